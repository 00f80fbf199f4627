"""SageMaker mode of the vLLM image on the group's one vLLM start: `serve` runs vLLM on 127.0.0.1:SERVE_ENGINE_PORT
and the container's adapter (entrypoint.make_adapter: the shared sagemaker_adapter.py minus the llama-only soft
limit) on 8080. Here the adapter is put in front of the EKS-mode server, after checking that the vLLM command
`serve` would start is exactly the one already running."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType

import httpx
import pytest

from tests.runtime.router.harness import metric
from tests.support.engine import free_port

pytestmark = pytest.mark.vllm


@contextmanager
def running_adapter(entrypoint: ModuleType, env: dict[str, str]) -> Iterator[tuple[str, object]]:
    """entrypoint.sagemaker_plan(env) + make_adapter, listening on loopback in a thread's event loop."""
    plan = entrypoint.sagemaker_plan(env)
    adapter = entrypoint.make_adapter(plan)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    port = asyncio.run_coroutine_threadsafe(adapter.start(plan.adapter.host, plan.adapter.port), loop).result(10)
    try:
        yield f"http://127.0.0.1:{port}", plan
    finally:
        asyncio.run_coroutine_threadsafe(adapter.close(grace=1), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)


def sagemaker_env(vllm_eks, **extra: str) -> dict[str, str]:
    engine_port = vllm_eks.url.rsplit(":", 1)[1]
    return {
        **vllm_eks.env,
        "SERVE_ENGINE_PORT": engine_port,
        "SAGEMAKER_BIND_TO_PORT": str(free_port()),
        "ADAPTER_HOST": "127.0.0.1",
        **extra,
    }


@pytest.fixture(scope="module")
def endpoint(vllm_eks, entrypoint_module):
    env = sagemaker_env(vllm_eks)
    # What `serve` would start is what runs: same argv (host 127.0.0.1 and this port in both).
    assert entrypoint_module.sagemaker_plan(env).command == entrypoint_module.eks_command(vllm_eks.env)
    with running_adapter(entrypoint_module, env) as (url, plan):
        assert plan.max_in_flight == 8  # SERVE_MAX_NUM_SEQS 4 + SERVE_QUEUE_DEPTH (default: the same)
        yield url


def test_ping_is_200_once_vllm_is_up(endpoint):
    resp = httpx.get(f"{endpoint}/ping", timeout=5)
    assert resp.status_code == 200 and resp.json() == {"status": "ok"}


def test_invocations_chat(endpoint, vllm_eks):
    body = {"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 8, "temperature": 0}
    resp = httpx.post(f"{endpoint}/invocations", json=body, timeout=120)
    assert resp.status_code == 200, resp.text
    assert resp.json()["model"] == vllm_eks.model  # no "model" in the body: vLLM answers with its one model
    assert resp.json()["choices"][0]["message"]["content"].strip()


def test_invocations_stream(endpoint):
    """InvokeEndpointWithResponseStream's path: SSE relayed as it arrives."""
    body = {
        "messages": [{"role": "user", "content": "Count to five."}],
        "max_tokens": 12,
        "temperature": 0,
        "stream": True,
    }
    events = []
    with httpx.stream("POST", f"{endpoint}/invocations", json=body, timeout=120) as resp:
        assert resp.status_code == 200
        assert resp.headers["content-type"].startswith("text/event-stream")
        events = [line[6:] for line in resp.iter_lines() if line.startswith("data: ")]
    assert len(events) >= 5 and events[-1] == "[DONE]"


def test_ping_is_503_with_retry_after_while_vllm_loads(vllm_eks, entrypoint_module):
    """Before vLLM listens (it imports, compiles and loads for a minute or more) /ping is 503, not refused."""
    with running_adapter(entrypoint_module, sagemaker_env(vllm_eks, SERVE_ENGINE_PORT=str(free_port()))) as (url, _):
        resp = httpx.get(f"{url}/ping", timeout=5)
        assert resp.status_code == 503 and resp.headers["retry-after"] == "1"


def test_admission_429_beyond_max_in_flight(vllm_eks, entrypoint_module):
    """SERVE_MAX_NUM_SEQS + SERVE_QUEUE_DEPTH requests in flight at most; the next one is 429 with Retry-After."""
    env = sagemaker_env(vllm_eks, SERVE_MAX_NUM_SEQS="1", SERVE_QUEUE_DEPTH="0", ADAPTER_RETRY_AFTER_SECONDS="3")
    with running_adapter(entrypoint_module, env) as (url, plan):
        assert plan.max_in_flight == 1
        body = {
            "messages": [{"role": "user", "content": "Tell a story."}],
            "max_tokens": 1000,
            "stream": True,
            "ignore_eos": True,
        }
        with httpx.stream("POST", f"{url}/invocations", json=body, timeout=120) as first:
            assert first.status_code == 200
            # The first event: the request is being answered. The iterator is kept: a discarded one is closed
            # when collected, and httpcore then closes the connection, which would end the request early.
            lines = first.iter_lines()
            next(lines)
            second = httpx.post(f"{url}/invocations", json={**body, "stream": False}, timeout=30)
            assert second.status_code == 429 and second.headers["retry-after"] == "3"
        # Leaving the stream closes the adapter's engine connection: vLLM aborts the rest of the 1000 tokens.


def test_budget_cuts_a_long_non_streamed_answer_and_vllm_stops(vllm_eks, entrypoint_module):
    """vLLM has no time limit of its own (t_max_predict_ms is ignored, test_server.py): at the budget the adapter
    answers 504 and closes the engine connection, and vLLM aborts the generation (running gauge back to 0)."""
    env = sagemaker_env(vllm_eks, ADAPTER_GENERATION_BUDGET_SECONDS="2")
    with running_adapter(entrypoint_module, env) as (url, _):
        body = {
            "messages": [{"role": "user", "content": "Write a very long essay."}],
            "max_tokens": 1500,
            "ignore_eos": True,
        }
        started = time.monotonic()
        resp = httpx.post(f"{url}/invocations", json=body, timeout=60)
        assert resp.status_code == 504 and "budget" in resp.json()["error"]["message"]
        assert time.monotonic() - started < 10
    deadline = time.monotonic() + 15
    while metric(vllm_eks.url, "vllm:num_requests_running", model_name=vllm_eks.model) != 0:
        assert time.monotonic() < deadline, "vLLM kept generating after the adapter gave up"
        time.sleep(0.2)
