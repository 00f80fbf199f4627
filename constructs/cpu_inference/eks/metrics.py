"""Metrics for KEDA to query: Amazon Managed Prometheus + an AWS managed scraper (default), or an
in-cluster Prometheus (prometheus-community `prometheus` chart, pinned).

Both scrape pods carrying the `prometheus.io/scrape|port|path` annotations (cpu_inference.k8s.specs.scrape),
which is how llama-server pods expose `/metrics`.

AMP notes: the managed collector needs the cluster endpoint to include private access (both
endpoint_access options do) and, with the cluster's API authentication mode (eks_v2 always uses it),
AMP creates the collector's access entry itself (so this construct creates none: EKS allows one entry per
principal). Its scrape interval cannot be under 30 s.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import aws_cdk as cdk
from aws_cdk import aws_aps as aps
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from constructs import Construct, IDependable

from cpu_inference.eks.inference_cluster import InferenceCluster
from cpu_inference.k8s.specs.keda import amp_query_url
from cpu_inference.k8s.specs.scrape import collector_rbac, scrape_config_yaml
from cpu_inference.monitoring.alerts import alertmanager_definition

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
    # AMP alert manager → SNS (mode "amp" with a new workspace): a new KMS-encrypted topic, or `alert_topic`
    # (then add `Metrics.alert_topic_statement` to its access policy, and let aps.amazonaws.com use its key).
    alert_manager: bool = True
    alert_topic: sns.ITopic | None = None

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
        if self.alert_topic is not None and (
            self.mode != "amp" or self.existing_workspace_id or not self.alert_manager
        ):
            raise ValueError(
                "alert_topic needs mode 'amp', a new workspace (no existing_workspace_id) and alert_manager=True"
            )
        scrape_config_yaml(self.scrape_interval)  # raises for an interval AMP rejects


class Metrics(Construct):
    """Attributes: mode, workspace (CfnWorkspace or None), workspace_id, workspace_arn, scraper,
    chart (in-cluster), query_url (KEDA's serverAddress), aws_region (set for AMP: SigV4), alert_topic
    (the SNS topic AMP's alert manager publishes to, or None), alert_key (its new KMS key, or None),
    alert_topic_statement (the topic-policy statement AMP needs), alert_manager_definition (text or None)."""

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
        self.alert_topic: sns.ITopic | None = None
        self.alert_key: kms.Key | None = None
        self.alert_topic_statement: iam.PolicyStatement | None = None
        self.alert_manager_definition: str | None = None
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
            self.workspace = aps.CfnWorkspace(
                self, "Workspace", alias=props.workspace_alias or f"{props.cluster_name}-metrics"
            )
            self.workspace_id = self.workspace.attr_workspace_id
            self.workspace_arn = self.workspace.attr_arn
            if props.alert_manager:
                self._alert_manager(props, self.workspace)
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
        # No access entry of ours for the collector's role: on a cluster in API (or API_AND_CONFIG_MAP)
        # authentication mode — eks_v2 clusters are — "any scrapers you create through the Amazon Managed
        # Service for Prometheus API ... will automatically have the correct access entry policy created for
        # you" (AMP user guide, "Configuring your Amazon EKS cluster"), and EKS allows one access entry per
        # principal (CreateAccessEntry.principalArn), so a second one fails the stack. That entry's policy grants
        # get/list/watch on nodes, nodes/proxy, pods, services, endpoints and GET /metrics: all our jobs need.
        # The RBAC below is the guide's manual path ("aws-auth ConfigMap" clusters map the scraper role to
        # user aps-collector-user): read-only, and what an existing CONFIG_MAP-mode cluster needs.
        self.scraper_rbac = props.cluster.add_manifest("ScraperRbac", *collector_rbac(COLLECTOR_USER))
        self.aws_region = stack.region
        self.query_url = amp_query_url(stack.region, self.workspace_id)

    def _alert_manager(self, props: MetricsProps, workspace: aps.CfnWorkspace) -> None:
        """Rule groups alert through the workspace's alert manager to SNS (the only receiver AMP supports).
        Permissions per the AMP user guide ("Giving Amazon Managed Service for Prometheus permission to send
        alert messages to your Amazon SNS topic"): the topic policy lets aps.amazonaws.com sns:Publish and
        sns:GetTopicAttributes, conditioned on aws:SourceArn = this workspace and aws:SourceAccount (confused
        deputy); an SSE topic's key policy lets aps.amazonaws.com kms:GenerateDataKey* and kms:Decrypt."""
        stack = cdk.Stack.of(self)
        if props.alert_topic is not None:
            topic = props.alert_topic
        else:
            self.alert_key = kms.Key(
                self,
                "AlertKey",
                enable_key_rotation=True,
                description=f"SNS alerts of AMP workspace {props.cluster_name}-metrics",
            )
            self.alert_key.add_to_resource_policy(
                iam.PolicyStatement(
                    sid="AllowAmpAlertManager",
                    principals=[iam.ServicePrincipal("aps.amazonaws.com")],
                    actions=["kms:GenerateDataKey*", "kms:Decrypt"],
                    resources=["*"],
                )
            )
            topic = sns.Topic(
                self,
                "AlertTopic",
                master_key=self.alert_key,
                enforce_ssl=True,
                display_name=f"{props.cluster_name} inference alerts",
            )
        self.alert_topic = topic
        self.alert_topic_statement = iam.PolicyStatement(
            sid="AllowAmpAlertManagerPublish",
            principals=[iam.ServicePrincipal("aps.amazonaws.com")],
            actions=["sns:Publish", "sns:GetTopicAttributes"],
            resources=[topic.topic_arn],
            conditions={
                "ArnEquals": {"aws:SourceArn": workspace.attr_arn},
                "StringEquals": {"aws:SourceAccount": stack.account},
            },
        )
        topic.add_to_resource_policy(self.alert_topic_statement)  # a no-op for an imported topic: see MetricsProps
        self.alert_manager_definition = alertmanager_definition(topic.topic_arn, stack.region)
        workspace.alert_manager_definition = self.alert_manager_definition

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
