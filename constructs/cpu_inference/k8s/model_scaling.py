"""How one served model scales: a KEDA ScaledObject on the engine's queue depth (`running + (waiting * 10)` over
its own gauges: llama-server's or vLLM's, `engines.queue_metrics`),
plus the gateway's demand for a model that may scale to zero, held for twice what a new replica costs."""

from __future__ import annotations

from dataclasses import replace

from .keda_specs import (
    DEFAULT_ACTIVATION,
    PrometheusTrigger,
    ScaledObjectSpec,
    ScalingModifiers,
    llama_queue_scaled_object,
)
from .model_workload import ModelWorkload
from .serving_policy import ServingPolicy

# Queue-depth target: all slots busy plus one request queued per replica (weight 10 in the formula).
QUEUE_WEIGHT = 10
MIN_SCALE_DOWN_STABILIZATION = 300


def queue_target(slots: int) -> int:
    """KEDA target for `running + (waiting * 10)` (metricType AverageValue): every slot busy plus one
    queued request per replica. For the 15-16-slot small models AWS tuned its default for, this is the
    field-notes 25 (+/-1); for few-slot big models, where one queued request is already seconds of added
    latency, the threshold falls with the slots instead of waiting for ~3 queued requests."""
    return slots + QUEUE_WEIGHT


def model_scaled_object(m: ModelWorkload, p: ServingPolicy, *, slots: int, ready_budget_seconds: int) -> ScaledObjectSpec | None:
    """The ScaledObject of `m` (None without a KEDA source). ready_budget_seconds: what a new replica costs to
    become ready (download + load)."""
    if p.keda is None:
        return None
    if m.replicas_min == 0 and not m.cold_start_query:
        raise ValueError(
            f"ModelWorkload {m.name!r}: replicas_min 0 needs cold_start_query — with no pod there is no engine "
            "metric to activate on (e.g. the gateway's per-model request rate), or set replicas_min ≥ 1"
        )
    target = m.scale_target if m.scale_target is not None else queue_target(slots)
    activation = m.activation_target if m.activation_target is not None else float(DEFAULT_ACTIVATION)
    formula = f"running + (waiting * {QUEUE_WEIGHT})"
    if m.cold_start_query:
        formula += f" + (demand * {QUEUE_WEIGHT})"
    so = llama_queue_scaled_object(
        m.name, p.namespace, m.name,
        server_address=p.keda.server_address, series_labels={"namespace": p.namespace, "app": m.name},
        min_replicas=m.replicas_min, max_replicas=m.replicas_max,
        aws_region=p.keda.aws_region, authentication_ref=p.keda.authentication_ref,
        modifiers=ScalingModifiers(formula=formula, target=_num(target), activation_target=_num(activation)),
        engine=m.engine,
    )
    triggers = so.triggers
    if m.cold_start_query:
        triggers += (PrometheusTrigger(
            name="demand", server_address=p.keda.server_address, query=m.cold_start_query,
            aws_region=p.keda.aws_region, authentication_ref=p.keda.authentication_ref,
        ),)
    # Hold replicas for at least twice what a new one costs to become ready, so Karpenter's
    # consolidation (1 min) and KEDA do not remove a replica that the next burst brings back.
    hold = max(MIN_SCALE_DOWN_STABILIZATION, 2 * ready_budget_seconds)
    return replace(so, triggers=triggers, scale_down_stabilization_seconds=hold, cooldown_period=hold)


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"
