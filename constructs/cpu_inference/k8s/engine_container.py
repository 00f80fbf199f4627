"""The llama-server container as every chart runs it (one model: LlamaServerChart; a multi-model pool:
ModelPoolChart): port, command, model directory, names and labels, resources and the `/health` probes."""

from __future__ import annotations

import math
from typing import TypedDict

import cdk8s
import cdk8s_plus_27 as kplus

from ..pool_preset import MODEL_DIR  # noqa: F401 - the engine's model directory, one definition

ENGINE_PORT = 8080
# The image's ENTRYPOINT, spelled out so the manifest is the whole command (EKS mode = no argument).
ENGINE_COMMAND = ("python3", "/opt/llama/entrypoint.py")
ENGINE_CONTAINER = "llama-server"
COMPONENT = "llama-server"
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
            "/health", port=ENGINE_PORT, period_seconds=cdk8s.Duration.seconds(period), failure_threshold=failures,
            timeout_seconds=cdk8s.Duration.seconds(timeout),
        )

    return {
        "startup": probe(STARTUP_PERIOD_SECONDS, math.ceil(startup_seconds / STARTUP_PERIOD_SECONDS), 3),
        "readiness": probe(5, 2, 3),
        "liveness": probe(10, 6, liveness_timeout_seconds),
    }
