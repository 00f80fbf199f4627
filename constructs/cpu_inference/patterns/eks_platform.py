"""The EKS platform both patterns share: cluster, Karpenter pools, metrics and KEDA, composed in one place."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from constructs import Construct

from cpu_inference.eks import (
    InferenceCluster,
    InferenceClusterProps,
    Karpenter,
    KarpenterProps,
    Keda,
    KedaProps,
    Metrics,
    MetricsProps,
    MountpointS3Csi,
    MountpointS3CsiProps,
)
from cpu_inference.eks.mountpoint import MountpointSettings


@dataclass(frozen=True)
class NodePoolSettings:
    """Karpenter's CPU-inference pools (mirrors config.yaml `eks`): Spot first with On-Demand fallback across
    the listed families and architectures; `memory_pool` adds the tainted r-family pool the model farm packs onto."""

    architectures: tuple[str, ...] = ("arm64", "amd64")
    capacity_types: tuple[str, ...] = ("spot", "on-demand")
    instance_families: tuple[str, ...] = ("c7g", "c8g", "m7g", "m8g", "r7g", "c7a", "m7a", "c7i", "m7i")
    instance_types: tuple[str, ...] = ()
    max_node_cpu: int = 256
    consolidation_budget: str = "20%"
    memory_pool: bool = True


@dataclass(frozen=True)
class EksPlatformProps:
    """cluster: the InferenceCluster's props (bring `existing_cluster`/`existing_vpc` there).
    node_pools: Karpenter pool settings. prometheus: `amp` (managed workspace + scraper) or `in-cluster`.
    mountpoint: the Mountpoint for S3 CSI driver that model-farm pools read their models through — installed once
    per cluster here, shared by every farm on the platform (MountpointSettings; install_mountpoint_addon=False +
    driver_role_arn when the cluster already runs the driver). None: no driver (a ModelFarm building its own
    platform sets it; one given an existing_platform needs it set there)."""

    cluster: InferenceClusterProps = InferenceClusterProps()
    node_pools: NodePoolSettings = field(default_factory=NodePoolSettings)
    prometheus: Literal["amp", "in-cluster"] = "amp"
    mountpoint: MountpointSettings | None = None

    def validate(self) -> None:
        self.cluster.validate()
        if self.mountpoint is not None:
            self.mountpoint.validate()
        if self.prometheus not in ("amp", "in-cluster"):
            raise ValueError(f"prometheus must be 'amp' or 'in-cluster', got {self.prometheus!r}")


class EksPlatform(Construct):
    """InferenceCluster + Karpenter (Bottlerocket/SOCI node class and default pools) + Metrics + KEDA.

    Attributes: `cluster` (InferenceCluster), `karpenter`, `metrics`, `keda`, `node_pools` (the NodePoolSpecs),
    `mountpoint` (MountpointS3Csi, or None), `pattern_namespaces` (namespace → construct path of the pattern on this
    platform that renders into it; deployment.claim_namespace keeps two from sharing one)."""

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        props: EksPlatformProps = EksPlatformProps(),
        mountpoint_scope: Construct | None = None,
    ) -> None:
        """mountpoint_scope: where the Mountpoint driver's constructs live (default: this platform). ModelFarm passes
        itself, where the add-on lived before it moved to the platform, so a deployed farm keeps the add-on's logical
        id: under a new id CloudFormation would create it while the old one still exists, and CreateAddon fails
        (ResourceInUseException: one add-on of a name per cluster)."""
        super().__init__(scope, id)
        props.validate()
        self.props = props
        self.cluster = InferenceCluster(self, "Cluster", props=props.cluster)
        self.karpenter = Karpenter(self, "Karpenter", props=KarpenterProps.for_cluster(self.cluster))
        self.mountpoint: MountpointS3Csi | None = None
        self.pattern_namespaces: dict[str, str] = {}
        if props.mountpoint is not None:
            self.mountpoint = MountpointS3Csi(
                mountpoint_scope or self,
                "Mountpoint",
                props=MountpointS3CsiProps.for_cluster(self.cluster, props.mountpoint),
            )
        pools = props.node_pools
        self.node_pools = self.karpenter.add_default_node_pools(
            architectures=pools.architectures,
            capacity_types=pools.capacity_types,
            instance_families=pools.instance_families,
            instance_types=pools.instance_types,
            max_node_cpu=pools.max_node_cpu,
            consolidation_budget=pools.consolidation_budget,
            memory_pool=pools.memory_pool,
            startup_taints=self.mountpoint.startup_taints if self.mountpoint is not None else (),
        )
        self.metrics = Metrics(self, "Metrics", props=MetricsProps.for_cluster(self.cluster, mode=props.prometheus))
        self.keda = Keda(self, "Keda", props=KedaProps.for_cluster(self.cluster, metrics=self.metrics))
