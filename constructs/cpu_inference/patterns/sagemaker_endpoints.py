"""SageMaker endpoint props from the patterns' types: a ServedModel's GravitonEndpointProps, and the SLM pre-filter's
RouterEndpointProps and RouterEscalation (config.yaml `router` + `escalation`). They live here, not in sagemaker/,
because sagemaker/ sits below the patterns and must not know their types."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import aws_cdk as cdk

from cpu_inference.artifacts import ModelArtifact
from cpu_inference.engines import is_vllm
from cpu_inference.images import LlamaCppImage
from cpu_inference.monitoring import latency
from cpu_inference.patterns.escalation import EscalationTarget
from cpu_inference.patterns.router_settings import RouterSettings
from cpu_inference.patterns.served_model import ServedModel
from cpu_inference.sagemaker import (
    EngineImage,
    GravitonEndpoint,
    GravitonEndpointProps,
    RouterEndpointProps,
    RouterEscalation,
)


def graviton_endpoint_props(
    served: ServedModel,
    *,
    model: ModelArtifact | str,
    image: LlamaCppImage | EngineImage,
    latency_slo_ms: int | None = None,
    network_isolation: bool = True,
    data_capture_percent: int = 0,
    **overrides: Any,
) -> GravitonEndpointProps:
    """Props for a pattern's ServedModel (config.yaml → served_models): name, spec, instance type and
    replicas come from it; the config's slo.p95_latency_ms, sagemaker.network_isolation and
    sagemaker.data_capture_percent map to the keyword arguments; anything else via `overrides`."""
    if not served.instance_type:
        raise ValueError(
            f"ServedModel {served.name}: instance_type is required for a SageMaker endpoint (set models[].instance_type or sagemaker.instance_type)"
        )
    if served.replicas_min < 1:
        raise ValueError(
            f"ServedModel {served.name}: replicas.min is {served.replicas_min}, but SageMaker real-time endpoints "
            "keep at least one instance — set replicas.min: 1"
        )
    kwargs: dict[str, Any] = dict(
        name=served.name,
        model=model,
        spec=served.spec,
        image=image,
        instance_type=served.instance_type,
        min_capacity=served.replicas_min,
        max_capacity=served.replicas_max,
        network_isolation=network_isolation,
        data_capture_percent=data_capture_percent,
    )
    if latency_slo_ms is not None:
        kwargs["latency_slo"] = cdk.Duration.millis(latency_slo_ms)
    if served.role == "slm":  # the router's SLM also answers (simple requests), not only classifies
        kwargs["alarm_output_tokens"] = latency.alarm_output_tokens((served.spec.task,), answers=True)
    kwargs.update(overrides)
    return GravitonEndpointProps(**kwargs)


def router_escalation(target: EscalationTarget, endpoints: Mapping[str, GravitonEndpoint]) -> RouterEscalation:
    """The SageMaker router's escalation from the pattern's EscalationTarget (config.yaml `escalation`): kind `model`
    is the GravitonEndpoint of that model (`endpoints[name]`)."""
    if target.kind == "model":
        if target.model not in endpoints:
            raise ValueError(f"escalation.model {target.model!r} has no SageMaker endpoint; known: {sorted(endpoints)}")
        endpoint = endpoints[str(target.model)]
        # vLLM answers 404 to a model name it does not serve (llama-server answers under any): name it.
        return RouterEscalation.sagemaker(
            endpoint, model_id=str(target.model) if is_vllm(endpoint.props.spec.engine) else None
        )
    if target.kind == "sagemaker":
        return RouterEscalation.sagemaker(str(target.endpoint_name))
    if target.kind == "bedrock":
        return RouterEscalation.bedrock(str(target.model_id))
    return RouterEscalation.openai(str(target.url), model_id=target.model_id, api_key_secret=target.api_key_secret_name)


def router_endpoint_props(
    settings: RouterSettings,
    escalation: EscalationTarget,
    *,
    slm: GravitonEndpoint | str,
    image: LlamaCppImage | EngineImage,
    endpoints: Mapping[str, GravitonEndpoint] | None = None,
    **overrides: Any,
) -> RouterEndpointProps:
    """Props from the SLM pre-filter pattern's RouterSettings and EscalationTarget (config.yaml `router` and
    `escalation`): labels, threshold, few-shot and replicas → min/max_capacity; `endpoints` (name →
    GravitonEndpoint) resolves escalation kind `model`. Anything else via `overrides`."""
    kwargs: dict[str, Any] = dict(
        image=image,
        slm=slm,
        escalation=router_escalation(escalation, endpoints or {}),
        labels=tuple(settings.labels),
        slm_labels=tuple(settings.slm_labels),
        confidence_threshold=settings.confidence_threshold,
        few_shot=tuple(settings.few_shot),
        instructions=settings.instructions,
        min_capacity=settings.replicas_min,
        max_capacity=settings.replicas_max,
    )
    kwargs.update(overrides)
    return RouterEndpointProps(**kwargs)
