"""Typed KEDA objects: ScaledObject with Prometheus triggers and `advanced.scalingModifiers`, and a
TriggerAuthentication for SigV4 to Amazon Managed Prometheus (`podIdentity: provider: aws`).

Scaling on queue depth, not CPU (a lagging signal): for llama-server, running =
`llamacpp:requests_processing`, waiting = `llamacpp:requests_deferred` (vLLM: `vllm:num_requests_running`,
`vllm:num_requests_waiting` — `engines.queue_metrics`). These are the object types only: the formula, target and
activation a served model deploys are k8s/workloads/model_scaling.py's (its one owner), so nothing here has a default
formula or target.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from cpu_inference._internal.k8s_object import is_dns_label
from cpu_inference.engines import LLAMA_CPP, queue_metrics

KEDA_API = "keda.sh/v1alpha1"
_TRIGGER_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
_NUMBER = re.compile(r"^-?[0-9]+(\.[0-9]+)?$")

RUNNING_METRIC, WAITING_METRIC = queue_metrics(LLAMA_CPP)  # llama-server's; every engine's: engines.queue_metrics


def amp_query_url(region: str, workspace_id: str) -> str:
    """The Prometheus-compatible base URL KEDA queries for an AMP workspace (KEDA appends /api/v1/query)."""
    return f"https://aps-workspaces.{region}.amazonaws.com/workspaces/{workspace_id}"


@dataclass(frozen=True)
class PrometheusTrigger:
    """A `prometheus` trigger. `name` is how `scalingModifiers.formula` refers to it. `aws_region` is set
    for Amazon Managed Prometheus (SigV4 signing with the TriggerAuthentication's identity)."""

    name: str
    server_address: str
    query: str
    threshold: str = "1"
    activation_threshold: str | None = None
    aws_region: str | None = None
    authentication_ref: str | None = None
    ignore_null_values: bool = True

    def validate(self) -> None:
        if not _TRIGGER_NAME.match(self.name):
            raise ValueError(
                f"trigger name {self.name!r} must be lowercase letters, digits, '_' (it is a variable in the formula)"
            )
        if not self.server_address.startswith(("http://", "https://")) and "${Token[" not in self.server_address:
            raise ValueError(f"trigger {self.name}: server_address {self.server_address!r} must be an http(s) URL")
        if not self.query.strip():
            raise ValueError(f"trigger {self.name}: query cannot be empty")
        for label, value in (("threshold", self.threshold), ("activation_threshold", self.activation_threshold)):
            if value is not None and not _NUMBER.match(value):
                raise ValueError(f"trigger {self.name}: {label} {value!r} must be a number as a string, e.g. '5'")
        if self.aws_region is not None and self.authentication_ref is None:
            raise ValueError(
                f"trigger {self.name}: an AMP (aws_region) trigger needs authentication_ref to a SigV4 TriggerAuthentication"
            )

    def to_dict(self) -> dict[str, Any]:
        meta: dict[str, str] = {"serverAddress": self.server_address, "query": self.query, "threshold": self.threshold}
        if self.activation_threshold is not None:
            meta["activationThreshold"] = self.activation_threshold
        if self.aws_region is not None:
            meta["awsRegion"] = self.aws_region
        meta["ignoreNullValues"] = "true" if self.ignore_null_values else "false"
        out: dict[str, Any] = {"type": "prometheus", "name": self.name, "metadata": meta}
        if self.authentication_ref is not None:
            out["authenticationRef"] = {"name": self.authentication_ref, "kind": "TriggerAuthentication"}
        return out


@dataclass(frozen=True)
class ScalingModifiers:
    """`advanced.scalingModifiers`. No default formula or target: a served model's come from
    k8s/workloads/model_scaling.py (queue_modifiers), a pool's from pool_in_flight_scaled_object."""

    formula: str
    target: str
    activation_target: str | None = None
    metric_type: str = "AverageValue"

    def validate(self, trigger_names: list[str]) -> None:
        if not self.formula.strip():
            raise ValueError("scalingModifiers.formula cannot be empty")
        for label, value in (("target", self.target), ("activation_target", self.activation_target)):
            if value is not None and not _NUMBER.match(value):
                raise ValueError(f"scalingModifiers.{label} {value!r} must be a number as a string, e.g. '25'")
        if self.metric_type not in ("AverageValue", "Value"):
            raise ValueError("scalingModifiers.metric_type must be AverageValue or Value")
        used = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", self.formula))
        missing = [n for n in trigger_names if n not in used]
        if missing:
            raise ValueError(f"scalingModifiers.formula {self.formula!r} does not use trigger(s) {missing}")

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"formula": self.formula, "target": self.target, "metricType": self.metric_type}
        if self.activation_target is not None:
            out["activationTarget"] = self.activation_target
        return out


@dataclass(frozen=True)
class ScaledObjectSpec:
    name: str
    namespace: str
    target_name: str
    triggers: tuple[PrometheusTrigger, ...]
    min_replicas: int = 1
    max_replicas: int = 4
    scaling_modifiers: ScalingModifiers | None = None
    target_kind: str = "Deployment"
    target_api_version: str = "apps/v1"
    polling_interval: int = 15
    cooldown_period: int = 300
    scale_down_stabilization_seconds: int | None = 300
    fallback_replicas: int | None = None  # replicas to hold when the metrics source fails 3 times

    def validate(self) -> None:
        for label, value in (("name", self.name), ("namespace", self.namespace), ("target_name", self.target_name)):
            if not is_dns_label(value):
                raise ValueError(f"ScaledObject {label} {value!r} must be a DNS label")
        if not self.triggers:
            raise ValueError(f"ScaledObject {self.name}: needs at least one trigger")
        names = [t.name for t in self.triggers]
        if len(set(names)) != len(names):
            raise ValueError(f"ScaledObject {self.name}: trigger names {names} must be unique")
        for t in self.triggers:
            t.validate()
        if not 0 <= self.min_replicas <= self.max_replicas:
            raise ValueError(
                f"ScaledObject {self.name}: need 0 ≤ min_replicas ({self.min_replicas}) ≤ max_replicas ({self.max_replicas})"
            )
        if self.scaling_modifiers is not None:
            self.scaling_modifiers.validate(names)
        if self.fallback_replicas is not None and self.fallback_replicas < 0:
            raise ValueError(f"ScaledObject {self.name}: fallback_replicas must be ≥ 0")

    def to_dict(self) -> dict[str, Any]:
        self.validate()
        spec: dict[str, Any] = {
            "scaleTargetRef": {
                "apiVersion": self.target_api_version,
                "kind": self.target_kind,
                "name": self.target_name,
            },
            "minReplicaCount": self.min_replicas,
            "maxReplicaCount": self.max_replicas,
            "pollingInterval": self.polling_interval,
            "cooldownPeriod": self.cooldown_period,
            "triggers": [t.to_dict() for t in self.triggers],
        }
        advanced: dict[str, Any] = {}
        if self.scaling_modifiers is not None:
            advanced["scalingModifiers"] = self.scaling_modifiers.to_dict()
        if self.scale_down_stabilization_seconds is not None:
            advanced["horizontalPodAutoscalerConfig"] = {
                "behavior": {"scaleDown": {"stabilizationWindowSeconds": self.scale_down_stabilization_seconds}}
            }
        if advanced:
            spec["advanced"] = advanced
        if self.fallback_replicas is not None:
            spec["fallback"] = {"failureThreshold": 3, "replicas": self.fallback_replicas}
        return {
            "apiVersion": KEDA_API,
            "kind": "ScaledObject",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": spec,
        }


@dataclass(frozen=True)
class AwsTriggerAuthentication:
    """SigV4 credentials for AMP via KEDA's `aws` pod-identity provider, for a KEDA operator on EKS Pod
    Identity. By default the operator's own identity (its Pod Identity association) signs. `role_arn` makes
    the operator assume another role: KEDA 2.20.2 (pkg/scalers/aws/aws_config_cache.go,
    retrievePodIdentityCredentials) tries web identity first — Pod Identity injects no token file — then
    falls back to sts:AssumeRole with the operator's credentials, so the role must trust the operator role and
    the operator role must be allowed sts:AssumeRole on it (Keda.trigger_authentication(role_arn=) grants that).

    `identity_owner="workload"` is refused: KEDA then reads the scaled workload's service-account annotation
    `eks.amazonaws.com/role-arn` (pkg/scaling/resolver/scale_resolvers.go, PodIdentityAnnotationEKS) — an IRSA
    annotation that Pod Identity never sets, so every query would fail. The CRD schema accepts it
    (enum keda|workload), so only this check stops it before deploy."""

    name: str
    namespace: str
    role_arn: str | None = None
    identity_owner: str | None = None

    def validate(self) -> None:
        if not is_dns_label(self.name) or not is_dns_label(self.namespace):
            raise ValueError(
                f"TriggerAuthentication {self.namespace}/{self.name}: name and namespace must be DNS labels"
            )
        if self.role_arn is not None and self.identity_owner is not None:
            raise ValueError(f"TriggerAuthentication {self.name}: role_arn and identity_owner are mutually exclusive")
        if self.identity_owner == "workload":
            raise ValueError(
                f"TriggerAuthentication {self.name}: identity_owner='workload' makes KEDA read the workload's IRSA annotation "
                "eks.amazonaws.com/role-arn, which EKS Pod Identity never sets — leave identity_owner unset (the KEDA operator's "
                "Pod Identity role signs) or give role_arn (the operator assumes that role)"
            )
        if self.identity_owner not in (None, "keda"):
            raise ValueError(
                f"TriggerAuthentication {self.name}: identity_owner must be 'keda' or unset, got {self.identity_owner!r}"
            )

    def to_dict(self) -> dict[str, Any]:
        self.validate()
        pod_identity: dict[str, Any] = {"provider": "aws"}
        if self.role_arn is not None:
            pod_identity["roleArn"] = self.role_arn
        if self.identity_owner is not None:
            pod_identity["identityOwner"] = self.identity_owner
        return {
            "apiVersion": KEDA_API,
            "kind": "TriggerAuthentication",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": {"podIdentity": pod_identity},
        }


def series_selector(labels: dict[str, str]) -> str:
    return ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))


POOL_IN_FLIGHT_METRIC = (
    "gateway_pool_in_flight"  # the gateway's gauge per pool (containers/router/slm_router/metrics.py)
)


def pool_in_flight_scaled_object(
    pool: str,
    namespace: str,
    stateful_set: str,
    *,
    server_address: str,
    target: int,
    min_replicas: int = 1,
    max_replicas: int = 4,
    hold_seconds: int = 300,
    aws_region: str | None = None,
    authentication_ref: str | None = None,
) -> ScaledObjectSpec:
    """A multi-model pool's ScaledObject: the StatefulSet `stateful_set` scales on the requests the gateway has in
    progress for the pool (`gateway_pool_in_flight{pool}`: loads of cold models included), `target` per replica
    (metricType AverageValue, as the model ScaledObjects). Not llama-server's own queue metrics: in router mode they
    exist per loaded model only (`/metrics?model=`), and a pod loading a cold model has none yet."""
    sel = series_selector({"namespace": namespace, "pool": pool})
    return ScaledObjectSpec(
        name=stateful_set,
        namespace=namespace,
        target_name=stateful_set,
        target_kind="StatefulSet",
        min_replicas=min_replicas,
        max_replicas=max_replicas,
        triggers=(
            PrometheusTrigger(
                name="in_flight",
                server_address=server_address,
                query=f"sum({POOL_IN_FLIGHT_METRIC}{{{sel}}}) or vector(0)",
                aws_region=aws_region,
                authentication_ref=authentication_ref,
            ),
        ),
        scaling_modifiers=ScalingModifiers(formula="in_flight", target=str(target), activation_target=None),
        scale_down_stabilization_seconds=hold_seconds,
        cooldown_period=hold_seconds,
    )
