"""The HTTP front shared by both modes (asyncio, stdlib) on http1.Http1Server (connections, keep-alive, malformed
requests, draining on shutdown): probes, /metrics and overload (429 + Retry-After beyond max_in_flight).
RouterServer answers the routed chat; gateway.GatewayServer routes by model name."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable

from inference_runtime.http1 import LAST_CHUNK, Http1Server, HttpError, Request, encode_chunk, encode_head, error_body

from .answer import Answer
from .client import HttpClient, UpstreamError
from .metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from .metrics import Metrics
from .router import BadRequest, NoUpstream, Routed, Router

log = logging.getLogger("router.http")

CLIENT_IDLE_S = 75.0  # longer than typical load balancer idle timeouts (ALB: 60 s), so the LB closes first
READY_CACHE_S = 1.0
OVERLOAD_RETRY_AFTER_S = 1
PROBE_PATHS = ("/health", "/ready", "/ping", "/metrics")


def error_response(
    status: int,
    message: str,
    *,
    keep_alive: bool = True,
    headers: list[tuple[str, str]] | None = None,
    extra: dict | None = None,
) -> bytes:
    body = error_body(status, message)
    if extra:
        doc = json.loads(body)
        doc["error"].update(extra)
        body = json.dumps(doc).encode()
    return (
        encode_head(
            status,
            [
                ("Content-Type", "application/json"),
                ("Content-Length", str(len(body))),
                *(headers or []),
                ("Connection", "keep-alive" if keep_alive else "close"),
            ],
        )
        + body
    )


def json_response(
    status: int,
    doc: object,
    *,
    keep_alive: bool,
    content_type: str = "application/json",
    headers: list[tuple[str, str]] | None = None,
    raw: bytes | None = None,
) -> bytes:
    body = raw if raw is not None else json.dumps(doc).encode()
    return (
        encode_head(
            status,
            [
                ("Content-Type", content_type),
                ("Content-Length", str(len(body))),
                *(headers or []),
                ("Connection", "keep-alive" if keep_alive else "close"),
            ],
        )
        + body
    )


class Front(Http1Server):
    """Subclasses set `post_paths`, and implement handle_post(), ready(), get_extra() and close_upstreams()."""

    post_paths: tuple[str, ...] = ()
    routes_hint = ""

    log = logging.getLogger("router.http")
    abort_seconds = 0.0  # nothing to end cleanly after the drain: remaining connections are dropped at once

    def __init__(
        self,
        *,
        render_metrics: Callable[[], bytes],
        on_reject: Callable[[str], None],
        max_body_bytes: int,
        max_in_flight: int,
    ):
        super().__init__(max_body_bytes=max_body_bytes, client_idle_timeout=CLIENT_IDLE_S)
        self.render_metrics = render_metrics
        self.on_reject = on_reject
        self.max_in_flight = max_in_flight
        self.in_flight = 0  # POST requests in progress (the overload limit)

    async def close(self, grace: float = 20.0) -> None:
        """Stop accepting, let requests in progress finish (up to `grace` seconds), then drop the rest."""
        await super().close(grace)
        await self.close_upstreams()

    def refuse(self, error: HttpError) -> bytes:
        return error_response(error.status, error.message, keep_alive=False)

    async def close_upstreams(self) -> None:
        raise NotImplementedError

    async def handle_post(self, req: Request, writer: asyncio.StreamWriter, ka: bool) -> bool:
        raise NotImplementedError

    async def ready(self) -> tuple[int, dict]:
        raise NotImplementedError

    def get_extra(self, path: str) -> tuple[int, object] | None:
        """Further GET routes of a mode (e.g. the gateway's /v1/models): (status, JSON doc) or None."""
        return None

    async def _dispatch(self, req: Request, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        ka = req.keep_alive and not self._closing
        path = req.path
        if path in self.post_paths:
            if req.method != "POST":
                writer.write(error_response(405, f"use POST {path}", keep_alive=ka, headers=[("Allow", "POST")]))
            elif self._closing:
                self.on_reject("draining")
                writer.write(
                    error_response(
                        503,
                        "shutting down: retry on another replica",
                        keep_alive=False,
                        headers=[("Retry-After", str(OVERLOAD_RETRY_AFTER_S))],
                    )
                )
            elif self.in_flight >= self.max_in_flight:
                # Overload: refuse at once instead of queueing without bound; clients and load balancers retry.
                self.on_reject("overload")
                writer.write(
                    error_response(
                        429,
                        f"overloaded: {self.in_flight} requests in progress (max_in_flight)",
                        keep_alive=ka,
                        headers=[("Retry-After", str(OVERLOAD_RETRY_AFTER_S))],
                    )
                )
            else:
                self.in_flight += 1
                try:
                    return await self.handle_post(req, writer, ka)
                finally:
                    self.in_flight -= 1
            await writer.drain()
            return ka
        extra = self.get_extra(path) if req.method in ("GET", "HEAD") else None
        if req.method not in ("GET", "HEAD"):
            writer.write(
                error_response(405 if path in PROBE_PATHS else 404, f"no route {req.method} {path}", keep_alive=ka)
            )
        elif path == "/health":
            # Liveness: the config loaded (the server only listens after that) and the loop answers.
            writer.write(json_response(200, {"status": "ok"}, keep_alive=ka))
        elif path in ("/ready", "/ping"):  # /ping: SageMaker's health check
            status, doc = await self.ready()
            if self._closing:
                status, doc = 503, {**doc, "status": "draining"}
            writer.write(json_response(status, doc, keep_alive=ka))
        elif path == "/metrics":
            writer.write(
                json_response(200, None, keep_alive=ka, content_type=METRICS_CONTENT_TYPE, raw=self.render_metrics())
            )
        elif extra is not None:
            writer.write(json_response(extra[0], extra[1], keep_alive=ka))
        else:
            writer.write(error_response(404, f"no route {path}: {self.routes_hint}", keep_alive=ka))
        await writer.drain()
        return ka

    async def relay_stream(
        self,
        answer: Answer,
        headers: list[tuple[str, str]],
        writer: asyncio.StreamWriter,
        ka: bool,
        on_break: Callable[[BaseException], None],
    ) -> bool:
        """Relay SSE pieces as they arrive. After the head is out there is no fallback: a broken upstream
        ends the stream with an SSE error event."""
        assert answer.chunks is not None
        writer.write(
            encode_head(
                answer.status,
                [
                    ("Content-Type", answer.content_type),
                    ("Cache-Control", "no-cache"),
                    *headers,
                    ("Transfer-Encoding", "chunked"),
                    ("Connection", "keep-alive" if ka else "close"),
                ],
            )
        )
        try:
            async for data in answer.chunks:
                writer.write(encode_chunk(data))
                await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            answer.close()  # the client left: closing upstream stops the generation
            raise
        except (TimeoutError, HttpError, asyncio.IncompleteReadError, UpstreamError) as e:
            answer.close()
            on_break(e)
            event = {
                "error": {"code": 502, "type": "server_error", "message": f"upstream stream broke ({type(e).__name__})"}
            }
            writer.write(encode_chunk(b"data: " + json.dumps(event).encode() + b"\n\n"))
            writer.write(LAST_CHUNK)
            await writer.drain()
            return False
        writer.write(LAST_CHUNK)
        await writer.drain()
        return ka


class RouterServer(Front):
    """Mode `router`: POST /v1/chat/completions classified by the SLM, answered by the SLM or the LLM."""

    post_paths = ("/v1/chat/completions", "/chat/completions", "/invocations")  # /invocations: SageMaker's data plane
    routes_hint = "the router serves POST /v1/chat/completions (and /invocations), GET /health, /ready, /ping, /metrics"

    def __init__(
        self,
        router: Router,
        metrics: Metrics,
        slm_health: HttpClient | None,
        *,
        max_body_bytes: int,
        max_in_flight: int,
    ):
        super().__init__(
            render_metrics=metrics.render,
            on_reject=lambda reason: metrics.rejected.labels(reason).inc(),
            max_body_bytes=max_body_bytes,
            max_in_flight=max_in_flight,
        )
        self.router = router
        self.metrics = metrics
        self.slm_health = slm_health
        self._ready_cache: tuple[float, int, dict] | None = None

    async def close_upstreams(self) -> None:
        for backend in (self.router.slm, self.router.llm):
            await backend.aclose()
        self.router.classifier.client.close()
        if self.slm_health is not None:
            self.slm_health.close()

    async def ready(self) -> tuple[int, dict]:
        """Ready when some model can answer: the SLM's /health is 200 (a SageMaker SLM endpoint: its circuit is not
        open), or the LLM's circuit is not open."""
        now = time.monotonic()
        if self._ready_cache and now - self._ready_cache[0] < READY_CACHE_S:
            return self._ready_cache[1], self._ready_cache[2]
        if self.slm_health is None:
            slm_ok = self.router.breakers["slm"].state != "open"
        else:
            try:
                slm_ok = await self.slm_health.get("/health", timeout=1.0) == 200
            except (TimeoutError, UpstreamError, HttpError, ConnectionError, asyncio.IncompleteReadError):
                slm_ok = False
        llm_state = self.router.breakers["llm"].state
        ready = slm_ok or llm_state != "open"
        doc = {
            "status": "ready" if ready else "unavailable",
            "slm": "ok" if slm_ok else "down",
            "llm_circuit": llm_state,
        }
        self._ready_cache = (now, 200 if ready else 503, doc)
        return self._ready_cache[1], doc

    async def handle_post(self, req: Request, writer: asyncio.StreamWriter, ka: bool) -> bool:
        try:
            body = json.loads(req.body)
        except (ValueError, UnicodeDecodeError):
            writer.write(error_response(400, "body must be JSON", keep_alive=ka))
            await writer.drain()
            return ka
        try:
            routed = await self.router.route(body)
        except BadRequest as e:
            writer.write(error_response(400, str(e), keep_alive=ka))
            await writer.drain()
            return ka
        except NoUpstream as e:
            writer.write(error_response(503, f"no model available: {e}", keep_alive=ka, headers=[("Retry-After", "1")]))
            await writer.drain()
            return ka
        answer = routed.answer
        if answer.chunks is None:
            writer.write(
                json_response(
                    answer.status,
                    None,
                    keep_alive=ka,
                    content_type=answer.content_type,
                    headers=routed.headers(),
                    raw=Router.mark_json(answer, routed),
                )
            )
            await writer.drain()
            return ka
        return await self.relay_stream(answer, routed.headers(), writer, ka, lambda e: self._stream_broke(routed, e))

    def _stream_broke(self, routed: Routed, e: BaseException) -> None:
        self.metrics.stream_errors.labels(routed.route).inc()
        log.warning("%s stream broke: %s", routed.route, type(e).__name__)
