"""EKS platform constructs (aws_eks_v2): InferenceCluster, Karpenter, Keda, Metrics, InferenceWorkloads
(the served models + router of one pattern), and the bounded manifest helper. See README.md beside this
file for a minimal example."""

from cpu_inference.eks.inference_cluster import SYSTEM_LABEL, SYSTEM_TAINT, InferenceCluster, InferenceClusterProps
from cpu_inference.eks.inference_workloads import (
    InferenceWorkloads,
    InferenceWorkloadsProps,
    KubernetesPatch,
    ModelDeployment,
)
from cpu_inference.eks.karpenter import INTERRUPTION_RULES, Karpenter, KarpenterProps
from cpu_inference.eks.keda import Keda, KedaProps
from cpu_inference.eks.manifests import add_bounded_manifests
from cpu_inference.eks.metrics import Metrics, MetricsProps
from cpu_inference.eks.mountpoint import MountpointS3Csi, MountpointS3CsiProps, MountpointSettings

__all__ = [
    "INTERRUPTION_RULES",
    "InferenceCluster",
    "InferenceClusterProps",
    "InferenceWorkloads",
    "InferenceWorkloadsProps",
    "KubernetesPatch",
    "ModelDeployment",
    "Karpenter",
    "KarpenterProps",
    "Keda",
    "KedaProps",
    "Metrics",
    "MetricsProps",
    "MountpointS3Csi",
    "MountpointS3CsiProps",
    "MountpointSettings",
    "SYSTEM_LABEL",
    "SYSTEM_TAINT",
    "add_bounded_manifests",
]
