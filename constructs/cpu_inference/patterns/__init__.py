"""The two production patterns (SlmPrefilter, ModelFarm) and the pieces they compose. See README.md beside this file."""

from cpu_inference.patterns.deployment import DeploymentProps, SageMakerSettings
from cpu_inference.patterns.eks_platform import EksPlatform, EksPlatformProps, NodePoolSettings
from cpu_inference.patterns.escalation import EscalationTarget
from cpu_inference.patterns.farm_pool import FarmPoolSettings
from cpu_inference.patterns.model_farm import ModelFarm, ModelFarmProps
from cpu_inference.patterns.router_settings import RouterSettings
from cpu_inference.patterns.served_model import ServedModel
from cpu_inference.patterns.serving_foundation import ROUTER_IMAGE, ServingFoundation, ServingFoundationProps
from cpu_inference.patterns.slm_prefilter import SlmPrefilter, SlmPrefilterProps

__all__ = [
    "DeploymentProps",
    "EksPlatform",
    "EksPlatformProps",
    "EscalationTarget",
    "FarmPoolSettings",
    "ModelFarm",
    "ModelFarmProps",
    "NodePoolSettings",
    "ROUTER_IMAGE",
    "RouterSettings",
    "SageMakerSettings",
    "ServedModel",
    "ServingFoundation",
    "ServingFoundationProps",
    "SlmPrefilter",
    "SlmPrefilterProps",
]
