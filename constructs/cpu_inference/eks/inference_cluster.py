"""InferenceCluster: an EKS cluster (aws_eks_v2) ready for self-managed Karpenter and KEDA.

A small Graviton managed node group carries only the system pods (CoreDNS, Karpenter, KEDA, the
metrics stack): it is tainted `CriticalAddonsOnly=true:NoSchedule`, which CoreDNS and the Karpenter
chart tolerate out of the box and KEDA/Prometheus are given. Workload nodes come from Karpenter.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass
from typing import Any, Literal

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from cpu_inference._internal import nag
from cpu_inference.k8s.specs.karpenter_node_pool import Taint
from cpu_inference.k8s.specs.karpenter_rules import family_architecture

KUBERNETES_MINORS = ("1.33", "1.34", "1.35")
SYSTEM_LABEL = "cpu-inference/node-role"
SYSTEM_TAINT = Taint("CriticalAddonsOnly", "true", "NoSchedule")
DISCOVERY_TAG = "karpenter.sh/discovery"
ADMIN_POLICY = "AmazonEKSClusterAdminPolicy"
# EKS add-on pins for Kubernetes 1.35 (the default minor): the newest builds of
# `aws eks describe-addon-versions --addon-name <name> --kubernetes-version 1.35` as recorded in public CDK code
# (2026-05); vpc-cni v1.21.1-eksbuild.8 is also the version a public copy of the EKS "Amazon VPC CNI versions"
# table gives for every minor 1.29–1.35. Format per the EKS user guide:
# major.minor.patch-eksbuild.build. Re-check them with that command whenever kubernetes_version changes.
VPC_CNI_VERSION = "v1.21.1-eksbuild.8"
POD_IDENTITY_AGENT_VERSION = "v1.3.10-eksbuild.3"
# aws-mountpoint-s3-csi-driver (installed by EksPlatform for model-farm pools, eks/mountpoint.py): driver v2.7.0
# (awslabs/mountpoint-s3-csi-driver CHANGELOG.md "v2.7.0": controller leader election; ≥ v2.5.0 for graceful
# Mountpoint-pod eviction #693 and cacheEmptyDirSizeLimit → --max-cache-size #743). Build -eksbuild.1 as pinned in
# public IaC for EKS 1.35 (2026): an EKS 1.35 security write-up calling v2.7.0-eksbuild.1 "Already the newest build",
# and Terraform recommending it for `aws_eks_addon` with the add-on's own pod_identity_association for
# s3-csi-driver-sa (v1 builds refused Pod Identity: mountpoint-s3-csi-driver#215). Re-check with
# `aws eks describe-addon-versions --addon-name aws-mountpoint-s3-csi-driver --kubernetes-version <minor>`.
MOUNTPOINT_VERSION = "v2.7.0-eksbuild.1"
_ADDON_VERSION = re.compile(r"^v\d+\.\d+\.\d+-eksbuild\.\d+$")


def kubectl_layer_for(scope: Construct, id: str, minor: str) -> lambda_.ILayerVersion:
    """The kubectl Lambda layer matching the Kubernetes minor (package aws-cdk.lambda-layer-kubectl-vNN)."""
    suffix = minor.replace("1.", "v", 1)
    module = f"aws_cdk.lambda_layer_kubectl_{suffix}"
    try:
        mod = importlib.import_module(module)
    except ImportError as exc:
        raise ValueError(
            f"kubernetes_version {minor} needs the kubectl layer package: pip install aws-cdk.lambda-layer-kubectl-{suffix}"
        ) from exc
    return getattr(mod, f"KubectlV{suffix[1:]}Layer")(scope, id)


def admin_principal_error(arn: str, key: str) -> None:
    """Raise ValueError unless `arn` is an IAM role/user ARN an EKS access entry accepts.

    botocore eks CreateAccessEntry.principalArn: "You can't use the STS session principal type with access
    entries because this is a temporary principal for each session" — an `arn:aws:sts::…:assumed-role/…`
    ARN (what `aws sts get-caller-identity` prints) is refused at deploy time and rolls the stack back.
    """
    if cdk.Token.is_unresolved(arn):
        return
    if ":sts::" in arn:
        role = arn.split(":assumed-role/")[-1].split("/")[0] if ":assumed-role/" in arn else "<role>"
        account = arn.split(":")[4] if arn.count(":") >= 5 else "<account>"
        raise ValueError(
            f"{key}: {arn!r} is an STS session ARN, which EKS access entries refuse — "
            f"use the IAM role ARN instead, e.g. arn:aws:iam::{account}:role/{role}"
        )
    if not arn.startswith("arn:") or ":iam::" not in arn or not (":role/" in arn or ":user/" in arn):
        raise ValueError(f"{key}: {arn!r} must be an IAM role/user ARN such as arn:aws:iam::123456789012:role/Admin")


@dataclass(frozen=True)
class InferenceClusterProps:
    """Defaults: Kubernetes 1.35, a new 3-AZ VPC, public+private endpoint, all control-plane log types,
    secrets envelope-encrypted with a new rotating KMS key, 2 × m7g.large system nodes, the vpc-cni and
    eks-pod-identity-agent add-ons pinned (VPC_CNI_VERSION, POD_IDENTITY_AGENT_VERSION).

    Bring your own: `existing_vpc`, `secrets_key`, `kubectl_layer`, or a whole `existing_cluster`
    (an imported eks_v2 ICluster with a kubectl provider). With an existing cluster this construct only
    adds what an already-running cluster can take: admin access entries and (if asked) the Pod Identity
    agent add-on. Version, endpoint access, logging, secrets encryption and the system node group are
    the existing cluster's own; its system nodes should carry the `CriticalAddonsOnly` taint and the
    `cpu-inference/node-role=system` label (or pass `system_node_selector={}`), and its subnets the
    `karpenter.sh/discovery=<cluster name>` tag for Karpenter's default node class.
    """

    kubernetes_version: str = "1.35"
    cluster_name: str | None = None  # default: a unique name derived from the construct path
    existing_vpc: ec2.IVpc | None = None
    max_azs: int = 3
    nat_gateways: int | None = None  # None: one per AZ (no cross-AZ single point of failure)
    admin_principal_arns: tuple[str, ...] = ()
    endpoint_access: Literal["public-and-private", "private"] = "public-and-private"
    public_access_cidrs: tuple[str, ...] = ()  # restrict the public endpoint; empty = 0.0.0.0/0
    system_instance_type: str = "m7g.large"
    system_node_count: int = 2
    system_node_max: int = 3
    secrets_key: kms.IKey | None = None
    kubectl_layer: lambda_.ILayerVersion | None = None
    workload_namespace: str | None = "inference"
    existing_cluster: eks.ICluster | None = None
    existing_cluster_name: str | None = None  # required with existing_cluster (Karpenter's IAM scoping needs it)
    install_pod_identity_agent: bool = True
    # The VPC CNI's network policy agent: without it NetworkPolicies (the model pods' allow-lists) are not
    # enforced. Default: on for a new cluster; an existing cluster's vpc-cni is left alone unless True.
    enable_network_policy: bool | None = None
    flow_logs: bool = True
    # Add-on versions (None: whatever EKS defaults to for the minor at deploy time — unreproducible).
    vpc_cni_version: str | None = VPC_CNI_VERSION
    pod_identity_agent_version: str | None = POD_IDENTITY_AGENT_VERSION

    def validate(self) -> None:
        if self.kubernetes_version not in KUBERNETES_MINORS:
            raise ValueError(f"kubernetes_version {self.kubernetes_version!r} must be one of {KUBERNETES_MINORS}")
        if self.endpoint_access not in ("public-and-private", "private"):
            raise ValueError("endpoint_access must be 'public-and-private' or 'private'")
        if self.public_access_cidrs and self.endpoint_access == "private":
            raise ValueError(
                "public_access_cidrs restrict a public endpoint; remove them or use endpoint_access='public-and-private'"
            )
        if not 1 <= self.system_node_count <= self.system_node_max:
            raise ValueError(
                f"need 1 ≤ system_node_count ({self.system_node_count}) ≤ system_node_max ({self.system_node_max})"
            )
        if "." not in self.system_instance_type:
            raise ValueError(f"system_instance_type {self.system_instance_type!r} must be an EC2 type like m7g.large")
        family_architecture(self.system_instance_type.split(".")[0])  # raises for a malformed family
        for arn in self.admin_principal_arns:
            admin_principal_error(arn, "admin_principal_arns")
        if self.existing_cluster is not None:
            if not self.existing_cluster_name:
                raise ValueError(
                    "existing_cluster needs existing_cluster_name (a literal name, used to scope Karpenter's IAM)"
                )
            if self.existing_vpc is None:
                raise ValueError("existing_cluster needs existing_vpc (the cluster's VPC)")
        for key, version in (
            ("vpc_cni_version", self.vpc_cni_version),
            ("pod_identity_agent_version", self.pod_identity_agent_version),
        ):
            if version is not None and not _ADDON_VERSION.match(version):
                raise ValueError(
                    f"{key} {version!r} must look like v1.21.1-eksbuild.8 (aws eks describe-addon-versions --kubernetes-version {self.kubernetes_version})"
                )
        if self.cluster_name is not None and cdk.Token.is_unresolved(self.cluster_name):
            raise ValueError(
                "cluster_name must be a literal string: Karpenter's IAM conditions embed it in policy keys"
            )


class InferenceCluster(Construct):
    """Attributes: cluster, vpc, cluster_name, kubernetes_version, secrets_key, kubectl_layer,
    system_nodegroup, pod_identity_agent, admin_access_entries, namespace_manifest,
    system_tolerations, system_node_selector, flow_log."""

    def __init__(self, scope: Construct, id: str, *, props: InferenceClusterProps = InferenceClusterProps()) -> None:
        super().__init__(scope, id)
        props.validate()
        self.props = props
        self.kubernetes_version = props.kubernetes_version
        self.system_tolerations: list[dict[str, Any]] = [SYSTEM_TAINT.toleration()]
        self.system_node_selector: dict[str, str] = {SYSTEM_LABEL: "system"}
        self.secrets_key: kms.IKey | None = None
        self.kubectl_layer: lambda_.ILayerVersion | None = None
        self.system_nodegroup: eks.Nodegroup | None = None
        self.flow_log: ec2.FlowLog | None = None
        self.pod_identity_agent: eks.IAddon | None = None
        self.vpc_cni: eks.Addon | None = None
        self.namespace_manifest: eks.KubernetesManifest | None = None
        self.admin_access_entries: list[eks.AccessEntry] = []

        if props.existing_cluster is not None:
            self.cluster: eks.ICluster = props.existing_cluster
            self.cluster_name: str = props.existing_cluster_name  # type: ignore[assignment]
            self.vpc: ec2.IVpc = props.existing_vpc  # type: ignore[assignment]
            if props.install_pod_identity_agent:
                self.pod_identity_agent = eks.Addon(
                    self,
                    "PodIdentityAgent",
                    cluster=self.cluster,
                    addon_name="eks-pod-identity-agent",
                    addon_version=props.pod_identity_agent_version,
                )
        else:
            self._create(props)
        if props.enable_network_policy or (props.enable_network_policy is None and props.existing_cluster is None):
            self.vpc_cni = eks.Addon(
                self,
                "VpcCni",
                cluster=self.cluster,
                addon_name="vpc-cni",
                addon_version=props.vpc_cni_version,
                configuration_values={"enableNetworkPolicy": "true"},
            )
            # Take over the cluster's default (self-managed) vpc-cni instead of failing on its fields.
            cfn = self.vpc_cni.node.default_child
            assert isinstance(cfn, eks.CfnAddon)
            cfn.resolve_conflicts = "OVERWRITE"

        for i, arn in enumerate(props.admin_principal_arns):
            self.admin_access_entries.append(
                eks.AccessEntry(
                    self,
                    f"Admin{i}",
                    cluster=self.cluster,
                    principal=arn,
                    access_policies=[
                        eks.AccessPolicy.from_access_policy_name(
                            ADMIN_POLICY, access_scope_type=eks.AccessScopeType.CLUSTER
                        )
                    ],
                )
            )
        if props.workload_namespace:
            self.namespace_manifest = eks.KubernetesManifest(
                self,
                "WorkloadNamespace",
                cluster=self.cluster,
                manifest=[self.namespace_object(props.workload_namespace)],
                overwrite=True,
            )

    @staticmethod
    def namespace_object(name: str) -> dict[str, Any]:
        """The workload namespace, with Pod Security admission at `restricted` (llama-server needs no privileges)."""
        return {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {
                "name": name,
                "labels": {
                    "pod-security.kubernetes.io/enforce": "restricted",
                    "pod-security.kubernetes.io/warn": "restricted",
                },
            },
        }

    def _create(self, props: InferenceClusterProps) -> None:
        self.cluster_name = props.cluster_name or cdk.Names.unique_resource_name(self, max_length=60, separator="-")
        if props.existing_vpc is not None:
            self.vpc = props.existing_vpc
        else:
            vpc = ec2.Vpc(
                self,
                "Vpc",
                max_azs=props.max_azs,
                nat_gateways=props.nat_gateways,
                subnet_configuration=[
                    ec2.SubnetConfiguration(name="public", subnet_type=ec2.SubnetType.PUBLIC, cidr_mask=24),
                    ec2.SubnetConfiguration(
                        name="private", subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS, cidr_mask=19
                    ),
                ],
            )
            for subnet in vpc.private_subnets:
                # Karpenter's default node class selects these; internal load balancers land here too.
                cdk.Tags.of(subnet).add(DISCOVERY_TAG, self.cluster_name)
                cdk.Tags.of(subnet).add("kubernetes.io/role/internal-elb", "1")
            for subnet in vpc.public_subnets:
                cdk.Tags.of(subnet).add("kubernetes.io/role/elb", "1")
            if props.flow_logs:
                self.flow_log = vpc.add_flow_log("FlowLog")
            self.vpc = vpc

        self.secrets_key = props.secrets_key or kms.Key(
            self,
            "SecretsKey",
            enable_key_rotation=True,
            description=f"EKS secrets envelope encryption for {self.cluster_name}",
        )
        self.kubectl_layer = props.kubectl_layer or kubectl_layer_for(self, "KubectlLayer", props.kubernetes_version)
        if props.endpoint_access == "private":
            endpoint = eks.EndpointAccess.PRIVATE
        elif props.public_access_cidrs:
            endpoint = eks.EndpointAccess.PUBLIC_AND_PRIVATE.only_from(*props.public_access_cidrs)
        else:
            endpoint = eks.EndpointAccess.PUBLIC_AND_PRIVATE

        cluster = eks.Cluster(
            self,
            "Cluster",
            cluster_name=self.cluster_name,
            version=eks.KubernetesVersion.of(props.kubernetes_version),
            vpc=self.vpc,
            vpc_subnets=[ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS)],
            default_capacity_type=eks.DefaultCapacityType.NODEGROUP,
            default_capacity=0,  # the tainted system group below replaces the untainted default group
            endpoint_access=endpoint,
            cluster_logging=[
                eks.ClusterLoggingTypes.API,
                eks.ClusterLoggingTypes.AUDIT,
                eks.ClusterLoggingTypes.AUTHENTICATOR,
                eks.ClusterLoggingTypes.CONTROLLER_MANAGER,
                eks.ClusterLoggingTypes.SCHEDULER,
            ],
            secrets_encryption_key=self.secrets_key,
            kubectl_provider_options=eks.KubectlProviderOptions(kubectl_layer=self.kubectl_layer),
        )
        self.cluster = cluster  # type: ignore[assignment]  # jsii stubs: Cluster lacks ICluster.kubectl_provider_options
        arch = family_architecture(props.system_instance_type.split(".")[0])
        self.system_nodegroup = cluster.add_nodegroup_capacity(
            "System",
            instance_types=[ec2.InstanceType(props.system_instance_type)],
            ami_type=eks.NodegroupAmiType.BOTTLEROCKET_ARM_64
            if arch == "arm64"
            else eks.NodegroupAmiType.BOTTLEROCKET_X86_64,
            min_size=props.system_node_count,
            desired_size=props.system_node_count,
            max_size=props.system_node_max,
            labels=dict(self.system_node_selector),
            taints=[eks.TaintSpec(effect=eks.TaintEffect.NO_SCHEDULE, key=SYSTEM_TAINT.key, value=SYSTEM_TAINT.value)],
            subnets=ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS),
        )
        self.pod_identity_agent = cluster.eks_pod_identity_agent
        agent = self.pod_identity_agent.node.default_child if self.pod_identity_agent is not None else None
        if isinstance(agent, eks.CfnAddon) and props.pod_identity_agent_version is not None:
            agent.addon_version = props.pod_identity_agent_version  # eks_v2 creates it unpinned
        self._suppress(cluster, props)

    def _suppress(self, cluster: eks.Cluster, props: InferenceClusterProps) -> None:
        """cdk-nag findings on resources aws_eks_v2 creates, each reviewed (see the reasons)."""
        nag.role_managed_policies(
            cluster.role,
            "EKS requires the AWS managed AmazonEKSClusterPolicy on the cluster service role",
        )
        if self.system_nodegroup is not None:
            nag.role_managed_policies(
                self.system_nodegroup.role,
                "Managed node groups require AmazonEKSWorkerNodePolicy, AmazonEKS_CNI_Policy and AmazonEC2ContainerRegistryReadOnly on the node role",
            )
        provider = self.cluster.node.try_find_child("KubectlProvider")
        if provider is not None:
            nag.role_managed_policies(
                provider,
                "CDK's kubectl provider Lambdas use the AWS Lambda basic/VPC execution policies and ECR read-only policies to pull the kubectl layer images",
            )
            for policy in provider.node.find_all():
                if isinstance(policy, iam.Policy):
                    nag.reviewed_policy(
                        policy,
                        "CDK's provider framework may invoke only its own kubectl handler function, all versions (<handler>.Arn:*)",
                    )
            handler = provider.node.try_find_child("Handler")
            if handler is not None:
                nag.acknowledge(
                    handler,
                    "AwsSolutions-L1",
                    "The kubectl handler runtime is pinned by aws-cdk-lib's eks_v2 KubectlProvider to match its kubectl/helm/awscli layers",
                )
