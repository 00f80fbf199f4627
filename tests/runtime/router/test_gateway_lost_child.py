"""The gateway's guard against the pinned router losing a model's process under a request (issue 25).

At a full pool under load, the pinned llama-server router can evict a model that has just loaded for queued requests
before those requests count as in flight, and kill the stopping child with them inside: each such request gets a 500
whose body is `proxy error: <httplib error>` (tools/server/server-models.cpp, the proxy thread:
`pipe->write({{}, 500, "", ""})` then `"proxy error: " + err_str`). tests/runtime/engine/test_pool_cold_loads.py
reproduces it against the real binary (router log: "evicting idle LRU name=X" in the same millisecond as "proxying
request to model X", then "force-killing model instance name=X after timeout" and "http client error: Failed to read
connection"). Nothing of the child's answer reached the client, so the gateway sends the request once more (the
router reloads the model for it), and answers 503 + Retry-After if it is lost again — never that 500.

The real gateway process runs against a stdlib stand-in of one replica's router that answers that exact 500 for the
first `lose` requests and a normal chat answer after.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from slm_router.config import GatewayPool
from tests.runtime.router.harness import metric, running_router
from tests.support.engine import free_port

POOL, MODEL, RETRY_AFTER = "small", "farm-m", 7
LOST = b"proxy error: Failed to read connection"  # server-models.cpp: "proxy error: " + httplib::to_string(error)


class Replica(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        self.lose = 0  # how many of the next requests lose their child
        self.fail = False  # answer the child's own 500 (a JSON error) instead
        self.posts = 0
        self.lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self.server_address[1]}"

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        replica = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, status: int, body: bytes, content_type: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                self._send(200, b'{"status":"ok"}', "application/json")

            def do_POST(self) -> None:
                model = json.loads(self.rfile.read(int(self.headers["Content-Length"])))["model"]
                with replica.lock:
                    replica.posts += 1
                    lost = replica.lose > 0
                    replica.lose -= lost
                if lost:  # the router's proxy thread: status 500, then the body, no JSON
                    self._send(500, LOST, "text/plain; charset=utf-8")
                    return
                if replica.fail:  # the model's own server error, relayed by the router as the child sent it
                    error = {"error": {"code": 500, "message": "decode failed", "type": "server_error"}}
                    self._send(500, json.dumps(error).encode(), "application/json")
                    return
                answer = {"model": model, "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi"}}]}
                self._send(200, json.dumps(answer).encode(), "application/json")

        return Handler


@pytest.fixture(scope="module")
def farm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Replica, str]]:
    replica = Replica()
    threading.Thread(target=replica.serve_forever, daemon=True).start()
    pool = GatewayPool.of(name=POOL, replication=1, models=(MODEL,), replicas=(replica.url,), status_port=0)
    cfg = {
        "mode": "gateway",
        "listen_host": "127.0.0.1",
        "listen_port": free_port(),
        "log_level": "INFO",
        "timeouts": {"connect_s": 2, "first_byte_s": 30, "idle_s": 30, "total_s": 60},
        "gateway": {"pools": [pool.to_dict()], "retry_after_s": RETRY_AFTER, "health_interval_s": 1},
    }
    try:
        with running_router(cfg, tmp_path_factory.mktemp("gateway")) as gw:
            yield replica, gw.url
    finally:
        replica.shutdown()


def _ask(gw: str) -> httpx.Response:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
    return httpx.post(f"{gw}/v1/chat/completions", json=body, timeout=60)


def test_a_request_whose_child_was_lost_once_is_sent_again_and_answered(farm) -> None:
    replica, gw = farm
    before_posts, before_lost = replica.posts, metric(gw, "gateway_pool_lost_child_total", pool=POOL)
    replica.lose = 1
    r = _ask(gw)
    assert r.status_code == 200 and r.json()["choices"], r.text
    assert replica.posts - before_posts == 2  # the lost send and the one that answered
    assert metric(gw, "gateway_pool_lost_child_total", pool=POOL) - before_lost == 1


def test_a_request_lost_twice_is_503_with_retry_after_never_the_500(farm) -> None:
    replica, gw = farm
    before_posts = replica.posts
    replica.lose = 2
    r = _ask(gw)
    assert r.status_code == 503 and r.headers["retry-after"] == str(RETRY_AFTER), r.text
    assert "lost the model's process" in r.json()["error"]["message"]
    assert replica.posts - before_posts == 2  # sent twice, not more: the client decides with Retry-After
    assert metric(gw, "gateway_requests_total", model=MODEL, code="500") == 0


def test_any_other_500_is_relayed_as_it_is_and_not_sent_again(farm) -> None:
    # Only the router's own "lost the child" answer is sent again: a model's own 500 (a JSON error) reaches the client.
    replica, gw = farm
    before_posts = replica.posts
    replica.lose, replica.fail = 0, True
    try:
        r = _ask(gw)
    finally:
        replica.fail = False
    assert r.status_code == 500 and r.json()["error"]["message"] == "decode failed", r.text
    assert replica.posts - before_posts == 1
