"""Synthesize the EKS platform once per session (EKS synth is slow on 2 cores): a new cluster with
Karpenter (default Bottlerocket/SOCI pools), AMP metrics, KEDA and one queue-depth ScaledObject,
with cdk-nag applied."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam

from cpu_inference.config.schema import Eks
from cpu_inference.eks import (
    InferenceCluster,
    InferenceClusterProps,
    Karpenter,
    KarpenterProps,
    Keda,
    KedaProps,
    Metrics,
    MetricsProps,
)
from cpu_inference.k8s import llama_queue_scaled_object
from tests.support.cdk import apply_nag, synth, template_json

ENV = cdk.Environment(account="123456789012", region="us-east-1")
ADMIN = "arn:aws:iam::123456789012:role/PlatformAdmin"


@dataclass
class Platform:
    app: cdk.App
    stack: cdk.Stack
    cluster: InferenceCluster
    karpenter: Karpenter
    metrics: Metrics
    keda: Keda
    template: dict[str, Any]


def build_platform(eks_config: Eks | None = None) -> Platform:
    eks_config = eks_config or Eks()
    app = cdk.App()
    apply_nag(app)
    stack = cdk.Stack(app, "Platform", env=ENV)
    ic = InferenceCluster(
        stack,
        "Inference",
        props=InferenceClusterProps(
            kubernetes_version=eks_config.kubernetes_version,
            admin_principal_arns=(ADMIN, *eks_config.admin_principal_arns),
            system_instance_type=eks_config.system_instance_type,
            endpoint_access=eks_config.endpoint_access,
        ),
    )
    karpenter = Karpenter(stack, "Karpenter", props=KarpenterProps.for_cluster(ic))
    karpenter.add_default_node_pools(
        architectures=eks_config.architectures,
        capacity_types=eks_config.capacity_types,
        instance_families=eks_config.instance_families,
        instance_types=eks_config.instance_types,
        max_node_cpu=eks_config.max_node_cpu,
        consolidation_budget=eks_config.consolidation_budget,
    )
    metrics = Metrics(stack, "Metrics", props=MetricsProps.for_cluster(ic, mode=eks_config.prometheus))
    keda = Keda(stack, "Keda", props=KedaProps.for_cluster(ic, metrics=metrics))
    auth = keda.trigger_authentication("inference")
    scaled = llama_queue_scaled_object(
        "smollm2",
        "inference",
        "smollm2",
        server_address=metrics.query_url,
        series_labels={"namespace": "inference", "app": "smollm2"},
        aws_region=metrics.aws_region,
        authentication_ref=auth.name,
        slots=15,  # the field notes' 15-16-slot small model: the queue target 25
    )
    assert ic.namespace_manifest is not None
    keda.add_scaled_objects("Scaling", [scaled], auth=auth, depends_on=[ic.namespace_manifest])
    synth(app)
    return Platform(app, stack, ic, karpenter, metrics, keda, template_json(stack))


@pytest.fixture(scope="session")
def platform() -> Platform:
    return build_platform()


def imported_cluster(
    stack: cdk.Stack, *, vpc: bool = True, cluster_security_group_id: str | None = None
) -> tuple[ec2.IVpc | None, eks.ICluster]:
    """An existing cluster `prod` (eu-west-1, account 123456789012) with its kubectl provider, and its VPC of two
    private subnets: what a user passes as `existing_cluster`, with no lookups."""
    imported_vpc = (
        ec2.Vpc.from_vpc_attributes(
            stack,
            "Vpc",
            vpc_id="vpc-0123456789abcdef0",
            availability_zones=["eu-west-1a", "eu-west-1b"],
            private_subnet_ids=["subnet-0aaaaaaaaaaaaaaa1", "subnet-0aaaaaaaaaaaaaaa2"],
        )
        if vpc
        else None
    )
    provider = eks.KubectlProvider.from_kubectl_provider_attributes(
        stack,
        "Kubectl",
        service_token="arn:aws:lambda:eu-west-1:123456789012:function:kubectl",
        role=iam.Role.from_role_arn(stack, "KubectlRole", "arn:aws:iam::123456789012:role/kubectl"),
    )
    cluster = eks.Cluster.from_cluster_attributes(
        stack,
        "C",
        cluster_name="prod",
        kubectl_provider=provider,
        vpc=imported_vpc,
        cluster_security_group_id=cluster_security_group_id,
    )
    return imported_vpc, cluster
