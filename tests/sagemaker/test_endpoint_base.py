"""One endpoint base: the three SageMaker endpoints share one props base (each shared field declared once; a
subclass only re-declares a field to give it its own default) and one construct base that runs the shared sequence."""

from __future__ import annotations

import dataclasses

from cpu_inference.sagemaker import (
    GravitonEndpoint,
    GravitonEndpointProps,
    MultiModelEndpoint,
    MultiModelEndpointProps,
    RouterEndpoint,
    RouterEndpointProps,
)
from cpu_inference.sagemaker.endpoint_base import SageMakerEndpointBase
from cpu_inference.sagemaker.endpoint_props import EndpointPropsBase, EngineEndpointPropsBase

# Shared fields a subclass re-declares only for its own default (router: 2..4 instances, faster cooldowns, a 10 s
# end-to-end SLO; each endpoint its own instance type; the router's name defaults to "router"; the pool budgets
# 256 output tokens where a single model budgets by task).
DEFAULT_OVERRIDES = {
    GravitonEndpointProps: {"instance_type"},
    MultiModelEndpointProps: {"instance_type", "alarm_output_tokens"},
    RouterEndpointProps: {
        "name",
        "instance_type",
        "min_capacity",
        "max_capacity",
        "scale_out_cooldown",
        "scale_in_cooldown",
        "latency_slo",
    },
}


def _own_annotations(cls: type) -> set[str]:
    return set(cls.__dict__.get("__annotations__", {}))


def test_shared_fields_are_declared_once() -> None:
    shared = {f.name for f in dataclasses.fields(EndpointPropsBase)}
    engine = {f.name for f in dataclasses.fields(EngineEndpointPropsBase)} - shared
    assert len(shared) == 26 and engine == {
        "environment",
        "volume_size_gb",
        "network_isolation",
        "alarm_output_tokens",
        "time_per_output_token",
    }
    for cls, overrides in DEFAULT_OVERRIDES.items():
        assert _own_annotations(cls) & (shared | engine) == overrides, cls.__name__
        assert shared <= {f.name for f in dataclasses.fields(cls)}
    assert issubclass(GravitonEndpointProps, EngineEndpointPropsBase) and issubclass(
        MultiModelEndpointProps, EngineEndpointPropsBase
    )
    assert not issubclass(RouterEndpointProps, EngineEndpointPropsBase)  # no engine: no environment, no isolation


def test_every_endpoint_runs_the_one_sequence() -> None:
    for cls in (GravitonEndpoint, RouterEndpoint, MultiModelEndpoint):
        assert issubclass(cls, SageMakerEndpointBase)
        assert "__init__" not in cls.__dict__ or cls.__init__.__code__.co_names == ("super", "__init__"), cls.__name__
