"""The parts GravitonEndpoint and RouterEndpoint share: the placement-hashed endpoint name, the endpoint's KMS
key and log group, the execution role's basic grants, the VPC security groups and ENI permissions, the Endpoint
resource, autoscaling on in-flight requests, the role's cdk-nag acknowledgments, and the props checks both
props classes make. Each function creates exactly what the constructs created inline before (same construct
IDs, same statement order), so the templates do not depend on which construct uses them."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import aws_cdk as cdk
from aws_cdk import aws_applicationautoscaling as appscaling
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sagemaker as sagemaker
from constructs import Construct

from .. import nag, sizing
from .engine_settings import TIMEOUT_MAX_SECONDS, TIMEOUT_MIN_SECONDS
from .monitoring import EndpointMonitoring, MonitoringSettings

if TYPE_CHECKING:
    from aws_cdk import aws_sns as sns

    from ..images import LlamaCppImage
    from .props import EngineImage

SCALABLE_DIMENSION = "sagemaker:variant:DesiredInstanceCount"
INVOKE_ACTIONS = ["sagemaker:InvokeEndpoint", "sagemaker:InvokeEndpointWithResponseStream"]
VPC_DESCRIBE = ["ec2:DescribeVpcs", "ec2:DescribeDhcpOptions", "ec2:DescribeSubnets", "ec2:DescribeSecurityGroups", "ec2:DescribeNetworkInterfaces"]
VPC_ENI = ["ec2:CreateNetworkInterface", "ec2:CreateNetworkInterfacePermission", "ec2:DeleteNetworkInterface", "ec2:DeleteNetworkInterfacePermission"]
# The catalog families with SageMaker hosting sizes (sizing's table, checked against botocore's enum).
SAGEMAKER_FAMILIES = tuple(dict.fromkeys(it.family for it in sizing.CATALOG.values() if it.sagemaker))

NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
ENDPOINT_PREFIX = re.compile(r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,53}$")
VARIANT = re.compile(r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$")
_SUBNET_FIELDS = ("availability_zones", "one_per_az", "subnet_filters", "subnet_group_name", "subnets", "subnet_type")


# -- names --------------------------------------------------------------------------------------------


def placement_slug(instance_type: str) -> str:
    """`ml.c7g.8xlarge` → `MlC7g8xlarge` (part of the logical IDs that must change with the instance type)."""
    return "".join(part.capitalize() for part in re.split(r"[^A-Za-z0-9]+", instance_type) if part)


def endpoint_name(scope: Construct, *, name: str, instance_type: str, variant_name: str, prefix: str | None) -> str:
    """`<prefix>-<hash>`: lowercase (SageMaker ARNs are), at most 63 characters, unique per construct path,
    and different for every placement (instance type, variant) so a re-placement is a new endpoint."""
    digest = hashlib.sha256(f"{scope.node.path}|{instance_type}|{variant_name}".encode()).hexdigest()[:8]
    if prefix is None:
        stack = cdk.Stack.of(scope)
        base = stack.stack_name if not cdk.Token.is_unresolved(stack.stack_name) else stack.node.id
        prefix = f"{base}-{name}"
    prefix = re.sub(r"-+", "-", re.sub(r"[^a-z0-9-]", "-", prefix.lower()))[:54].strip("-") or name[:54]
    return f"{prefix}-{digest}"


def log_group_name(endpoint: str) -> str:
    """The group SageMaker writes an endpoint's container logs to."""
    return f"/aws/sagemaker/Endpoints/{endpoint}"


# -- key, logs, role ----------------------------------------------------------------------------------


def create_key(scope: Construct, *, description: str, removal_policy: cdk.RemovalPolicy, endpoint: str) -> kms.Key:
    """A rotated key CloudWatch Logs may use for this endpoint's log group only."""
    stack = cdk.Stack.of(scope)
    key = kms.Key(scope, "Key", description=description, enable_key_rotation=True, removal_policy=removal_policy)
    key.add_to_resource_policy(
        iam.PolicyStatement(
            sid="ThisEndpointsLogGroup",
            principals=[iam.ServicePrincipal(f"logs.{stack.region}.amazonaws.com")],
            actions=["kms:Encrypt*", "kms:Decrypt*", "kms:ReEncrypt*", "kms:GenerateDataKey*", "kms:Describe*"],
            resources=["*"],
            conditions={
                "ArnLike": {
                    "kms:EncryptionContext:aws:logs:arn": (
                        f"arn:{stack.partition}:logs:{stack.region}:{stack.account}:log-group:{log_group_name(endpoint)}"
                    )
                }
            },
        )
    )
    return key


def endpoint_log_group(
    scope: Construct, slug: str, *, endpoint: str, retention: logs.RetentionDays, key: kms.IKey, own_key: bool
) -> logs.LogGroup:
    """Creating SageMaker's group sets retention and encryption (only with a key this construct created: a
    key it did not create may not allow CloudWatch Logs). It follows the endpoint name, so a replaced
    endpoint gets a new group and the old one goes with the old endpoint."""
    return logs.LogGroup(
        scope, f"Logs{slug}",
        log_group_name=log_group_name(endpoint),
        retention=retention,
        encryption_key=key if own_key else None,
        removal_policy=cdk.RemovalPolicy.DESTROY,
    )


def execution_role(scope: Construct, existing: iam.IRole | None, description: str) -> iam.IRole:
    return existing or iam.Role(scope, "ExecutionRole", assumed_by=iam.ServicePrincipal("sagemaker.amazonaws.com"), description=description)


def grant_basics(role: iam.IRole, *, image: LlamaCppImage | EngineImage, log_group: logs.LogGroup, key: kms.IKey) -> None:
    """Pull the image, write the logs and metrics, and let SageMaker encrypt the ML storage volume."""
    image.grant_pull(role)
    log_group.grant_write(role)
    log_group.grant(role, "logs:CreateLogGroup", "logs:DescribeLogStreams")
    role.add_to_principal_policy(
        iam.PolicyStatement(
            sid="EndpointMetrics",
            actions=["cloudwatch:PutMetricData"],
            resources=["*"],
            conditions={"StringLike": {"cloudwatch:namespace": "/aws/sagemaker/*"}},
        )
    )
    # The ML storage volume is encrypted with the endpoint key: SageMaker creates a grant on it for the
    # instance's EBS volume (only for AWS resources).
    role.add_to_principal_policy(
        iam.PolicyStatement(
            sid="VolumeKeyGrant",
            actions=["kms:CreateGrant", "kms:DescribeKey"],
            resources=[key.key_arn],
            conditions={"Bool": {"kms:GrantIsForAWSResource": "true"}},
        )
    )


def grant_invoke(grantee: iam.IGrantable, endpoint_arn: str) -> iam.Grant:
    """InvokeEndpoint and InvokeEndpointWithResponseStream on one endpoint."""
    return iam.Grant.add_to_principal(grantee=grantee, actions=INVOKE_ACTIONS, resource_arns=[endpoint_arn])


# -- network ------------------------------------------------------------------------------------------


def security_groups(
    scope: Construct, role: iam.IRole, *, vpc: ec2.IVpc | None, given: Sequence[ec2.ISecurityGroup], description: str,
    egress: Callable[[], Sequence[tuple[int, str]]],
) -> list[ec2.ISecurityGroup]:
    """The given groups, else one with no inbound and only the `egress()` (port, description) rules (asked only
    when the group is created); and the role's permissions to place the endpoint's ENIs in the VPC. No VPC: no
    groups, no permissions."""
    if vpc is None:
        return []
    groups = list(given)
    if not groups:
        sg = ec2.SecurityGroup(scope, "SecurityGroup", vpc=vpc, allow_all_outbound=False, description=description)
        for port, why in egress():
            sg.add_egress_rule(ec2.Peer.any_ipv4(), ec2.Port.tcp(port), why)
        groups = [sg]
    # SageMaker attaches the endpoint's ENIs in these subnets with the execution role.
    role.add_to_principal_policy(iam.PolicyStatement(sid="DescribeNetwork", actions=VPC_DESCRIBE, resources=["*"]))
    role.add_to_principal_policy(
        iam.PolicyStatement(
            sid="EndpointNetworkInterfaces", actions=VPC_ENI, resources=["*"],
            conditions={"ArnEquals": {"ec2:Vpc": vpc.vpc_arn}},
        )
    )
    return groups


def vpc_config(
    vpc: ec2.IVpc | None, selection: ec2.SubnetSelection | None, groups: Sequence[ec2.ISecurityGroup]
) -> sagemaker.CfnModel.VpcConfigProperty | None:
    if vpc is None:
        return None
    chosen = {f: getattr(selection, f) for f in _SUBNET_FIELDS if selection is not None and getattr(selection, f) is not None}
    return sagemaker.CfnModel.VpcConfigProperty(
        security_group_ids=[g.security_group_id for g in groups], subnets=vpc.select_subnets(**chosen).subnet_ids,
    )


# -- endpoint and scaling -----------------------------------------------------------------------------


def endpoint_config(
    scope: Construct, slug: str, props: EndpointPropsBase, *, model: sagemaker.CfnModel, key: kms.IKey,
    data_capture_config: sagemaker.CfnEndpointConfig.DataCaptureConfigProperty | None = None, **variant: Any,
) -> sagemaker.CfnEndpointConfig:
    """One production variant of `model` on the props' instance type and count, the volume encrypted with
    `key`; `variant` adds ProductionVariant fields (timeouts, volume size)."""
    return sagemaker.CfnEndpointConfig(
        scope, f"Config{slug}",
        production_variants=[
            sagemaker.CfnEndpointConfig.ProductionVariantProperty(
                variant_name=props.variant_name,
                model_name=model.attr_model_name,
                instance_type=props.instance_type,
                initial_instance_count=props.initial_count,
                initial_variant_weight=1,
                **variant,
            )
        ],
        kms_key_id=key.key_arn,
        data_capture_config=data_capture_config,
    )


def create_endpoint(
    scope: Construct, slug: str, *, name: str, config: sagemaker.CfnEndpointConfig, scales: bool, log_group: logs.LogGroup
) -> sagemaker.CfnEndpoint:
    endpoint = sagemaker.CfnEndpoint(
        scope, f"Endpoint{slug}",
        endpoint_name=name,
        endpoint_config_name=config.attr_endpoint_config_name,
        # A model/engine/config update must not reset the instance count autoscaling chose.
        retain_all_variant_properties=True if scales else None,
    )
    endpoint.node.add_dependency(log_group)
    return endpoint


def autoscaling(
    scope: Construct, slug: str, props: EndpointPropsBase, *, endpoint: sagemaker.CfnEndpoint, target: float | None,
) -> tuple[appscaling.ScalableTarget | None, appscaling.TargetTrackingScalingPolicy | None]:
    """Target tracking on the variant's in-flight requests per instance (ConcurrentRequestsPerModel, high
    resolution): each request holds a slot (engine) or an AWS call thread (router) until its answer ends,
    so concurrency — not request rate, whose cost varies 10-100x with output length — is what runs out.
    No target (the endpoint does not scale): (None, None)."""
    if target is None:
        return None, None
    stack = cdk.Stack.of(scope)
    # The service-linked role Application Auto Scaling creates for SageMaker variants on first use.
    slr = iam.Role.from_role_arn(
        scope, "ScalingServiceRole",
        f"arn:{stack.partition}:iam::{stack.account}:role/aws-service-role/sagemaker.application-autoscaling.amazonaws.com/"
        "AWSServiceRoleForApplicationAutoScaling_SageMakerEndpoint",
        mutable=False,
    )
    scalable_target = appscaling.ScalableTarget(
        scope, f"Scaling{slug}",
        service_namespace=appscaling.ServiceNamespace.SAGEMAKER,
        # attr_endpoint_name (not the string) so the target is registered after the endpoint exists.
        resource_id=f"endpoint/{endpoint.attr_endpoint_name}/variant/{props.variant_name}",
        scalable_dimension=SCALABLE_DIMENSION,
        min_capacity=props.min_capacity,
        max_capacity=props.max_capacity,
        role=slr,
    )
    policy = scalable_target.scale_to_track_metric(
        "ConcurrentRequests",
        target_value=target,
        predefined_metric=appscaling.PredefinedMetric.SAGEMAKER_VARIANT_CONCURRENT_REQUESTS_PER_MODEL_HIGH_RESOLUTION,
        scale_out_cooldown=props.scale_out_cooldown,
        scale_in_cooldown=props.scale_in_cooldown,
    )
    return scalable_target, policy


def monitoring(
    scope: Construct, props: EndpointPropsBase, *, endpoint: str, vcpus: int, target_concurrency: float | None, max_in_flight: int,
    latency_alarm: cdk.Duration | None = None, latency_alarm_basis: str = "",
) -> EndpointMonitoring:
    """Alarms (and a dashboard) on the endpoint's variant with the props' thresholds; `latency_alarm`: the p95
    ModelLatency budget (default: the props' latency_slo)."""
    return EndpointMonitoring(
        scope, "Monitoring",
        settings=MonitoringSettings(
            endpoint_name=endpoint, variant_name=props.variant_name, vcpus=vcpus,
            latency_slo=props.latency_slo, target_concurrency=target_concurrency, max_in_flight=max_in_flight,
            error_rate_4xx_percent=props.error_rate_4xx_percent, error_rate_5xx_percent=props.error_rate_5xx_percent,
            utilization_percent=props.utilization_alarm_percent, alarm_topic=props.alarm_topic, dashboard=props.dashboard,
            latency_alarm=latency_alarm, latency_alarm_basis=latency_alarm_basis,
        ),
    )


# -- cdk-nag ------------------------------------------------------------------------------------------


def role_wildcards(repository: str) -> list[nag.Wildcard]:
    """The execution role's `Resource::*` statements that have no narrower resource, each with its reason;
    `repository` names the one repository image pulls are limited to."""
    only = lambda allowed: (lambda actions: bool(actions) and set(actions) <= set(allowed))  # noqa: E731
    return [
        nag.Wildcard(
            r"Resource::\*",
            f"ecr:GetAuthorizationToken has no resource-level permissions; image pulls are limited to {repository}",
            only_with=only(["ecr:GetAuthorizationToken"]),
        ),
        nag.Wildcard(
            r"Resource::\*",
            "cloudwatch:PutMetricData has no resource-level permissions; limited to the /aws/sagemaker/ namespaces by condition",
            only_with=only(["cloudwatch:PutMetricData"]),
        ),
        nag.Wildcard(
            r"Resource::\*",
            "EC2 Describe* calls SageMaker makes to place the endpoint's ENIs have no resource-level permissions",
            only_with=only(VPC_DESCRIBE),
        ),
        nag.Wildcard(
            r"Resource::\*",
            "ENIs SageMaker creates for the endpoint do not exist before it runs; limited to this VPC by the ec2:Vpc condition",
            only_with=only(VPC_ENI),
        ),
    ]


# -- props --------------------------------------------------------------------------------------------


class EndpointPropsBase:
    """Derived values and checks common to GravitonEndpointProps and RouterEndpointProps (frozen dataclasses
    with these fields). Each `_check_*` raises ValueError naming `<p>.<key>` and the fix."""

    if TYPE_CHECKING:
        name: str
        instance_type: str
        min_capacity: int
        max_capacity: int
        initial_instance_count: int | None
        autoscaling: bool
        scale_out_cooldown: cdk.Duration
        scale_in_cooldown: cdk.Duration
        vpc: ec2.IVpc | None
        vpc_subnets: ec2.SubnetSelection | None
        security_groups: tuple[ec2.ISecurityGroup, ...]
        latency_slo: cdk.Duration
        error_rate_4xx_percent: float
        error_rate_5xx_percent: float
        utilization_alarm_percent: float
        alarm_topic: sns.ITopic | None
        dashboard: bool
        endpoint_name_prefix: str | None
        variant_name: str

    @property
    def instance(self) -> sizing.InstanceType:
        return sizing.instance(self.instance_type)

    @property
    def scales(self) -> bool:
        return self.autoscaling and self.max_capacity > self.min_capacity

    @property
    def initial_count(self) -> int:
        return self.initial_instance_count if self.initial_instance_count is not None else self.min_capacity

    def _check_name(self, p: str) -> None:
        if not NAME.match(self.name):
            raise ValueError(f"{p}.name must be a DNS label (lowercase letters, digits, '-'; at most 63), got {self.name!r}")

    def _check_instance_type(self, p: str, example: str) -> sizing.InstanceType:
        """The catalog entry of a SageMaker CPU instance type."""
        if not self.instance_type.startswith("ml."):
            raise ValueError(f"{p}.instance_type must be a SageMaker instance type such as {example}, got {self.instance_type!r}")
        try:
            return self.instance
        except sizing.UnknownInstanceType:
            alt = sizing.sagemaker_alternative(self.instance_type)
            if alt is not None:
                raise ValueError(
                    f"{p}.instance_type {self.instance_type!r} is not a SageMaker hosting instance type (not in "
                    f"ProductionVariantInstanceType) — use {alt.sagemaker_name} ({alt.vcpus} vCPUs, {alt.memory_gib:g} GiB)"
                ) from None
            raise ValueError(
                f"{p}.instance_type {self.instance_type!r} is not a SageMaker CPU instance in the catalog "
                f"(families: {', '.join('ml.' + f for f in SAGEMAKER_FAMILIES)}; `cpu-inference size --list`)"
            ) from None

    def _check_image_arch(self, p: str, arch: str, architectures: Sequence[str], image: str) -> None:
        """`image` names what to build ("the image", "the router image")."""
        if arch not in architectures:
            raise ValueError(
                f"{p}.image has no {arch} build ({', '.join(architectures)}) but {self.instance_type} is {arch} — "
                f"build {image} for {arch} or pick an instance type of its architecture"
            )

    def _check_capacity_bounds(self, p: str) -> None:
        if self.min_capacity < 1:
            raise ValueError(f"{p}.min_capacity must be >= 1 (SageMaker real-time endpoints cannot scale to zero), got {self.min_capacity}")
        if self.max_capacity < self.min_capacity:
            raise ValueError(f"{p}.max_capacity ({self.max_capacity}) must be >= min_capacity ({self.min_capacity})")
        if not self.min_capacity <= self.initial_count <= self.max_capacity:
            raise ValueError(f"{p}.initial_instance_count ({self.initial_count}) must be within min_capacity..max_capacity ({self.min_capacity}..{self.max_capacity})")

    def _check_timeout(self, p: str, attr: str) -> None:
        value: cdk.Duration | None = getattr(self, attr)
        if value is not None and not TIMEOUT_MIN_SECONDS <= value.to_seconds() <= TIMEOUT_MAX_SECONDS:
            raise ValueError(f"{p}.{attr} must be {TIMEOUT_MIN_SECONDS}..{TIMEOUT_MAX_SECONDS} seconds (SageMaker's range), got {value.to_seconds()}")

    def _check_network(self, p: str) -> None:
        if self.security_groups and self.vpc is None:
            raise ValueError(f"{p}.security_groups need a vpc: give vpc too, or drop security_groups")
        if self.vpc_subnets is not None and self.vpc is None:
            raise ValueError(f"{p}.vpc_subnets need a vpc: give vpc too, or drop vpc_subnets")

    def _check_alarms(self, p: str) -> None:
        if self.latency_slo.to_milliseconds() <= 0:
            raise ValueError(f"{p}.latency_slo must be positive")
        for attr in ("error_rate_4xx_percent", "error_rate_5xx_percent", "utilization_alarm_percent"):
            if not 0 < getattr(self, attr) <= 100:
                raise ValueError(f"{p}.{attr} must be in (0, 100], got {getattr(self, attr)}")

    def _check_naming(self, p: str) -> None:
        if self.endpoint_name_prefix is not None and not ENDPOINT_PREFIX.match(self.endpoint_name_prefix):
            raise ValueError(
                f"{p}.endpoint_name_prefix must be letters, digits and '-' (not first or last), at most 54 characters "
                f"(a 9-character placement hash follows), got {self.endpoint_name_prefix!r}"
            )
        if not VARIANT.match(self.variant_name):
            raise ValueError(f"{p}.variant_name must be letters, digits and '-', at most 63, got {self.variant_name!r}")
