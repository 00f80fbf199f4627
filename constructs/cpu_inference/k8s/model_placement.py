"""Where one served model runs: its sizing on the planned node type (or the smallest fitting type of the
policy's families), with a one-line error naming the fix when it does not fit."""

from __future__ import annotations

from .. import sizing
from .model_workload import ModelWorkload
from .serving_policy import ServingPolicy


def plan(model: ModelWorkload, node_families: tuple[str, ...] = ServingPolicy.node_families) -> sizing.Sizing:
    """Sizing of `model` on its node_type (or the smallest fitting type of `node_families`); raises
    ValueError naming the fix when it does not fit."""
    cpu = model.pod_cpu
    if model.node_type:
        try:
            it = sizing.instance(model.node_type)
        except sizing.UnknownInstanceType:
            raise ValueError(f"ModelWorkload {model.name!r}: node_type {model.node_type!r} is not in the instance catalog") from None
        s = sizing.size(model.spec, it, target="eks", cpu=cpu)
        if not s.fits:
            raise ValueError(
                f"ModelWorkload {model.name!r}: {cpu:g} vCPU / {s.memory_request_mib} MiB does not fit {it.name} "
                f"(allocatable {s.cpu_available:g} vCPU / {s.memory_available_bytes // sizing.MIB} MiB) — choose a bigger node_type or fewer cpu"
            )
        return s
    candidates = [it for it in sizing.CATALOG.values() if it.family in node_families]
    fitting = sizing.smallest_fitting(model.spec, candidates, target="eks", cpu=cpu)
    if fitting is None:
        raise ValueError(f"ModelWorkload {model.name!r}: no {list(node_families)} instance fits {cpu:g} vCPU and the model's memory — add a bigger family")
    return fitting
