"""SageMaker mode end to end: `entrypoint.py serve` (adapter + real llama-server) on loopback."""

from __future__ import annotations

import json
import socket
import threading
import time

import httpx
import pytest

from tests.runtime.engine.serving import QUEUE_DEPTH, SLOTS, Endpoint, chat_body, metric

pytestmark = pytest.mark.engine


def test_ping_is_503_while_loading_then_200(endpoint: Endpoint) -> None:
    pings, health = endpoint.startup_pings, endpoint.startup_health
    assert pings[0] == 503, pings  # the adapter binds before the engine loads the model
    assert pings[-1] == 200
    assert 200 not in pings[:-1]
    # 503 not only while llama-server was not listening yet, but while it was up and loading the model
    # (its own /health answered 503 "Loading model").
    assert any(p == 503 and h == 503 for p, h in zip(pings, health, strict=False)), list(
        zip(pings, health, strict=False)
    )
    with httpx.Client(base_url=endpoint.url, timeout=10) as client:
        assert client.get("/ping").status_code == 200


def test_chat_invocation(endpoint: Endpoint) -> None:
    r = httpx.post(f"{endpoint.url}/invocations", json=chat_body("What is 2+2?"), timeout=60)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "chat.completion"
    assert body["choices"][0]["message"]["content"].strip()
    assert body["model"] == "SmolLM2-135M-Instruct.Q4_1"  # alias from the GGUF file name


def test_completion_invocation(endpoint: Endpoint) -> None:
    r = httpx.post(
        f"{endpoint.url}/invocations",
        json={"prompt": "The capital of France is", "max_tokens": 8, "temperature": 0},
        timeout=60,
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "text_completion"
    assert body["usage"]["completion_tokens"] >= 1


def test_streaming_invocation_relays_sse_events_as_they_come(endpoint: Endpoint) -> None:
    events: list[dict] = []
    arrivals: list[float] = []
    with (
        httpx.Client(timeout=60) as client,
        client.stream(
            "POST",
            f"{endpoint.url}/invocations",
            json=chat_body("Count from one to twenty.", max_tokens=40, stream=True),
        ) as r,
    ):
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        for line in r.iter_lines():
            if line.startswith("data: "):
                arrivals.append(time.monotonic())
                payload = line[len("data: ") :]
                events.append({"done": True} if payload == "[DONE]" else json.loads(payload))
    assert events[-1] == {"done": True}
    text = "".join(e["choices"][0]["delta"].get("content") or "" for e in events[:-1] if e.get("choices"))
    assert text.strip()
    assert len(events) > 10
    # Streamed, not buffered: the events arrive spread over the generation, not in one burst at the end.
    assert arrivals[-1] - arrivals[0] > 0.05


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/props"),
        ("POST", "/props"),
        ("GET", "/slots"),
        ("POST", "/slots/0?action=save"),
        ("POST", "/slots/0?action=restore"),
        ("POST", "/models/load"),
        ("POST", "/lora-adapters"),
        ("GET", "/health"),
        ("GET", "/metrics"),
        ("POST", "/v1/chat/completions"),
        ("POST", "/completion"),
    ],
)
def test_admin_and_engine_paths_are_not_exposed(endpoint: Endpoint, method: str, path: str) -> None:
    r = httpx.request(method, f"{endpoint.url}{path}", json={"filename": "x.bin", "model": "other"}, timeout=10)
    assert r.status_code == 404
    assert "/invocations" in r.json()["error"]["message"]


@pytest.mark.parametrize(
    ("method", "path"), [("GET", "/invocations"), ("PUT", "/invocations"), ("POST", "/ping"), ("DELETE", "/ping")]
)
def test_wrong_methods_are_405(endpoint: Endpoint, method: str, path: str) -> None:
    assert httpx.request(method, f"{endpoint.url}{path}", timeout=10).status_code == 405


@pytest.mark.parametrize("body", [b"not json", b"[1, 2]", b'{"text": "x"}', b'{"prompt": "x", "messages": []}'])
def test_bad_bodies_are_400(endpoint: Endpoint, body: bytes) -> None:
    r = httpx.post(
        f"{endpoint.url}/invocations", content=body, headers={"Content-Type": "application/json"}, timeout=10
    )
    assert r.status_code == 400
    assert r.json()["error"]["code"] == 400


def test_overload_is_bounded_every_request_answered(endpoint: Endpoint) -> None:
    """4x (slots + queue) concurrent requests: each gets 200, or 429/503 with Retry-After; none hangs."""
    n = 4 * (SLOTS + QUEUE_DEPTH)
    results: list[tuple[int, str | None] | BaseException] = [None] * n  # type: ignore[list-item]
    start = threading.Barrier(n)
    samples: list[tuple[float, float]] = []
    done = threading.Event()

    def call(i: int) -> None:
        try:
            with httpx.Client(timeout=httpx.Timeout(120, connect=10)) as client:
                start.wait(timeout=30)
                r = client.post(
                    f"{endpoint.url}/invocations",
                    json=chat_body(f"Write a short poem about the number {i}.", max_tokens=24),
                )
                results[i] = (r.status_code, r.headers.get("retry-after"))
        except BaseException as e:  # noqa: BLE001 - recorded and asserted below
            results[i] = e

    def sample_metrics() -> None:
        with httpx.Client(base_url=endpoint.engine_url, timeout=5) as client:
            while not done.is_set():
                text = client.get("/metrics").text
                samples.append(
                    (metric(text, "llamacpp:requests_processing"), metric(text, "llamacpp:requests_deferred"))
                )
                time.sleep(0.1)

    sampler = threading.Thread(target=sample_metrics)
    sampler.start()
    threads = [threading.Thread(target=call, args=(i,)) for i in range(n)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=180)
    done.set()
    sampler.join(timeout=10)
    assert not any(t.is_alive() for t in threads), "a request hung"
    errors = [r for r in results if isinstance(r, BaseException)]
    assert not errors, errors
    statuses = [r[0] for r in results]  # type: ignore[index]
    assert set(statuses) <= {200, 429, 503}, statuses
    assert all(ra is not None and int(ra) >= 1 for status, ra in results if status != 200)  # type: ignore[misc]
    assert statuses.count(200) >= 1 and statuses.count(429) >= 1, statuses
    assert time.monotonic() - t0 < 180
    # The engine queued what the adapter admitted beyond its slots (the KEDA scaling signal).
    assert max(p for p, _ in samples) >= 1
    assert max(d for _, d in samples) >= 1
    # ...and serves normally afterwards.
    assert httpx.post(f"{endpoint.url}/invocations", json=chat_body(max_tokens=4), timeout=60).status_code == 200


def test_client_leaving_mid_stream_frees_the_slot(endpoint: Endpoint) -> None:
    with httpx.Client(timeout=60) as client:
        with client.stream(
            "POST",
            f"{endpoint.url}/invocations",
            json=chat_body("Tell a very long story.", max_tokens=2000, stream=True),
        ) as r:
            assert r.status_code == 200
            next(r.iter_lines())
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if metric(client.get(f"{endpoint.engine_url}/metrics").text, "llamacpp:requests_processing") == 0:
                break
            time.sleep(0.1)
        else:
            pytest.fail("the engine kept generating for a client that left")


def _raw(url: str, data: bytes, *, read_until_close: bool = True, timeout: float = 60) -> bytes:
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        s.sendall(data)
        chunks = []
        while read_until_close and (chunk := s.recv(65536)):
            chunks.append(chunk)
        return b"".join(chunks)


def test_chunked_body_with_expect_continue(endpoint: Endpoint) -> None:
    """What some SDKs send: Expect: 100-continue, then a chunked body."""
    body = json.dumps(chat_body(max_tokens=4)).encode()
    host, port = endpoint.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=60) as s:
        s.sendall(
            b"POST /invocations HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nExpect: 100-continue\r\nConnection: close\r\n\r\n"
        )
        assert s.recv(64).startswith(b"HTTP/1.1 100 Continue")
        s.sendall(b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body))
        response = b""
        while chunk := s.recv(65536):
            response += chunk
    head, _, payload = response.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head
    assert b'"chat.completion"' in payload


def test_oversized_and_malformed_requests_are_refused(endpoint: Endpoint) -> None:
    big = _raw(endpoint.url, b"POST /invocations HTTP/1.1\r\nHost: x\r\nContent-Length: 7000000\r\n\r\n")
    assert big.startswith(b"HTTP/1.1 413")
    assert _raw(endpoint.url, b"NONSENSE\r\n\r\n").startswith(b"HTTP/1.1 400")
    assert _raw(endpoint.url, b"GET /ping HTTP/1.1\r\n" + b"X-Pad: " + b"a" * 70000 + b"\r\n\r\n").startswith(
        b"HTTP/1.1 431"
    )
