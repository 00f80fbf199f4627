"""The SageMaker-mode settings beyond sizing: prompt-cache RAM under the memory alarm, queue depth, model path."""

from __future__ import annotations

import pytest

from cpu_inference import sizing
from cpu_inference.sagemaker.engine_settings import engine_settings, prompt_cache_mib

SPEC_8B = sizing.ModelSpec(parameters_billions=8, quantization="Q4_K_M", context_window=4096)


@pytest.mark.parametrize(
    "instance_type", ["ml.m8g.large", "ml.c7g.2xlarge", "ml.c7g.4xlarge", "ml.c7g.8xlarge", "ml.r7gd.16xlarge"]
)
def test_prompt_cache_keeps_memory_under_the_alarm(instance_type: str) -> None:
    s = sizing.size(SPEC_8B, sizing.instance(instance_type), target="sagemaker")
    cache = prompt_cache_mib(s)
    total = s.instance.memory_gib * sizing.GIB
    assert 0 <= cache <= 8192
    if cache:
        assert s.memory_needed_bytes + cache * sizing.MIB <= 0.80 * total < 0.85 * total
    else:  # nothing left under 80 %: the cache is off rather than pushing the instance towards OOM
        assert s.memory_needed_bytes > 0.80 * total - sizing.MIB


def test_cache_is_off_when_the_model_barely_fits_and_capped_when_roomy() -> None:
    assert prompt_cache_mib(sizing.size(SPEC_8B, sizing.instance("ml.m8g.large"), target="sagemaker")) == 0
    assert prompt_cache_mib(sizing.size(SPEC_8B, sizing.instance("ml.c7g.8xlarge"), target="sagemaker")) == 8192


def test_queue_depth_and_model_path() -> None:
    e = engine_settings(SPEC_8B, "ml.c7g.8xlarge", alias="m")
    assert (e.queue_depth, e.max_in_flight, e.model_path) == (8, 16, None)
    assert "MODEL_PATH" not in e.environment()  # the entrypoint finds the one .gguf under /opt/ml/model
    e = engine_settings(SPEC_8B, "ml.c7g.8xlarge", alias="m", model_file="Q4_K_M/m-00001-of-00002.gguf", queue_depth=0)
    assert (e.queue_depth, e.max_in_flight) == (0, 8)
    assert e.environment()["MODEL_PATH"] == "/opt/ml/model/Q4_K_M/m-00001-of-00002.gguf"


def test_the_invoke_time_figures_are_the_containers() -> None:
    """engine_settings holds the construct side's copy of the adapter's time figures (the constructs cannot import
    containers/): InvokeEndpoint's 60 s, the 50 s generation budget and the variable the adapter reads it from."""
    import sys
    from pathlib import Path

    import botocore.session

    from cpu_inference.sagemaker import engine_settings as es

    engine_dir = Path(__file__).resolve().parents[2] / "containers" / "llama-server"
    sys.path.insert(0, str(engine_dir))
    try:
        from inference_runtime import sagemaker_adapter
    finally:
        sys.path.remove(str(engine_dir))
    assert sagemaker_adapter.INVOKE_ENDPOINT_TIMEOUT_SECONDS == es.INVOKE_TIMEOUT_SECONDS
    assert sagemaker_adapter.DEFAULT_GENERATION_BUDGET_SECONDS == es.GENERATION_BUDGET_SECONDS
    assert (
        sagemaker_adapter.adapter_settings({es.GENERATION_BUDGET_ENV: "20"}, engine_stop_seconds=5).generation_budget
        == 20
    )  # both images
    doc = (
        botocore.session.get_session()
        .get_service_model("sagemaker-runtime")
        .operation_model("InvokeEndpoint")
        .documentation
    )
    assert f"must respond to requests within {es.INVOKE_TIMEOUT_SECONDS} seconds" in doc
