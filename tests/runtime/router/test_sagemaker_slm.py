"""The router as RouterEndpoint runs it: started with `serve`, the SLM and the LLM behind SageMaker endpoints
(`slm_endpoint_name`, escalation kind sagemaker). Real botocore signs InvokeEndpoint /
InvokeEndpointWithResponseStream calls to the loopback SageMaker Runtime stand-in, which hands the body to the
real engines (SLM: SmolLM2, LLM: Gemma); `slm_url` points nowhere, so every SLM byte went through SageMaker."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from tests.evaluation.sagemaker_emulator import sagemaker_container
from tests.runtime.router.aws_standin import AwsStandIn
from tests.runtime.router.harness import COMPLEX, LLM_ALIAS, SIMPLE, SLM_ALIAS, router_config, running_router
from tests.support.engine import free_port

pytestmark = pytest.mark.engine

AWS_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_EC2_METADATA_DISABLED": "true"}
SLM_EP, LLM_EP = "slm-smollm2-1a2b3c4d", "llm-gemma-5e6f7a8b"


@pytest.fixture(scope="module")
def standin(slm, llm):
    s = AwsStandIn(llm, endpoints={SLM_EP: slm, LLM_EP: llm}).start()
    yield s
    s.stop()


@pytest.fixture(scope="module")
def router(standin, tmp_path_factory):
    cfg = router_config(
        "http://127.0.0.1:9",
        "http://unused",  # slm_url is ignored: nothing listens on port 9
        slm_endpoint_name=SLM_EP,
        slm_region="us-east-1",
        slm_endpoint_url=standin.url,
        escalation={"kind": "sagemaker", "endpoint_name": LLM_EP, "region": "us-east-1", "endpoint_url": standin.url},
        # Long enough that the last test sees both circuits open (earlier tests leave them closed).
        breaker={"failure_threshold": 2, "reset_after_s": 60},
    )
    port = free_port()
    with running_router(
        cfg, tmp_path_factory.mktemp("sm-slm"), env={**AWS_ENV, "ROUTER_PORT": str(port)}, args=("serve",)
    ) as r:
        assert r.url.endswith(f":{port}")  # serve: ROUTER_PORT, not the config's listen_port
        deadline = time.monotonic() + 60
        while "warm-up done" not in r.log.read_text(errors="replace"):
            assert time.monotonic() < deadline, f"no warm-up through SageMaker:\n{r.log_tail()}"
            time.sleep(0.2)
        yield r


@pytest.fixture(autouse=True)
def fresh_standin(standin, router):
    standin.fail_with = None
    standin.seen.clear()
    standin.containers.clear()
    yield


def _post(router, path: str, text: str, **extra) -> httpx.Response:
    body = {"messages": [{"role": "user", "content": text}], "max_tokens": 8, "temperature": 0, **extra}
    return httpx.post(f"{router.url}{path}", json=body, timeout=240)


def test_warm_up_calibrated_the_labels_through_invoke_endpoint(router):
    # No /tokenize through SageMaker: the label token counts come from grammar-forced generations.
    assert "warm-up done: classification generates 1 token(s)" in router.log.read_text(errors="replace")


def test_invocations_classify_and_answer_through_the_slm_endpoint(router, standin):
    resp = _post(router, "/invocations", SIMPLE[0])
    assert resp.status_code == 200, resp.text
    assert resp.headers["x-router-route"] == "slm" and resp.headers["x-router-label"] == "simple"
    assert "x-router-fallback" not in resp.headers
    body = resp.json()
    assert body["model"] == SLM_ALIAS and body["choices"][0]["message"]["content"]
    classify, answer = standin.seen
    assert classify.path == answer.path == f"/endpoints/{SLM_EP}/invocations"
    assert (
        classify.authorization.startswith("AWS4-HMAC-SHA256 Credential=testing/")
        and "/us-east-1/sagemaker/aws4_request" in classify.authorization
    )
    # The classification body reaches the engine whole: grammar, logprobs and prompt caching included.
    assert classify.body["grammar"] == 'root ::= "simple" | "complex"'
    assert (
        classify.body["logprobs"] is True
        and classify.body["top_logprobs"] == 10
        and classify.body["cache_prompt"] is True
    )
    assert classify.body["max_tokens"] == 1 and classify.body["messages"][-1]["content"] == SIMPLE[0]
    assert answer.body["messages"] == [{"role": "user", "content": SIMPLE[0]}] and answer.body["max_tokens"] == 8


def test_streamed_slm_answer_comes_from_the_response_stream(router, standin):
    body = {"messages": [{"role": "user", "content": SIMPLE[1]}], "max_tokens": 8, "stream": True}
    with httpx.stream("POST", f"{router.url}/v1/chat/completions", json=body, timeout=240) as resp:
        assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/event-stream")
        assert resp.headers["x-router-route"] == "slm"
        events = [line[len("data: ") :] for line in resp.iter_lines() if line.startswith("data: ")]
    assert [s.path for s in standin.seen] == [
        f"/endpoints/{SLM_EP}/invocations",
        f"/endpoints/{SLM_EP}/invocations-response-stream",
    ]
    assert events[-1] == "[DONE]" and len(events) >= 3
    assert {json.loads(e)["model"] for e in events[:-1]} == {SLM_ALIAS}


def test_complex_escalates_to_the_llm_endpoint(router, standin):
    resp = _post(router, "/invocations", COMPLEX[0])
    assert resp.status_code == 200, resp.text
    assert resp.headers["x-router-route"] == "llm" and resp.headers["x-router-label"] == "complex"
    assert resp.json()["model"] == LLM_ALIAS
    assert [s.path for s in standin.seen] == [f"/endpoints/{SLM_EP}/invocations", f"/endpoints/{LLM_EP}/invocations"]


def test_a_full_slm_container_is_overload_not_a_failure(router, standin, slm):
    """The SLM endpoint's container (the image's adapter, every admission slot taken) answers 429 + Retry-After;
    SageMaker hands callers ModelError (424) with OriginalStatusCode 429. The router retries the idempotent
    classification with backoff, then escalates; the overloaded SLM's circuit stays closed (it is up, only full).
    With the LLM full too, the client gets 503 + Retry-After, never the 424."""
    classify = f"/endpoints/{SLM_EP}/invocations"
    with sagemaker_container(slm, max_in_flight=1, busy=True) as full:
        standin.containers[SLM_EP] = full
        for _ in range(3):  # more consecutive SLM failures than breaker.failure_threshold (2)
            resp = _post(router, "/invocations", SIMPLE[0])
            assert resp.status_code == 200, resp.text
            assert resp.headers["x-router-route"] == "llm" and resp.headers["x-router-fallback"] == "slm-unavailable"
            assert resp.json()["model"] == LLM_ALIAS
        # Each request: classify_attempts (2) tries at the SLM, then the LLM answers.
        assert [s.path for s in standin.seen] == [classify, classify, f"/endpoints/{LLM_EP}/invocations"] * 3
        time.sleep(1.1)  # past /ready's 1 s cache
        assert httpx.get(f"{router.url}/ping", timeout=5).json()["slm"] == "ok"

        standin.containers[LLM_EP] = full
        standin.seen.clear()
        resp = _post(router, "/invocations", COMPLEX[1])
        assert resp.status_code == 503 and resp.headers["Retry-After"] == "1", resp.text
        assert [s.path for s in standin.seen] == [classify, classify, f"/endpoints/{LLM_EP}/invocations", classify]
    time.sleep(1.1)
    assert httpx.get(f"{router.url}/ping", timeout=5).json() == {
        "status": "ready",
        "slm": "ok",
        "llm_circuit": "closed",
    }


def test_ping_follows_the_circuits_not_a_health_url(router, standin):
    ping = httpx.get(f"{router.url}/ping", timeout=5)
    assert ping.status_code == 200 and ping.json() == {"status": "ready", "slm": "ok", "llm_circuit": "closed"}
    assert httpx.get(f"{router.url}/ready", timeout=5).json() == ping.json()
    assert standin.seen == []  # readiness calls nothing (SageMaker pings every few seconds)
    standin.fail_with = (503, "ServiceUnavailable")
    # 1st: classification (2 attempts) and the SLM answer fail → SLM circuit open; the LLM fails once.
    # 2nd: the LLM fails again → its circuit opens too. Neither can answer: 503.
    for _ in range(2):
        resp = _post(router, "/invocations", SIMPLE[2])
        assert resp.status_code == 503 and resp.headers["Retry-After"] == "1", resp.text
    time.sleep(1.1)  # past /ready's 1 s cache
    ping = httpx.get(f"{router.url}/ping", timeout=5)
    assert ping.status_code == 503 and ping.json() == {"status": "unavailable", "slm": "down", "llm_circuit": "open"}
