"""A pooled model whose copy has not landed, or failed, answers clearly through the gateway (issue 25).

The catalog copies pooled models one by one, off the deploy's critical path, so a pool replica's supervisor
(containers/llama-server/pool_supervisor.py) serves its router only the models that landed: the router then
refuses the others with its "model '<name>' not found" 400 (tools/server/server-models.cpp router_validate_model;
tests/runtime/router/test_gateway_pool_errors.py pins that exact body against the real binary). For a model the
gateway lists, the gateway asks the replica's status side port (inference_runtime/pool_status.py) and answers:

    copying      503 + Retry-After: pool_status.COPYING_RETRY_AFTER_SECONDS, "model X is being copied (n of N landed)"
    copy_failed  500, type model_copy_failed, "model X failed to copy: <reason>"
    landed, unknown to the supervisor, or no answer: 503 + gateway.retry_after_s (the preset is still stale)

never a 400/404. The real gateway process runs here against a stdlib stand-in of one replica: its router answers
that pinned 400 for every model it does not serve, and its side port answers GET /status?model=X as the
contract says (and counts the questions: 1,000 clients asking for a copying model must not hammer it).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from inference_runtime import pool_status as ps
from slm_router.config import GatewayPool
from slm_router.pools import STATUS_CACHE_S
from tests.runtime.router.harness import metric, running_router
from tests.support.engine import free_port

POOL = "small"
RETRY_AFTER = 7
SERVED, COPYING, BROKEN, STALE, UNKNOWN = "farm-served", "farm-copying", "farm-broken", "farm-stale", "farm-unknown"
REASON = "HTTP 404 from the Hub for org/model@main: model.gguf"


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # listen backlog (socketserver's default 5 refuses a burst of 50 connections)


class Replica:
    """One pool replica: its router on one port (pinned 400 for a model it does not serve) and its supervisor's
    status side port on another (answers from `states`, counts every question)."""

    def __init__(self) -> None:
        self.served = {SERVED}
        self.states: dict[str, dict[str, Any]] = {
            SERVED: {ps.STATE: ps.LANDED, ps.REASON: ""},
            COPYING: {ps.STATE: ps.COPYING, ps.REASON: ""},
            BROKEN: {ps.STATE: ps.COPY_FAILED, ps.REASON: REASON},
            STALE: {ps.STATE: ps.LANDED, ps.REASON: ""},  # landed, but the router's preset does not list it yet
        }
        self.status_asked = 0
        self.status_delay = 0.0
        self.lock = threading.Lock()
        self.router = Server(("127.0.0.1", 0), self._router_handler())
        self.status = Server(("127.0.0.1", 0), self._status_handler())
        self.url = f"http://127.0.0.1:{self.router.server_address[1]}"
        self.status_port = self.status.server_address[1]

    def _router_handler(self) -> type[BaseHTTPRequestHandler]:
        replica = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, status: int, doc: dict) -> None:
                body = json.dumps(doc, separators=(",", ":")).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                self._send(200, {"status": "ok"})

            def do_POST(self) -> None:
                model = json.loads(self.rfile.read(int(self.headers["Content-Length"])))["model"]
                if model not in replica.served:  # server-models.cpp router_validate_model (pinned: see module doc)
                    error = {"code": 400, "message": f"model '{model}' not found", "type": "invalid_request_error"}
                    self._send(400, {"error": error})
                    return
                message = {"role": "assistant", "content": "Hi"}
                self._send(200, {"model": model, "choices": [{"index": 0, "message": message}]})

        return Handler

    def _status_handler(self) -> type[BaseHTTPRequestHandler]:
        replica = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                with replica.lock:
                    replica.status_asked += 1
                time.sleep(replica.status_delay)
                u = urlsplit(self.path)
                model = parse_qs(u.query).get("model", [""])[0]
                states = replica.states
                landed = sum(1 for s in states.values() if s[ps.STATE] == ps.LANDED)
                doc = {ps.MODEL: model, ps.STATE: None, ps.REASON: "", ps.LANDED_COUNT: landed, ps.TOTAL: len(states)}
                status = 404
                if u.path == ps.STATUS_PATH and model in states:
                    doc.update(states[model])
                    status = 200
                body = json.dumps(doc).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        return Handler

    def __enter__(self) -> Replica:
        for server in (self.router, self.status):
            threading.Thread(target=server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        for server in (self.router, self.status):
            server.shutdown()
            server.server_close()


def _config(replica: Replica, status_port: int) -> dict:
    models = [SERVED, COPYING, BROKEN, STALE, UNKNOWN]
    pool = GatewayPool.of(
        name=POOL, replication=1, models=tuple(models), replicas=(replica.url,), status_port=status_port
    )
    return {
        "mode": "gateway",
        "listen_host": "127.0.0.1",
        "listen_port": free_port(),
        "log_level": "DEBUG",
        "timeouts": {"connect_s": 2, "first_byte_s": 30, "total_s": 30},
        "gateway": {"pools": [pool.to_dict()], "retry_after_s": RETRY_AFTER},  # probes every 5 s, 2 s timeout
    }


@pytest.fixture(scope="module")
def farm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    with (
        Replica() as replica,
        running_router(_config(replica, replica.status_port), tmp_path_factory.mktemp("gw")) as gw,
    ):
        yield {"gw": gw.url, "replica": replica, "process": gw}


def _chat(url: str, model: str) -> httpx.Response:
    body = {"model": model, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
    return httpx.post(f"{url}/v1/chat/completions", json=body, timeout=60)


def test_a_model_being_copied_is_503_with_retry_after_and_the_copy_progress(farm):
    gw = farm["gw"]
    resp = _chat(gw, COPYING)
    assert resp.status_code == 503, resp.text
    assert resp.headers["retry-after"] == str(ps.COPYING_RETRY_AFTER_SECONDS)
    error = resp.json()["error"]
    assert f"model {COPYING} is being copied (2 of 4 landed)" in error["message"]
    assert error["retry_after_seconds"] == ps.COPYING_RETRY_AFTER_SECONDS
    assert metric(gw, "gateway_pool_missing_model_total", pool=POOL, state=ps.COPYING) == 1
    assert metric(gw, "gateway_requests_total", model=COPYING, code="503") == 1
    assert metric(gw, "gateway_pool_requests_total", pool=POOL, replica="0", code="503") == 1
    assert metric(gw, "gateway_requests_total", model=COPYING, code="400") == 0


def test_a_model_whose_copy_failed_is_500_naming_the_failure(farm):
    gw = farm["gw"]
    resp = _chat(gw, BROKEN)
    assert resp.status_code == 500, resp.text
    assert "retry-after" not in resp.headers  # a retry cannot fix it: the operator re-runs the copy
    error = resp.json()["error"]
    assert error["type"] == "model_copy_failed"
    assert error["message"].startswith(f"model {BROKEN} failed to copy: {REASON}")
    assert metric(gw, "gateway_pool_missing_model_total", pool=POOL, state=ps.COPY_FAILED) == 1
    assert metric(gw, "gateway_requests_total", model=BROKEN, code="500") == 1


@pytest.mark.parametrize("model", [STALE, UNKNOWN])
def test_a_landed_model_or_one_the_supervisor_does_not_know_is_the_stale_preset_503(farm, model):
    gw = farm["gw"]
    resp = _chat(gw, model)
    assert resp.status_code == 503, resp.text
    assert resp.headers["retry-after"] == str(RETRY_AFTER)
    assert "not loaded its preset" in resp.json()["error"]["message"]
    assert metric(gw, "gateway_requests_total", model=model, code="503") == 1


def test_many_clients_asking_for_a_copying_model_ask_the_side_port_once_then_200_once_landed(farm):
    gw, replica = farm["gw"], farm["replica"]
    time.sleep(STATUS_CACHE_S + 0.5)  # what earlier tests cached has expired
    asked = replica.status_asked
    replica.status_delay = 0.3  # the answer is slow: concurrent questions must share one call, not queue up calls
    t0 = time.monotonic()
    try:
        with ThreadPoolExecutor(50) as ex:
            answers = list(ex.map(lambda _: _chat(gw, COPYING), range(200)))
    finally:
        replica.status_delay = 0.0
    elapsed = time.monotonic() - t0
    assert {r.status_code for r in answers} == {503}
    assert all("is being copied" in r.json()["error"]["message"] for r in answers), farm["process"].log_tail()
    # One question per cache period of the burst (on a loaded 2-core box 200 requests may outlast one period).
    assert 1 <= replica.status_asked - asked <= 1 + int(elapsed / STATUS_CACHE_S), elapsed
    # The copy lands while the farm serves: the supervisor hands it to its router, and within the cache's few
    # seconds the same gateway (no restart) answers 200.
    replica.states[COPYING] = {ps.STATE: ps.LANDED, ps.REASON: ""}
    replica.served.add(COPYING)
    resp = _chat(gw, COPYING)
    assert resp.status_code == 200, resp.text
    assert resp.json()["model"] == COPYING


def test_no_status_answer_is_the_stale_preset_503_at_once(tmp_path):
    """The side port is off or not there (a replica of an older image): today's 503 + Retry-After, quickly."""
    with Replica() as replica, running_router(_config(replica, free_port()), tmp_path) as gw:
        t0 = time.monotonic()
        resp = _chat(gw.url, COPYING)
        assert time.monotonic() - t0 < 3
        assert resp.status_code == 503 and resp.headers["retry-after"] == str(RETRY_AFTER)
        assert "not loaded its preset" in resp.json()["error"]["message"]
        assert metric(gw.url, "gateway_pool_status_lookups_total", pool=POOL, result="no_answer") == 1
        assert metric(gw.url, "gateway_pool_missing_model_total", pool=POOL, state="stale_preset") == 1
