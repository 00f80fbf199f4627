"""Per-model autoscaling of inference components: the Custom::InferenceComponentScaling handler
(lambda/ic_scaling/handler.py) and its construct (cpu_inference.sagemaker.ic_scaling).

The handler runs through a REAL boto3 client (botocore serializes and validates each call against its
application-autoscaling model). moto's Application Auto Scaling refuses the inference-component dimension (pinned
below), so the service behind the client is an in-process one on botocore's `before-send` hook: it re-validates every
request body against the model's input shape with botocore's ParamValidator, checks every enum value against the
model, keeps the targets and policies, and answers ObjectNotFoundException for a target that is not registered,
serialized as the JSON protocol's error (so botocore's own parser raises the ClientError the handler sees)."""

from __future__ import annotations

import importlib.util
import json
import logging
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import boto3
import botocore.session
import pytest
from aws_cdk.assertions import Template
from botocore.awsrequest import AWSResponse
from botocore.validate import ParamValidator

from cpu_inference.sagemaker import ic_scaling
from cpu_inference.sagemaker.ic_scaling import ComponentScaling, InferenceComponentScaling
from tests.support.cdk import apply_nag, nag_errors, normalized

ROOT = Path(__file__).resolve().parents[2]
HANDLER = ROOT / "lambda" / "ic_scaling" / "handler.py"
ENV = cdk.Environment(account="123456789012", region="us-east-1")
MODEL = botocore.session.get_session().get_service_model("application-autoscaling")


def _load_handler() -> Any:
    spec = importlib.util.spec_from_file_location("ic_scaling_handler_under_test", HANDLER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


handler = _load_handler()


# -- the names the handler sends, against botocore's model -----------------------------------------------------------


def test_every_name_and_enum_is_in_botocores_model() -> None:
    assert handler.SERVICE_NAMESPACE in MODEL.shape_for("ServiceNamespace").enum
    assert handler.SCALABLE_DIMENSION in MODEL.shape_for("ScalableDimension").enum
    assert handler.POLICY_TYPE in MODEL.shape_for("PolicyType").enum
    assert handler.METRIC_TYPE in MODEL.shape_for("MetricType").enum
    # The ResourceId form, from RegisterScalableTarget's own documentation.
    doc = MODEL.operation_model("RegisterScalableTarget").input_shape.members["ResourceId"].documentation
    assert "inference-component/my-inference-component" in doc
    assert handler.RESOURCE_ID_PREFIX == "inference-component/"
    # MinCapacity 0 is documented for inference components (ComponentScaling allows it).
    assert "SageMaker inference components" in (
        MODEL.operation_model("RegisterScalableTarget").input_shape.members["MinCapacity"].documentation
    )
    # Deregistering removes the target's policies: Delete needs no DeleteScalingPolicy.
    assert "deletes the scaling policies" in MODEL.operation_model("DeregisterScalableTarget").documentation
    assert handler.NOT_FOUND in [e.name for e in MODEL.operation_model("DeregisterScalableTarget").error_shapes]
    # The construct's names are the handler's (one owner).
    assert ic_scaling.RESOURCE_TYPE == handler.RESOURCE_TYPE
    assert ic_scaling.FUNCTION_TIMEOUT_SECONDS == handler.FUNCTION_TIMEOUT_SECONDS
    assert ic_scaling.SCALABLE_DIMENSION == handler.SCALABLE_DIMENSION


# -- an in-process Application Auto Scaling behind a real client ------------------------------------------------------


class _Raw:
    def __init__(self, data: bytes) -> None:
        self._data = data

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self._data


def _enum_errors(value: Any, shape: Any, path: str) -> list[str]:
    if shape.type_name == "structure" and isinstance(value, dict):
        return [e for k, v in value.items() for e in _enum_errors(v, shape.members[k], f"{path}.{k}")]
    if shape.type_name == "list" and isinstance(value, list):
        return [e for i, v in enumerate(value) for e in _enum_errors(v, shape.member, f"{path}[{i}]")]
    if shape.type_name == "string" and shape.enum and value not in shape.enum:
        return [f"{path}={value!r} not in {shape.name}"]
    return []


class FakeAAS:
    """Targets and policies keyed by ResourceId; records every call; counts calls in flight."""

    def __init__(self, *, latency: float = 0.0) -> None:
        self.targets: dict[str, dict[str, Any]] = {}
        self.policies: dict[str, dict[str, Any]] = {}
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.latency = latency
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()

    def client(self) -> Any:
        aas = boto3.client(
            "application-autoscaling", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x"
        )
        aas.meta.events.register("before-send.application-auto-scaling", self)
        return aas

    def _respond(self, request: Any, status: int, body: dict[str, Any]) -> AWSResponse:
        return AWSResponse(request.url, status, {"x-amzn-requestid": "fake"}, _Raw(json.dumps(body).encode()))

    def __call__(self, request: Any, **_: Any) -> AWSResponse:
        target = request.headers["X-Amz-Target"]
        op = (target.decode() if isinstance(target, bytes) else target).split(".")[-1]
        body = json.loads(request.body)
        shape = MODEL.operation_model(op).input_shape
        report = ParamValidator().validate(body, shape)
        assert not report.has_errors(), report.generate_report()
        assert not _enum_errors(body, shape, op), _enum_errors(body, shape, op)
        with self._lock:
            self.calls.append((op, body))
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            time.sleep(self.latency)
            return self._handle(request, op, body)
        finally:
            with self._lock:
                self.in_flight -= 1

    def _handle(self, request: Any, op: str, body: dict[str, Any]) -> AWSResponse:
        rid = body["ResourceId"]
        with self._lock:
            if op == "RegisterScalableTarget":
                self.targets[rid] = body
                return self._respond(request, 200, {"ScalableTargetARN": f"arn:aws:application-autoscaling:x:{rid}"})
            if op == "PutScalingPolicy":
                if rid not in self.targets:
                    return self._respond(request, 400, {"__type": "ObjectNotFoundException", "message": "no target"})
                self.policies[rid] = body
                return self._respond(request, 200, {"PolicyARN": f"arn:policy:{rid}"})
            if op == "DeregisterScalableTarget":
                if rid not in self.targets:
                    return self._respond(
                        request, 400, {"__type": "ObjectNotFoundException", "message": f"No scalable target {rid}"}
                    )
                del self.targets[rid]
                self.policies.pop(rid, None)  # DeregisterScalableTarget deletes the target's policies
                return self._respond(request, 200, {})
        return self._respond(request, 400, {"__type": "ValidationException", "message": f"unexpected {op}"})

    def state(self) -> dict[str, tuple[int, int, float]]:
        return {
            rid.removeprefix("inference-component/"): (
                t["MinCapacity"],
                t["MaxCapacity"],
                self.policies[rid]["TargetTrackingScalingPolicyConfiguration"]["TargetValue"],
            )
            for rid, t in self.targets.items()
        }


def _props(*components: tuple[str, int, int, int], out: int = 120, in_: int = 600) -> dict[str, Any]:
    # As CloudFormation delivers them: every scalar a string.
    return {
        "ServiceToken": "arn:aws:lambda:us-east-1:123456789012:function:x",
        "Components": [
            {"Name": n, "MinCopies": str(lo), "MaxCopies": str(hi), "InvocationsPerCopy": str(t)}
            for n, lo, hi, t in components
        ],
        "ScaleOutCooldown": str(out),
        "ScaleInCooldown": str(in_),
    }


def _event(request: str, props: dict[str, Any], old: dict[str, Any] | None = None) -> dict[str, Any]:
    event: dict[str, Any] = {"RequestType": request, "LogicalResourceId": "Scaling", "ResourceProperties": props}
    if request != "Create":
        event["PhysicalResourceId"] = "ic-scaling-Scaling"
    if old is not None:
        event["OldResourceProperties"] = old
    return event


A, B, C = ("model-a", 1, 3, 10), ("model-b", 0, 2, 5), ("model-c", 1, 1, 4)


def test_create_registers_every_component_with_its_target_tracking_policy() -> None:
    fake = FakeAAS()
    out = handler.on_event(_event("Create", _props(A, B)), aas=fake.client())
    assert out["PhysicalResourceId"] == "ic-scaling-Scaling"
    assert fake.state() == {"model-a": (1, 3, 10.0), "model-b": (0, 2, 5.0)}
    policy = fake.policies["inference-component/model-a"]
    assert policy["ServiceNamespace"] == "sagemaker"
    assert policy["ScalableDimension"] == "sagemaker:inference-component:DesiredCopyCount"
    assert policy["PolicyType"] == "TargetTrackingScaling"
    assert policy["TargetTrackingScalingPolicyConfiguration"] == {
        "TargetValue": 10.0,
        "PredefinedMetricSpecification": {"PredefinedMetricType": "SageMakerInferenceComponentInvocationsPerCopy"},
        "ScaleOutCooldown": 120,
        "ScaleInCooldown": 600,
    }
    # Per component: register before its policy.
    ops_a = [op for op, body in fake.calls if body["ResourceId"] == "inference-component/model-a"]
    assert ops_a == ["RegisterScalableTarget", "PutScalingPolicy"]


def test_update_adds_one_removes_one_changes_max_and_touches_nothing_else() -> None:
    fake = FakeAAS()
    aas = fake.client()
    handler.on_event(_event("Create", _props(A, B)), aas=aas)
    fake.calls.clear()
    a_wider = ("model-a", 1, 6, 10)
    out = handler.on_event(_event("Update", _props(a_wider, C), old=_props(A, B)), aas=aas)
    assert out["PhysicalResourceId"] == "ic-scaling-Scaling"  # stable: no replacement
    assert fake.state() == {"model-a": (1, 6, 10.0), "model-c": (1, 1, 4.0)}
    touched = sorted({(op, body["ResourceId"]) for op, body in fake.calls})
    assert touched == [
        ("DeregisterScalableTarget", "inference-component/model-b"),
        ("PutScalingPolicy", "inference-component/model-a"),
        ("PutScalingPolicy", "inference-component/model-c"),
        ("RegisterScalableTarget", "inference-component/model-a"),
        ("RegisterScalableTarget", "inference-component/model-c"),
    ]
    # Adding one model to an unchanged list calls for that model only.
    fake.calls.clear()
    handler.on_event(_event("Update", _props(a_wider, C, B), old=_props(a_wider, C)), aas=aas)
    assert {body["ResourceId"] for _, body in fake.calls} == {"inference-component/model-b"}


def test_update_of_the_cooldowns_reapplies_every_policy() -> None:
    fake = FakeAAS()
    aas = fake.client()
    handler.on_event(_event("Create", _props(A, B)), aas=aas)
    fake.calls.clear()
    handler.on_event(_event("Update", _props(A, B, out=60), old=_props(A, B)), aas=aas)
    assert sorted(b["ResourceId"] for op, b in fake.calls if op == "PutScalingPolicy") == [
        "inference-component/model-a",
        "inference-component/model-b",
    ]
    assert (
        fake.policies["inference-component/model-b"]["TargetTrackingScalingPolicyConfiguration"]["ScaleOutCooldown"]
        == 60
    )


def test_rollback_update_restores_the_old_list() -> None:
    fake = FakeAAS()
    aas = fake.client()
    handler.on_event(_event("Create", _props(A, B)), aas=aas)
    new = _props(("model-a", 2, 8, 10), C)
    handler.on_event(_event("Update", new, old=_props(A, B)), aas=aas)
    # CloudFormation's rollback: an Update back to the old properties.
    handler.on_event(_event("Update", _props(A, B), old=new), aas=aas)
    assert fake.state() == {"model-a": (1, 3, 10.0), "model-b": (0, 2, 5.0)}


def test_delete_deregisters_all_and_a_target_already_gone_is_fine() -> None:
    fake = FakeAAS()
    aas = fake.client()
    handler.on_event(_event("Create", _props(A, B, C)), aas=aas)
    # e.g. its endpoint was deleted first, which deregisters the target and so its policy
    del fake.targets["inference-component/model-b"], fake.policies["inference-component/model-b"]
    out = handler.on_event(_event("Delete", _props(A, B, C)), aas=aas)
    assert out == {"PhysicalResourceId": "ic-scaling-Scaling"}
    assert fake.targets == {} and fake.policies == {}
    # Delete when everything is gone (a second delete, or a create that failed before registering anything).
    handler.on_event(_event("Delete", _props(A, B, C)), aas=aas)


def test_a_failure_names_the_component_and_fails_the_request() -> None:
    fake = FakeAAS()
    aas = fake.client()

    def refuse(request: Any, **_: Any) -> AWSResponse | None:
        if b"model-b" in request.body and b"PolicyName" in request.body:
            return fake._respond(request, 400, {"__type": "ValidationException", "message": "missing permission"})
        return None

    aas.meta.events.register_first("before-send.application-auto-scaling", refuse)
    with pytest.raises(RuntimeError, match=r"1 of 2 components failed \(model-b\).*ValidationException"):
        handler.on_event(_event("Create", _props(A, B)), aas=aas)


def test_300_components_are_bounded_by_the_thread_pool_and_the_deadline() -> None:
    comps = [(f"model-{i:03d}", 1, 4, 8) for i in range(300)]
    fake = FakeAAS(latency=0.005)
    started = time.monotonic()
    handler.on_event(_event("Create", _props(*comps)), aas=fake.client())
    assert len(fake.calls) == 600 and len(fake.state()) == 300
    assert fake.max_in_flight <= handler.WORKERS
    assert time.monotonic() - started < 60

    class NearlyOut:
        def get_remaining_time_in_millis(self) -> int:
            return (handler.DEADLINE_MARGIN_SECONDS - 1) * 1000

    fake = FakeAAS()
    with pytest.raises(RuntimeError, match=r"300 of 300 components failed .* time ran out"):
        handler.on_event(_event("Create", _props(*comps)), NearlyOut(), aas=fake.client())
    assert fake.calls == []
    # The function's own budget fits in Lambda's 15 minutes, with the margin inside it.
    assert handler.DEADLINE_MARGIN_SECONDS < handler.FUNCTION_TIMEOUT_SECONDS < 15 * 60


# -- moto: its Application Auto Scaling refuses the inference-component dimension (why the fake above) -------------


@pytest.fixture(scope="module")
def moto_url() -> Iterator[str]:
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


def test_moto_refuses_the_inference_component_dimension(moto_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL_APPLICATION_AUTO_SCALING": moto_url,
    }.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    aas = handler.client()  # the handler's own client, retry config and all
    # moto works for a SageMaker variant ...
    aas.register_scalable_target(
        ServiceNamespace="sagemaker",
        ResourceId="endpoint/e/variant/AllTraffic",
        ScalableDimension="sagemaker:variant:DesiredInstanceCount",
        MinCapacity=1,
        MaxCapacity=2,
    )
    # ... and refuses the inference component's dimension, which botocore's model has.
    refused = r"ValidationException.*'sagemaker:inference-component:DesiredCopyCount' at 'scalableDimension' failed"
    with pytest.raises(RuntimeError, match=refused):
        handler.on_event(_event("Create", _props(A)), aas=aas)
    # The same refusal on Deregister: moto cannot stand in for the service here (a ValidationException, unlike
    # ObjectNotFoundException, rightly fails a Delete).
    with pytest.raises(RuntimeError, match=refused):
        handler.on_event(_event("Delete", _props(A)), aas=aas)


# -- ComponentScaling validation -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"min_copies": -1}, "min_copies"),
        ({"max_copies": 0, "min_copies": 0}, "max_copies"),
        ({"min_copies": 3, "max_copies": 2}, "min_copies"),
        ({"invocations_per_copy": 0}, "invocations_per_copy"),
        ({"max_copies": 2.5}, "max_copies"),
    ],
)
def test_component_scaling_refuses_bad_values_naming_the_field(kwargs: dict[str, Any], field: str) -> None:
    values: dict[str, Any] = {"name": "m", "min_copies": 1, "max_copies": 2, "invocations_per_copy": 5, **kwargs}
    with pytest.raises(ValueError, match=field):
        ComponentScaling(**values).validate()
    with pytest.raises(ValueError, match=field):
        InferenceComponentScaling(cdk.Stack(cdk.App()), "S", components=[ComponentScaling(**values)])


def test_min_zero_is_allowed_and_duplicates_are_refused() -> None:
    ComponentScaling("m", 0, 1, 1).validate()
    with pytest.raises(ValueError, match="duplicate names"):
        InferenceComponentScaling(
            cdk.Stack(cdk.App()), "S", components=[ComponentScaling("m", 1, 2, 5), ComponentScaling("m", 1, 3, 5)]
        )


# -- the construct's template ----------------------------------------------------------------------------------------


def _synth(n: int, *, nag: bool = False) -> tuple[cdk.Stack, dict[str, Any]]:
    app = cdk.App()
    if nag:
        apply_nag(app)
    stack = cdk.Stack(app, "Farm", env=ENV)
    comps = [ComponentScaling(f"model-{i:03d}", 1, 4, 8) for i in range(n)]
    scaling = InferenceComponentScaling(stack, "Scaling", components=comps)
    assert isinstance(scaling.resource, cdk.CustomResource)
    return stack, dict(Template.from_stack(stack).to_json())


def _custom(template: dict[str, Any]) -> dict[str, Any]:
    (resource,) = [r for r in template["Resources"].values() if r["Type"] == "Custom::InferenceComponentScaling"]
    return resource


def test_resource_count_is_the_same_for_1_and_300_components() -> None:
    _, one = _synth(1)
    _, many = _synth(300)
    assert len(one["Resources"]) == len(many["Resources"])
    assert len(_custom(many)["Properties"]["Components"]) == 300
    # Everything but the Components list is identical: the template grows only by that list.
    for t in (one, many):
        del _custom(t)["Properties"]["Components"]
    assert normalized(one) == normalized(many)
    types = sorted(r["Type"] for r in one["Resources"].values())
    assert types.count("AWS::Lambda::Function") == 2  # the handler + the provider framework's onEvent
    assert types.count("Custom::InferenceComponentScaling") == 1


def _statements(template: dict[str, Any], role_prefix: str) -> list[dict[str, Any]]:
    (role_id,) = [
        k for k, r in template["Resources"].items() if r["Type"] == "AWS::IAM::Role" and k.startswith(role_prefix)
    ]
    return [
        s
        for r in template["Resources"].values()
        if r["Type"] == "AWS::IAM::Policy" and {"Ref": role_id} in r["Properties"]["Roles"]
        for s in r["Properties"]["PolicyDocument"]["Statement"]
    ]


def test_handler_role_is_least_privilege() -> None:
    _, template = _synth(3)
    by_sid = {s.get("Sid", "logs"): s for s in _statements(template, "ScalingHandlerRole")}
    assert set(by_sid) == {
        "logs",
        "ScaleInferenceComponentsOnly",
        "TargetServiceInferenceComponents",
        "TargetTrackingDescribeAlarms",
        "TargetTrackingAlarms",
        "SageMakerScalingServiceLinkedRole",
    }
    actions = [a for s in by_sid.values() for a in (s["Action"] if isinstance(s["Action"], list) else [s["Action"]])]
    assert not [a for a in actions if "*" in a]
    scale = by_sid["ScaleInferenceComponentsOnly"]
    assert sorted(scale["Action"]) == [
        "application-autoscaling:DeregisterScalableTarget",
        "application-autoscaling:PutScalingPolicy",
        "application-autoscaling:RegisterScalableTarget",
    ]
    assert scale["Condition"] == {
        "StringEquals": {
            "application-autoscaling:service-namespace": "sagemaker",
            "application-autoscaling:scalable-dimension": "sagemaker:inference-component:DesiredCopyCount",
        }
    }
    assert "scalable-target/*" in json.dumps(scale["Resource"])
    assert sorted(by_sid["TargetServiceInferenceComponents"]["Action"]) == [
        "sagemaker:DescribeInferenceComponent",
        "sagemaker:UpdateInferenceComponentRuntimeConfig",
    ]
    assert ":inference-component/*" in json.dumps(by_sid["TargetServiceInferenceComponents"]["Resource"])
    assert by_sid["TargetTrackingDescribeAlarms"]["Action"] == "cloudwatch:DescribeAlarms"
    alarms = by_sid["TargetTrackingAlarms"]
    assert ":alarm:TargetTracking*" in json.dumps(alarms["Resource"])
    assert alarms["Condition"] == {"StringEquals": {"aws:CalledViaLast": "application-autoscaling.amazonaws.com"}}
    slr = by_sid["SageMakerScalingServiceLinkedRole"]
    assert slr["Action"] == "iam:CreateServiceLinkedRole"
    assert slr["Condition"] == {"StringLike": {"iam:AWSServiceName": "sagemaker.application-autoscaling.amazonaws.com"}}
    assert (
        "role/aws-service-role/sagemaker.application-autoscaling.amazonaws.com/"
        "AWSServiceRoleForApplicationAutoScaling_SageMakerEndpoint"
    ) in json.dumps(slr["Resource"])


def test_handler_function_runtime_timeout_and_properties() -> None:
    _, template = _synth(2)
    functions = [r for r in template["Resources"].values() if r["Type"] == "AWS::Lambda::Function"]
    (fn,) = [f for f in functions if f["Properties"].get("Handler") == "handler.on_event"]
    assert fn["Properties"]["Runtime"] == "python3.14"
    assert fn["Properties"]["Architectures"] == ["arm64"]
    assert fn["Properties"]["Timeout"] == handler.FUNCTION_TIMEOUT_SECONDS
    props = _custom(template)["Properties"]
    assert props["Components"][0] == {"Name": "model-000", "MinCopies": 1, "MaxCopies": 4, "InvocationsPerCopy": 8}
    # The cooldowns are a GravitonEndpoint's defaults (one owner: EndpointPropsBase).
    assert (props["ScaleOutCooldown"], props["ScaleInCooldown"]) == (120, 600)
    # What the handler parses out of these properties is what the construct meant.
    parsed = handler.settings(json.loads(json.dumps(props)))
    assert parsed.components[0] == handler.Component("model-000", 1, 4, 8.0)


def test_cdk_nag_has_no_unacknowledged_findings() -> None:
    stack, _ = _synth(3, nag=True)
    assert nag_errors(stack) == []
