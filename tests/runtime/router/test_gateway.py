"""Mode gateway (the model farm's one entry point) on loopback in front of two real engines (conftest.py):
SmolLM2-135M and Gemma-3-270M, each under its own model name, plus a name whose backend is not running
(a model scaled to zero)."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from tests.runtime.router.harness import metric, running_router
from tests.support.engine import free_port, llama_server

pytestmark = pytest.mark.engine

RETRY_AFTER = 7


def gateway_config(models: dict[str, str], **overrides) -> dict:
    cfg = {
        "mode": "gateway",
        "gateway": {"models": [{"name": n, "url": u} for n, u in models.items()], "retry_after_s": RETRY_AFTER},
        "listen_host": "127.0.0.1",
        "listen_port": free_port(),
        "timeouts": {"connect_s": 2, "first_byte_s": 120, "total_s": 180},
        "log_level": "DEBUG",
    }
    cfg.update(overrides)
    return cfg


@pytest.fixture(scope="module")
def cold_port() -> int:
    return free_port()


@pytest.fixture(scope="module")
def gateway(slm: str, llm: str, cold_port: int, tmp_path_factory: pytest.TempPathFactory):
    models = {"smollm2": slm, "gemma": llm, "cold": f"http://127.0.0.1:{cold_port}"}
    with running_router(gateway_config(models), tmp_path_factory.mktemp("gateway")) as g:
        yield g


def _chat(url: str, model: str | None, text: str = "Hello!", **extra) -> httpx.Response:
    body = {"messages": [{"role": "user", "content": text}], "max_tokens": 6, "temperature": 0, **extra}
    if model is not None:
        body["model"] = model
    return httpx.post(f"{url}/v1/chat/completions", json=body, timeout=240)


@pytest.mark.parametrize("model", ["smollm2", "gemma"])
def test_routes_by_model_name_to_that_models_engine(gateway, slm, llm, model):
    """The answer through the gateway is the one the named engine gives directly (greedy decoding, and the
    two models tokenize the same chat differently)."""
    via = _chat(gateway.url, model)
    assert via.status_code == 200, via.text
    assert via.headers["x-gateway-model"] == model
    direct = {name: _chat(url, model).json() for name, url in (("smollm2", slm), ("gemma", llm))}
    assert direct["smollm2"]["usage"]["prompt_tokens"] != direct["gemma"]["usage"]["prompt_tokens"]
    got = via.json()
    assert got["usage"]["prompt_tokens"] == direct[model]["usage"]["prompt_tokens"]
    assert got["choices"][0]["message"]["content"] == direct[model]["choices"][0]["message"]["content"]
    assert metric(gateway.url, "gateway_requests_total", model=model, code="200") >= 1


def test_streaming_is_relayed_piece_by_piece(gateway):
    body = {
        "model": "gemma",
        "messages": [{"role": "user", "content": "Count to five."}],
        "max_tokens": 12,
        "stream": True,
    }
    with httpx.stream("POST", f"{gateway.url}/v1/chat/completions", json=body, timeout=240) as resp:
        assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/event-stream")
        events = [line[6:] for line in resp.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    deltas = [
        json.loads(e)["choices"][0]["delta"].get("content") or "" for e in events[:-1] if json.loads(e).get("choices")
    ]
    assert len(deltas) >= 2 and "".join(deltas).strip()


def test_unknown_and_missing_model(gateway):
    unknown = _chat(gateway.url, "gpt-5")
    assert unknown.status_code == 404
    err = unknown.json()["error"]
    assert err["known_models"] == ["smollm2", "gemma", "cold"]
    assert "'gpt-5' is not served here; known models: smollm2, gemma, cold" in err["message"]
    missing = _chat(gateway.url, None)
    assert missing.status_code == 400 and "model: required" in missing.json()["error"]["message"]
    assert metric(gateway.url, "gateway_unknown_model_total") == 1
    models = httpx.get(f"{gateway.url}/v1/models", timeout=10).json()
    assert [m["id"] for m in models["data"]] == ["smollm2", "gemma", "cold"]
    assert httpx.get(f"{gateway.url}/ready", timeout=10).status_code == 200
    assert httpx.post(f"{gateway.url}/v1/nope", json={"model": "gemma"}, timeout=10).status_code == 404


def test_model_scaled_to_zero_is_503_with_retry_after_until_it_is_back(
    gateway, llama_server_bin, smollm2_gguf, cold_port
):
    resp = _chat(gateway.url, "cold")
    assert resp.status_code == 503 and resp.headers["retry-after"] == str(RETRY_AFTER)
    assert "'cold' is unavailable right now" in resp.json()["error"]["message"]
    assert metric(gateway.url, "gateway_backend_unavailable_total", model="cold") == 1
    # The other models are unaffected.
    assert _chat(gateway.url, "smollm2").status_code == 200
    # The autoscaler brings a replica up on the model's address: the next request is answered.
    with llama_server(llama_server_bin, smollm2_gguf, "-np", "1", "-t", "1", "-c", "512", port=cold_port):
        back = _chat(gateway.url, "cold")
        assert back.status_code == 200, back.text
        assert back.json()["choices"][0]["message"]["content"]
    assert metric(gateway.url, "gateway_requests_total", model="cold", code="200") == 1


def test_overload_is_429_with_retry_after(slm, tmp_path):
    """Beyond max_in_flight the gateway refuses at once (the same front as the router)."""
    with running_router(gateway_config({"smollm2": slm}, max_in_flight=1), tmp_path) as g:
        body = {
            "model": "smollm2",
            "messages": [{"role": "user", "content": "Tell a story."}],
            "max_tokens": 400,
            "ignore_eos": True,
            "stream": True,
        }
        with httpx.stream("POST", f"{g.url}/v1/chat/completions", json=body, timeout=240) as held:
            assert held.status_code == 200
            lines = held.iter_lines()  # kept referenced: a collected iterator closes the response
            next(lines)  # the first request is now in progress
            assert metric(g.url, "gateway_in_flight", model="smollm2") == 1
            refused = _chat(g.url, "smollm2")
            assert refused.status_code == 429 and refused.headers["retry-after"] == "1"
            assert "max_in_flight" in refused.json()["error"]["message"]
        assert metric(g.url, "gateway_rejected_requests_total", reason="overload") == 1
        deadline = time.monotonic() + 30  # the held stream is gone: requests are accepted again
        while (r := _chat(g.url, "smollm2")).status_code == 429:
            assert time.monotonic() < deadline
            time.sleep(0.2)
        assert r.status_code == 200
