"""Escalation through botocore to SageMaker Runtime and Bedrock Runtime: the real botocore client signs and
sends the calls to a loopback stand-in of the AWS front end (aws_standin.py), which forwards the chat to the
real stand-in LLM engine; dummy credentials, no AWS account."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.runtime.router.aws_standin import AwsStandIn
from tests.runtime.router.harness import COMPLEX, LLM_ALIAS, SLM_ALIAS, chat, metric, router_config, running_router

pytestmark = pytest.mark.engine

AWS_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_EC2_METADATA_DISABLED": "true"}
MODEL_ID = "amazon.nova-lite-v1:0"


@pytest.fixture(scope="module")
def standin(llm):
    s = AwsStandIn(llm).start()
    yield s
    s.stop()


@pytest.fixture(scope="module")
def sagemaker_router(slm, standin, tmp_path_factory):
    esc = {"kind": "sagemaker", "endpoint_name": "llm-endpoint", "region": "us-east-1", "endpoint_url": standin.url}
    with running_router(
        router_config(slm, "http://unused", escalation=esc), tmp_path_factory.mktemp("sm"), env=AWS_ENV
    ) as r:
        yield r


@pytest.fixture(scope="module")
def bedrock_router(slm, standin, tmp_path_factory):
    esc = {"kind": "bedrock", "model_id": MODEL_ID, "region": "us-east-1", "endpoint_url": standin.url}
    with running_router(
        router_config(slm, "http://unused", escalation=esc), tmp_path_factory.mktemp("br"), env=AWS_ENV
    ) as r:
        yield r


@pytest.fixture(autouse=True)
def healthy_standin(standin):
    standin.fail_with = None
    standin.seen.clear()
    yield


def _sse(resp: httpx.Response) -> list[str]:
    return [line[len("data: ") :] for line in resp.iter_lines() if line.startswith("data: ")]


def test_sagemaker_invoke_endpoint(sagemaker_router, standin):
    resp = chat(sagemaker_router.url, COMPLEX[0], max_tokens=8)
    assert resp.status_code == 200, resp.text
    assert resp.headers["x-router-route"] == "llm"
    body = resp.json()
    assert body["model"] == LLM_ALIAS and body["choices"][0]["message"]["content"]
    [call] = standin.seen
    assert call.path == "/endpoints/llm-endpoint/invocations"
    assert (
        call.authorization.startswith("AWS4-HMAC-SHA256 Credential=testing/")
        and "/sagemaker/aws4_request" in call.authorization
    )
    assert call.body["messages"][-1]["content"] == COMPLEX[0] and call.body["max_tokens"] == 8  # the OpenAI body, as is


def test_sagemaker_response_stream_is_relayed_as_sse(sagemaker_router, standin):
    body = {"messages": [{"role": "user", "content": COMPLEX[1]}], "max_tokens": 10, "stream": True}
    with httpx.stream("POST", f"{sagemaker_router.url}/v1/chat/completions", json=body, timeout=240) as resp:
        assert resp.status_code == 200 and resp.headers["x-router-route"] == "llm"
        events = _sse(resp)
    assert standin.seen[0].path == "/endpoints/llm-endpoint/invocations-response-stream"
    assert events[-1] == "[DONE]" and len(events) >= 3
    assert {json.loads(e)["model"] for e in events[:-1]} == {LLM_ALIAS}


def test_bedrock_converse_answers_in_openai_shape(bedrock_router, standin):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": COMPLEX[0]}]
    resp = httpx.post(
        f"{bedrock_router.url}/v1/chat/completions",
        json={"messages": messages, "max_tokens": 8, "temperature": 0},
        timeout=240,
    )
    assert resp.status_code == 200, resp.text
    assert resp.headers["x-router-route"] == "llm"
    body = resp.json()
    assert body["object"] == "chat.completion" and body["model"] == MODEL_ID
    assert body["choices"][0]["message"]["content"] and body["choices"][0]["finish_reason"] in ("length", "stop")
    assert body["usage"]["completion_tokens"] > 0
    [call] = standin.seen
    assert call.path == "/model/amazon.nova-lite-v1%3A0/converse"
    assert "/bedrock/aws4_request" in call.authorization
    assert call.body["system"] == [{"text": "Be brief."}]
    assert call.body["messages"] == [{"role": "user", "content": [{"text": COMPLEX[0]}]}]
    assert call.body["inferenceConfig"] == {"maxTokens": 8, "temperature": 0.0}


def test_bedrock_converse_stream_becomes_openai_chunks(bedrock_router, standin):
    body = {
        "messages": [{"role": "user", "content": COMPLEX[2]}],
        "max_tokens": 10,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    with httpx.stream("POST", f"{bedrock_router.url}/v1/chat/completions", json=body, timeout=240) as resp:
        assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/event-stream")
        events = _sse(resp)
    assert standin.seen[0].path.endswith("/converse-stream")
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text.strip()
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]] == [
        "length"
    ]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] > 0


@pytest.mark.parametrize("fixture", ["sagemaker_router", "bedrock_router"])
def test_throttled_llm_falls_back_to_the_slm(fixture, standin, request):
    router = request.getfixturevalue(fixture)
    standin.fail_with = (429, "ThrottlingException")
    before = metric(router.url, "router_fallbacks_total", reason="llm-unavailable")
    resp = chat(router.url, COMPLEX[0])
    assert resp.status_code == 200, resp.text
    assert resp.headers["x-router-route"] == "slm" and resp.headers["x-router-fallback"] == "llm-unavailable"
    assert resp.json()["model"] == SLM_ALIAS
    assert metric(router.url, "router_fallbacks_total", reason="llm-unavailable") == before + 1
    assert len(standin.seen) == 1  # no botocore retries: the router's fallback is the retry


def test_bedrock_validation_error_is_the_clients(bedrock_router, standin):
    standin.fail_with = (400, "ValidationException")
    resp = chat(bedrock_router.url, COMPLEX[0])
    assert resp.status_code == 400 and "ValidationException" in resp.json()["error"]["message"]
    assert "x-router-fallback" not in resp.headers
