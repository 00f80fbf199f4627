"""How one served model scales: a KEDA ScaledObject on the engine's queue depth over its own gauges (llama-server's
or vLLM's, `engines.queue_metrics`), plus the gateway's demand for a model that may scale to zero, held for twice what
a new replica costs.

This module is the one owner of the queue-depth scaling rule every served model's ScaledObject renders: the queued
requests' weight (QUEUE_WEIGHT), the formula (queue_formula), the target (queue_target) and the activation
(QUEUE_ACTIVATION). Change them here; tests/test_one_definition.py checks every shipped config's ScaledObjects
follow."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from cpu_inference.engines import LLAMA_CPP, queue_metrics
from cpu_inference.k8s.specs.keda import PrometheusTrigger, ScaledObjectSpec, ScalingModifiers, series_selector
from cpu_inference.k8s.workloads.model_workload import ModelWorkload
from cpu_inference.k8s.workloads.serving_policy import ServingPolicy

# A queued request weighs as much as this many running ones in the formula: one queued request per replica already
# counts as the target's headroom (queue_target). AWS's field notes: `running + (waiting * 10)`, target 25,
# activation 5.
QUEUE_WEIGHT = 10
# The formula's value below which KEDA keeps a scaled-to-zero model at zero: one queued request (10) or the
# gateway's demand signal (1 x QUEUE_WEIGHT) crosses it, a single running request does not.
QUEUE_ACTIVATION = 5
MIN_SCALE_DOWN_STABILIZATION = 300


def queue_formula(*, cold_start: bool = False) -> str:
    """The scalingModifiers formula over the triggers `running`, `waiting` (and `demand`, the gateway's wish for a
    model that may be at zero replicas: cold_start)."""
    formula = f"running + (waiting * {QUEUE_WEIGHT})"
    return f"{formula} + (demand * {QUEUE_WEIGHT})" if cold_start else formula


def queue_target(slots: int) -> int:
    """KEDA target for queue_formula() (metricType AverageValue): every slot busy plus one
    queued request per replica. For the 15-16-slot small models AWS tuned its default for, this is the
    field-notes 25 (+/-1); for few-slot big models, where one queued request is already seconds of added
    latency, the threshold falls with the slots instead of waiting for ~3 queued requests."""
    return slots + QUEUE_WEIGHT


def queue_modifiers(
    slots: int, *, cold_start: bool = False, target: float | None = None, activation: float | None = None
) -> ScalingModifiers:
    """The scalingModifiers of a served model with `slots` slots per replica (target / activation: the
    ModelWorkload's overrides, None for the rule's)."""
    return ScalingModifiers(
        formula=queue_formula(cold_start=cold_start),
        target=_num(target if target is not None else queue_target(slots)),
        activation_target=_num(activation if activation is not None else QUEUE_ACTIVATION),
    )


def llama_queue_scaled_object(
    name: str,
    namespace: str,
    deployment: str,
    *,
    server_address: str,
    series_labels: dict[str, str],
    min_replicas: int = 1,
    max_replicas: int = 4,
    aws_region: str | None = None,
    authentication_ref: str | None = None,
    slots: int | None = None,
    modifiers: ScalingModifiers | None = None,
    engine: str = LLAMA_CPP,
) -> ScaledObjectSpec:
    """The engine's queue-depth ScaledObject (llama-server by default; `engine="vllm"` for vLLM's gauges): triggers
    `running` and `waiting` summed over the series matching `series_labels` (e.g. {"namespace": "inference",
    "app": "smollm2"}), combined by this module's queue rule for a replica of `slots` llama-server slots
    (queue_modifiers), or by
    `modifiers` given instead."""
    if modifiers is None:
        if slots is None:
            raise ValueError(
                f"ScaledObject {name}: give slots (the engine's slots per replica, which set the queue target) or modifiers"
            )
        modifiers = queue_modifiers(slots)
    running, waiting = queue_metrics(engine)
    sel = series_selector(series_labels)
    common: dict[str, Any] = {
        "server_address": server_address,
        "aws_region": aws_region,
        "authentication_ref": authentication_ref,
    }
    return ScaledObjectSpec(
        name=name,
        namespace=namespace,
        target_name=deployment,
        min_replicas=min_replicas,
        max_replicas=max_replicas,
        triggers=(
            PrometheusTrigger(name="running", query=f"sum({running}{{{sel}}}) or vector(0)", **common),
            PrometheusTrigger(name="waiting", query=f"sum({waiting}{{{sel}}}) or vector(0)", **common),
        ),
        scaling_modifiers=modifiers,
    )


def model_scaled_object(
    m: ModelWorkload, p: ServingPolicy, *, slots: int, ready_budget_seconds: int
) -> ScaledObjectSpec | None:
    """The ScaledObject of `m` (None without a KEDA source). ready_budget_seconds: what a new replica costs to
    become ready (download + load)."""
    if p.keda is None:
        return None
    if m.replicas_min == 0 and not m.cold_start_query:
        raise ValueError(
            f"ModelWorkload {m.name!r}: replicas_min 0 needs cold_start_query — with no pod there is no engine "
            "metric to activate on (e.g. the gateway's per-model request rate), or set replicas_min ≥ 1"
        )
    so = llama_queue_scaled_object(
        m.name,
        p.namespace,
        m.name,
        server_address=p.keda.server_address,
        series_labels={"namespace": p.namespace, "app": m.name},
        min_replicas=m.replicas_min,
        max_replicas=m.replicas_max,
        aws_region=p.keda.aws_region,
        authentication_ref=p.keda.authentication_ref,
        modifiers=queue_modifiers(
            slots, cold_start=bool(m.cold_start_query), target=m.scale_target, activation=m.activation_target
        ),
        engine=m.engine,
    )
    triggers = so.triggers
    if m.cold_start_query:
        triggers += (
            PrometheusTrigger(
                name="demand",
                server_address=p.keda.server_address,
                query=m.cold_start_query,
                aws_region=p.keda.aws_region,
                authentication_ref=p.keda.authentication_ref,
            ),
        )
    # Hold replicas for at least twice what a new one costs to become ready, so Karpenter's
    # consolidation (1 min) and KEDA do not remove a replica that the next burst brings back.
    hold = max(MIN_SCALE_DOWN_STABILIZATION, 2 * ready_budget_seconds)
    return replace(so, triggers=triggers, scale_down_stabilization_seconds=hold, cooldown_period=hold)


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"
