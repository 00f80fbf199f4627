"""The execution role's permissions every endpoint needs (image pull, logs, metrics, the volume key, the VPC's
ENIs), the invoke grant for callers, and the cdk-nag reasons for the statements that have no narrower resource.
Statement order is part of the templates: keep it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs

from cpu_inference._internal import nag

if TYPE_CHECKING:
    from cpu_inference.images import LlamaCppImage
    from cpu_inference.sagemaker.engine_image import EngineImage

INVOKE_ACTIONS = ["sagemaker:InvokeEndpoint", "sagemaker:InvokeEndpointWithResponseStream"]
VPC_DESCRIBE = [
    "ec2:DescribeVpcs",
    "ec2:DescribeDhcpOptions",
    "ec2:DescribeSubnets",
    "ec2:DescribeSecurityGroups",
    "ec2:DescribeNetworkInterfaces",
]
VPC_ENI = [
    "ec2:CreateNetworkInterface",
    "ec2:CreateNetworkInterfacePermission",
    "ec2:DeleteNetworkInterface",
    "ec2:DeleteNetworkInterfacePermission",
]


def grant_basics(
    role: iam.IRole, *, image: LlamaCppImage | EngineImage, log_group: logs.LogGroup, key: kms.IKey
) -> None:
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


def grant_network(role: iam.IRole, vpc: ec2.IVpc) -> None:
    """SageMaker attaches the endpoint's ENIs in the VPC's subnets with the execution role."""
    role.add_to_principal_policy(iam.PolicyStatement(sid="DescribeNetwork", actions=VPC_DESCRIBE, resources=["*"]))
    role.add_to_principal_policy(
        iam.PolicyStatement(
            sid="EndpointNetworkInterfaces",
            actions=VPC_ENI,
            resources=["*"],
            conditions={"ArnEquals": {"ec2:Vpc": vpc.vpc_arn}},
        )
    )


def grant_invoke(grantee: iam.IGrantable, endpoint_arn: str) -> iam.Grant:
    """InvokeEndpoint and InvokeEndpointWithResponseStream on one endpoint."""
    return iam.Grant.add_to_principal(grantee=grantee, actions=INVOKE_ACTIONS, resource_arns=[endpoint_arn])


def role_wildcards(repository: str) -> list[nag.Wildcard]:
    """The execution role's `Resource::*` statements that have no narrower resource, each with its reason;
    `repository` names the one repository image pulls are limited to."""
    only = lambda allowed: lambda actions: bool(actions) and set(actions) <= set(allowed)  # noqa: E731
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
