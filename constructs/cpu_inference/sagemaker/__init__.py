"""SageMaker real-time endpoints for llama.cpp and vLLM on CPU (Graviton first): GravitonEndpoint (one model, either
engine), MultiModelEndpoint (a farm pool of llama.cpp models on one multi-model endpoint), and RouterEndpoint for the
SLM pre-filter's router; InferenceComponents (a farm's dedicated models, one inference component each on shared
endpoints) with InferenceComponentScaling (their copy-count scaling, one custom resource for all). See README.md.

Exported here: the constructs, their props and what they expose. How the engine is tuned per instance
(engine_settings.py) and the endpoint plumbing (placement, target concurrency) are internal to their modules."""

from cpu_inference.sagemaker.engine_image import EngineImage
from cpu_inference.sagemaker.graviton_endpoint import GravitonEndpoint
from cpu_inference.sagemaker.ic_scaling import ComponentScaling, InferenceComponentScaling
from cpu_inference.sagemaker.inference_components import (
    ComponentHandle,
    ComponentModel,
    InferenceComponents,
    InferenceComponentsProps,
    SharedEndpoint,
)
from cpu_inference.sagemaker.monitoring import EndpointMonitoring, MonitoringSettings
from cpu_inference.sagemaker.multi_model_endpoint import MultiModelEndpoint
from cpu_inference.sagemaker.multi_model_props import MultiModelEndpointProps, TargetModel
from cpu_inference.sagemaker.props import GravitonEndpointProps
from cpu_inference.sagemaker.router_endpoint import RouterEndpoint
from cpu_inference.sagemaker.router_props import RouterEndpointProps, RouterEscalation

__all__ = [
    "ComponentHandle",
    "ComponentModel",
    "ComponentScaling",
    "EndpointMonitoring",
    "EngineImage",
    "GravitonEndpoint",
    "GravitonEndpointProps",
    "InferenceComponentScaling",
    "InferenceComponents",
    "InferenceComponentsProps",
    "MonitoringSettings",
    "MultiModelEndpoint",
    "MultiModelEndpointProps",
    "RouterEndpoint",
    "RouterEndpointProps",
    "RouterEscalation",
    "SharedEndpoint",
    "TargetModel",
]
