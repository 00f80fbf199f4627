"""A pool replica's side port: GET /status, /status?model=X and /metrics (stdlib only; daemon threads beside the
supervisor's loop). Names, keys and states: inference_runtime/pool_status.py.

Cold loads are timed from the router's own event stream, not polled. The pinned router publishes every model state
change on `GET /models/sse` (tools/server/server-models.cpp get_router_models_sse, notify_sse): `model_status`
"loading" when it spawns a model's child (server_models::load, after the process is created), `status_change`
"loaded" when the child reports ready (handle_child_state SERVER_STATE_READY: the model is loaded and its HTTP
server listens), `status_change` "unloaded" with the exit_code when the child has exited (on_child_exit). So one
cold load is spawn -> ready, a load that ends "unloaded" before "loaded" failed (a bad file: exit_code 1 within
~0.1 s, which a 0.25 s poll of GET /models would mostly miss), and "loaded" -> "unloaded" is an unload (LRU eviction
at models_max, a reload, or a crash). Each edge is timed when its event arrives here, one loopback hop after the
router's transition, so a load time is exact to about a millisecond (GET /models polled every 0.25 s would be
+-0.25 s), and nothing in the container's log changes. A wake from `sleeping` (only with --sleep-idle-seconds) has
no spawn event and is not a cold load. The stream holds one of the router's dynamic HTTP threads (server-http.cpp:
n_threads_http fixed + up to 1024 more). If it drops, the follower reconnects and resyncs the loaded set from
GET /models; a load in flight across the gap is not timed.

Cardinality: three counters per model that has started at least one load (loads, their seconds, failures), one
histogram without a model label, one unload counter, four state gauges, and one gauge per model whose copy failed.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from socket import AF_INET6
from urllib.parse import parse_qs, urlsplit

from inference_runtime.pool_status import (
    ADAPTERS,
    ADAPTERS_PENDING,
    COLD_LOAD_BUCKETS,
    COLD_LOAD_HISTOGRAM,
    COLD_LOAD_SECONDS,
    COLD_LOADS,
    COPY_FAILED,
    COPY_FAILED_MODEL,
    LANDED,
    LANDED_COUNT,
    LOAD_FAILURES,
    LOADED,
    METRICS_PATH,
    MODEL,
    MODELS,
    MODELS_BY_STATE,
    REASON,
    STATE,
    STATES,
    STATUS_PATH,
    TOTAL,
    UNLOADS,
)
from pool_landing import ModelStatus

MAX_CONNECTIONS = 16  # concurrent side-port connections; more are closed at once (the gateway caches answers)
REQUEST_TIMEOUT_SECONDS = 5  # a client that sends nothing for this long is dropped
RECONNECT_SECONDS = 0.1  # the router is not listening yet, or the stream closed: ask again after this
PROMETHEUS_TEXT = "text/plain; version=0.0.4; charset=utf-8"


@dataclass(frozen=True)
class Published:
    """What the supervisor last applied: every model of the configured preset, in preset order; each base's adapters
    its router serves (in id order) and those of its section not served yet (pool_status.ADAPTERS*)."""

    models: Mapping[str, ModelStatus] = field(default_factory=dict)
    adapters: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    adapters_pending: Mapping[str, Mapping[str, ModelStatus]] = field(default_factory=dict)

    @property
    def landed(self) -> int:
        return sum(1 for s in self.models.values() if s.state == LANDED)

    def whole(self) -> dict:
        return {
            TOTAL: len(self.models),
            LANDED_COUNT: self.landed,
            MODELS: {name: {STATE: s.state, REASON: s.reason} for name, s in self.models.items()},
        }

    def one(self, name: str) -> tuple[int, dict[str, object]]:
        s = self.models.get(name)
        body: dict[str, object] = {
            MODEL: name,
            STATE: s.state if s else None,
            REASON: s.reason if s else None,
            LANDED_COUNT: self.landed,
            TOTAL: len(self.models),
        }
        if name in self.adapters or name in self.adapters_pending:
            body[ADAPTERS] = list(self.adapters.get(name, ()))
            pending = self.adapters_pending.get(name, {})
            body[ADAPTERS_PENDING] = {w: {STATE: a.state, REASON: a.reason} for w, a in pending.items()}
        return (200 if s else 404), body


def _label(value: str) -> str:
    """A label value in the text exposition format (backslash, double quote and line feed escaped)."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    return repr(float(value)) if not float(value).is_integer() else str(int(value))


class ColdLoads:
    """Cold loads, failed loads and unloads on this replica, from the router's model events (thread-safe)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._started: dict[str, float] = {}  # model -> when its child was spawned (a load in flight)
        self._loaded: set[str] = set()  # running and ready (or sleeping)
        self._per_model: dict[str, list[float]] = {}  # model -> [loads, seconds, failures]
        self._buckets = [0] * len(COLD_LOAD_BUCKETS)
        self._sum = 0.0
        self._count = 0
        self._unloads = 0

    def event(self, event: Mapping) -> None:
        """One `/models/sse` event: {"model": name, "event": kind, "data": {"status": ...}}."""
        name, kind = event.get("model"), event.get("event")
        data = event.get("data")
        status = data.get("status") if isinstance(data, Mapping) else None
        if not isinstance(name, str):
            return
        now = self._clock()
        with self._lock:
            if kind == "model_status" and status == "loading":  # the router spawned the model's child
                self._started[name] = now
                self._per_model.setdefault(name, [0, 0.0, 0])
            elif kind == "status_change" and status in ("loaded", "sleeping"):
                start = self._started.pop(name, None)
                if start is not None:
                    self._record(name, now - start)
                self._loaded.add(name)
            elif kind == "status_change" and status == "unloaded":
                if self._started.pop(name, None) is not None:  # gone before it was ever ready
                    self._per_model.setdefault(name, [0, 0.0, 0])[2] += 1
                elif name in self._loaded:
                    self._unloads += 1
                self._loaded.discard(name)

    def _record(self, name: str, seconds: float) -> None:
        row = self._per_model.setdefault(name, [0, 0.0, 0])
        row[0] += 1
        row[1] += seconds
        self._sum += seconds
        self._count += 1
        for i, bound in enumerate(COLD_LOAD_BUCKETS):
            if seconds <= bound:
                self._buckets[i] += 1

    def resync(self, loaded: Iterable[str]) -> None:
        """After (re)subscribing: the models running now (GET /models); loads in flight are not timed."""
        with self._lock:
            self._started.clear()
            self._loaded = set(loaded)

    def loaded(self) -> int:
        with self._lock:
            return len(self._loaded)

    def exposition(self, published: Published) -> str:
        """The Prometheus text exposition (format 0.0.4) of these counters and the published model states."""
        with self._lock:
            per_model = sorted((name, list(row)) for name, row in self._per_model.items())
            buckets, total, count = list(self._buckets), self._sum, self._count
            unloads, loaded = self._unloads, len(self._loaded)
        lines: list[str] = []

        def family(name: str, kind: str, help_text: str) -> None:
            lines.append(f"# HELP {name} {help_text}")
            lines.append(f"# TYPE {name} {kind}")

        family(COLD_LOADS, "counter", "Model loads completed on this replica (child spawned until ready).")
        lines += [f'{COLD_LOADS}{{model="{_label(n)}"}} {_number(r[0])}' for n, r in per_model]
        family(COLD_LOAD_SECONDS, "counter", "Seconds spent in those loads.")
        lines += [f'{COLD_LOAD_SECONDS}{{model="{_label(n)}"}} {_number(round(r[1], 6))}' for n, r in per_model]
        family(LOAD_FAILURES, "counter", "Model loads that ended before the model was ready.")
        lines += [f'{LOAD_FAILURES}{{model="{_label(n)}"}} {_number(r[2])}' for n, r in per_model]
        family(COLD_LOAD_HISTOGRAM, "histogram", "Load time of the models loaded on this replica, in seconds.")
        lines += [
            f'{COLD_LOAD_HISTOGRAM}_bucket{{le="{b}"}} {n}' for b, n in zip(COLD_LOAD_BUCKETS, buckets, strict=True)
        ]
        lines.append(f'{COLD_LOAD_HISTOGRAM}_bucket{{le="+Inf"}} {count}')
        lines.append(f"{COLD_LOAD_HISTOGRAM}_sum {_number(round(total, 6))}")
        lines.append(f"{COLD_LOAD_HISTOGRAM}_count {count}")
        family(UNLOADS, "counter", "Models unloaded on this replica (evicted at models_max, reloaded, or exited).")
        lines.append(f"{UNLOADS} {unloads}")
        by_state = dict.fromkeys(STATES, 0)
        for s in published.models.values():
            by_state[s.state] = by_state.get(s.state, 0) + 1
        family(MODELS_BY_STATE, "gauge", "Models of the preset by copy state, and those loaded now.")
        lines += [f'{MODELS_BY_STATE}{{state="{state}"}} {n}' for state, n in by_state.items()]
        lines.append(f'{MODELS_BY_STATE}{{state="{LOADED}"}} {loaded}')
        family(COPY_FAILED_MODEL, "gauge", "1 for each model of the preset whose copy failed.")
        lines += [
            f'{COPY_FAILED_MODEL}{{model="{_label(n)}"}} 1'
            for n, s in published.models.items()
            if s.state == COPY_FAILED
        ]
        return "\n".join(lines) + "\n"


def _request(url: str, key: str | None) -> urllib.request.Request:
    return urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"} if key else {})


def follow_router(base_url: str, key: str | None, loads: ColdLoads, stop: threading.Event) -> None:
    """Feed `loads` from the router's event stream until `stop` is set (run in a daemon thread)."""
    while not stop.is_set():
        try:
            with urllib.request.urlopen(_request(base_url + "/models/sse", key)) as stream:
                # Subscribed first, then the snapshot: no transition falls between the two.
                with urllib.request.urlopen(_request(base_url + "/models", key), timeout=10) as r:
                    listing = json.loads(r.read())
                loads.resync(
                    m["id"]
                    for m in listing.get("data", [])
                    if m.get("status", {}).get("value") in ("loaded", "sleeping")
                )
                for line in stream:
                    if stop.is_set():
                        return
                    if line.startswith(b"data: "):
                        try:
                            loads.event(json.loads(line[6:]))
                        except ValueError:
                            continue
        except (OSError, http.client.HTTPException, ValueError, AttributeError):
            pass  # the router is not up yet, or went away: ask again
        stop.wait(RECONNECT_SECONDS)


class _Handler(BaseHTTPRequestHandler):
    server: StatusServer
    timeout = REQUEST_TIMEOUT_SECONDS  # the socket's timeout (StreamRequestHandler.setup)
    server_version = "pool-supervisor"
    sys_version = ""
    # Bounded reads: the request line at most 64 KiB (BaseHTTPRequestHandler.handle_one_request: 414 beyond), at most
    # 100 header lines of 64 KiB (http.client.parse_headers: 431 beyond); no request body is ever read.

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        url = urlsplit(self.path)
        published = self.server.published()
        if url.path == STATUS_PATH:
            model = parse_qs(url.query).get(MODEL)
            if model:
                status, body = published.one(model[0])
                self._send(status, "application/json", json.dumps(body).encode())
            else:
                self._send(200, "application/json", json.dumps(published.whole()).encode())
        elif url.path == METRICS_PATH:
            self._send(200, PROMETHEUS_TEXT, self.server.loads.exposition(published).encode())
        else:
            self._send(
                404,
                "application/json",
                json.dumps({"error": f"no such path (GET {STATUS_PATH}, {METRICS_PATH})"}).encode(),
            )

    def _send(self, status: int, content_type: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (http.server's signature)
        return  # no access log: the gateway asks often, and the router's log is the container's


class StatusServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = MAX_CONNECTIONS

    def __init__(self, host: str, port: int, published: Callable[[], Published], loads: ColdLoads) -> None:
        if ":" in host:
            self.address_family = AF_INET6
        self.published = published
        self.loads = loads
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        super().__init__((host, port), _Handler)

    def process_request(self, request, client_address) -> None:
        if not self._slots.acquire(blocking=False):
            self.shutdown_request(request)  # busy: close at once rather than queue a thread per connection
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


def serve_status(host: str, port: int, published: Callable[[], Published], loads: ColdLoads) -> StatusServer:
    """Bind the side port and serve it from a daemon thread (OSError if the port cannot be bound)."""
    server = StatusServer(host, port, published, loads)
    threading.Thread(target=server.serve_forever, name="pool-status", daemon=True).start()
    return server
