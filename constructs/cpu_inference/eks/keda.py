"""KEDA (chart 2.20.x) on the system nodes, its operator on EKS Pod Identity with read access to the
AMP workspace, and helpers to add TriggerAuthentications/ScaledObjects after the chart (whose CRDs
they need)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct, IDependable

from cpu_inference.eks.inference_cluster import InferenceCluster
from cpu_inference.eks.manifests import add_bounded_manifests
from cpu_inference.eks.metrics import Metrics
from cpu_inference.k8s.specs.keda import AwsTriggerAuthentication, ScaledObjectSpec

VERSION = "2.20.2"
REPOSITORY = "https://kedacore.github.io/charts"
AMP_QUERY_ACTIONS = ("aps:QueryMetrics", "aps:GetSeries", "aps:GetLabels", "aps:GetMetricMetadata")


@dataclass(frozen=True)
class KedaProps:
    """Defaults: chart 2.20.2 in namespace `keda`, operator service account `keda-operator`. Give
    `amp_workspace_arn` (or build with `KedaProps.for_cluster(ic, metrics=...)`) to let the operator
    sign AMP queries with its Pod Identity role."""

    cluster: eks.ICluster
    version: str = VERSION
    namespace: str = "keda"
    operator_service_account: str = "keda-operator"
    amp_workspace_arn: str | None = None
    system_node_selector: dict[str, str] = field(default_factory=dict)
    system_tolerations: tuple[dict[str, Any], ...] = ()
    chart_dependencies: tuple[IDependable, ...] = ()

    @classmethod
    def for_cluster(cls, ic: InferenceCluster, metrics: Metrics | None = None, **overrides: Any) -> KedaProps:
        deps = tuple(d for d in (ic.system_nodegroup, ic.pod_identity_agent) if d is not None)
        if metrics is not None and metrics.workspace_arn is not None:
            overrides.setdefault("amp_workspace_arn", metrics.workspace_arn)
        return cls(
            cluster=ic.cluster,
            system_node_selector=dict(ic.system_node_selector),
            system_tolerations=tuple(ic.system_tolerations),
            chart_dependencies=deps,
            **overrides,
        )

    def validate(self) -> None:
        if not self.version.startswith("2.20."):
            raise ValueError(
                f"KEDA chart {self.version} is outside the pinned 2.20.x line (scalingModifiers and the CRDs tested here)"
            )


class Keda(Construct):
    """Attributes: chart, operator_role, pod_identity_association, manifests."""

    def __init__(self, scope: Construct, id: str, *, props: KedaProps) -> None:
        super().__init__(scope, id)
        props.validate()
        self.props = props
        self.manifests: list[eks.KubernetesManifest] = []
        self._assumable: set[str] = set()
        self.operator_role = iam.Role(
            self,
            "OperatorRole",
            assumed_by=iam.SessionTagsPrincipal(iam.ServicePrincipal("pods.eks.amazonaws.com")),
            description="KEDA operator (EKS Pod Identity): SigV4 queries to Amazon Managed Prometheus",
        )
        if props.amp_workspace_arn is not None:
            self.operator_role.add_to_principal_policy(
                iam.PolicyStatement(
                    sid="QueryAmpWorkspace", actions=list(AMP_QUERY_ACTIONS), resources=[props.amp_workspace_arn]
                )
            )
        self.pod_identity_association = eks.CfnPodIdentityAssociation(
            self,
            "PodIdentity",
            cluster_name=props.cluster.cluster_name,
            namespace=props.namespace,
            service_account=props.operator_service_account,
            role_arn=self.operator_role.role_arn,
        )
        self.chart = eks.HelmChart(
            self,
            "Chart",
            cluster=props.cluster,
            chart="keda",
            repository=REPOSITORY,
            version=props.version,
            namespace=props.namespace,
            release="keda",
            create_namespace=True,
            wait=True,
            timeout=cdk.Duration.minutes(10),
            values={
                "serviceAccount": {"operator": {"create": True, "name": props.operator_service_account}},
                "nodeSelector": dict(props.system_node_selector),
                "tolerations": list(props.system_tolerations),
            },
        )
        self.chart.node.add_dependency(self.pod_identity_association, *props.chart_dependencies)

    def trigger_authentication(
        self, namespace: str, name: str = "amp-sigv4", role_arn: str | None = None
    ) -> AwsTriggerAuthentication:
        """A TriggerAuthentication signing with the operator's own Pod Identity role, or with `role_arn`,
        which the operator assumes (sts:AssumeRole from its Pod Identity credentials: this grants it; the
        role's trust policy must name the operator role, `operator_role.role_arn`)."""
        auth = AwsTriggerAuthentication(name=name, namespace=namespace, role_arn=role_arn)
        auth.validate()
        if role_arn is not None and role_arn not in self._assumable:
            self._assumable.add(role_arn)
            self.operator_role.add_to_principal_policy(
                iam.PolicyStatement(actions=["sts:AssumeRole"], resources=[role_arn])
            )
        return auth

    def add_objects(
        self,
        id: str,
        objs: Sequence[dict[str, Any]],
        depends_on: Sequence[IDependable] = (),
        scope: Construct | None = None,
    ) -> list[eks.KubernetesManifest]:
        """KEDA objects (or anything that needs KEDA's CRDs) in bounded manifests after the chart. `scope`: where the
        manifests live (default this construct). Pass the caller's own construct when it is in another stack: a
        manifest here that depends on the caller's resources makes this stack depend on that one (a cycle)."""
        manifests = add_bounded_manifests(
            self.props.cluster, id, list(objs), scope=scope or self, depends_on=[self.chart, *depends_on]
        )
        self.manifests.extend(manifests)
        return manifests

    def add_scaled_objects(
        self,
        id: str,
        specs: Sequence[ScaledObjectSpec],
        auth: AwsTriggerAuthentication | None = None,
        depends_on: Sequence[IDependable] = (),
        scope: Construct | None = None,
    ) -> list[eks.KubernetesManifest]:
        objs = ([auth.to_dict()] if auth is not None else []) + [s.to_dict() for s in specs]
        return self.add_objects(id, objs, depends_on, scope=scope)
