"""InvokeEndpoint waits at most 60 s for an answer (API_runtime_InvokeEndpoint: "A customer's model containers
must respond to requests within 60 seconds"). The adapter gives a non-streamed request a time budget (scaled
down here through ADAPTER_GENERATION_BUDGET_SECONDS), cancels the engine's work when the budget ends or the
client leaves, and answers overload with a JSON body a caller behind SageMaker can parse (it never sees
headers: ModelError carries only OriginalStatusCode and OriginalMessage). Real entrypoint, real llama-server."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import httpx
import pytest

from tests.runtime.engine.serving import chat_body, metric, sagemaker_endpoint

pytestmark = pytest.mark.engine

BUDGET = (
    8.0  # seconds, instead of the deployed 50 (the engine stops at 60% of it, leaving the rest for prompt and newline)
)
MARGIN = 2.0  # the engine stops at the first newline past its own limit, plus scheduling on a loaded host
COUNTING = "Count from 1 to 2000, one number per line."


def processing(ep) -> float:
    return metric(httpx.get(f"{ep.engine_url}/metrics", timeout=10).text, "llamacpp:requests_processing")


def deferred(ep) -> float:
    return metric(httpx.get(f"{ep.engine_url}/metrics", timeout=10).text, "llamacpp:requests_deferred")


# llama-server notices a closed connection of a non-streamed request only after 1 s in which no result reached
# any waiter (server_response::recv_with_timeout restarts its 1 s wait on every notify_all; server-queue.cpp),
# and a /metrics answer is such a result. Cancellation checks therefore poll /metrics no faster than this.
QUIET_POLL = 2.0


def wait_until(predicate, timeout: float, message: str, poll: float = 0.05) -> float:
    """Seconds until predicate() holds; fails after `timeout`."""
    t0 = time.monotonic()
    while not predicate():
        assert time.monotonic() - t0 < timeout, message
        time.sleep(poll)
    return time.monotonic() - t0


@pytest.fixture(scope="module")
def budgeted(llama_server_bin: Path, smollm2_gguf: Path, tmp_path_factory: pytest.TempPathFactory):
    with sagemaker_endpoint(
        llama_server_bin,
        smollm2_gguf,
        tmp_path_factory.mktemp("budget"),
        LLAMA_PARALLEL="1",
        LLAMA_QUEUE_DEPTH="1",
        LLAMA_CTX_PER_SLOT="4096",
        ADAPTER_GENERATION_BUDGET_SECONDS=str(BUDGET),
    ) as ep:
        yield ep


def test_a_long_non_streamed_answer_comes_back_cut_within_the_budget(budgeted) -> None:
    t0 = time.monotonic()
    r = httpx.post(
        f"{budgeted.url}/invocations", json=chat_body(COUNTING, max_tokens=3000, ignore_eos=True), timeout=120
    )
    elapsed = time.monotonic() - t0
    assert r.status_code == 200, f"{r.text} after {elapsed:.1f}s"
    choice = r.json()["choices"][0]
    assert choice["finish_reason"] == "length" and r.json()["usage"]["completion_tokens"] < 3000
    assert choice["message"]["content"]
    print(f"cut answer after {elapsed:.2f} s, {r.json()['usage']['completion_tokens']} tokens (budget {BUDGET:.0f} s)")
    assert elapsed < BUDGET + MARGIN, f"answered after {elapsed:.1f}s"
    assert processing(budgeted) == 0


def test_a_request_still_queued_at_the_budget_is_cancelled_and_answered_504(budgeted) -> None:
    """The one slot is busy with a streamed answer (no budget: the way to long answers); a non-streamed request
    queued behind it gets no token before its budget: 504 with a message that names the remedy, on time.
    Its engine task is cancelled (not left to run for nobody) once the engine notices the closed connection,
    which it does when no other result is flowing: here, after the stream's client leaves too."""
    with (
        httpx.Client(timeout=120) as client,
        client.stream(
            "POST",
            f"{budgeted.url}/invocations",
            json=chat_body(COUNTING, max_tokens=3000, ignore_eos=True, stream=True),
        ) as stream,
    ):
        assert stream.status_code == 200
        lines = stream.iter_lines()
        next(lines)
        t0 = time.monotonic()
        r = client.post(f"{budgeted.url}/invocations", json=chat_body("Say hi.", max_tokens=8))
        elapsed = time.monotonic() - t0
        assert r.status_code == 504 and r.json()["error"]["type"] == "timeout_error"
        assert "InvokeEndpointWithResponseStream" in r.json()["error"]["message"]
        assert BUDGET - 0.2 < elapsed < BUDGET + MARGIN, elapsed
        assert processing(budgeted) == 1  # the stream goes on
    wait_until(
        lambda: processing(budgeted) == 0 and deferred(budgeted) == 0,
        10,
        "the engine kept working for clients that left",
        poll=QUIET_POLL,
    )


def open_request(ep, payload: dict) -> socket.socket:
    """POST /invocations on a raw socket and leave it open without reading (a client still waiting)."""
    body = json.dumps(payload).encode()
    host, port = ep.url.removeprefix("http://").split(":")
    s = socket.create_connection((host, int(port)), timeout=30)
    s.sendall(
        b"POST /invocations HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    return s


def test_overload_429_body_says_when_to_retry(budgeted) -> None:
    """Slot and queue taken: 429 with Retry-After, and the same figure in the JSON body (what a SageMaker caller
    sees, as ModelError's OriginalMessage next to OriginalStatusCode 429)."""
    long = chat_body(COUNTING, max_tokens=3000, ignore_eos=True, stream=True)
    a = open_request(budgeted, long)
    wait_until(lambda: processing(budgeted) == 1, 30, "first request never started")
    b = open_request(budgeted, long)
    try:
        wait_until(lambda: deferred(budgeted) == 1, 30, "second request never queued")
        r = httpx.post(f"{budgeted.url}/invocations", json=chat_body("Say hi.", max_tokens=4), timeout=30)
        assert r.status_code == 429
        error = json.loads(r.content)["error"]
        assert error["type"] == "rate_limit_error"
        assert error["retry_after_seconds"] == int(r.headers["retry-after"]) >= 1
    finally:
        a.close()
        b.close()
    wait_until(
        lambda: processing(budgeted) == 0 and deferred(budgeted) == 0,
        10,
        "engine still busy for clients that left",
        poll=QUIET_POLL,
    )


def test_a_client_leaving_a_non_streamed_request_stops_the_engine(
    llama_server_bin: Path, smollm2_gguf: Path, tmp_path: Path
) -> None:
    """The deployed budget (50 s) and a 3000-token answer: the client hangs up once generation runs; the engine
    is idle again within a few seconds (it polls its connection each second), long before the answer would end."""
    with sagemaker_endpoint(
        llama_server_bin, smollm2_gguf, tmp_path, LLAMA_PARALLEL="1", LLAMA_CTX_PER_SLOT="4096"
    ) as ep:
        client = open_request(ep, chat_body(COUNTING, max_tokens=3000, ignore_eos=True))
        wait_until(lambda: processing(ep) == 1, 30, "the request never reached the engine")
        time.sleep(0.5)
        client.close()
        idle_after = wait_until(
            lambda: processing(ep) == 0, 12, "the engine kept generating for a client that left", poll=QUIET_POLL
        )
        tokens = metric(httpx.get(f"{ep.engine_url}/metrics", timeout=10).text, "llamacpp:tokens_predicted_total")
        assert idle_after <= 3 * QUIET_POLL and tokens < 3000
        assert "client left before the answer" in ep.log.read_text()
