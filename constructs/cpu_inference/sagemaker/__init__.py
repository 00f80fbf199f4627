"""SageMaker real-time endpoints for llama.cpp and vLLM on CPU (Graviton first): GravitonEndpoint (one model, either
engine), MultiModelEndpoint (a farm pool of llama.cpp models on one multi-model endpoint), and RouterEndpoint for the
SLM pre-filter's router. See README.md.

Exported here: the constructs, their props and what they expose. How the engine is tuned per instance
(engine_settings.py) and the endpoint plumbing (placement, target concurrency) are internal to their modules."""

from .graviton_endpoint import GravitonEndpoint
from .monitoring import EndpointMonitoring, MonitoringSettings
from .multi_model_endpoint import MultiModelEndpoint
from .multi_model_props import MultiModelEndpointProps, TargetModel
from .props import EngineImage, GravitonEndpointProps
from .router_endpoint import RouterEndpoint
from .router_props import RouterEndpointProps, RouterEscalation

__all__ = [
    "EndpointMonitoring",
    "EngineImage",
    "GravitonEndpoint",
    "GravitonEndpointProps",
    "MonitoringSettings",
    "MultiModelEndpoint",
    "MultiModelEndpointProps",
    "RouterEndpoint",
    "RouterEndpointProps",
    "RouterEscalation",
    "TargetModel",
]
