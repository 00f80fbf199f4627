"""cdk-cpu-inference: AWS CDK + cdk8s constructs for CPU-first LLM/SLM inference with llama.cpp.

The public API is re-exported here (see README.md for the architecture and examples). Construct exports load
lazily, so the CLI's pure commands (validate, size, local, bench, eval) never start the jsii runtime."""

from __future__ import annotations

import importlib
from importlib.metadata import PackageNotFoundError, version
from typing import Any

# First, before any module here can import a jsii library (aws_cdk, constructs, cdk8s): jsii's Node is chosen then.
from ._jsii_node import use_virtualenv_node

use_virtualenv_node()

from . import sizing  # noqa: E402
from .config import Config, ConfigError  # noqa: E402
from .config import load as load_config  # noqa: E402

try:
    __version__ = version("cdk-cpu-inference")
except PackageNotFoundError:  # a bare source tree on PYTHONPATH, never installed
    __version__ = "0+unknown"

_LAZY = {
    ".artifacts": ("ModelArtifact", "ModelArtifactProps", "ModelBucket", "ModelBucketProps"),
    ".eks": (
        "InferenceCluster", "InferenceClusterProps", "InferenceWorkloads", "InferenceWorkloadsProps", "Karpenter",
        "KarpenterProps", "Keda", "KedaProps", "Metrics", "MetricsProps", "ModelDeployment",
    ),
    ".images": ("LlamaCppImage", "LlamaCppImageProps"),
    ".k8s": ("LlamaServerChart", "LlamaServerChartProps", "ModelWorkload", "RouterChart", "RouterChartProps", "ServingPolicy"),
    ".patterns": (
        "DeploymentProps", "EksPlatform", "EksPlatformProps", "EscalationTarget", "ModelFarm", "ModelFarmProps",
        "NodePoolSettings", "RouterSettings", "SageMakerSettings", "ServedModel", "ServingFoundation",
        "ServingFoundationProps", "SlmPrefilter", "SlmPrefilterProps",
    ),
    ".sagemaker": ("EngineImage", "GravitonEndpoint", "GravitonEndpointProps", "RouterEndpoint", "RouterEndpointProps"),
}
_WHERE = {name: module for module, names in _LAZY.items() for name in names}

__all__ = sorted(["Config", "ConfigError", "load_config", "sizing", *_WHERE])


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'cpu_inference' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
