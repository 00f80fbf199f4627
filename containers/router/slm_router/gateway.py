"""Mode `gateway` (the model farm's one entry point): route each OpenAI request to the backend of its `model`.

The body is forwarded byte for byte to the same path on that model's backend (a llama-server), and the
answer comes back unchanged: JSON, or SSE relayed piece by piece. An unknown model is a 404 that lists the
known ones. A backend that cannot answer now (scaled to zero, still loading, gone) is a 503 with
Retry-After, counted in gateway_backend_unavailable_total{model} so the autoscaler can wake it up.
Nothing is retried here: the client decides, guided by Retry-After.

A pooled model (gateway.pools) is answered by one replica of its pool, chosen by affinity (affinity.py): the
body still carries the model's name, on which llama-server's router mode picks (and if needed loads) the model.
Its response head may take a load: it must come within gateway.cold_load_timeout_s, else 503 + Retry-After. A
replica that refuses the connection was sent nothing, so the next replica in the model's ranking is tried.
A replica's "model '<name>' not found" for a model listed here is never passed on as the client's error: the
replica's supervisor is asked why (pools.Pool.model_status, its status side port): a model whose copy has not
landed yet is 503 + Retry-After "model X is being copied (n of N landed)", one whose copy failed is 500
model_copy_failed naming the failure, and otherwise (landed, or no answer) the replica's preset is stale — a model
just added reaches this config before the replicas' presets (the kubelet refreshes their ConfigMap volume later) —
so 503 + Retry-After too.

A LoRA adapter (gateway.models[].adapters, gateway.pools[].adapters; inference_runtime/lora.py) is a name clients
send as `model`: its request goes where its base's would (the base's backend, or its base's replica by affinity, so
an adapter lands where its base is warm), with the body's `model` set to the base and `lora` = [{id, scale}] (a
client's own `lora` with an adapter's name is a 400: the adapter is the name). The id is the position of the
adapter's file in the backend's OWN list — a dedicated llama-server's GET /lora-adapters, a pool replica's
supervisor /status?model=<base> (the pool's own status lookup: pools.Pool.model_status) — read before sending and
reused a few seconds per backend and base (ADAPTER_LIST_CACHE_S; a pool's STATUS_CACHE_S), never
this config's order (the gateway and the engines roll out separately): an adapter the backend does not list is a 503
+ Retry-After naming it and why (being copied, or its base's adapters being rolled out), never another adapter's
answer. A request to a base that has adapters carries lora.base_lora() (every adapter at scale 0) unless the client
sent its own `lora`: the pinned engine would otherwise apply all of them (lora.py); and every request to such a base
(its own and its adapters') goes with cache_prompt false (lora.isolated: llama.cpp#26207 reuses prompt KV across
adapters). Metrics count an adapter's
requests under its own name (bounded by the config), and its base's backend unavailable under the base's (the
base's scale-from-zero signal).
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from inference_runtime import pool_status as ps
from inference_runtime.http1 import HttpError, Request
from inference_runtime.lora import LORA_FIELD, base_lora, engine_adapter_paths, isolated, request_lora

from .backends import Answer
from .client import HttpClient, Response, UpstreamError
from .config import Config, GatewayAdapter
from .metrics import STALE_PRESET, GatewayMetrics
from .pools import NO_REPLICA, Pool
from .server import Front, error_response, json_response

log = logging.getLogger("router.gateway")

# llama-server's OpenAI-compatible routes that carry a `model`.
GATEWAY_PATHS = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/rerank")
UNAVAILABLE_STATUSES = (502, 503, 504)
FORWARDED_HEADERS = ("accept", "authorization")
KNOWN_IN_MESSAGE = 20  # a 404 names at most this many models (a farm has hundreds: GET /v1/models lists them all)
POOL_ATTEMPTS = 3  # replicas tried for one pooled request when connections are refused (nothing was sent to them)
# Sends of one pooled request to the same replica when its router lost the model's process under the request before
# answering (lost_child): once more, since the router reloads the model for it; then 503 + Retry-After.
LOST_CHILD_SENDS = 2
# A dedicated backend's adapter list is reused this long (per base; a pool replica's is its status answer, reused
# pools.STATUS_CACHE_S): a thousand requests for adapters of one base
# cost its backend one small GET every few seconds. Safe to reuse because a backend's list only grows at its end
# while adapters land (pool_landing / engine_flags serve the landed PREFIX of the configured list), so a cached id
# stays that adapter's; a list reordered by a new config reaches the gateway within this much of the backend.
ADAPTER_LIST_CACHE_S = 5.0
ADAPTER_LIST_TIMEOUT_S = 5.0  # GET /lora-adapters is a task of the engine's queue: it waits for the current batch
ENGINE_ADAPTERS_PATH = "/lora-adapters"  # tools/server/server.cpp: GET /lora-adapters -> [{id, path, scale}, ...]


@dataclass(frozen=True)
class AdapterRoute:
    """An adapter name as the gateway routes it."""

    name: str
    base: str
    path: str
    scale: float
    pool: Pool | None  # its base's pool; None: its base is a dedicated model


@dataclass(frozen=True)
class AdapterList:
    """A backend's adapters of one base: `served` in id order; `pending` (pools): path -> (state, reason) of those
    configured but not served yet; `base_state` (pools): the base's own copy state and reason."""

    served: tuple[str, ...]
    pending: dict[str, tuple[str, str]]
    base_state: tuple[str, str] = (ps.LANDED, "")


class _Refused(Exception):
    """An adapter request answered here without reaching a backend (the response is ready)."""

    def __init__(self, response: bytes) -> None:
        self.response = response


def missing_from_preset(status: int, raw: bytes, model: str) -> bool:
    """The pool replica's router does not know `model` (yet): llama.cpp tools/server/server-models.cpp
    router_validate_model answers format_error_response("model '%s' not found", ERROR_TYPE_INVALID_REQUEST), i.e.
    400 {"error": {"code": 400, "message": "model '<name>' not found", "type": "invalid_request_error"}}
    (server-common.cpp format_error_response; tests/runtime/router/test_gateway_pool_errors.py pins it)."""
    if status != 400:
        return False
    try:
        error = json.loads(raw).get("error")
    except (ValueError, UnicodeDecodeError, AttributeError):
        return False
    return isinstance(error, dict) and error.get("message") == f"model '{model}' not found"


def lost_child(status: int, raw: bytes) -> bool:
    """The pool replica's router forwarded the request to the model's process and that process went away before it
    answered: llama.cpp tools/server/server-models.cpp (the proxy thread) answers 500 with the body
    `proxy error: <httplib error>` when its client request to the child fails, before any of the child's answer was
    sent. Seen at a full pool under load (tests/runtime/engine/test_pool_cold_loads.py): a model that has just loaded
    for queued requests is evicted as idle before those requests count as in flight (`ensure_model_ready` drops its
    queue entry, then `proxy_request` counts it: the window upstream llama.cpp #28698 narrowed but did not close), and
    the stopping child is killed with the requests inside. Nothing reached the client and a generation has no side
    effect, so the request can be sent again."""
    return status == 500 and raw.startswith(b"proxy error: ")


class _Read:
    """A pooled replica's answer whose body was read (to look at it) before it is relayed."""

    def __init__(self, resp: Response, raw: bytes) -> None:
        self._resp, self._raw, self.status = resp, raw, resp.status

    def header(self, name: str, default: str = "") -> str:
        return self._resp.header(name, default)

    async def read(self, timeout: float) -> bytes:
        return self._raw

    async def iter(self, idle_timeout: float) -> AsyncIterator[bytes]:
        yield self._raw

    def close(self) -> None:
        """Already read whole."""


class GatewayServer(Front):
    post_paths = GATEWAY_PATHS
    routes_hint = (
        "the gateway serves POST " + ", ".join(GATEWAY_PATHS) + " (routed by the body's model), "
        "GET /v1/models, /health, /ready, /metrics"
    )

    def __init__(self, cfg: Config, metrics: GatewayMetrics):
        super().__init__(
            render_metrics=metrics.render,
            on_reject=lambda reason: metrics.rejected.labels(reason).inc(),
            max_body_bytes=cfg.max_body_bytes,
            max_in_flight=cfg.max_in_flight,
        )
        self.cfg = cfg
        self.metrics = metrics
        self.backends = {m.name: HttpClient(m.url, connect_timeout=cfg.timeouts.connect_s) for m in cfg.gateway.models}
        self.pools = [Pool(p, cfg, metrics) for p in cfg.gateway.pools]
        self.pool_of = {m: pool for pool in self.pools for m in pool.spec.models}
        self.names = [m.name for m in cfg.gateway.models] + list(self.pool_of)
        self.adapters: dict[str, AdapterRoute] = {}
        pool_by_name = {p.name: p for p in self.pools}
        listed: list[tuple[str, tuple[GatewayAdapter, ...], Pool | None]] = [
            (m.name, m.adapters, None) for m in cfg.gateway.models
        ] + [("", p.adapters, pool_by_name[p.name]) for p in cfg.gateway.pools]
        for base, adapters, pool in listed:
            for a in adapters:
                self.adapters[a.name] = AdapterRoute(a.name, a.base or base, a.path, a.scale, pool)
        self.with_adapters = {r.base for r in self.adapters.values()}
        self.names += list(self.adapters)
        # (backend key, base) -> (expiry on the monotonic clock, the list or None); one question in flight per key.
        self._lists: dict[tuple[str, str], tuple[float, AdapterList | None]] = {}
        self._asking: dict[tuple[str, str], asyncio.Task] = {}
        self._children: dict[tuple[object, tuple[str, ...]], Any] = {}
        self.retry_after = str(cfg.gateway.retry_after_s)
        self._created = int(time.time())

    async def start(self, host: str, port: int) -> int:
        # One probe round before listening, so the first requests already skip replicas that are not there.
        await asyncio.gather(*(p.probe_all() for p in self.pools))
        bound = await super().start(host, port)
        for p in self.pools:
            p.start_probing()
        return bound

    async def close_upstreams(self) -> None:
        for client in self.backends.values():
            client.close()
        for pool in self.pools:
            pool.close()

    async def ready(self) -> tuple[int, dict]:
        # Backends scaled to zero are normal for a farm: the gateway is ready as soon as it routes.
        live = {p.name: sum(p.affinity.live) for p in self.pools}
        return 200, {"status": "ready", "models": len(self.names), **({"pools_live_replicas": live} if live else {})}

    def get_extra(self, path: str) -> tuple[int, object] | None:
        if path in ("/v1/models", "/models"):
            data = []
            for n in self.names:
                entry = {"id": n, "object": "model", "created": self._created, "owned_by": "cpu-inference"}
                if n in self.pool_of:
                    entry["pool"] = self.pool_of[n].name
                if n in self.adapters:  # vLLM's spelling for a LoRA module over a base (its /v1/models "parent")
                    route = self.adapters[n]
                    entry["parent"] = route.base
                    if route.pool is not None:
                        entry["pool"] = route.pool.name
                data.append(entry)
            return 200, {"object": "list", "data": data}
        return None

    def _child(self, metric: Any, *labels: str) -> Any:
        """metric.labels(*labels), looked up once per label set: prometheus_client's labels() takes a lock and builds
        its key on every call, several times a request. The label sets are bounded (models, pools, status codes)."""
        key = (metric, labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    async def handle_post(self, req: Request, writer: asyncio.StreamWriter, ka: bool) -> bool:
        try:
            body = json.loads(req.body)
        except (ValueError, UnicodeDecodeError):
            body = None
        if not isinstance(body, dict):
            writer.write(error_response(400, "body must be a JSON object", keep_alive=ka))
            await writer.drain()
            return ka
        model = body.get("model")
        route = self.adapters.get(model) if isinstance(model, str) else None
        if route is not None and LORA_FIELD in body:
            self.metrics.requests.labels(model, "400").inc()
            message = f"lora: {model!r} is a LoRA adapter of {route.base!r}; send no `lora` with an adapter's name"
            writer.write(error_response(400, message, keep_alive=ka, extra={"param": LORA_FIELD}))
            await writer.drain()
            return ka
        base = route.base if route is not None else model
        if not isinstance(model, str) or (model not in self.backends and model not in self.pool_of and route is None):
            known = ", ".join(self.names[:KNOWN_IN_MESSAGE])
            if len(self.names) > KNOWN_IN_MESSAGE:
                known += f", … ({len(self.names) - KNOWN_IN_MESSAGE} more: GET /v1/models)"
            if isinstance(model, str) and model:
                self.metrics.unknown_model.inc()
                status, message = 404, f"model {model!r} is not served here; known models: {known}"
            else:
                status, message = 400, f"model: required (one of: {known})"
            extra = {"param": "model", "known_models": self.names[:KNOWN_IN_MESSAGE]}
            writer.write(error_response(status, message, keep_alive=ka, extra=extra))
            await writer.drain()
            return ka
        assert isinstance(base, str)
        pool = self.pool_of.get(base)
        self.metrics.started(model)
        if pool is not None:
            self._child(self.metrics.pool_in_flight, pool.name).inc()
        try:
            if pool is not None:
                return await self._forward_pooled(pool, model, req, writer, ka, route=route, body=body)
            return await self._forward(model, req, writer, ka, route=route, body=body)
        except _Refused as refused:
            writer.write(refused.response)
            await writer.drain()
            return ka
        finally:
            self.metrics.finished(model)
            if pool is not None:
                self._child(self.metrics.pool_in_flight, pool.name).dec()

    def _unavailable(self, model: str, detail: str, ka: bool, retry_after: str = "") -> bytes:
        route = self.adapters.get(model)
        # The backend's unavailability is its base's scale-from-zero signal, whichever name the client sent.
        self.metrics.unavailable.labels(route.base if route is not None else model).inc()
        self.metrics.requests.labels(model, "503").inc()
        log.warning("model %s unavailable: %s", model, detail)
        return error_response(
            503,
            f"model {model!r} is unavailable right now ({detail}); retry later",
            keep_alive=ka,
            headers=[("Retry-After", retry_after or self.retry_after)],
        )

    async def _body(
        self,
        req: Request,
        body: dict[str, Any] | None,
        base: str,
        route: AdapterRoute | None,
        backend: str,
        lookup: Callable[[], Awaitable[AdapterList | None]],
    ) -> bytes:
        """The body to send: as received, with base_lora() for a base that has adapters, or for an adapter its base's
        name and `lora` with the adapter's id in `backend`'s list (`lookup` answers that list, cached). Raises _Refused
        with the answer when the backend does not serve the adapter now."""
        if route is None:
            if base in self.with_adapters and body is not None:
                return json.dumps(isolated({LORA_FIELD: base_lora(), **body})).encode()
            return req.body
        listed = await lookup()
        name = route.name
        if listed is None:
            raise _Refused(
                self._refuse(name, 503, f"adapter {name}: the adapter list of its base {base!r} could not be read", [])
            )
        state, reason = listed.base_state
        if state == ps.COPYING:
            raise _Refused(
                self._refuse(name, 503, f"adapter {name}: its base {base} is being copied", [], copying=True)
            )
        if state == ps.COPY_FAILED:
            raise _Refused(
                self._refuse(
                    name, 500, f"adapter {name}: its base {base} failed to copy: {reason or 'no reason given'}"
                )
            )
        if route.path in listed.served:
            adapter_id = listed.served.index(route.path)
            return json.dumps(
                isolated({**(body or {}), "model": base, LORA_FIELD: request_lora(adapter_id, route.scale)})
            ).encode()
        state, reason = listed.pending.get(route.path, ("", ""))
        if state == ps.COPYING:
            detail = f" ({reason})" if reason else ""
            raise _Refused(self._refuse(name, 503, f"adapter {name} is being copied{detail}", [], copying=True))
        if state == ps.COPY_FAILED:
            raise _Refused(self._refuse(name, 500, f"adapter {name} failed to copy: {reason or 'no reason given'}"))
        log.info("adapter %s: %s of %s lists %s, not %s", name, backend, base, listed.served, route.path)
        raise _Refused(
            self._refuse(
                name,
                503,
                f"adapters of {base} are being rolled out: its backend does not serve adapter {name} "
                f"({route.path}) yet",
                [],
            )
        )

    def _refuse(
        self, name: str, code: int, message: str, headers: list[tuple[str, str]] | None = None, *, copying: bool = False
    ) -> bytes:
        """An adapter's request answered here: 503 + Retry-After (`headers` not None) or 500, counted under its name."""
        self._child(self.metrics.requests, name, str(code)).inc()
        extra: dict[str, object] = {"param": "model"}
        if headers is not None:
            retry = str(ps.COPYING_RETRY_AFTER_SECONDS) if copying else self.retry_after
            headers = [*headers, ("Retry-After", retry)]
            extra["retry_after_seconds"] = int(retry)
        else:
            extra["type"] = "model_copy_failed"
        log.warning("%s", message)
        return error_response(code, message, headers=headers or [], extra=extra)

    async def _adapter_list(
        self, key: tuple[str, str], fetch: Callable[[], Awaitable[AdapterList | None]]
    ) -> AdapterList | None:
        """`fetch()`'s answer, reused ADAPTER_LIST_CACHE_S, asked once however many requests wait for it. An
        UpstreamError (a backend that cannot be reached) is raised to every waiter and not kept."""
        cached = self._lists.get(key)
        if cached is not None and cached[0] > time.monotonic():
            return cached[1]
        task = self._asking.get(key)
        if task is None:
            task = self._asking[key] = asyncio.create_task(self._ask_list(key, fetch))
        return await asyncio.shield(task)  # a client that goes away cancels its wait, not the others' question

    async def _ask_list(
        self, key: tuple[str, str], fetch: Callable[[], Awaitable[AdapterList | None]]
    ) -> AdapterList | None:
        try:
            listed = await fetch()
        finally:
            self._asking.pop(key, None)
        self._lists[key] = (time.monotonic() + ADAPTER_LIST_CACHE_S, listed)
        return listed

    async def _engine_list(self, client: HttpClient, req: Request) -> AdapterList | None:
        """A dedicated llama-server's adapters (GET /lora-adapters). UpstreamError when it cannot be reached."""
        auth = req.head.header("authorization")
        resp = await client.request(
            "GET",
            ENGINE_ADAPTERS_PATH,
            b"",
            [("Authorization", auth)] if auth else [],
            head_timeout=ADAPTER_LIST_TIMEOUT_S,
        )
        try:
            raw = await resp.read(ADAPTER_LIST_TIMEOUT_S)
        except (TimeoutError, HttpError, asyncio.IncompleteReadError, ConnectionError) as e:
            raise UpstreamError(
                "protocol", f"GET {ENGINE_ADAPTERS_PATH}: body not complete ({type(e).__name__})"
            ) from None
        finally:
            resp.close()
        try:
            paths = engine_adapter_paths(json.loads(raw)) if resp.status == 200 else None
        except ValueError:
            paths = None
        if paths is None:
            log.warning("GET %s%s answered %d: not an adapter list", client.base_url, ENGINE_ADAPTERS_PATH, resp.status)
            return None
        return AdapterList(paths, {})

    async def _pool_list(self, pool: Pool, replica: int, base: str) -> AdapterList | None:
        """A pool replica's adapters of `base`: what its supervisor says of the base (pool_status.ADAPTERS), asked
        through the pool's own side-port client, cache and single question in flight (Pool.model_status); None
        without an answer."""
        status = await pool.model_status(replica, base)
        if status is None:
            return None
        return AdapterList(status.adapters, dict(status.adapters_pending), (status.state, status.reason))

    def _headers(self, req: Request) -> list[tuple[str, str]]:
        headers = [("Content-Type", "application/json")]
        return headers + [(name.title(), req.head.header(name)) for name in FORWARDED_HEADERS if req.head.header(name)]

    async def _forward(
        self,
        model: str,
        req: Request,
        writer: asyncio.StreamWriter,
        ka: bool,
        *,
        route: AdapterRoute | None = None,
        body: dict[str, Any] | None = None,
    ) -> bool:
        start = time.perf_counter()
        base = route.base if route is not None else model
        client = self.backends[base]
        try:
            raw = await self._body(
                req,
                body,
                base,
                route,
                "dedicated",
                lambda: self._adapter_list(("dedicated", base), lambda: self._engine_list(client, req)),
            )
            resp = await client.request(
                "POST", req.path, raw, self._headers(req), head_timeout=self.cfg.timeouts.first_byte_s
            )
        except UpstreamError as e:
            writer.write(self._unavailable(model, f"{e.reason}: {e}", ka))
            await writer.drain()
            return ka
        self.metrics.request_seconds.labels(model).observe(time.perf_counter() - start)
        return await self._relay(model, resp, writer, ka)

    async def _forward_pooled(
        self,
        pool: Pool,
        model: str,
        req: Request,
        writer: asyncio.StreamWriter,
        ka: bool,
        *,
        route: AdapterRoute | None = None,
        body: dict[str, Any] | None = None,
    ) -> bool:
        start = time.perf_counter()
        base = route.base if route is not None else model
        candidates = pool.affinity.candidates(base)[:POOL_ATTEMPTS]  # an adapter goes where its base is warm
        if not candidates:  # counted under replica "none": the pool's scale-from-zero signal (its in-flight stays 0)
            pool.metrics.pool_requests.labels(pool.name, NO_REPLICA, "503").inc()
            writer.write(self._unavailable(model, f"no live replica in pool {pool.name!r}", ka))
            await writer.drain()
            return ka
        for n, replica in enumerate(candidates):
            pool.affinity.started(base, replica)
            try:
                try:
                    raw = await self._body(
                        req,
                        body,
                        base,
                        route,
                        f"{pool.name}/{replica}",
                        functools.partial(self._pool_list, pool, replica, base),
                    )
                    resp = await self._send_pooled(pool, replica, model, req, raw)
                except UpstreamError as e:
                    if e.reason == "connect":  # nothing was sent: the replica is gone, try the model's next one
                        pool.set_live(replica, False, str(e))
                        if n + 1 < len(candidates):
                            continue
                    pool.metrics.pool_requests.labels(pool.name, pool.replica_label(replica), "503").inc()
                    detail = (
                        f"no response head within gateway.cold_load_timeout_s={pool.head_timeout:g}s from pool "
                        f"{pool.name!r} (loading the model?)"
                        if e.reason == "timeout"
                        else f"{e.reason}: {e}"
                    )
                    writer.write(self._unavailable(model, detail, ka))
                    await writer.drain()
                    return ka
                self._child(self.metrics.request_seconds, model).observe(time.perf_counter() - start)
                return await self._relay(model, resp, writer, ka, pool.counter(replica), pool, replica, base)
            finally:
                pool.affinity.finished(base, replica)
        raise AssertionError("unreachable: the last candidate always answers or returns")

    async def _send_pooled(self, pool: Pool, replica: int, model: str, req: Request, body: bytes) -> Response | _Read:
        """The replica's answer to `body` (the request body to send, the same on every send); a lost_child 500 is sent
        again (LOST_CHILD_SENDS), its last one is relayed as 503."""
        for send in range(LOST_CHILD_SENDS):
            resp = await pool.clients[replica].request(
                "POST", req.path, body, self._headers(req), head_timeout=pool.head_timeout
            )
            if resp.status != 500:
                return resp
            try:
                raw = await resp.read(self.cfg.timeouts.total_s)
            except (TimeoutError, HttpError, asyncio.IncompleteReadError, ConnectionError) as e:
                resp.close()
                raise UpstreamError("protocol", f"500 body not complete ({type(e).__name__})") from None
            if not lost_child(resp.status, raw) or send + 1 == LOST_CHILD_SENDS:
                return _Read(resp, raw)
            self._child(self.metrics.pool_lost_child, pool.name).inc()
            log.warning(
                "model %s: pool %s replica %d lost the model's process under the request (%s); sending again",
                model,
                pool.name,
                replica,
                raw[:120].decode(errors="replace"),
            )
        raise AssertionError("unreachable: the last send returns")

    async def _relay(
        self,
        model: str,
        resp: Response | _Read,
        writer: asyncio.StreamWriter,
        ka: bool,
        count: Callable[[str], None] = lambda code: None,
        pool: Pool | None = None,
        replica: int = 0,
        base: str = "",
    ) -> bool:
        """Send the backend's answer to the client: SSE piece by piece, JSON whole; 502/503/504 become our 503, and a
        `pool` replica's "model not found" for this listed model (`base`: the model it was sent as, an adapter's
        base) is answered by what its supervisor says (copying, copy failed, or a preset update not arrived yet)."""
        base = base or model
        t = self.cfg.timeouts
        content_type = resp.header("content-type", "application/json")
        out = [("x-gateway-model", model)]
        if resp.status == 200 and content_type.startswith("text/event-stream"):
            self.metrics.requests.labels(model, "200").inc()
            count("200")
            answer = Answer(200, content_type, chunks=resp.iter(t.idle_s), close=resp.close)
            return await self.relay_stream(answer, out, writer, ka, lambda e: self._stream_broke(model, e))
        try:
            raw = await resp.read(t.total_s)
        except (TimeoutError, HttpError, asyncio.IncompleteReadError, ConnectionError) as e:
            resp.close()
            count("503")
            writer.write(self._unavailable(model, f"body not complete ({type(e).__name__})", ka))
            await writer.drain()
            return ka
        if pool is not None and missing_from_preset(resp.status, raw, base):
            writer.write(await self._missing(pool, replica, base, ka, count, model))
            await writer.drain()
            return ka
        if pool is not None and lost_child(resp.status, raw):  # lost twice (_send_pooled): the client retries later
            count("503")
            writer.write(
                self._unavailable(model, f"pool {pool.name!r} lost the model's process twice under this request", ka)
            )
            await writer.drain()
            return ka
        if resp.status in UNAVAILABLE_STATUSES:  # e.g. llama-server answers 503 while it loads the model
            count("503")
            writer.write(self._unavailable(model, f"backend answered {resp.status}", ka, resp.header("retry-after")))
            await writer.drain()
            return ka
        if resp.status == 429:
            out.append(("Retry-After", resp.header("retry-after") or "1"))
        self._child(self.metrics.requests, model, str(resp.status)).inc()
        count(str(resp.status))
        writer.write(json_response(resp.status, None, keep_alive=ka, content_type=content_type, headers=out, raw=raw))
        await writer.drain()
        return ka

    async def _missing(
        self, pool: Pool, replica: int, model: str, ka: bool, count: Callable[[str], None], label: str = ""
    ) -> bytes:
        """The answer for a listed model that `replica`'s router does not know, from what its supervisor says
        (`label`: the name the client sent, an adapter's for its base `model`)."""
        label = label or model
        status = await pool.model_status(replica, model)
        state = status.state if status is not None and status.state != ps.LANDED else STALE_PRESET
        self._child(self.metrics.pool_missing_model, pool.name, state).inc()
        if status is None or state == STALE_PRESET:
            count("503")
            return self._unavailable(
                label,
                f"a replica of pool {pool.name!r} has not loaded its preset with model {model!r} yet "
                "(just added: replicas apply a new preset within about a minute)",
                ka,
            )
        if state == ps.COPYING:
            # Not a backend that is down (gateway_backend_unavailable_total is the scale-from-zero signal): the
            # weights are not in S3 yet, and no replica can serve them before the copy lands.
            code, message = 503, f"model {model} is being copied ({status.landed} of {status.total} landed)"
            extra: dict[str, object] = {"retry_after_seconds": ps.COPYING_RETRY_AFTER_SECONDS}
            headers = [("Retry-After", str(ps.COPYING_RETRY_AFTER_SECONDS))]
            log.debug("model %s: %s", model, message)
        else:  # COPY_FAILED: a client retry cannot fix it, the operator re-runs the copy
            code, headers = 500, []
            message = f"model {model} failed to copy: {status.reason or 'no reason given'}"
            extra = {"type": "model_copy_failed"}
        self._child(self.metrics.requests, label, str(code)).inc()
        count(str(code))
        return error_response(code, message, keep_alive=ka, headers=headers, extra=extra)

    def _stream_broke(self, model: str, e: BaseException) -> None:
        self.metrics.stream_errors.labels(model).inc()
        log.warning("%s stream broke: %s", model, type(e).__name__)
