"""Pattern 1 — SLM pre-filter: a router on CPU asks a small model to classify each request (constrained to the
configured labels), lets it answer the easy ones, and escalates the rest to a large LLM."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import aws_cdk as cdk
from constructs import Construct

from cpu_inference.eks import InferenceWorkloads
from cpu_inference.engines import is_vllm
from cpu_inference.k8s.charts.router_chart import RouterChartProps
from cpu_inference.patterns.deployment import (
    DeploymentProps,
    claim_namespace,
    eks_workloads,
    endpoints,
    served_policy,
    validate_namespace,
)
from cpu_inference.patterns.eks_platform import EksPlatform
from cpu_inference.patterns.escalation import EscalationTarget
from cpu_inference.patterns.router_settings import RouterSettings
from cpu_inference.patterns.sagemaker_endpoints import router_endpoint_props
from cpu_inference.patterns.served_model import ServedModel
from cpu_inference.patterns.serving_foundation import ServingFoundation, ServingFoundationProps
from cpu_inference.sagemaker import GravitonEndpoint, RouterEndpoint
from cpu_inference.sizing.slm_context import RouterConfig, prefilter_router_config

NAMESPACE = "slm-prefilter"  # SlmPrefilterProps.namespace's default


@dataclass(frozen=True)
class SlmPrefilterProps:
    """deployment: the models (exactly one with role `slm`; role `llm` for a self-hosted escalation model) and
    the target. escalation: where hard requests go. router: labels, threshold, few-shot examples, replicas.
    namespace (EKS): where its objects go — each pattern on one platform needs its own (a second pre-filter on an
    existing_platform sets one)."""

    deployment: DeploymentProps
    escalation: EscalationTarget
    router: RouterSettings = field(default_factory=RouterSettings)
    namespace: str = NAMESPACE

    def validate(self) -> None:
        self.deployment.validate()
        validate_namespace(self.namespace, "SlmPrefilterProps.namespace")
        self.escalation.validate()
        self.router.validate()
        slms = [m.name for m in self.deployment.models if m.role == "slm"]
        if len(slms) != 1:
            raise ValueError(
                f"SlmPrefilter needs exactly one model with role slm (the router classifies with it), got {slms or 'none'}"
            )
        llms = {m.name for m in self.deployment.models if m.role == "llm"}
        if self.escalation.kind == "model" and self.escalation.model not in llms:
            raise ValueError(
                f"escalation.model {self.escalation.model!r} must name a model with role llm, one of {sorted(llms) or 'none'}"
            )
        farm = [m.name for m in self.deployment.models if m.role == "farm"]
        if farm:
            raise ValueError(f"models {farm} have role farm — use role slm or llm in an SLM pre-filter")
        spec, need = next(m.spec for m in self.deployment.models if m.role == "slm"), self.router.slm_context_per_slot()
        why = (
            f"the router's SLM {self.slm!r} needs {need} tokens per slot (its classification prompt with classify_max_chars "
            "of request, and a request with answer_max_tokens)"
        )
        if spec.context_per_slot is not None and spec.context_per_slot < need:
            raise ValueError(
                f"{why}, but its spec.context_per_slot is {spec.context_per_slot} — leave it unset or raise it"
            )
        if spec.context_window < need:
            raise ValueError(
                f"{why}, but its spec.context_window is {spec.context_window} — raise it (within the model's "
                "trained context) or lower RouterSettings.classify_max_chars"
            )

    @property
    def slm(self) -> str:
        return next(m.name for m in self.deployment.models if m.role == "slm")

    def served_models(self) -> tuple[ServedModel, ...]:
        """The models as deployed: the SLM's slots hold the router's prompt and an answer (min_context_per_slot)."""
        need = self.router.slm_context_per_slot()
        return tuple(
            replace(m, spec=replace(m.spec, min_context_per_slot=max(need, m.spec.min_context_per_slot or 0)))
            if m.role == "slm"
            else m
            for m in self.deployment.models
        )

    def prefilter_config(self, *, urls: dict[str, str], region: str | None) -> RouterConfig:
        """The router's config on EKS (the chart adds mode and listen address): decision keys, the SLM's URL and
        the escalation. `urls`: each model's root URL; `region`: for AWS escalations."""
        return prefilter_router_config(
            self.router.decision(),
            slm_url=urls[self.slm],
            escalation=self.escalation.router_escalation(llm_url=urls.get(self.escalation.model or ""), region=region),
            slm_model=self.slm if self._slm_is_vllm() else "",
        )

    def _slm_is_vllm(self) -> bool:
        return any(is_vllm(m.engine) for m in self.deployment.models if m.name == self.slm)

    def router_config(self, *, urls: dict[str, str], region: str | None) -> dict[str, Any]:
        """prefilter_config(...) as its JSON object."""
        return self.prefilter_config(urls=urls, region=region).to_dict()


class SlmPrefilter(Construct):
    """Attributes: foundation (ServingFoundation: bucket, artifacts, images); on EKS `platform` (EksPlatform) and
    `workloads` (InferenceWorkloads: model charts + router chart + Pod Identity roles); on SageMaker `endpoints`
    (name → GravitonEndpoint) and `router_endpoint` (RouterEndpoint)."""

    def __init__(self, scope: Construct, id: str, *, props: SlmPrefilterProps) -> None:
        super().__init__(scope, id)
        props.validate()
        props = replace(props, deployment=replace(props.deployment, models=props.served_models()))
        self.props = props
        d = props.deployment
        self.foundation = ServingFoundation(
            self,
            "Serving",
            props=ServingFoundationProps(
                models=d.models,
                bucket=d.bucket,
                engine_image=d.engine_image,
                vllm_image=d.vllm_image,
                router_image=d.router_image,
            ),
        )
        self.platform: EksPlatform | None = None
        self.workloads: InferenceWorkloads | None = None
        self.endpoints: dict[str, GravitonEndpoint] = {}
        self.router_endpoint: RouterEndpoint | None = None
        if d.target == "eks":
            self._on_eks(props)
        else:
            self._on_sagemaker(props)

    def _on_sagemaker(self, props: SlmPrefilterProps) -> None:
        """One endpoint per model, and the router itself as a small SageMaker endpoint that reaches them
        through SageMaker Runtime (its role may invoke exactly the SLM and the escalation target)."""
        self.endpoints = endpoints(self, props.deployment, self.foundation)
        assert self.foundation.router_image is not None
        self.router_endpoint = RouterEndpoint(
            self,
            "Router",
            props=router_endpoint_props(
                props.router,
                props.escalation,
                slm=self.endpoints[props.slm],
                image=self.foundation.router_image,
                endpoints=self.endpoints,
                **({"config_overrides": overrides} if (overrides := self._router_overrides(props)) else {}),
            ),
        )

    def _router_overrides(self, props: SlmPrefilterProps) -> dict[str, Any]:
        overrides: dict[str, Any] = {}
        if props.router.classify_max_chars:
            overrides["classify_max_chars"] = props.router.classify_max_chars
        if props._slm_is_vllm():  # vLLM answers 404 to a model name it does not serve
            overrides["slm_model"] = props.slm
        return overrides

    def _on_eks(self, props: SlmPrefilterProps) -> None:
        d = props.deployment
        self.platform = d.existing_platform or EksPlatform(self, "Platform", props=d.platform)
        claim_namespace(self.platform, props.namespace, owner=self, key="SlmPrefilterProps.namespace")
        policy = served_policy(d, namespace=props.namespace, pattern="slm-prefilter", farm=False)
        url = {m.name: f"http://{m.name}.{props.namespace}.svc.cluster.local:8080" for m in d.models}
        # Explicit, deploy-time region for AWS escalations: EKS Pod Identity injects credentials, not a region.
        config = props.prefilter_config(urls=url, region=cdk.Stack.of(self).region)
        assert self.foundation.router_image is not None
        router = RouterChartProps(
            image=self.foundation.router_image.image_uri,
            config=config,
            mode="router",
            namespace=props.namespace,
            pattern="slm-prefilter",
            replicas_min=props.router.replicas_min,
            replicas_max=props.router.replicas_max,
            architectures=tuple(d.platform_in_use.node_pools.architectures),
        )
        self.workloads = eks_workloads(
            self,
            d,
            self.foundation,
            self.platform,
            policy=policy,
            router=router,
            router_statements=props.escalation.policy_statements(cdk.Stack.of(self)),
        )
