"""SageMaker real-time endpoints for llama.cpp on CPU (Graviton first): GravitonEndpoint, MultiModelEndpoint (a farm
pool on one multi-model endpoint), and RouterEndpoint for the SLM pre-filter's router. See README.md."""

from .engine_settings import (
    EngineSettings,
    engine_settings,
    model_download_timeout_seconds,
    prompt_cache_mib,
    startup_health_check_timeout_seconds,
)
from .graviton_endpoint import GravitonEndpoint, default_target_concurrency, placement_slug
from .monitoring import EndpointMonitoring, MonitoringSettings
from .multi_model_endpoint import MultiModelEndpoint
from .multi_model_props import MultiModelEndpointProps, TargetModel
from .props import EngineImage, GravitonEndpointProps
from .router_endpoint import RouterEndpoint
from .router_props import RouterEndpointProps, RouterEscalation

__all__ = [
    "EndpointMonitoring",
    "EngineImage",
    "EngineSettings",
    "GravitonEndpoint",
    "GravitonEndpointProps",
    "MonitoringSettings",
    "MultiModelEndpoint",
    "MultiModelEndpointProps",
    "RouterEndpoint",
    "RouterEndpointProps",
    "RouterEscalation",
    "TargetModel",
    "default_target_concurrency",
    "engine_settings",
    "model_download_timeout_seconds",
    "placement_slug",
    "prompt_cache_mib",
    "startup_health_check_timeout_seconds",
]
