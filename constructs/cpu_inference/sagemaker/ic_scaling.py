"""InferenceComponentScaling: per-model autoscaling of SageMaker inference components with a number of CloudFormation
resources that does not grow with the number of models — ONE custom resource (Custom::InferenceComponentScaling)
whose handler (lambda/ic_scaling/handler.py) registers, updates and deregisters every component's Application Auto
Scaling scalable target and target-tracking policy, plus its provider (two functions, their roles and one log
group). Adding model 301 changes only the custom resource's Components property.

The caller makes the custom resource depend on the inference components (`resource.node.add_dependency(...)`):
a component must exist before its target is registered, and on a stack delete the targets go first.

IAM (the handler's role; every statement scoped as far as the service allows):
- application-autoscaling:RegisterScalableTarget / PutScalingPolicy / DeregisterScalableTarget on scalable targets
  of this account and region, only with service-namespace `sagemaker` and scalable-dimension
  `sagemaker:inference-component:DesiredCopyCount` (the service's condition keys:
  https://docs.aws.amazon.com/service-authorization/latest/reference/list_awsapplicationautoscaling.html; the
  target's ARN carries an opaque id, not the component's name, so the resource is `scalable-target/*`, as in AWS's
  own AmazonSageMakerCanvasFullAccess policy: https://docs.aws.amazon.com/sagemaker/latest/dg/security-iam-awsmanpol-canvas.html).
- What Application Auto Scaling requires of its CALLER on the target service and CloudWatch — it validates these
  before it accepts RegisterScalableTarget / PutScalingPolicy
  (https://docs.aws.amazon.com/autoscaling/application/userguide/security_iam_permission_validation.html,
  https://docs.aws.amazon.com/autoscaling/application/userguide/security_iam_id-based-policy-examples.html):
  sagemaker:DescribeInferenceComponent and sagemaker:UpdateInferenceComponentRuntimeConfig (the inference-component
  actions of Application Auto Scaling's SageMaker policy, AWSApplicationAutoscalingSageMakerEndpointPolicy:
  https://docs.aws.amazon.com/autoscaling/application/userguide/security-iam-awsmanpol.html) on this account's
  inference components; cloudwatch:DescribeAlarms (Resource "*", as AWS's policies grant it) and
  cloudwatch:PutMetricAlarm / DeleteAlarms on `alarm:TargetTracking*` (target tracking's alarms) only when called
  via Application Auto Scaling (aws:CalledViaLast, as in AmazonSageMakerCanvasFullAccess).
- iam:CreateServiceLinkedRole for AWSServiceRoleForApplicationAutoScaling_SageMakerEndpoint only, with
  iam:AWSServiceName `sagemaker.application-autoscaling.amazonaws.com`: Application Auto Scaling creates it on the
  first RegisterScalableTarget for SageMaker in the account
  (https://docs.aws.amazon.com/autoscaling/application/userguide/application-auto-scaling-service-linked-roles.html,
  https://docs.aws.amazon.com/autoscaling/application/userguide/services-that-can-integrate-sagemaker.html)."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from types import ModuleType

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import custom_resources as cr
from constructs import Construct

from cpu_inference._internal import nag
from cpu_inference._internal.resources import IC_SCALING, runtime_dir
from cpu_inference.sagemaker.endpoint_props import EndpointPropsBase

__all__ = ["ComponentScaling", "InferenceComponentScaling"]


def _code_dir() -> Path:
    return runtime_dir(IC_SCALING)


def _handler_module() -> ModuleType:
    """lambda/ic_scaling/handler.py, loaded by path (Lambda code, not an installed package; stdlib-only at import):
    the one owner of the resource type, the names Application Auto Scaling takes and the function's time budget."""
    spec = importlib.util.spec_from_file_location("_cpu_inference_ic_scaling_handler", _code_dir() / "handler.py")
    if spec is None or spec.loader is None:
        raise FileNotFoundError(f"{_code_dir() / 'handler.py'} is missing")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


_HANDLER = _handler_module()
RESOURCE_TYPE: str = _HANDLER.RESOURCE_TYPE
FUNCTION_TIMEOUT_SECONDS: int = _HANDLER.FUNCTION_TIMEOUT_SECONDS
SERVICE_NAMESPACE: str = _HANDLER.SERVICE_NAMESPACE
SCALABLE_DIMENSION: str = _HANDLER.SCALABLE_DIMENSION
# Application Auto Scaling's service-linked role for SageMaker and its service principal (services-that-can-integrate-
# sagemaker.html; ARN form: application-auto-scaling-service-linked-roles.html, "Service-linked role ARN reference").
SLR_SERVICE = "sagemaker.application-autoscaling.amazonaws.com"
SLR_NAME = "AWSServiceRoleForApplicationAutoScaling_SageMakerEndpoint"
# Target tracking names the alarms it creates TargetTracking-... (AWSApplicationAutoscalingSageMakerEndpointPolicy
# scopes PutMetricAlarm/DeleteAlarms to alarm:TargetTracking*).
TARGET_TRACKING_ALARMS = "TargetTracking*"


def _endpoint_default_seconds(name: str) -> int:
    """A GravitonEndpoint's default cooldown (one owner: EndpointPropsBase): a dedicated model keeps the scaling
    behaviour it had as an endpoint of its own."""
    field = next(f for f in fields(EndpointPropsBase) if f.name == name)
    duration: cdk.Duration = field.default_factory()  # type: ignore[operator]
    return int(duration.to_seconds())


SCALE_OUT_COOLDOWN_SECONDS = _endpoint_default_seconds("scale_out_cooldown")
SCALE_IN_COOLDOWN_SECONDS = _endpoint_default_seconds("scale_in_cooldown")


@dataclass(frozen=True)
class ComponentScaling:
    """One inference component's autoscaling. name: its InferenceComponentName (may be a CDK token); min_copies /
    max_copies: copy-count bounds (0 <= min <= max, max >= 1; Application Auto Scaling allows 0 for SageMaker
    inference components: botocore RegisterScalableTarget MinCapacity); invocations_per_copy: the target-tracking
    target on SageMakerInferenceComponentInvocationsPerCopy (>= 1)."""

    name: str
    min_copies: int
    max_copies: int
    invocations_per_copy: int

    def validate(self) -> None:
        who = f"ComponentScaling {self.name}"
        for key in ("min_copies", "max_copies", "invocations_per_copy"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"{who}: {key} must be an integer, got {value!r}")
        if self.min_copies < 0:
            raise ValueError(f"{who}: min_copies must be >= 0, got {self.min_copies}")
        if self.max_copies < 1:
            raise ValueError(f"{who}: max_copies must be >= 1, got {self.max_copies}")
        if self.min_copies > self.max_copies:
            raise ValueError(
                f"{who}: min_copies ({self.min_copies}) must be <= max_copies ({self.max_copies}); raise max_copies"
            )
        if self.invocations_per_copy < 1:
            raise ValueError(f"{who}: invocations_per_copy must be >= 1, got {self.invocations_per_copy}")
        if not self.name:
            raise ValueError("ComponentScaling: name must be the inference component's name, got ''")

    def to_property(self) -> dict[str, object]:
        return {
            "Name": self.name,
            "MinCopies": self.min_copies,
            "MaxCopies": self.max_copies,
            "InvocationsPerCopy": self.invocations_per_copy,
        }


class InferenceComponentScaling(Construct):
    """ONE Custom::InferenceComponentScaling for every component given (O(1) resources in their number).

    Attributes: resource (cdk.CustomResource), handler (lambda_.Function), role (the handler's iam.Role),
    provider (cr.Provider), log_group."""

    def __init__(self, scope: Construct, id: str, *, components: Sequence[ComponentScaling]) -> None:
        super().__init__(scope, id)
        components = tuple(components)
        if not components:
            raise ValueError(f"InferenceComponentScaling {id}: components is empty; give at least one ComponentScaling")
        for component in components:
            component.validate()
        names = [c.name for c in components]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"InferenceComponentScaling {id}: components has duplicate names {duplicates}")

        stack = cdk.Stack.of(self)
        self.log_group = logs.LogGroup(
            self, "Logs", retention=logs.RetentionDays.ONE_YEAR, removal_policy=cdk.RemovalPolicy.DESTROY
        )
        self.role = iam.Role(
            self,
            "HandlerRole",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description="Registers the inference components' Application Auto Scaling targets and policies",
        )
        self._grant(stack)
        self.handler = lambda_.Function(
            self,
            "Handler",
            runtime=lambda_.Runtime.PYTHON_3_14,
            architecture=lambda_.Architecture.ARM_64,
            handler="handler.on_event",
            code=lambda_.Code.from_asset(str(_code_dir()), exclude=["__pycache__", "*.pyc"]),
            timeout=cdk.Duration.seconds(FUNCTION_TIMEOUT_SECONDS),
            memory_size=256,
            role=self.role,
            log_group=self.log_group,
            description="cpu-inference: registers inference components' autoscaling",
        )
        framework_role = iam.Role(
            self,
            "ProviderRole",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description="Inference component scaling: CDK Provider framework onEvent function",
        )
        self._write_logs(framework_role)
        self.provider = cr.Provider(
            self,
            "Provider",
            on_event_handler=self.handler,
            framework_on_event_role=framework_role,
            log_group=self.log_group,
        )
        self.resource = cdk.CustomResource(
            self,
            "Resource",
            service_token=self.provider.service_token,
            resource_type=RESOURCE_TYPE,
            properties={
                "Components": [c.to_property() for c in components],
                "ScaleOutCooldown": SCALE_OUT_COOLDOWN_SECONDS,
                "ScaleInCooldown": SCALE_IN_COOLDOWN_SECONDS,
            },
        )
        # The handler's calls need its policy in place.
        self.resource.node.add_dependency(self.role)
        self._acknowledge()

    def _write_logs(self, role: iam.Role) -> None:
        role.add_to_policy(
            iam.PolicyStatement(
                actions=["logs:CreateLogStream", "logs:PutLogEvents"], resources=[self.log_group.log_group_arn]
            )
        )

    def _grant(self, stack: cdk.Stack) -> None:
        self._write_logs(self.role)
        self.role.add_to_policy(
            iam.PolicyStatement(
                sid="ScaleInferenceComponentsOnly",
                actions=[
                    "application-autoscaling:RegisterScalableTarget",
                    "application-autoscaling:PutScalingPolicy",
                    "application-autoscaling:DeregisterScalableTarget",
                ],
                resources=[
                    stack.format_arn(service="application-autoscaling", resource="scalable-target", resource_name="*")
                ],
                conditions={
                    "StringEquals": {
                        "application-autoscaling:service-namespace": SERVICE_NAMESPACE,
                        "application-autoscaling:scalable-dimension": SCALABLE_DIMENSION,
                    }
                },
            )
        )
        self.role.add_to_policy(
            iam.PolicyStatement(
                sid="TargetServiceInferenceComponents",
                actions=["sagemaker:DescribeInferenceComponent", "sagemaker:UpdateInferenceComponentRuntimeConfig"],
                resources=[stack.format_arn(service="sagemaker", resource="inference-component", resource_name="*")],
            )
        )
        self.role.add_to_policy(
            iam.PolicyStatement(
                sid="TargetTrackingDescribeAlarms", actions=["cloudwatch:DescribeAlarms"], resources=["*"]
            )
        )
        self.role.add_to_policy(
            iam.PolicyStatement(
                sid="TargetTrackingAlarms",
                actions=["cloudwatch:PutMetricAlarm", "cloudwatch:DeleteAlarms"],
                resources=[
                    stack.format_arn(
                        service="cloudwatch",
                        resource="alarm",
                        resource_name=TARGET_TRACKING_ALARMS,
                        arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME,
                    )
                ],
                conditions={"StringEquals": {"aws:CalledViaLast": "application-autoscaling.amazonaws.com"}},
            )
        )
        self.role.add_to_policy(
            iam.PolicyStatement(
                sid="SageMakerScalingServiceLinkedRole",
                actions=["iam:CreateServiceLinkedRole"],
                resources=[
                    stack.format_arn(
                        service="iam",
                        region="",
                        resource="role",
                        resource_name=f"aws-service-role/{SLR_SERVICE}/{SLR_NAME}",
                    )
                ],
                conditions={"StringLike": {"iam:AWSServiceName": SLR_SERVICE}},
            )
        )

    def _acknowledge(self) -> None:
        nag.acknowledge_wildcards(
            self,
            {
                r"Resource::arn:<AWS::Partition>:application-autoscaling:[^:]+:[^:]+:scalable-target/\*": (
                    "A scalable target's ARN carries an opaque id, not the component's name; the statement is limited "
                    "to SageMaker inference components' copy count by the service-namespace and scalable-dimension conditions"
                ),
                r"Resource::arn:<AWS::Partition>:sagemaker:[^:]+:[^:]+:inference-component/\*": (
                    "Application Auto Scaling checks that its caller may describe and scale the inference components "
                    "it registers; listing each of up to hundreds of components would outgrow the role policy's size limit"
                ),
                r"Resource::\*": "cloudwatch:DescribeAlarms, which Application Auto Scaling checks its caller has, is granted on all alarms as in AWS's policies",
                r"Resource::arn:<AWS::Partition>:cloudwatch:[^:]+:[^:]+:alarm:TargetTracking\*": (
                    "Target tracking's own alarms (TargetTracking-...), created and deleted only via Application Auto Scaling"
                ),
                r"Resource::<.*Handler[0-9A-F]{8}\.Arn>:\*": (
                    "The provider framework invokes this construct's handler function; ':*' covers its versions and aliases only"
                ),
            },
        )
