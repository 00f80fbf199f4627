"""Self-managed Karpenter on an InferenceCluster: CRD chart → controller chart → EC2NodeClasses →
NodePools, with the controller's IAM on EKS Pod Identity and Karpenter's interruption queue.

Node role and the VPC CNI: the node role keeps AmazonEKS_CNI_Policy (as Karpenter's reference template
does) instead of moving aws-node to Pod Identity. Nodes then become Ready without depending on the Pod
Identity agent being up first, and pods cannot borrow the node role because the node classes require
IMDSv2 with a hop limit of 1.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sqs as sqs
from constructs import Construct, IDependable

from cpu_inference._internal import nag
from cpu_inference.eks import karpenter_policy as policy
from cpu_inference.eks.inference_cluster import DISCOVERY_TAG, InferenceCluster
from cpu_inference.eks.manifests import add_bounded_manifests
from cpu_inference.k8s.specs.bottlerocket import BottlerocketNodeClass
from cpu_inference.k8s.specs.default_node_pools import default_node_pools
from cpu_inference.k8s.specs.karpenter_node_class import EC2NodeClassSpec
from cpu_inference.k8s.specs.karpenter_node_pool import NodePoolSpec, Taint

VERSION = "1.14.1"
REPOSITORY = "oci://public.ecr.aws/karpenter"
DEFAULT_NODE_CLASS = "bottlerocket-soci"

# Karpenter's reference interruption rules (v1.14 cloudformation.yaml): source, detail-type, extra detail filter.
INTERRUPTION_RULES: dict[str, tuple[str, str, dict[str, Any] | None]] = {
    # Karpenter only acts on scheduled-change Health events; filtering here keeps the queue free of the rest.
    "ScheduledChangeRule": ("aws.health", "AWS Health Event", {"eventTypeCategory": ["scheduledChange"]}),
    "SpotInterruptionRule": ("aws.ec2", "EC2 Spot Instance Interruption Warning", None),
    "RebalanceRule": ("aws.ec2", "EC2 Instance Rebalance Recommendation", None),
    "InstanceStateChangeRule": ("aws.ec2", "EC2 Instance State-change Notification", None),
    "CapacityReservationInterruptionRule": ("aws.ec2", "EC2 Capacity Reservation Instance Interruption Warning", None),
}


@dataclass(frozen=True)
class KarpenterProps:
    """`cluster` must have a kubectl provider; `cluster_name` must be literal (it appears in IAM condition
    keys). Build from an InferenceCluster with `KarpenterProps.for_cluster(ic)`.

    Defaults: chart 1.14.1 in kube-system, 2 controller replicas (500m CPU / 1 GiB each) on the system
    nodes, interruption queue named after the cluster, a new node role."""

    cluster: eks.ICluster
    cluster_name: str
    version: str = VERSION
    namespace: str = "kube-system"
    service_account: str = "karpenter"
    replicas: int = 2
    controller_cpu: str = "500m"
    controller_memory: str = "1Gi"
    system_node_selector: dict[str, str] = field(default_factory=dict)
    system_tolerations: tuple[dict[str, Any], ...] = ()
    interruption_queue_name: str | None = None
    existing_node_role: iam.IRole | None = None
    volume_encryption_key: kms.IKey | None = None
    enable_zonal_shift: bool = False
    chart_dependencies: tuple[IDependable, ...] = ()  # e.g. the system node group and Pod Identity agent

    @classmethod
    def for_cluster(cls, ic: InferenceCluster, **overrides: Any) -> KarpenterProps:
        deps = tuple(d for d in (ic.system_nodegroup, ic.pod_identity_agent) if d is not None)
        return cls(
            cluster=ic.cluster,
            cluster_name=ic.cluster_name,
            system_node_selector=dict(ic.system_node_selector),
            system_tolerations=tuple(ic.system_tolerations),
            chart_dependencies=deps,
            **overrides,
        )

    def validate(self) -> None:
        if cdk.Token.is_unresolved(self.cluster_name):
            raise ValueError("cluster_name must be a literal string (it is part of Karpenter's IAM condition keys)")
        if not self.version or self.version.startswith("v"):
            raise ValueError(f"version {self.version!r} must be a chart version like {VERSION} (no leading v)")
        if self.replicas < 1:
            raise ValueError("replicas must be ≥ 1")
        name = self.interruption_queue_name or self.cluster_name
        if not cdk.Token.is_unresolved(name) and (len(name) > 80 or not all(c.isalnum() or c in "-_" for c in name)):
            raise ValueError(f"interruption queue name {name!r} must be ≤ 80 letters, digits, '-' or '_'")


class Karpenter(Construct):
    """Attributes: crd_chart, chart, controller_role, pod_identity_association, node_role,
    node_access_entry, interruption_queue, rules (dict name → Rule), node_class_manifests,
    node_pool_manifests, policies."""

    def __init__(self, scope: Construct, id: str, *, props: KarpenterProps) -> None:
        super().__init__(scope, id)
        props.validate()
        self.props = props
        cluster, name = props.cluster, props.cluster_name
        self.node_class_manifests: dict[str, list[eks.KubernetesManifest]] = {}
        self.node_pool_manifests: list[eks.KubernetesManifest] = []

        self.interruption_queue = sqs.Queue(
            self,
            "InterruptionQueue",
            queue_name=props.interruption_queue_name or name,
            retention_period=cdk.Duration.seconds(300),
            encryption=sqs.QueueEncryption.SQS_MANAGED,
        )
        self.interruption_queue.add_to_resource_policy(
            iam.PolicyStatement(
                sid="DenyHTTP",
                effect=iam.Effect.DENY,
                actions=["sqs:*"],
                resources=[self.interruption_queue.queue_arn],
                principals=[iam.AnyPrincipal()],
                conditions={"Bool": {"aws:SecureTransport": "false"}},
            )
        )
        self.rules: dict[str, events.Rule] = {}
        for rule_id, (source, detail_type, detail) in INTERRUPTION_RULES.items():
            pattern = events.EventPattern(source=[source], detail_type=[detail_type], detail=detail)
            rule = events.Rule(self, rule_id, event_pattern=pattern)
            rule.add_target(targets.SqsQueue(self.interruption_queue))
            self.rules[rule_id] = rule

        self.node_role: iam.IRole = props.existing_node_role or iam.Role(
            self,
            "NodeRole",
            assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"),
            managed_policies=[
                iam.ManagedPolicy.from_aws_managed_policy_name(n)
                for n in (
                    "AmazonEKSWorkerNodePolicy",
                    "AmazonEKS_CNI_Policy",
                    "AmazonEC2ContainerRegistryPullOnly",
                    "AmazonSSMManagedInstanceCore",
                )
            ],
        )
        self.node_access_entry = eks.AccessEntry(
            self,
            "NodeAccess",
            cluster=cluster,
            principal=self.node_role.role_arn,
            access_entry_type=eks.AccessEntryType.EC2_LINUX,
            access_policies=[],
        )

        self.controller_role = iam.Role(
            self,
            "ControllerRole",
            assumed_by=iam.SessionTagsPrincipal(iam.ServicePrincipal("pods.eks.amazonaws.com")),
            description=f"Karpenter controller for EKS cluster {name} (EKS Pod Identity)",
        )
        groups: dict[str, list[iam.PolicyStatement]] = {
            "NodeLifecyclePolicy": policy.node_lifecycle(name),
            "IAMIntegrationPolicy": policy.iam_integration(name, self.node_role.role_arn),
            "EKSIntegrationPolicy": policy.eks_integration(name),
            "InterruptionPolicy": policy.interruption(self.interruption_queue.queue_arn),
            "ResourceDiscoveryPolicy": policy.resource_discovery(),
        }
        if props.enable_zonal_shift:
            groups["ZonalShiftPolicy"] = policy.zonal_shift(name)
        if props.volume_encryption_key is not None:
            groups["VolumeKeyPolicy"] = policy.volume_key(props.volume_encryption_key.key_arn)
        self.policies: dict[str, iam.ManagedPolicy] = {
            gid: iam.ManagedPolicy(self, gid, statements=stmts, roles=[self.controller_role])
            for gid, stmts in groups.items()
        }
        self.pod_identity_association = eks.CfnPodIdentityAssociation(
            self,
            "PodIdentity",
            cluster_name=cluster.cluster_name,
            namespace=props.namespace,
            service_account=props.service_account,
            role_arn=self.controller_role.role_arn,
        )

        self.crd_chart = eks.HelmChart(
            self,
            "CrdChart",
            cluster=cluster,
            chart="karpenter-crd",
            repository=f"{REPOSITORY}/karpenter-crd",
            version=props.version,
            namespace=props.namespace,
            release="karpenter-crd",
            wait=True,
        )
        self.chart = eks.HelmChart(
            self,
            "Chart",
            cluster=cluster,
            chart="karpenter",
            repository=f"{REPOSITORY}/karpenter",
            version=props.version,
            namespace=props.namespace,
            release="karpenter",
            skip_crds=True,  # the karpenter-crd release owns (and upgrades) the CRDs
            wait=True,
            timeout=cdk.Duration.minutes(10),
            values=self.chart_values(),
        )
        self.chart.node.add_dependency(self.crd_chart, self.pod_identity_association, *props.chart_dependencies)
        self._suppress()

    def chart_values(self) -> dict[str, Any]:
        p = self.props
        settings: dict[str, Any] = {
            "clusterName": p.cluster_name,
            "interruptionQueue": self.interruption_queue.queue_name,
        }
        if p.enable_zonal_shift:
            settings["enableZonalShift"] = True
        return {
            "settings": settings,
            "serviceAccount": {"create": True, "name": p.service_account},
            "replicas": p.replicas,
            "nodeSelector": {"kubernetes.io/os": "linux", **p.system_node_selector},
            # The chart's default toleration (CriticalAddonsOnly) plus whatever the system nodes need.
            "tolerations": [{"key": "CriticalAddonsOnly", "operator": "Exists"}]
            + [t for t in p.system_tolerations if t.get("key") != "CriticalAddonsOnly"],
            "controller": {
                # Explicit region: the controller need not reach IMDS (hop limits) to discover it.
                "env": [{"name": "AWS_REGION", "value": cdk.Stack.of(self).region}],
                "resources": {
                    "requests": {"cpu": p.controller_cpu, "memory": p.controller_memory},
                    "limits": {"memory": p.controller_memory},
                },
            },
        }

    # --- node classes and pools -------------------------------------------------------------------

    def bottlerocket_node_class(self, name: str = DEFAULT_NODE_CLASS, **overrides: Any) -> BottlerocketNodeClass:
        """A Bottlerocket/SOCI node class wired to this cluster: the node role, private subnets tagged
        `karpenter.sh/discovery=<cluster>`, the EKS cluster security group (tagged `aws:eks:cluster-name`
        by EKS), and the volume key if one was given."""
        kwargs: dict[str, Any] = {
            "name": name,
            "role": self.node_role.role_name,
            "subnet_selector_terms": ({"tags": {DISCOVERY_TAG: self.props.cluster_name}},),
            "security_group_selector_terms": ({"tags": {"aws:eks:cluster-name": self.props.cluster_name}},),
            "kms_key_id": self.props.volume_encryption_key.key_arn if self.props.volume_encryption_key else None,
        }
        kwargs.update(overrides)
        return BottlerocketNodeClass(**kwargs)

    def add_ec2_node_class(self, spec: EC2NodeClassSpec | BottlerocketNodeClass) -> list[eks.KubernetesManifest]:
        obj = spec.to_dict()
        name = obj["metadata"]["name"]
        if name in self.node_class_manifests:
            raise ValueError(f"EC2NodeClass {name} was already added")
        manifests = add_bounded_manifests(
            self.props.cluster, f"NodeClass-{name}-", [obj], scope=self, depends_on=[self.chart, self.node_access_entry]
        )
        self.node_class_manifests[name] = manifests
        return manifests

    def add_node_pool(self, spec: NodePoolSpec) -> list[eks.KubernetesManifest]:
        return self.add_node_pools([spec])

    def add_node_pools(self, specs: Sequence[NodePoolSpec], id: str | None = None) -> list[eks.KubernetesManifest]:
        """NodePools in bounded manifests, each after the controller and the node classes they reference."""
        objs = [s.to_dict() for s in specs]
        deps: list[IDependable] = [self.chart]
        for s in specs:
            if s.node_class in self.node_class_manifests:
                deps.extend(self.node_class_manifests[s.node_class])
            elif self.node_class_manifests:
                raise ValueError(
                    f"NodePool {s.name} references EC2NodeClass {s.node_class}, which was not added (have {sorted(self.node_class_manifests)})"
                )
        manifests = add_bounded_manifests(
            self.props.cluster, id or f"NodePools{len(self.node_pool_manifests)}-", objs, scope=self, depends_on=deps
        )
        self.node_pool_manifests.extend(manifests)
        return manifests

    def add_default_node_pools(
        self,
        *,
        architectures: Iterable[str] = ("arm64", "amd64"),
        capacity_types: Iterable[str] = ("spot", "on-demand"),
        instance_families: Iterable[str] = ("c7g", "c8g", "m7g", "m8g", "r7g", "c7a", "m7a", "c7i", "m7i"),
        instance_types: Iterable[str] = (),
        max_node_cpu: int = 256,
        consolidation_budget: str = "20%",
        memory_pool: bool = True,
        node_class: BottlerocketNodeClass | EC2NodeClassSpec | None = None,
        startup_taints: Iterable[Taint] = (),
    ) -> list[NodePoolSpec]:
        """The Bottlerocket/SOCI node class and the CPU-inference pools (arguments mirror config.yaml `eks`)."""
        nc = node_class or self.bottlerocket_node_class()
        pools = default_node_pools(
            nc.name,
            architectures=tuple(architectures),
            capacity_types=tuple(capacity_types),
            instance_families=tuple(instance_families),
            instance_types=tuple(instance_types),
            max_node_cpu=max_node_cpu,
            consolidation_budget=consolidation_budget,
            memory_pool=memory_pool,
            startup_taints=tuple(startup_taints),
        )
        self.add_ec2_node_class(nc)
        self.add_node_pools(pools, id="DefaultNodePools")
        return pools

    def _suppress(self) -> None:
        nag.acknowledge(
            self.interruption_queue,
            "AwsSolutions-SQS3",
            "Interruption notices matter for minutes (300 s retention, as in Karpenter's reference); a DLQ would keep stale notices nothing replays",
        )
        if isinstance(self.node_role, iam.Role):
            nag.role_managed_policies(
                self.node_role,
                "Karpenter's reference node role: AmazonEKSWorkerNodePolicy, AmazonEKS_CNI_Policy, AmazonEC2ContainerRegistryPullOnly, AmazonSSMManagedInstanceCore",
            )
        for gid, managed in self.policies.items():
            nag.reviewed_policy(
                managed,
                f"Karpenter's reference controller policy ({gid}): instance, volume, fleet and launch-template ARNs do not exist before launch, "
                "so mutations are scoped by the cluster-ownership and karpenter.sh tag conditions; Describe*, pricing and ListInstanceProfiles "
                "have no resource-level permissions",
            )
