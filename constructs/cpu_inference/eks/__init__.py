"""EKS platform constructs (aws_eks_v2): InferenceCluster, Karpenter, Keda, Metrics, InferenceWorkloads
(the served models + router of one pattern), and the bounded manifest helper. See README.md beside this
file for a minimal example."""

from .inference_cluster import SYSTEM_LABEL, SYSTEM_TAINT, InferenceCluster, InferenceClusterProps
from .inference_workloads import InferenceWorkloads, InferenceWorkloadsProps, KubernetesPatch, ModelDeployment
from .karpenter import INTERRUPTION_RULES, Karpenter, KarpenterProps
from .keda import Keda, KedaProps
from .manifests import add_bounded_manifests
from .metrics import Metrics, MetricsProps
from .mountpoint import MountpointS3Csi, MountpointS3CsiProps, MountpointSettings

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
