"""Metrics for KEDA to query: Amazon Managed Prometheus + an AWS managed scraper (default), or an
in-cluster Prometheus (prometheus-community `prometheus` chart, pinned).

Both scrape pods carrying the `prometheus.io/scrape|port|path` annotations (cpu_inference.k8s.scrape),
which is how llama-server pods expose `/metrics`.

AMP notes: the managed collector needs the cluster endpoint to include private access (both
endpoint_access options do) and, with the cluster's API authentication mode (eks_v2 always uses it),
AMP creates the collector's access entry itself. Its scrape interval cannot be under 30 s.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import aws_cdk as cdk
from aws_cdk import aws_aps as aps
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct, IDependable

from ..k8s.keda_specs import amp_query_url
from ..k8s.scrape import collector_rbac, scrape_config_yaml
from .inference_cluster import InferenceCluster

COLLECTOR_USER = "aps-collector-user"

PROMETHEUS_CHART_VERSION = "29.45.2"
PROMETHEUS_REPOSITORY = "https://prometheus-community.github.io/helm-charts"


@dataclass(frozen=True)
class MetricsProps:
    """mode "amp": a new AMP workspace (or `existing_workspace_id`) and a managed scraper in the cluster's
    private subnets with the EKS cluster security group. mode "in-cluster": the prometheus chart in
    `namespace`, without persistence (no EBS CSI driver is installed; KEDA needs only recent samples)."""

    cluster: eks.ICluster
    cluster_name: str
    vpc: ec2.IVpc
    mode: Literal["amp", "in-cluster"] = "amp"
    scrape_interval: str = "30s"
    workspace_alias: str | None = None
    existing_workspace_id: str | None = None
    scraper_subnet_ids: tuple[str, ...] = ()  # default: the VPC's private subnets
    scraper_security_group_ids: tuple[str, ...] = ()  # default: the EKS cluster security group
    namespace: str = "monitoring"
    chart_version: str = PROMETHEUS_CHART_VERSION
    retention: str = "2d"
    system_node_selector: dict[str, str] = field(default_factory=dict)
    system_tolerations: tuple[dict[str, Any], ...] = ()
    chart_dependencies: tuple[IDependable, ...] = ()

    @classmethod
    def for_cluster(cls, ic: InferenceCluster, **overrides: Any) -> MetricsProps:
        deps = tuple(d for d in (ic.system_nodegroup,) if d is not None)
        return cls(
            cluster=ic.cluster,
            cluster_name=ic.cluster_name,
            vpc=ic.vpc,
            system_node_selector=dict(ic.system_node_selector),
            system_tolerations=tuple(ic.system_tolerations),
            chart_dependencies=deps,
            **overrides,
        )

    def validate(self) -> None:
        if self.mode not in ("amp", "in-cluster"):
            raise ValueError("mode must be 'amp' or 'in-cluster'")
        if self.mode == "in-cluster" and self.existing_workspace_id:
            raise ValueError("existing_workspace_id applies to mode 'amp' only")
        scrape_config_yaml(self.scrape_interval)  # raises for an interval AMP rejects


class Metrics(Construct):
    """Attributes: mode, workspace (CfnWorkspace or None), workspace_id, workspace_arn, scraper,
    chart (in-cluster), query_url (KEDA's serverAddress), aws_region (set for AMP: SigV4)."""

    def __init__(self, scope: Construct, id: str, *, props: MetricsProps) -> None:
        super().__init__(scope, id)
        props.validate()
        self.props = props
        self.mode = props.mode
        self.workspace: aps.CfnWorkspace | None = None
        self.scraper: aps.CfnScraper | None = None
        self.chart: eks.HelmChart | None = None
        self.workspace_id: str | None = None
        self.workspace_arn: str | None = None
        self.aws_region: str | None = None
        if props.mode == "amp":
            self._amp(props)
        else:
            self._in_cluster(props)

    def _amp(self, props: MetricsProps) -> None:
        stack = cdk.Stack.of(self)
        if props.existing_workspace_id:
            self.workspace_id = props.existing_workspace_id
            self.workspace_arn = stack.format_arn(service="aps", resource="workspace", resource_name=self.workspace_id)
        else:
            self.workspace = aps.CfnWorkspace(self, "Workspace", alias=props.workspace_alias or f"{props.cluster_name}-metrics")
            self.workspace_id = self.workspace.attr_workspace_id
            self.workspace_arn = self.workspace.attr_arn
        subnets = list(props.scraper_subnet_ids) or [s.subnet_id for s in props.vpc.private_subnets]
        groups = list(props.scraper_security_group_ids) or [props.cluster.cluster_security_group_id]
        self.scraper = aps.CfnScraper(
            self,
            "Scraper",
            alias=f"{props.cluster_name}-pods",
            source=aps.CfnScraper.SourceProperty(
                eks_configuration=aps.CfnScraper.EksConfigurationProperty(
                    cluster_arn=props.cluster.cluster_arn, subnet_ids=subnets, security_group_ids=groups
                )
            ),
            destination=aps.CfnScraper.DestinationProperty(
                amp_configuration=aps.CfnScraper.AmpConfigurationProperty(workspace_arn=self.workspace_arn)
            ),
            # CloudFormation takes the YAML text and encodes it for the API itself.
            scrape_configuration=aps.CfnScraper.ScrapeConfigurationProperty(
                configuration_blob=scrape_config_yaml(props.scrape_interval, props.cluster_name)
            ),
        )
        # The collector authenticates as its own service-linked role: an access entry maps that role to a
        # Kubernetes user whose ClusterRole lets it discover targets and read cAdvisor through the node proxy.
        self.scraper_rbac = props.cluster.add_manifest("ScraperRbac", *collector_rbac(COLLECTOR_USER))
        self.scraper_access = eks.CfnAccessEntry(
            self, "ScraperAccess", cluster_name=props.cluster.cluster_name, principal_arn=self.scraper.attr_role_arn,
            username=COLLECTOR_USER, type="STANDARD",
        )
        self.aws_region = stack.region
        self.query_url = amp_query_url(stack.region, self.workspace_id)

    def _in_cluster(self, props: MetricsProps) -> None:
        placement = {"nodeSelector": dict(props.system_node_selector), "tolerations": list(props.system_tolerations)}
        self.chart = eks.HelmChart(
            self,
            "Prometheus",
            cluster=props.cluster,
            chart="prometheus",
            repository=PROMETHEUS_REPOSITORY,
            version=props.chart_version,
            namespace=props.namespace,
            release="prometheus",
            create_namespace=True,
            wait=True,
            values={
                "alertmanager": {"enabled": False},
                "prometheus-pushgateway": {"enabled": False},
                "kube-state-metrics": placement,
                "server": {
                    **placement,
                    "retention": props.retention,
                    "persistentVolume": {"enabled": False},
                    "global": {"scrape_interval": props.scrape_interval},
                },
            },
        )
        for d in props.chart_dependencies:
            self.chart.node.add_dependency(d)
        self.query_url = f"http://prometheus-server.{props.namespace}.svc.cluster.local"
