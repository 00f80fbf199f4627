"""cdk-cpu-inference: AWS CDK + cdk8s constructs for CPU-first LLM/SLM inference with llama.cpp.

The public API is re-exported here (see README.md for the architecture and examples): `__all__` is the list, every
name in it is supported; anything else is reached through its subpackage (cpu_inference.k8s, .eks, ...) or is
internal. Construct exports load lazily, so the CLI's pure commands (validate, size, local, bench, eval) never start
the jsii runtime; type checkers see them through the TYPE_CHECKING imports below (the package is typed: py.typed)."""

from __future__ import annotations

import importlib
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

# First, before any module here can import a jsii library (aws_cdk, constructs, cdk8s): jsii's Node is chosen then.
from cpu_inference._internal.jsii_node import use_virtualenv_node

use_virtualenv_node()

# The eager exports (pure: no jsii). `X as X` marks an explicit re-export for type checkers.
from cpu_inference import sizing as sizing  # noqa: E402
from cpu_inference.config import Config as Config  # noqa: E402
from cpu_inference.config import ConfigError as ConfigError  # noqa: E402
from cpu_inference.config import load as _load  # noqa: E402

load_config = _load  # config.load under the name the README uses

try:
    __version__ = version("cdk-cpu-inference")
except PackageNotFoundError:  # a bare source tree on PYTHONPATH, never installed
    __version__ = "0+unknown"

# The lazy exports: name → the subpackage it comes from. Mirrored for type checkers by the block below, which
# tests/test_public_api.py keeps equal to this table.
_LAZY = {
    "cpu_inference.artifacts": (
        "CatalogEntry",
        "ModelArtifact",
        "ModelArtifactProps",
        "ModelBucket",
        "ModelBucketProps",
        "ModelCatalog",
        "ModelCatalogProps",
    ),
    "cpu_inference.eks": (
        "InferenceCluster",
        "InferenceClusterProps",
        "InferenceWorkloads",
        "InferenceWorkloadsProps",
        "Karpenter",
        "KarpenterProps",
        "Keda",
        "KedaProps",
        "Metrics",
        "MetricsProps",
        "ModelDeployment",
        "MountpointS3Csi",
        "MountpointS3CsiProps",
        "MountpointSettings",
    ),
    "cpu_inference.images": (
        "LlamaCppImage",
        "LlamaCppImageProps",
        "VLLM_IMAGE",
    ),
    "cpu_inference.k8s": (
        "KedaSource",
        "LlamaServerChart",
        "LlamaServerChartProps",
        "ModelPoolChart",
        "ModelPoolChartProps",
        "ModelWorkload",
        "PoolModel",
        "RouterChart",
        "RouterChartProps",
        "ServingPolicy",
    ),
    "cpu_inference.patterns": (
        "DeploymentProps",
        "EksPlatform",
        "EksPlatformProps",
        "EscalationTarget",
        "FarmPoolSettings",
        "ModelFarm",
        "ModelFarmProps",
        "NodePoolSettings",
        "RouterSettings",
        "SageMakerSettings",
        "ServedModel",
        "ServingFoundation",
        "ServingFoundationProps",
        "SlmPrefilter",
        "SlmPrefilterProps",
    ),
    "cpu_inference.sagemaker": (
        "EngineImage",
        "GravitonEndpoint",
        "GravitonEndpointProps",
        "MultiModelEndpoint",
        "MultiModelEndpointProps",
        "RouterEndpoint",
        "RouterEndpointProps",
        "TargetModel",
    ),
}
# What the lazy table resolves to, visible to mypy/pyright (`X as X` marks an explicit re-export). isort is off here:
# it would split these into one statement per name.
# isort: off
if TYPE_CHECKING:
    from cpu_inference.artifacts import (
        CatalogEntry as CatalogEntry,
        ModelArtifact as ModelArtifact,
        ModelArtifactProps as ModelArtifactProps,
        ModelBucket as ModelBucket,
        ModelBucketProps as ModelBucketProps,
        ModelCatalog as ModelCatalog,
        ModelCatalogProps as ModelCatalogProps,
    )
    from cpu_inference.eks import (
        InferenceCluster as InferenceCluster,
        InferenceClusterProps as InferenceClusterProps,
        InferenceWorkloads as InferenceWorkloads,
        InferenceWorkloadsProps as InferenceWorkloadsProps,
        Karpenter as Karpenter,
        KarpenterProps as KarpenterProps,
        Keda as Keda,
        KedaProps as KedaProps,
        Metrics as Metrics,
        MetricsProps as MetricsProps,
        ModelDeployment as ModelDeployment,
        MountpointS3Csi as MountpointS3Csi,
        MountpointS3CsiProps as MountpointS3CsiProps,
        MountpointSettings as MountpointSettings,
    )
    from cpu_inference.images import (
        VLLM_IMAGE as VLLM_IMAGE,
        LlamaCppImage as LlamaCppImage,
        LlamaCppImageProps as LlamaCppImageProps,
    )
    from cpu_inference.k8s import (
        KedaSource as KedaSource,
        LlamaServerChart as LlamaServerChart,
        LlamaServerChartProps as LlamaServerChartProps,
        ModelPoolChart as ModelPoolChart,
        ModelPoolChartProps as ModelPoolChartProps,
        ModelWorkload as ModelWorkload,
        PoolModel as PoolModel,
        RouterChart as RouterChart,
        RouterChartProps as RouterChartProps,
        ServingPolicy as ServingPolicy,
    )
    from cpu_inference.patterns import (
        DeploymentProps as DeploymentProps,
        EksPlatform as EksPlatform,
        EksPlatformProps as EksPlatformProps,
        EscalationTarget as EscalationTarget,
        FarmPoolSettings as FarmPoolSettings,
        ModelFarm as ModelFarm,
        ModelFarmProps as ModelFarmProps,
        NodePoolSettings as NodePoolSettings,
        RouterSettings as RouterSettings,
        SageMakerSettings as SageMakerSettings,
        ServedModel as ServedModel,
        ServingFoundation as ServingFoundation,
        ServingFoundationProps as ServingFoundationProps,
        SlmPrefilter as SlmPrefilter,
        SlmPrefilterProps as SlmPrefilterProps,
    )
    from cpu_inference.sagemaker import (
        EngineImage as EngineImage,
        GravitonEndpoint as GravitonEndpoint,
        GravitonEndpointProps as GravitonEndpointProps,
        MultiModelEndpoint as MultiModelEndpoint,
        MultiModelEndpointProps as MultiModelEndpointProps,
        RouterEndpoint as RouterEndpoint,
        RouterEndpointProps as RouterEndpointProps,
        TargetModel as TargetModel,
    )
# isort: on

_WHERE = {name: module for module, names in _LAZY.items() for name in names}

_EAGER = ("Config", "ConfigError", "load_config", "sizing")
__all__ = sorted([*_EAGER, *_WHERE])


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'cpu_inference' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
