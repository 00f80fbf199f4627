"""Kubernetes objects as typed Python: Karpenter NodePools/EC2NodeClasses, the Bottlerocket SOCI node
class, KEDA ScaledObjects/TriggerAuthentications, the Prometheus scrape contract, and an offline CRD
validator. Plain Python (no aws_cdk) so CDK manifests, cdk8s charts and tests share them."""

from .bottlerocket import BottlerocketNodeClass, SociSettings, user_data as bottlerocket_user_data
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
)
from .scrape import scrape_annotations, scrape_config

__all__ = [
    "AwsTriggerAuthentication",
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
