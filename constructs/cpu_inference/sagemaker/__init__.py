"""SageMaker real-time endpoints for llama.cpp on CPU (Graviton first): GravitonEndpoint, and RouterEndpoint for the
SLM pre-filter's router. See README.md."""

from .engine_settings import (
    EngineSettings,
    engine_settings,
    model_download_timeout_seconds,
    prompt_cache_mib,
    startup_health_check_timeout_seconds,
)
from .graviton_endpoint import GravitonEndpoint, default_target_concurrency, placement_slug
from .monitoring import EndpointMonitoring, MonitoringSettings
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
    "RouterEndpoint",
    "RouterEndpointProps",
    "RouterEscalation",
    "default_target_concurrency",
    "engine_settings",
    "model_download_timeout_seconds",
    "placement_slug",
    "prompt_cache_mib",
    "startup_health_check_timeout_seconds",
]
