"""Karpenter controller IAM, statement for statement after Karpenter's reference CloudFormation
(website/content/en/v1.14/getting-started/getting-started-with-karpenter/cloudformation.yaml):
mutating EC2/IAM actions are scoped by the `kubernetes.io/cluster/<name>` and `eks:eks-cluster-name`
tags and the `karpenter.sh/nodepool` / `karpenter.k8s.aws/ec2nodeclass` tags Karpenter sets."""

from __future__ import annotations

from aws_cdk import Aws
from aws_cdk import aws_iam as iam


def _ec2(resource: str, account: str = "*") -> str:
    return f"arn:{Aws.PARTITION}:ec2:{Aws.REGION}:{account}:{resource}"


def node_lifecycle(cluster_name: str) -> list[iam.PolicyStatement]:
    owned = f"aws:ResourceTag/kubernetes.io/cluster/{cluster_name}"
    req_owned = f"aws:RequestTag/kubernetes.io/cluster/{cluster_name}"
    tagged = [
        _ec2(r)
        for r in (
            "fleet/*",
            "instance/*",
            "volume/*",
            "network-interface/*",
            "launch-template/*",
            "spot-instances-request/*",
        )
    ]
    return [
        iam.PolicyStatement(
            sid="AllowScopedEC2InstanceAccessActions",
            actions=["ec2:RunInstances", "ec2:CreateFleet"],
            resources=[_ec2("image/*", ""), _ec2("snapshot/*", "")]
            + [_ec2(r) for r in ("security-group/*", "subnet/*", "capacity-reservation/*", "placement-group/*")],
        ),
        iam.PolicyStatement(
            sid="AllowScopedEC2LaunchTemplateAccessActions",
            actions=["ec2:RunInstances", "ec2:CreateFleet"],
            resources=[_ec2("launch-template/*")],
            conditions={"StringEquals": {owned: "owned"}, "StringLike": {"aws:ResourceTag/karpenter.sh/nodepool": "*"}},
        ),
        iam.PolicyStatement(
            sid="AllowScopedEC2InstanceActionsWithTags",
            actions=["ec2:RunInstances", "ec2:CreateFleet", "ec2:CreateLaunchTemplate"],
            resources=tagged,
            conditions={
                "StringEquals": {req_owned: "owned", "aws:RequestTag/eks:eks-cluster-name": cluster_name},
                "StringLike": {"aws:RequestTag/karpenter.sh/nodepool": "*"},
            },
        ),
        iam.PolicyStatement(
            sid="AllowScopedResourceCreationTagging",
            actions=["ec2:CreateTags"],
            resources=tagged,
            conditions={
                "StringEquals": {
                    req_owned: "owned",
                    "aws:RequestTag/eks:eks-cluster-name": cluster_name,
                    "ec2:CreateAction": ["RunInstances", "CreateFleet", "CreateLaunchTemplate"],
                },
                "StringLike": {"aws:RequestTag/karpenter.sh/nodepool": "*"},
            },
        ),
        iam.PolicyStatement(
            sid="AllowScopedResourceTagging",
            actions=["ec2:CreateTags"],
            resources=[_ec2("instance/*")],
            conditions={
                "StringEquals": {owned: "owned"},
                "StringLike": {"aws:ResourceTag/karpenter.sh/nodepool": "*"},
                "StringEqualsIfExists": {"aws:RequestTag/eks:eks-cluster-name": cluster_name},
                "ForAllValues:StringEquals": {
                    "aws:TagKeys": ["eks:eks-cluster-name", "karpenter.sh/nodeclaim", "Name"]
                },
            },
        ),
        iam.PolicyStatement(
            sid="AllowScopedDeletion",
            actions=["ec2:TerminateInstances", "ec2:DeleteLaunchTemplate"],
            resources=[_ec2("instance/*"), _ec2("launch-template/*")],
            conditions={"StringEquals": {owned: "owned"}, "StringLike": {"aws:ResourceTag/karpenter.sh/nodepool": "*"}},
        ),
    ]


def iam_integration(cluster_name: str, node_role_arn: str) -> list[iam.PolicyStatement]:
    profile = f"arn:{Aws.PARTITION}:iam::{Aws.ACCOUNT_ID}:instance-profile/*"
    owned = f"aws:ResourceTag/kubernetes.io/cluster/{cluster_name}"
    req_owned = f"aws:RequestTag/kubernetes.io/cluster/{cluster_name}"
    return [
        iam.PolicyStatement(
            sid="AllowPassingInstanceRole",
            actions=["iam:PassRole"],
            resources=[node_role_arn],
            conditions={"StringEquals": {"iam:PassedToService": ["ec2.amazonaws.com", "ec2.amazonaws.com.cn"]}},
        ),
        iam.PolicyStatement(
            sid="AllowScopedInstanceProfileCreationActions",
            actions=["iam:CreateInstanceProfile"],
            resources=[profile],
            conditions={
                "StringEquals": {
                    req_owned: "owned",
                    "aws:RequestTag/eks:eks-cluster-name": cluster_name,
                    "aws:RequestTag/topology.kubernetes.io/region": Aws.REGION,
                },
                "StringLike": {"aws:RequestTag/karpenter.k8s.aws/ec2nodeclass": "*"},
            },
        ),
        iam.PolicyStatement(
            sid="AllowScopedInstanceProfileTagActions",
            actions=["iam:TagInstanceProfile"],
            resources=[profile],
            conditions={
                "StringEquals": {
                    owned: "owned",
                    "aws:ResourceTag/topology.kubernetes.io/region": Aws.REGION,
                    req_owned: "owned",
                    "aws:RequestTag/eks:eks-cluster-name": cluster_name,
                    "aws:RequestTag/topology.kubernetes.io/region": Aws.REGION,
                },
                "StringLike": {
                    "aws:ResourceTag/karpenter.k8s.aws/ec2nodeclass": "*",
                    "aws:RequestTag/karpenter.k8s.aws/ec2nodeclass": "*",
                },
            },
        ),
        iam.PolicyStatement(
            sid="AllowScopedInstanceProfileActions",
            actions=["iam:AddRoleToInstanceProfile", "iam:RemoveRoleFromInstanceProfile", "iam:DeleteInstanceProfile"],
            resources=[profile],
            conditions={
                "StringEquals": {owned: "owned", "aws:ResourceTag/topology.kubernetes.io/region": Aws.REGION},
                "StringLike": {"aws:ResourceTag/karpenter.k8s.aws/ec2nodeclass": "*"},
            },
        ),
    ]


def cluster_arn(cluster_name: str) -> str:
    return f"arn:{Aws.PARTITION}:eks:{Aws.REGION}:{Aws.ACCOUNT_ID}:cluster/{cluster_name}"


def eks_integration(cluster_name: str) -> list[iam.PolicyStatement]:
    return [
        iam.PolicyStatement(
            sid="AllowAPIServerEndpointDiscovery",
            actions=["eks:DescribeCluster"],
            resources=[cluster_arn(cluster_name)],
        )
    ]


def interruption(queue_arn: str) -> list[iam.PolicyStatement]:
    return [
        iam.PolicyStatement(
            sid="AllowInterruptionQueueActions",
            actions=["sqs:DeleteMessage", "sqs:GetQueueUrl", "sqs:ReceiveMessage"],
            resources=[queue_arn],
        )
    ]


def zonal_shift(cluster_name: str) -> list[iam.PolicyStatement]:
    return [
        iam.PolicyStatement(
            sid="AllowZonalShiftStatusReadOnly",
            actions=["arc-zonal-shift:GetManagedResource"],
            resources=["*"],
            conditions={"StringEquals": {"arc-zonal-shift:ResourceIdentifier": cluster_arn(cluster_name)}},
        )
    ]


def resource_discovery() -> list[iam.PolicyStatement]:
    return [
        iam.PolicyStatement(
            sid="AllowRegionalReadActions",
            actions=[
                "ec2:DescribeCapacityReservations",
                "ec2:DescribeImages",
                "ec2:DescribeInstances",
                "ec2:DescribeInstanceStatus",
                "ec2:DescribeInstanceTypeOfferings",
                "ec2:DescribeInstanceTypes",
                "ec2:DescribeLaunchTemplates",
                "ec2:DescribePlacementGroups",
                "ec2:DescribeSecurityGroups",
                "ec2:DescribeSpotPriceHistory",
                "ec2:DescribeSubnets",
            ],
            resources=["*"],
            conditions={"StringEquals": {"aws:RequestedRegion": Aws.REGION}},
        ),
        iam.PolicyStatement(
            sid="AllowSSMReadActions",
            actions=["ssm:GetParameter"],
            resources=[f"arn:{Aws.PARTITION}:ssm:{Aws.REGION}::parameter/aws/service/*"],
        ),
        iam.PolicyStatement(sid="AllowPricingReadActions", actions=["pricing:GetProducts"], resources=["*"]),
        iam.PolicyStatement(
            sid="AllowUnscopedInstanceProfileListAction", actions=["iam:ListInstanceProfiles"], resources=["*"]
        ),
        iam.PolicyStatement(
            sid="AllowInstanceProfileReadActions",
            actions=["iam:GetInstanceProfile"],
            resources=[f"arn:{Aws.PARTITION}:iam::{Aws.ACCOUNT_ID}:instance-profile/*"],
        ),
    ]


def volume_key(key_arn: str) -> list[iam.PolicyStatement]:
    """Launching instances whose EBS volumes use a customer KMS key: EC2 acts with the caller's grants."""
    return [
        iam.PolicyStatement(
            sid="AllowEbsKeyUse",
            actions=[
                "kms:Decrypt",
                "kms:DescribeKey",
                "kms:GenerateDataKeyWithoutPlaintext",
                "kms:ReEncryptFrom",
                "kms:ReEncryptTo",
            ],
            resources=[key_arn],
        ),
        iam.PolicyStatement(
            sid="AllowEbsKeyGrants",
            actions=["kms:CreateGrant"],
            resources=[key_arn],
            conditions={"Bool": {"kms:GrantIsForAWSResource": "true"}},
        ),
    ]
