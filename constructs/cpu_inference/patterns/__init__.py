"""The two production patterns (SlmPrefilter, ModelFarm) and the pieces they compose. See README.md beside this file."""

from .deployment import DeploymentProps, SageMakerSettings
from .eks_platform import EksPlatform, EksPlatformProps, NodePoolSettings
from .escalation import EscalationTarget
from .farm_pool import FarmPoolSettings
from .model_farm import ModelFarm, ModelFarmProps
from .router_settings import RouterSettings
from .served_model import ServedModel
from .serving_foundation import ROUTER_IMAGE, ServingFoundation, ServingFoundationProps
from .slm_prefilter import SlmPrefilter, SlmPrefilterProps

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
