"""The engine container as every chart runs it (one model: LlamaServerChart, llama-server or vLLM; a multi-model
pool: ModelPoolChart, llama-server only): port, command, model directory, names and labels, resources and the
`/health` probes."""

from __future__ import annotations

import math
from typing import TypedDict

import cdk8s
import cdk8s_plus_27 as kplus

from cpu_inference.engines import is_vllm

ENGINE_PORT = 8080
# The image's ENTRYPOINT, spelled out so the manifest is the whole command (EKS mode = no argument).
ENGINE_COMMAND = ("python3", "/opt/llama/entrypoint.py")
ENGINE_CONTAINER = "llama-server"
# The serving role every model pod has, whatever its engine: the router's egress and the pattern's policies select
# model pods by it. The engine itself is the pod label ENGINE_LABEL.
COMPONENT = "llama-server"
ENGINE_LABEL = "cpu-inference/engine"
# vLLM (containers/vllm-cpu): its image's entrypoint turns MODEL_PATH / SERVE_* into the OpenAI API server's flags.
VLLM_ENGINE_COMMAND = ("python3", "/opt/vllm/app/entrypoint.py")  # = containers/vllm-cpu/Dockerfile ENTRYPOINT
VLLM_CONTAINER = "vllm"
# vLLM's inter-process queues are POSIX shared memory in /dev/shm (vllm/distributed/device_communicators/
# shm_broadcast.py: ShmRingBuffer, `max_chunks x max_chunk_bytes`, refused up front by check_shm_free_space when
# /dev/shm is too small — a container's default is 64 MiB). On CPU the executor is always the multiprocessing one
# (vllm/platforms/cpu.py sets distributed_executor_backend="mp"), which opens two queues for one worker:
# rpc_broadcast_mq 10 x VLLM_MQ_MAX_CHUNK_BYTES_MB (16 MiB default, vllm/envs.py) = 160 MiB and worker_response_mq
# MessageQueue(1, 1) with the 24 MiB default chunk = 240 MiB (v1/executor/multiproc_executor.py). 400 MiB + metadata;
# the volume is a memory-backed emptyDir, whose pages count against the container's memory limit, so the chart adds
# VLLM_SHM_MIB to the memory request and limit.
VLLM_SHM_MIB = 10 * (16 + 24) + 48  # + headroom for torch's own shared-memory segments
SHM_DIR = "/dev/shm"
# Writable places vLLM uses under a read-only root filesystem, all on the pod's /tmp emptyDir: ~/.cache/vllm (compile
# cache), ~/.config/vllm, ~/.cache/huggingface and torch inductor's tempfile.gettempdir()/torchinductor_<user>.
# Telemetry off and the Hub offline: the model is on local disk, and egress 443 is open for S3.
VLLM_RUNTIME_ENV = {"HOME": "/tmp", "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}


def engine_command(engine: str) -> tuple[str, ...]:
    return VLLM_ENGINE_COMMAND if is_vllm(engine) else ENGINE_COMMAND


def engine_container_name(engine: str) -> str:
    return VLLM_CONTAINER if is_vllm(engine) else ENGINE_CONTAINER


ROUTER_COMPONENT = "router"
STARTUP_PERIOD_SECONDS = 5
PRE_STOP_SECONDS = 10  # endpoints/router drop the pod before SIGTERM


def engine_resources(
    *, cpu_millis: int, memory_mib: int, cpu_limit: str, ephemeral_gib: int
) -> kplus.ContainerResources:
    """Requests as sized; memory limit = request (not compressible: an outgrown model is OOM-killed alone); a
    CPU limit only with `cpu_limit="request"` (Guaranteed QoS) — see llama_server_chart.py's docstring."""
    cpu = kplus.Cpu.millis(cpu_millis)
    mem = cdk8s.Size.mebibytes(memory_mib)
    return kplus.ContainerResources(
        cpu=kplus.CpuResources(request=cpu, limit=cpu if cpu_limit == "request" else None),
        memory=kplus.MemoryResources(request=mem, limit=mem),
        ephemeral_storage=kplus.EphemeralStorageResources(request=cdk8s.Size.gibibytes(ephemeral_gib)),
    )


class HealthProbes(TypedDict):
    startup: kplus.Probe
    readiness: kplus.Probe
    liveness: kplus.Probe


def health_probes(startup_seconds: int, *, liveness_timeout_seconds: int) -> HealthProbes:
    """`/health` for startup (`startup_seconds` in STARTUP_PERIOD_SECONDS steps), readiness and liveness —
    the container props' `startup`, `readiness` and `liveness`. Liveness is generous: a saturated CPU answers
    /health late, and a restart reloads the model(s)."""

    def probe(period: int, failures: int, timeout: int) -> kplus.Probe:
        return kplus.Probe.from_http_get(
            "/health",
            port=ENGINE_PORT,
            period_seconds=cdk8s.Duration.seconds(period),
            failure_threshold=failures,
            timeout_seconds=cdk8s.Duration.seconds(timeout),
        )

    return {
        "startup": probe(STARTUP_PERIOD_SECONDS, math.ceil(startup_seconds / STARTUP_PERIOD_SECONDS), 3),
        "readiness": probe(5, 2, 3),
        "liveness": probe(10, 6, liveness_timeout_seconds),
    }
