"""Kubernetes objects as typed Python, in three layers: specs/ (Karpenter NodePools/EC2NodeClasses, the Bottlerocket
SOCI node class, KEDA ScaledObjects/TriggerAuthentications and the Prometheus scrape contract: plain Python, no
aws_cdk), workloads/ (the containers, pod hardening, placement, time budgets and scaling every workload is built
from) and charts/ (cdk8s-plus-27: LlamaServerChart, one served model on llama-server or vLLM; ModelPoolChart, a
multi-model pool; RouterChart, router / gateway; ServingNamespaceChart). See README.md beside this file.

Exported here: what users construct or call. The planning and wiring helpers (bin_packing, the gateway and preset
renderers, queue targets) are internal and stay in their modules; the alert rules are cpu_inference.monitoring; the
checks of rendered objects (Pod Security "restricted", the CRD schema and CEL validator) are cpu_inference.testing."""

from cpu_inference.engines.pool_preset import PoolModel
from cpu_inference.k8s.charts.llama_server_chart import LlamaServerChart, LlamaServerChartProps
from cpu_inference.k8s.charts.model_pool_chart import ModelPoolChart, ModelPoolChartProps
from cpu_inference.k8s.charts.namespace_chart import ServingNamespaceChart, ServingNamespaceProps
from cpu_inference.k8s.charts.router_chart import RouterChart, RouterChartProps
from cpu_inference.k8s.specs.bottlerocket import BottlerocketNodeClass, SociSettings
from cpu_inference.k8s.specs.default_node_pools import default_node_pools
from cpu_inference.k8s.specs.karpenter_node_class import BlockDevice, EC2NodeClassSpec, MetadataOptions
from cpu_inference.k8s.specs.karpenter_node_pool import Budget, Disruption, NodePoolSpec, Requirement, Taint
from cpu_inference.k8s.specs.keda import (
    AwsTriggerAuthentication,
    PrometheusTrigger,
    ScaledObjectSpec,
    ScalingModifiers,
    amp_query_url,
    pool_in_flight_scaled_object,
)
from cpu_inference.k8s.specs.scrape import scrape_annotations, scrape_config
from cpu_inference.k8s.workloads.model_scaling import llama_queue_scaled_object
from cpu_inference.k8s.workloads.model_workload import ModelWorkload
from cpu_inference.k8s.workloads.serving_policy import KedaSource, ServingPolicy

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
    "default_node_pools",
    "llama_queue_scaled_object",
    "pool_in_flight_scaled_object",
    "scrape_annotations",
    "scrape_config",
]
