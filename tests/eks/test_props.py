"""Props validation (precise messages at synth time) and the endpoint/version options of InferenceCluster."""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks

from cpu_inference.eks import InferenceCluster, InferenceClusterProps, KarpenterProps, KedaProps, MetricsProps
from cpu_inference.eks.inference_cluster import kubectl_layer_for
from tests.support.cdk import template_json


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"kubernetes_version": "1.30"}, "kubernetes_version '1.30' must be one of"),
        ({"endpoint_access": "public"}, "endpoint_access must be"),
        (
            {"endpoint_access": "private", "public_access_cidrs": ("203.0.113.0/24",)},
            "public_access_cidrs restrict a public endpoint",
        ),
        ({"system_node_count": 4, "system_node_max": 3}, r"system_node_count \(4\) ≤ system_node_max \(3\)"),
        ({"system_instance_type": "m7g"}, "must be an EC2 type"),
        ({"admin_principal_arns": ("alice",)}, "must be an IAM role/user ARN"),
        # botocore eks CreateAccessEntry.principalArn: "You can't use the STS session principal type with access
        # entries".
        (
            {"admin_principal_arns": ("arn:aws:sts::123456789012:assumed-role/Admin/alice",)},
            r"admin_principal_arns: .* STS session ARN, which EKS access entries refuse — use the IAM role ARN instead, e\.g\. arn:aws:iam::123456789012:role/Admin",
        ),
        ({"cluster_name": cdk.Token.as_string(cdk.Aws.STACK_NAME)}, "cluster_name must be a literal"),
    ],
)
def test_inference_cluster_props_reject(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        InferenceClusterProps(**kwargs).validate()


def test_existing_cluster_needs_its_name_and_vpc() -> None:
    stack = cdk.Stack()
    imported = eks.Cluster.from_cluster_attributes(stack, "C", cluster_name="x")
    with pytest.raises(ValueError, match="existing_cluster_name"):
        InferenceClusterProps(existing_cluster=imported).validate()
    with pytest.raises(ValueError, match="existing_vpc"):
        InferenceClusterProps(existing_cluster=imported, existing_cluster_name="x").validate()


def test_kubectl_layer_for_an_unknown_minor_names_the_package() -> None:
    with pytest.raises(ValueError, match="pip install aws-cdk.lambda-layer-kubectl-v99"):
        kubectl_layer_for(cdk.Stack(), "L", "1.99")


def test_component_props_reject() -> None:
    stack = cdk.Stack()
    cluster = eks.Cluster.from_cluster_attributes(stack, "C", cluster_name="x")
    vpc = ec2.Vpc.from_vpc_attributes(
        stack, "V", vpc_id="vpc-1", availability_zones=["a"], private_subnet_ids=["subnet-1"]
    )
    with pytest.raises(ValueError, match="cluster_name must be a literal"):
        KarpenterProps(cluster=cluster, cluster_name=cdk.Aws.STACK_NAME).validate()
    with pytest.raises(ValueError, match="no leading v"):
        KarpenterProps(cluster=cluster, cluster_name="x", version="v1.14.1").validate()
    with pytest.raises(ValueError, match="interruption queue name"):
        KarpenterProps(cluster=cluster, cluster_name="x", interruption_queue_name="bad name!").validate()
    with pytest.raises(ValueError, match="outside the pinned 2.20.x"):
        KedaProps(cluster=cluster, version="2.17.0").validate()
    with pytest.raises(ValueError, match="30s minimum"):
        MetricsProps(cluster=cluster, cluster_name="x", vpc=vpc, scrape_interval="10s").validate()
    with pytest.raises(ValueError, match="existing_workspace_id applies to mode 'amp' only"):
        MetricsProps(
            cluster=cluster, cluster_name="x", vpc=vpc, mode="in-cluster", existing_workspace_id="ws-1"
        ).validate()


def test_private_endpoint_x86_system_nodes_and_another_minor() -> None:
    stack = cdk.Stack(cdk.App(), "Private", env=cdk.Environment(account="123456789012", region="us-west-2"))
    ic = InferenceCluster(
        stack,
        "C",
        props=InferenceClusterProps(
            endpoint_access="private",
            system_instance_type="m7i.large",
            cluster_name="private-inference",
            workload_namespace=None,
            flow_logs=False,
        ),
    )
    t = template_json(stack)["Resources"]
    (cluster,) = [r["Properties"] for r in t.values() if r["Type"] == "AWS::EKS::Cluster"]
    assert cluster["Name"] == "private-inference" == ic.cluster_name
    assert (
        cluster["ResourcesVpcConfig"]["EndpointPublicAccess"] is False
        and cluster["ResourcesVpcConfig"]["EndpointPrivateAccess"] is True
    )
    (ng,) = [r["Properties"] for r in t.values() if r["Type"] == "AWS::EKS::Nodegroup"]
    assert ng["AmiType"] == "BOTTLEROCKET_x86_64" and ng["InstanceTypes"] == ["m7i.large"]
    assert not [
        r for r in t.values() if r["Type"] == "Custom::AWSCDK-EKS-KubernetesResource"
    ]  # no workload namespace asked for
    assert not [r for r in t.values() if r["Type"] == "AWS::EC2::FlowLog"]


def test_public_endpoint_can_be_restricted_to_cidrs() -> None:
    stack = cdk.Stack(cdk.App(), "Restricted", env=cdk.Environment(account="123456789012", region="us-west-2"))
    InferenceCluster(
        stack, "C", props=InferenceClusterProps(public_access_cidrs=("203.0.113.0/24",), kubernetes_version="1.35")
    )
    t = template_json(stack)["Resources"]
    (cluster,) = [r["Properties"] for r in t.values() if r["Type"] == "AWS::EKS::Cluster"]
    assert cluster["ResourcesVpcConfig"]["PublicAccessCidrs"] == ["203.0.113.0/24"]
    assert [r for r in t.values() if r["Type"] == "AWS::EC2::FlowLog"]
