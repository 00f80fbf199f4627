"""Failover between real engines: kill the LLM → the SLM answers, marked; kill the SLM → escalation;
the circuit breaker stops calling a dead upstream and closes again once it is back."""

from __future__ import annotations

import json
import time
from contextlib import ExitStack

import httpx
import pytest

from tests.runtime.router.harness import (
    COMPLEX,
    LLM_ALIAS,
    SIMPLE,
    SLM_ALIAS,
    SLM_ARGS,
    chat,
    metric,
    router_config,
    running_router,
)
from tests.support.engine import free_port, llama_server

pytestmark = pytest.mark.engine

RESET_AFTER_S = 2  # harness breaker config: 2 failures open the circuit for 2 s


def _counts(url: str, upstream: str, reason: str) -> tuple[float, float]:
    return (
        metric(url, "router_fallbacks_total", reason=reason),
        sum(
            metric(url, "router_upstream_failures_total", upstream=upstream, reason=r)
            for r in ("connect", "timeout", "protocol", "status")
        ),
    )


def test_llm_down_answers_with_the_slm_marked_and_recovers(llama_server_bin, smollm2_gguf, slm, tmp_path):
    port = free_port()
    victim_args = (llama_server_bin, smollm2_gguf, "-np", "1", "-t", "1", "-c", "1024", "--alias", "llm-victim")
    with ExitStack() as engine, running_router(router_config(slm, f"http://127.0.0.1:{port}"), tmp_path) as router:
        engine.enter_context(llama_server(*victim_args, port=port))
        up = chat(router.url, COMPLEX[0])
        assert up.headers["x-router-route"] == "llm" and up.json()["model"] == "llm-victim"

        engine.close()  # the LLM dies
        for _ in range(2):  # two failures open the circuit
            resp = chat(router.url, COMPLEX[0])
            assert resp.status_code == 200, resp.text
            assert resp.headers["x-router-route"] == "slm"
            assert resp.headers["x-router-fallback"] == "llm-unavailable"
            assert resp.headers["x-router-label"] == "complex"  # the decision still said "escalate"
            body = resp.json()
            assert body["model"] == SLM_ALIAS and body["x_router"]["fallback"] == "llm-unavailable"
        assert metric(router.url, "router_circuit_open", upstream="llm") == 1
        fallbacks, failures = _counts(router.url, "llm", "llm-unavailable")
        assert fallbacks == 2 and failures == 2

        # While the circuit is open the LLM is not even tried: one more fallback, no new failure.
        streamed = {"messages": [{"role": "user", "content": COMPLEX[1]}], "max_tokens": 6, "stream": True}
        with httpx.stream("POST", f"{router.url}/v1/chat/completions", json=streamed, timeout=240) as resp:
            assert resp.headers["x-router-fallback"] == "llm-unavailable"
            assert resp.headers["x-router-route"] == "slm"
            assert "data: [DONE]" in resp.read().decode()
        assert _counts(router.url, "llm", "llm-unavailable") == (3, 2)

        # The LLM comes back on its address: after reset_after_s one trial request closes the circuit.
        engine.enter_context(llama_server(*victim_args, port=port))
        time.sleep(RESET_AFTER_S + 0.2)
        back = chat(router.url, COMPLEX[0])
        assert back.headers["x-router-route"] == "llm" and "x-router-fallback" not in back.headers
        assert back.json()["model"] == "llm-victim"
        assert metric(router.url, "router_circuit_open", upstream="llm") == 0


def test_llm_dying_mid_stream_ends_the_stream_with_an_error_event(llama_server_bin, smollm2_gguf, slm, tmp_path):
    port = free_port()
    victim = (llama_server_bin, smollm2_gguf, "-np", "1", "-t", "1", "-c", "4096", "--alias", "llm-victim")
    with ExitStack() as engine, running_router(router_config(slm, f"http://127.0.0.1:{port}"), tmp_path) as router:
        engine.enter_context(llama_server(*victim, port=port))
        body = {
            "messages": [{"role": "user", "content": COMPLEX[0]}],
            "max_tokens": 3000,
            "ignore_eos": True,
            "stream": True,
        }
        with httpx.stream("POST", f"{router.url}/v1/chat/completions", json=body, timeout=240) as resp:
            assert resp.headers["x-router-route"] == "llm"
            events = []
            for line in resp.iter_lines():
                if line.startswith("data: "):
                    events.append(line[len("data: ") :])
                    if len(events) == 3:
                        engine.close()  # the LLM dies after the head went out: no fallback is possible now
        assert len(events) > 3 and events[-1] != "[DONE]"
        assert "stream broke" in json.loads(events[-1])["error"]["message"]
        assert metric(router.url, "router_stream_errors_total", route="llm") == 1


def test_slm_down_escalates_every_request(llama_server_bin, smollm2_gguf, llm, tmp_path):
    port = free_port()
    with ExitStack() as engine, running_router(router_config(f"http://127.0.0.1:{port}", llm), tmp_path) as router:
        engine.enter_context(
            llama_server(llama_server_bin, smollm2_gguf, *SLM_ARGS, "--alias", "slm-victim", port=port)
        )
        up = chat(router.url, SIMPLE[0])
        assert up.headers["x-router-route"] == "slm" and up.json()["model"] == "slm-victim"

        engine.close()  # the SLM dies
        retries = metric(router.url, "router_classify_retries_total")
        for text in (SIMPLE[0], SIMPLE[1], COMPLEX[0]):
            resp = chat(router.url, text)
            assert resp.status_code == 200, resp.text
            assert resp.headers["x-router-route"] == "llm"
            assert resp.headers["x-router-fallback"] == "slm-unavailable"
            assert "x-router-label" not in resp.headers  # no classification happened: no label is invented
            assert resp.json()["model"] == LLM_ALIAS
        assert metric(router.url, "router_fallbacks_total", reason="slm-unavailable") == 3
        # Classification is idempotent: each of the first two requests tried twice (classify_attempts 2, with
        # backoff) before counting one failure; two failures opened the circuit, so the third was not tried.
        assert metric(router.url, "router_classify_retries_total") - retries == 2
        assert metric(router.url, "router_classification_errors_total", reason="slm-unavailable") == 2
        assert metric(router.url, "router_classification_errors_total", reason="circuit-open") == 1
        assert metric(router.url, "router_circuit_open", upstream="slm") == 1
        ready = httpx.get(f"{router.url}/ready", timeout=10)
        assert ready.status_code == 200 and ready.json()["slm"] == "down"  # the LLM can still answer


def test_no_upstream_at_all_is_a_503(tmp_path):
    dead = f"http://127.0.0.1:{free_port()}"
    with running_router(router_config(dead, f"http://127.0.0.1:{free_port()}"), tmp_path) as router:
        resp = chat(router.url, SIMPLE[0])
        assert resp.status_code == 503 and resp.headers["retry-after"] == "1"
        assert "no model available" in resp.json()["error"]["message"]
        assert metric(router.url, "router_failed_requests_total", reason="no-upstream") == 1
        chat(router.url, SIMPLE[0])  # second failure opens the LLM circuit
        ready = httpx.get(f"{router.url}/ready", timeout=10)
        assert ready.status_code == 503 and ready.json() == {
            "status": "unavailable",
            "slm": "down",
            "llm_circuit": "open",
        }


def test_overload_is_429_with_retry_after(slm, llm, tmp_path):
    """Beyond max_in_flight the router refuses at once instead of queueing without bound."""
    with running_router(router_config(slm, llm, max_in_flight=1), tmp_path) as router:
        body = {
            "messages": [{"role": "user", "content": SIMPLE[0]}],
            "max_tokens": 400,
            "ignore_eos": True,
            "stream": True,
        }
        with httpx.stream("POST", f"{router.url}/v1/chat/completions", json=body, timeout=240) as held:
            assert held.status_code == 200
            lines = held.iter_lines()  # kept referenced: a collected iterator closes the response
            next(lines)  # the first request is in progress
            assert metric(router.url, "router_in_flight") == 1
            refused = chat(router.url, SIMPLE[1])
            assert refused.status_code == 429 and refused.headers["retry-after"] == "1", refused.text
        assert metric(router.url, "router_rejected_requests_total", reason="overload") == 1
        deadline = time.monotonic() + 30  # the held stream is gone: requests are accepted again
        while (resp := chat(router.url, SIMPLE[1])).status_code == 429:
            assert time.monotonic() < deadline
            time.sleep(0.2)
        assert resp.status_code == 200 and resp.headers["x-router-route"] == "slm"
