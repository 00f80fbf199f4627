"""Kubernetes objects as typed Python: Karpenter NodePools/EC2NodeClasses, the Bottlerocket SOCI node
class, KEDA ScaledObjects/TriggerAuthentications, the Prometheus scrape contract, and an offline CRD
validator. Plain Python (no aws_cdk) so CDK manifests, cdk8s charts and tests share them.

The cdk8s charts (cdk8s-plus-27): LlamaServerChart (one served model), RouterChart (router / gateway),
ServingNamespaceChart; with the pure helpers around them: bin packing, Pod Security "restricted" checks,
alert rules and dashboards. See README.md beside this file."""

from .alerts import ModelAlertSpec, dashboard, rule_groups, rule_groups_yaml
from .bin_packing import PackingPlan, PodRequest, choose, model_pod, pack, served_model_pods
from .bin_packing import table as packing_table
from .bottlerocket import BottlerocketNodeClass, SociSettings
from .bottlerocket import user_data as bottlerocket_user_data
from .karpenter_specs import (
    BlockDevice,
    Budget,
    Disruption,
    EC2NodeClassSpec,
    MetadataOptions,
    NodePoolSpec,
    Requirement,
    Taint,
    default_node_pools,
    family_architecture,
)
from .keda_specs import (
    AwsTriggerAuthentication,
    PrometheusTrigger,
    ScaledObjectSpec,
    ScalingModifiers,
    amp_query_url,
    llama_queue_scaled_object,
    pool_in_flight_scaled_object,
)
from .llama_server_chart import (
    KedaSource,
    LlamaServerChart,
    LlamaServerChartProps,
    ModelWorkload,
    ServingPolicy,
    queue_target,
)
from .model_pool_chart import ModelPoolChart, ModelPoolChartProps, PoolModel, pool_replica_urls, render_preset
from .namespace_chart import ServingNamespaceChart, ServingNamespaceProps
from .pod_security import restricted_violations
from .router_chart import RouterChart, RouterChartProps, gateway_cold_start_query, gateway_models, gateway_pool
from .scrape import scrape_annotations, scrape_config

__all__ = [
    "AwsTriggerAuthentication",
    "KedaSource",
    "LlamaServerChart",
    "LlamaServerChartProps",
    "ModelAlertSpec",
    "ModelWorkload",
    "PackingPlan",
    "PodRequest",
    "RouterChart",
    "RouterChartProps",
    "ServingNamespaceChart",
    "ServingNamespaceProps",
    "ServingPolicy",
    "choose",
    "dashboard",
    "gateway_cold_start_query",
    "gateway_models",
    "gateway_pool",
    "ModelPoolChart",
    "ModelPoolChartProps",
    "PoolModel",
    "pool_in_flight_scaled_object",
    "pool_replica_urls",
    "render_preset",
    "model_pod",
    "pack",
    "packing_table",
    "queue_target",
    "restricted_violations",
    "rule_groups",
    "rule_groups_yaml",
    "served_model_pods",
    "BlockDevice",
    "BottlerocketNodeClass",
    "Budget",
    "Disruption",
    "EC2NodeClassSpec",
    "MetadataOptions",
    "NodePoolSpec",
    "PrometheusTrigger",
    "Requirement",
    "ScaledObjectSpec",
    "ScalingModifiers",
    "SociSettings",
    "Taint",
    "amp_query_url",
    "bottlerocket_user_data",
    "default_node_pools",
    "family_architecture",
    "llama_queue_scaled_object",
    "scrape_annotations",
    "scrape_config",
]
