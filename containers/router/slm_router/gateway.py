"""Mode `gateway` (the model farm's one entry point): route each OpenAI request to the backend of its `model`.

The body is forwarded byte for byte to the same path on that model's backend (a llama-server), and the
answer comes back unchanged: JSON, or SSE relayed piece by piece. An unknown model is a 404 that lists the
known ones. A backend that cannot answer now (scaled to zero, still loading, gone) is a 503 with
Retry-After, counted in gateway_backend_unavailable_total{model} so the autoscaler can wake it up.
Nothing is retried here: the client decides, guided by Retry-After.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time

from .backends import Answer
from .client import HttpClient, UpstreamError
from .config import Config
from .http1 import HttpError, Request
from .metrics import GatewayMetrics
from .server import Front, error_response, json_response

log = logging.getLogger("router.gateway")

# llama-server's OpenAI-compatible routes that carry a `model`.
GATEWAY_PATHS = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/rerank")
UNAVAILABLE_STATUSES = (502, 503, 504)
FORWARDED_HEADERS = ("accept", "authorization")


class GatewayServer(Front):
    post_paths = GATEWAY_PATHS
    routes_hint = ("the gateway serves POST " + ", ".join(GATEWAY_PATHS) + " (routed by the body's model), "
                   "GET /v1/models, /health, /ready, /metrics")

    def __init__(self, cfg: Config, metrics: GatewayMetrics):
        super().__init__(render_metrics=metrics.render, on_reject=lambda reason: metrics.rejected.labels(reason).inc(),
                         max_body_bytes=cfg.max_body_bytes, max_in_flight=cfg.max_in_flight)
        self.cfg = cfg
        self.metrics = metrics
        self.backends = {m.name: HttpClient(m.url, connect_timeout=cfg.timeouts.connect_s) for m in cfg.gateway.models}
        self.names = [m.name for m in cfg.gateway.models]
        self.retry_after = str(cfg.gateway.retry_after_s)
        self._created = int(time.time())

    async def close_upstreams(self) -> None:
        for client in self.backends.values():
            client.close()

    async def ready(self) -> tuple[int, dict]:
        # Backends scaled to zero are normal for a farm: the gateway is ready as soon as it routes.
        return 200, {"status": "ready", "models": len(self.names)}

    def get_extra(self, path: str) -> tuple[int, object] | None:
        if path in ("/v1/models", "/models"):
            data = [{"id": n, "object": "model", "created": self._created, "owned_by": "cpu-inference"} for n in self.names]
            return 200, {"object": "list", "data": data}
        return None

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
        if not isinstance(model, str) or model not in self.backends:
            known = ", ".join(self.names)
            if isinstance(model, str) and model:
                self.metrics.unknown_model.inc()
                status, message = 404, f"model {model!r} is not served here; known models: {known}"
            else:
                status, message = 400, f"model: required (one of: {known})"
            writer.write(error_response(status, message, keep_alive=ka, extra={"param": "model", "known_models": self.names}))
            await writer.drain()
            return ka
        self.metrics.in_flight.labels(model).inc()
        try:
            return await self._forward(model, req, writer, ka)
        finally:
            self.metrics.in_flight.labels(model).dec()

    def _unavailable(self, model: str, detail: str, ka: bool, retry_after: str = "") -> bytes:
        self.metrics.unavailable.labels(model).inc()
        self.metrics.requests.labels(model, "503").inc()
        log.warning("model %s unavailable: %s", model, detail)
        return error_response(503, f"model {model!r} is unavailable right now ({detail}); retry later", keep_alive=ka,
                              headers=[("Retry-After", retry_after or self.retry_after)])

    async def _forward(self, model: str, req: Request, writer: asyncio.StreamWriter, ka: bool) -> bool:
        t = self.cfg.timeouts
        start = time.perf_counter()
        headers = [("Content-Type", "application/json")]
        headers += [(name.title(), req.head.header(name)) for name in FORWARDED_HEADERS if req.head.header(name)]
        try:
            resp = await self.backends[model].request("POST", req.path, req.body, headers, head_timeout=t.first_byte_s)
        except UpstreamError as e:
            writer.write(self._unavailable(model, f"{e.reason}: {e}", ka))
            await writer.drain()
            return ka
        self.metrics.request_seconds.labels(model).observe(time.perf_counter() - start)
        content_type = resp.header("content-type", "application/json")
        out = [("x-gateway-model", model)]
        if resp.status == 200 and content_type.startswith("text/event-stream"):
            self.metrics.requests.labels(model, "200").inc()
            answer = Answer(200, content_type, chunks=resp.iter(t.idle_s), close=resp.close)
            return await self.relay_stream(answer, out, writer, ka, lambda e: self._stream_broke(model, e))
        try:
            raw = await resp.read(t.total_s)
        except (TimeoutError, HttpError, asyncio.IncompleteReadError, ConnectionError) as e:
            resp.close()
            writer.write(self._unavailable(model, f"body not complete ({type(e).__name__})", ka))
            await writer.drain()
            return ka
        if resp.status in UNAVAILABLE_STATUSES:  # e.g. llama-server answers 503 while it loads the model
            writer.write(self._unavailable(model, f"backend answered {resp.status}", ka, resp.header("retry-after")))
            await writer.drain()
            return ka
        if resp.status == 429:
            out.append(("Retry-After", resp.header("retry-after") or "1"))
        self.metrics.requests.labels(model, str(resp.status)).inc()
        writer.write(json_response(resp.status, None, keep_alive=ka, content_type=content_type, headers=out, raw=raw))
        await writer.drain()
        return ka

    def _stream_broke(self, model: str, e: BaseException) -> None:
        self.metrics.stream_errors.labels(model).inc()
        log.warning("%s stream broke: %s", model, type(e).__name__)
