"""The router's SageMaker escalation addressing one model on a multi-model endpoint (issue 13's SageMaker farm):
`escalation.target_model` becomes InvokeEndpoint's TargetModel, sent by the real botocore client to the loopback
stand-in of SageMaker Runtime (aws_standin.py), which answers from the engine of that model.

InvokeEndpointWithResponseStream has no TargetModel (botocore's sagemaker-runtime model, checked below), so a
streamed request to a multi-model endpoint is asked for whole and replayed to the client as SSE."""

from __future__ import annotations

import json

import botocore.session
import httpx
import pytest

from slm_router import config as rc
from tests.runtime.router.aws_standin import AwsStandIn
from tests.runtime.router.harness import COMPLEX, LLM_ALIAS, router_config, running_router

pytestmark = pytest.mark.engine

AWS_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_EC2_METADATA_DISABLED": "true"}
ENDPOINT = "farm-small"
TARGET = "qwen-coder/1a2b3c4d5e6f7a8b-0c1d2e3f.tar.gz"  # <name>/<idhash>-<args hash>.tar.gz under the farm/ prefix


def test_botocore_has_target_model_only_on_the_unstreamed_invoke():
    model = botocore.session.get_session().get_service_model("sagemaker-runtime")
    invoke = model.operation_model("InvokeEndpoint").input_shape.members
    stream = model.operation_model("InvokeEndpointWithResponseStream").input_shape.members
    assert invoke["TargetModel"].serialization == {"location": "header", "name": "X-Amzn-SageMaker-Target-Model"}
    assert (invoke["TargetModel"].metadata["min"], invoke["TargetModel"].metadata["max"]) == (1, 1024)
    assert "TargetModel" not in stream


@pytest.mark.parametrize(
    ("esc", "message"),
    [
        (
            {"kind": "openai", "url": "http://llm/v1", "target_model": TARGET},
            "escalation.target_model: only kind sagemaker",
        ),
        (
            {"kind": "sagemaker", "endpoint_name": ENDPOINT, "target_model": TARGET, "inference_component": "ic-1"},
            "set target_model or inference_component, not both",
        ),
        (
            {"kind": "sagemaker", "endpoint_name": ENDPOINT, "target_model": " m.tar.gz"},
            "escalation.target_model: must be 1-1024",
        ),
        (
            {"kind": "sagemaker", "endpoint_name": ENDPOINT, "target_model": "x" * 1025},
            "escalation.target_model: must be 1-1024",
        ),
    ],
)
def test_target_model_errors_name_the_key(esc, message):
    with pytest.raises(rc.ConfigError) as e:
        rc.from_dict({"escalation": esc})
    assert message in str(e.value)


@pytest.fixture(scope="module")
def standin(llm):
    # Only the target model has an engine: a call without TargetModel would reach no engine (unused port).
    s = AwsStandIn("http://127.0.0.1:9", endpoints={f"{ENDPOINT}/{TARGET}": llm}).start()
    yield s
    s.stop()


@pytest.fixture(scope="module")
def mme_router(slm, standin, tmp_path_factory):
    esc = {
        "kind": "sagemaker",
        "endpoint_name": ENDPOINT,
        "target_model": TARGET,
        "region": "us-east-1",
        "endpoint_url": standin.url,
    }
    with running_router(
        router_config(slm, "http://unused", escalation=esc), tmp_path_factory.mktemp("mme"), env=AWS_ENV
    ) as r:
        yield r


def _escalate(url: str, **extra) -> httpx.Response:
    body = {"messages": [{"role": "user", "content": COMPLEX[0]}], "max_tokens": 6, "temperature": 0, **extra}
    return httpx.post(f"{url}/v1/chat/completions", json=body, timeout=240)


def test_escalation_invokes_the_target_model(mme_router, standin):
    standin.seen.clear()
    resp = _escalate(mme_router.url)
    assert resp.status_code == 200, resp.text
    assert resp.headers["x-router-route"] == "llm" and "x-router-fallback" not in resp.headers
    assert resp.json()["model"] == LLM_ALIAS  # the engine behind (endpoint, TargetModel) answered
    [call] = standin.seen
    assert (call.path, call.target_model) == (f"/endpoints/{ENDPOINT}/invocations", TARGET)


def test_a_streamed_escalation_is_answered_whole_and_replayed_as_sse(mme_router, standin):
    standin.seen.clear()
    resp = _escalate(mme_router.url, stream=True, stream_options={"include_usage": True})
    assert resp.status_code == 200, resp.text
    assert resp.headers["content-type"].startswith("text/event-stream") and resp.headers["x-router-route"] == "llm"
    events = [line[6:] for line in resp.text.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert all(c["object"] == "chat.completion.chunk" and c["model"] == LLM_ALIAS for c in chunks)
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"]).strip()
    assert chunks[-2]["choices"][0]["finish_reason"] == "length" and chunks[-1]["usage"]["completion_tokens"] == 6
    [call] = standin.seen  # the unstreamed operation (the only one with TargetModel), without stream in the body
    assert (call.path, call.target_model) == (f"/endpoints/{ENDPOINT}/invocations", TARGET)
    assert "stream" not in call.body and "stream_options" not in call.body
