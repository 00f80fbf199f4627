"""Kubernetes objects as typed Python: Karpenter NodePools/EC2NodeClasses, the Bottlerocket SOCI node
class, KEDA ScaledObjects/TriggerAuthentications and the Prometheus scrape contract. Plain Python (no aws_cdk) so CDK
manifests, cdk8s charts and tests share them.

The cdk8s charts (cdk8s-plus-27): LlamaServerChart (one served model, llama-server or vLLM), ModelPoolChart (a
multi-model pool), RouterChart (router / gateway), ServingNamespaceChart; and the alert rules and dashboards. See
README.md beside this file. Exported here: what users construct or call. The planning and wiring helpers (bin_packing,
the gateway and preset renderers, queue targets) are internal and stay in their modules; the checks of rendered
objects (Pod Security "restricted", the CRD schema and CEL validator) are test helpers: cpu_inference.testing."""

from .alerts import ModelAlertSpec, dashboard, rule_groups, rule_groups_yaml
from .bottlerocket import BottlerocketNodeClass, SociSettings
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
from .llama_server_chart import KedaSource, LlamaServerChart, LlamaServerChartProps, ModelWorkload, ServingPolicy
from .model_pool_chart import ModelPoolChart, ModelPoolChartProps, PoolModel
from .namespace_chart import ServingNamespaceChart, ServingNamespaceProps
from .router_chart import RouterChart, RouterChartProps
from .scrape import scrape_annotations, scrape_config

__all__ = [
    "AwsTriggerAuthentication",
    "BlockDevice",
    "BottlerocketNodeClass",
    "Budget",
    "Disruption",
    "EC2NodeClassSpec",
    "KedaSource",
    "LlamaServerChart",
    "LlamaServerChartProps",
    "MetadataOptions",
    "ModelAlertSpec",
    "ModelPoolChart",
    "ModelPoolChartProps",
    "ModelWorkload",
    "NodePoolSpec",
    "PoolModel",
    "PrometheusTrigger",
    "Requirement",
    "RouterChart",
    "RouterChartProps",
    "ScaledObjectSpec",
    "ScalingModifiers",
    "ServingNamespaceChart",
    "ServingNamespaceProps",
    "ServingPolicy",
    "SociSettings",
    "Taint",
    "amp_query_url",
    "dashboard",
    "default_node_pools",
    "llama_queue_scaled_object",
    "pool_in_flight_scaled_object",
    "rule_groups",
    "rule_groups_yaml",
    "scrape_annotations",
    "scrape_config",
]
