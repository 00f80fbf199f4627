"""patterns.sagemaker_endpoints: SageMaker endpoint props from the patterns' ServedModel, RouterSettings and
EscalationTarget (moved here from GravitonEndpointProps.for_served_model / RouterEndpointProps.for_prefilter:
sagemaker/ sits below the patterns). The router config they lead to is read by the router's own loader."""

from __future__ import annotations

import dataclasses
import json

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ecr as ecr

from cpu_inference import sizing
from cpu_inference.patterns.escalation import EscalationTarget
from cpu_inference.patterns.router_settings import RouterSettings
from cpu_inference.patterns.sagemaker_endpoints import graviton_endpoint_props, router_endpoint_props
from cpu_inference.patterns.served_model import ServedModel
from cpu_inference.sagemaker import EngineImage, RouterEscalation
from tests.sagemaker.test_router_endpoint import ENV, HAIKU, _endpoints, _load

DIGEST = "sha256:" + "cd" * 32
SPEC = sizing.ModelSpec(parameters_billions=8, quantization="Q4_K_M", context_window=4096)


@pytest.fixture(scope="module")
def repo() -> ecr.IRepository:
    return ecr.Repository.from_repository_name(cdk.Stack(cdk.App(), "Props"), "Repo", "llama-server")


def test_graviton_endpoint_props_map_the_served_model(repo: ecr.IRepository) -> None:
    served = ServedModel(
        name="zephyr-7b",
        hf_repo="TheBloke/zephyr-7B-beta-GGUF",
        file="zephyr-7b-beta.Q4_K_M.gguf",
        spec=SPEC,
        role="llm",
        replicas_min=1,
        replicas_max=3,
        instance_type="ml.c7g.8xlarge",
    )
    image = EngineImage(repo, digest=DIGEST)
    p = graviton_endpoint_props(
        served,
        model="s3://my-b/models/zephyr-7b/main/",
        image=image,
        latency_slo_ms=1500,
        network_isolation=False,
        data_capture_percent=5,
        queue_depth=4,
    )
    p.validate()
    assert (p.name, p.spec, p.instance_type, p.min_capacity, p.max_capacity) == (
        "zephyr-7b",
        SPEC,
        "ml.c7g.8xlarge",
        1,
        3,
    )
    assert (p.latency_slo.to_milliseconds(), p.network_isolation, p.data_capture_percent, p.queue_depth) == (
        1500,
        False,
        5,
        4,
    )
    # An SLM also answers: its latency alarm budgets a chat answer, not a label.
    slm = graviton_endpoint_props(
        dataclasses.replace(served, role="slm", spec=dataclasses.replace(SPEC, task="classification")),
        model="s3://my-b/m/",
        image=image,
    )
    assert slm.output_tokens_budget == 256

    with pytest.raises(
        ValueError, match=r"ServedModel zephyr-7b: instance_type is required .*sagemaker\.instance_type"
    ):
        graviton_endpoint_props(dataclasses.replace(served, instance_type=None), model="s3://my-b/m/", image=image)
    with pytest.raises(ValueError, match=r"ServedModel zephyr-7b: replicas\.min is 0, .* set replicas\.min: 1"):
        graviton_endpoint_props(dataclasses.replace(served, replicas_min=0), model="s3://my-b/m/", image=image)


def test_router_endpoint_props_map_settings_and_escalation() -> None:
    settings = RouterSettings(
        labels=("easy", "hard"),
        slm_labels=("easy",),
        confidence_threshold=0.6,
        few_shot=({"text": "hi", "label": "easy"}, {"text": "prove it", "label": "hard"}),
        replicas_min=1,
        replicas_max=3,
    )
    stack = cdk.Stack(cdk.App(), "Pattern", env=ENV)
    slm, llm = _endpoints(stack)
    image = EngineImage(ecr.Repository.from_repository_name(stack, "RouterRepo", "slm-router"), digest=DIGEST)
    made = router_endpoint_props(
        settings, EscalationTarget(kind="model", model="llama-8b"), slm=slm, image=image, endpoints={"llama-8b": llm}
    )
    made.validate()
    assert (made.labels, made.slm_labels, made.confidence_threshold, made.min_capacity, made.max_capacity) == (
        ("easy", "hard"),
        ("easy",),
        0.6,
        1,
        3,
    )
    assert made.escalation.kind == "sagemaker" and made.escalation.endpoint is llm
    config = made.router_config("us-east-1")
    assert (
        config["escalation"]["endpoint_name"] == llm.endpoint_name and config["slm_endpoint_name"] == slm.endpoint_name
    )
    assert _load(json.dumps(config)).labels == ("easy", "hard")
    bedrock = router_endpoint_props(settings, EscalationTarget(kind="bedrock", model_id=HAIKU), slm=slm, image=image)
    assert bedrock.escalation == RouterEscalation.bedrock(HAIKU)
    with_key = router_endpoint_props(
        settings,
        EscalationTarget(kind="openai", url="https://api.example.com/v1", api_key_secret_name="k"),
        slm=slm,
        image=image,
    )
    with pytest.raises(ValueError, match=r"cannot receive an API key"):
        with_key.validate()
    with pytest.raises(ValueError, match=r"escalation\.model 'nope' has no SageMaker endpoint; known: \['llama-8b'\]"):
        router_endpoint_props(
            settings, EscalationTarget(kind="model", model="nope"), slm=slm, image=image, endpoints={"llama-8b": llm}
        )
