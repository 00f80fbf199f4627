"""Where one served model runs: its sizing on the planned node type (or the smallest fitting type of the policy's
families), with a one-line error naming the fix when it does not fit. A vLLM pod also holds its /dev/shm volume in
memory (engine_container.VLLM_SHM_MIB, in its memory request and limit), so that counts in the fit too."""

from __future__ import annotations

from cpu_inference import engines, sizing
from cpu_inference.k8s.workloads.engine_container import VLLM_SHM_MIB
from cpu_inference.k8s.workloads.model_workload import ModelWorkload
from cpu_inference.k8s.workloads.serving_policy import ServingPolicy


def pod_memory_extra_bytes(engine: str) -> int:
    """Memory the pod's engine container holds beyond the sizing's: vLLM's memory-backed /dev/shm."""
    return VLLM_SHM_MIB * sizing.MIB if engines.is_vllm(engine) else 0


def fits(s: sizing.Sizing) -> bool:
    return (
        s.memory_needed_bytes + pod_memory_extra_bytes(s.engine) <= s.memory_available_bytes
        and s.cpu_request <= s.cpu_available
    )


def plan(model: ModelWorkload, node_families: tuple[str, ...] = ServingPolicy.node_families) -> sizing.Sizing:
    """Sizing of `model` on its node_type (or the smallest fitting type of `node_families`); raises
    ValueError naming the fix when it does not fit."""
    cpu = model.pod_cpu
    extra_mib = pod_memory_extra_bytes(model.engine) // sizing.MIB
    if model.node_type:
        try:
            it = sizing.instance(model.node_type)
        except sizing.UnknownInstanceType:
            raise ValueError(
                f"ModelWorkload {model.name!r}: node_type {model.node_type!r} is not in the instance catalog"
            ) from None
        s = sizing.size(model.spec, it, target="eks", cpu=cpu)
        if not fits(s):
            raise ValueError(
                f"ModelWorkload {model.name!r}: {cpu:g} vCPU / {s.memory_request_mib + extra_mib} MiB does not fit {it.name} "
                f"(allocatable {s.cpu_available:g} vCPU / {s.memory_available_bytes // sizing.MIB} MiB) — choose a bigger node_type or fewer cpu"
            )
        return s
    candidates = [it for it in sizing.CATALOG.values() if it.family in node_families]
    # sizing.smallest_fitting's order (memory, then vCPUs), with the pod's own fit.
    for it in sorted(candidates, key=lambda i: (i.memory_gib, i.vcpus)):
        s = sizing.size(model.spec, it, target="eks", cpu=cpu)
        if fits(s):
            return s
    raise ValueError(
        f"ModelWorkload {model.name!r}: no {list(node_families)} instance fits {cpu:g} vCPU and the model's memory — add a bigger family"
    )
