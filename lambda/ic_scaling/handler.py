"""Custom::InferenceComponentScaling — one CloudFormation custom resource (CDK Provider framework, onEvent only) that
gives every inference component of a farm its Application Auto Scaling scalable target and target-tracking policy, so
per-model autoscaling adds no CloudFormation resource per model (an AWS::ApplicationAutoScaling::ScalableTarget and
ScalingPolicy per model would be two).

Properties: Components — [{Name, MinCopies, MaxCopies, InvocationsPerCopy}, ...]; ScaleOutCooldown,
ScaleInCooldown (seconds, for every component). CloudFormation passes every value as a string.

- Create: for each component, RegisterScalableTarget (ServiceNamespace `sagemaker`, ResourceId
  `inference-component/<Name>`, ScalableDimension `sagemaker:inference-component:DesiredCopyCount`, Min/MaxCapacity)
  then PutScalingPolicy (TargetTrackingScaling on the predefined SageMakerInferenceComponentInvocationsPerCopy,
  TargetValue = InvocationsPerCopy). Names and enums: botocore application-autoscaling RegisterScalableTarget /
  PutScalingPolicy (ResourceId and ScalableDimension docs, MetricType enum); MinCapacity 0 is allowed for
  "SageMaker inference components" (botocore RegisterScalableTarget MinCapacity doc).
- Update: the components that are new or changed get both calls again (RegisterScalableTarget "registers or
  updates", PutScalingPolicy creates or replaces the policy of that name); a cooldown change re-applies all; the
  components that left the list (OldResourceProperties) are deregistered. A rollback is an Update back to the old
  list, so the same diff undoes a partly applied update.
- Delete: every component is deregistered — "Deregistering a scalable target deletes the scaling policies and the
  scheduled actions that are associated with it" (botocore DeregisterScalableTarget doc). A target that is already
  gone (ObjectNotFoundException, e.g. its endpoint was deleted first, which deregisters its targets:
  https://docs.aws.amazon.com/sagemaker/latest/dg/endpoint-delete-with-scaling.html) never fails a Delete.

PhysicalResourceId: `ic-scaling-<LogicalResourceId>` on Create, kept as is on every Update (no replacement).

Bounded time: the components are worked on by WORKERS threads (one component = its two calls in order), through one
client in botocore's `adaptive` retry mode (exponential backoff on throttling plus client-side rate limiting:
https://docs.aws.amazon.com/sdkref/latest/guide/feature-retry-behavior.html). 300 components x 2 calls at ~0.2 s a
call is ~30 s with 4 workers; throttling slows that down, never past the function's timeout: no component is started
once less than DEADLINE_MARGIN_SECONDS of the invocation remain, and the run then fails naming what was not applied
(a redeploy, or CloudFormation's rollback, applies the rest). The construct gives the function FUNCTION_TIMEOUT_SECONDS,
inside the Provider framework's 15-minute onEvent function and CloudFormation's one hour for a custom resource."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

RESOURCE_TYPE = "Custom::InferenceComponentScaling"
# botocore application-autoscaling: ServiceNamespace / ScalableDimension / PolicyType / MetricType enums, and the
# RegisterScalableTarget ResourceId doc ("Amazon SageMaker inference component - The resource type is
# inference-component and the unique identifier is the resource ID. Example:
# inference-component/my-inference-component").
SERVICE_NAMESPACE = "sagemaker"
SCALABLE_DIMENSION = "sagemaker:inference-component:DesiredCopyCount"
RESOURCE_ID_PREFIX = "inference-component/"
POLICY_TYPE = "TargetTrackingScaling"
METRIC_TYPE = "SageMakerInferenceComponentInvocationsPerCopy"
# One policy per scalable target; a policy is named within its target, so one name serves every component.
POLICY_NAME = "cpu-inference-invocations-per-copy"
NOT_FOUND = "ObjectNotFoundException"

WORKERS = 4
# Lambda's own limit is 15 minutes (https://docs.aws.amazon.com/lambda/latest/dg/configuration-timeout.html); 10
# leaves the Provider framework's onEvent function (15 min) room to report.
FUNCTION_TIMEOUT_SECONDS = 600
DEADLINE_MARGIN_SECONDS = 60
# botocore Config: retries {mode, max_attempts}; adaptive = standard + client-side rate limiting on throttling.
RETRIES: Any = {"mode": "adaptive", "max_attempts": 10}
CONNECT_TIMEOUT_SECONDS = 5
READ_TIMEOUT_SECONDS = 20
_NAMES_IN_ERROR = 10


@dataclass(frozen=True)
class Component:
    name: str
    min_copies: int
    max_copies: int
    invocations_per_copy: float

    @property
    def resource_id(self) -> str:
        return RESOURCE_ID_PREFIX + self.name


@dataclass(frozen=True)
class Settings:
    components: tuple[Component, ...]
    scale_out_cooldown: int
    scale_in_cooldown: int

    def by_name(self) -> dict[str, Component]:
        return {c.name: c for c in self.components}


def settings(props: Mapping[str, Any] | None) -> Settings:
    """The resource's properties, typed (CloudFormation sends numbers as strings)."""
    props = props or {}
    components = tuple(
        Component(
            name=str(c["Name"]),
            min_copies=int(c["MinCopies"]),
            max_copies=int(c["MaxCopies"]),
            invocations_per_copy=float(c["InvocationsPerCopy"]),
        )
        for c in props.get("Components") or []
    )
    names = [c.name for c in components]
    if len(set(names)) != len(names):
        raise ValueError(f"Components: duplicate names {sorted({n for n in names if names.count(n) > 1})}")
    return Settings(
        components=components,
        scale_out_cooldown=int(props.get("ScaleOutCooldown") or 0),
        scale_in_cooldown=int(props.get("ScaleInCooldown") or 0),
    )


def target_request(c: Component) -> dict[str, Any]:
    return {
        "ServiceNamespace": SERVICE_NAMESPACE,
        "ResourceId": c.resource_id,
        "ScalableDimension": SCALABLE_DIMENSION,
        "MinCapacity": c.min_copies,
        "MaxCapacity": c.max_copies,
    }


def policy_request(c: Component, s: Settings) -> dict[str, Any]:
    return {
        "PolicyName": POLICY_NAME,
        "ServiceNamespace": SERVICE_NAMESPACE,
        "ResourceId": c.resource_id,
        "ScalableDimension": SCALABLE_DIMENSION,
        "PolicyType": POLICY_TYPE,
        "TargetTrackingScalingPolicyConfiguration": {
            "TargetValue": c.invocations_per_copy,
            "PredefinedMetricSpecification": {"PredefinedMetricType": METRIC_TYPE},
            "ScaleOutCooldown": s.scale_out_cooldown,
            "ScaleInCooldown": s.scale_in_cooldown,
        },
    }


def deregister_request(name: str) -> dict[str, Any]:
    return {
        "ServiceNamespace": SERVICE_NAMESPACE,
        "ResourceId": RESOURCE_ID_PREFIX + name,
        "ScalableDimension": SCALABLE_DIMENSION,
    }


def client() -> Any:
    import boto3
    from botocore.config import Config

    return boto3.client(
        "application-autoscaling",
        config=Config(
            retries=RETRIES,
            connect_timeout=CONNECT_TIMEOUT_SECONDS,
            read_timeout=READ_TIMEOUT_SECONDS,
            max_pool_connections=WORKERS,
        ),
    )


def _error_code(exc: Exception) -> str:
    response = getattr(exc, "response", None) or {}
    return str((response.get("Error") or {}).get("Code") or type(exc).__name__)


def _run(names: list[str], work: Callable[[str], None], context: Any) -> None:
    """work(name) for every name on WORKERS threads; raises one line naming what failed or was not started."""
    deadline = None
    if context is not None and hasattr(context, "get_remaining_time_in_millis"):
        deadline = time.monotonic() + context.get_remaining_time_in_millis() / 1000 - DEADLINE_MARGIN_SECONDS

    def one(name: str) -> tuple[str, str | None]:
        if deadline is not None and time.monotonic() > deadline:
            return name, "not started: the invocation's time ran out"
        try:
            work(name)
        except Exception as exc:  # noqa: BLE001 - every failure is reported, by component, below
            return name, f"{_error_code(exc)}: {exc}"
        return name, None

    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        failed = [(n, e) for n, e in pool.map(one, names) if e is not None]
    if failed:
        shown = ", ".join(n for n, _ in failed[:_NAMES_IN_ERROR])
        more = f" and {len(failed) - _NAMES_IN_ERROR} more" if len(failed) > _NAMES_IN_ERROR else ""
        raise RuntimeError(
            f"inference component scaling: {len(failed)} of {len(names)} components failed ({shown}{more}); "
            f"first: {failed[0][0]}: {failed[0][1]}"
        )


def apply(aas: Any, s: Settings, names: Iterable[str], context: Any = None) -> None:
    """Register (or update) each named component's scalable target, then put its target-tracking policy."""
    by_name = s.by_name()

    def work(name: str) -> None:
        c = by_name[name]
        aas.register_scalable_target(**target_request(c))
        aas.put_scaling_policy(**policy_request(c, s))

    _run(list(names), work, context)


def deregister(aas: Any, names: Iterable[str], context: Any = None) -> None:
    """Deregister each named component's scalable target (and so its policy); one already gone is fine."""

    def work(name: str) -> None:
        try:
            aas.deregister_scalable_target(**deregister_request(name))
        except Exception as exc:
            if _error_code(exc) != NOT_FOUND:
                raise

    _run(list(names), work, context)


def changed(old: Settings, new: Settings) -> tuple[list[str], list[str]]:
    """(components to (re)apply, components to deregister) for an Update from `old` to `new`."""
    before, after = old.by_name(), new.by_name()
    same_cooldowns = (old.scale_out_cooldown, old.scale_in_cooldown) == (new.scale_out_cooldown, new.scale_in_cooldown)
    to_apply = [n for n, c in after.items() if not same_cooldowns or before.get(n) != c]
    gone = [n for n in before if n not in after]
    return to_apply, gone


def on_event(event: dict[str, Any], context: Any = None, *, aas: Any = None) -> dict[str, Any]:
    request = event["RequestType"]
    physical = event.get("PhysicalResourceId") or f"ic-scaling-{event.get('LogicalResourceId', 'resource')}"
    new = settings(event.get("ResourceProperties"))
    aas = aas if aas is not None else client()
    if request == "Delete":
        deregister(aas, [c.name for c in new.components], context)
        print(f"deregistered {len(new.components)} inference components")
        return {"PhysicalResourceId": physical}
    to_apply: list[str]
    gone: list[str]
    if request == "Create":
        to_apply, gone = [c.name for c in new.components], []
    else:
        to_apply, gone = changed(settings(event.get("OldResourceProperties")), new)
    apply(aas, new, to_apply, context)
    deregister(aas, gone, context)
    print(json.dumps({"request": request, "applied": len(to_apply), "deregistered": len(gone)}))
    return {"PhysicalResourceId": physical, "Data": {"Components": str(len(new.components))}}
