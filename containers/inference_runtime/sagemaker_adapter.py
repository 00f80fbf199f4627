"""SageMaker's container contract in front of llama-server on loopback (asyncio; the HTTP layer is http1).

Data plane only: `GET /ping` and `POST /invocations`; every other path is 404 (no model swap, no
/props, no slot save/restore). The body's shape picks the engine route (ROUTES, one table): an OpenAI chat
body (`messages`) goes to /v1/chat/completions, a completion body (`prompt`) to /v1/completions, an OpenAI
embeddings body (`input`, a string or a list of them) to /v1/embeddings, a rerank body (`query` + `documents`)
to /v1/rerank; a body of no shape or of two is one 400 naming them. A streamed generation is forwarded byte
for byte (a non-streamed one gets the engine's time limit, see Time below), an embeddings or rerank body always
byte for byte (they generate nothing), and the response is relayed as it arrives (SSE when `stream: true`,
which InvokeEndpointWithResponseStream consumes).

Admission: at most `max_in_flight` (= slots + queue depth) requests in flight; beyond that 429 with
Retry-After, so bursts queue in the engine (bounded) instead of piling up behind SageMaker's timeout.
503 with Retry-After while the engine is down or loading.

Time: InvokeEndpoint waits at most 60 s for the container ("A customer's model containers must respond
to requests within 60 seconds", API_runtime_InvokeEndpoint), so a non-streamed request gets a time budget
(`generation_budget`): the engine is asked to stop generating before it (`t_max_predict_ms`, which the
pinned llama-server honours at the first newline after the limit: tools/server/server-context.cpp), and at
the budget the adapter closes the engine connection and answers 504. A request whose client left is
cancelled the same way: closing the engine connection makes llama-server cancel the task (its handler
polls `is_connection_closed` every HTTP_POLLING_SECONDS = 1 s and the response reader's destructor
cancels the task: server-context.cpp, server-queue.cpp). Streamed requests
(InvokeEndpointWithResponseStream) have no budget: that is the way to long answers. Embeddings and rerank
requests keep the budget (they are never streamed) but get no `t_max_predict_ms`: they generate no token.

LoRA adapters (a base served with its adapters: LLAMA_LORA_MANIFEST, lora.py): the body's `model` picks what answers
— an adapter's name sends the request with `lora` = that adapter's id and scale (lora.request_lora) and `model` = the
base's name; the base's name or no `model` sends lora.base_lora() (the pinned engine would apply every adapter to a
request without `lora`: llama.cpp#28674). Every request goes with cache_prompt false (lora.isolated: llama.cpp#26207
reuses prompt KV across adapters). A client's own `lora` is a 400 (the adapter is chosen by name, its id is this
endpoint's business), and so is a `model` that is neither the base nor an adapter, naming what is served. Without
adapters `model` is not looked at (llama-server answers under its alias whatever was asked).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from .env import EngineConfigError, env_float, env_int, env_str
from .http1 import (
    LAST_CHUNK,
    Connection,
    Head,
    Http1Server,
    HttpError,
    KeepAlivePool,
    Request,
    encode_chunk,
    encode_head,
    iter_chunked,
    iter_until_eof,
    json_error,
    read_head,
)
from .lora import LORA_FIELD, BundledAdapter, base_lora, isolated, request_lora

log = logging.getLogger("sagemaker-adapter")

# Both engines close an idle keep-alive connection after 5 s: cpp-httplib's CPPHTTPLIB_KEEPALIVE_TIMEOUT_SECOND in the
# pinned llama.cpp, uvicorn's timeout_keep_alive in vLLM 0.32 (vllm/envs.py VLLM_HTTP_TIMEOUT_KEEP_ALIVE = 5). The
# adapter drops its idle engine connections before that (ADAPTER_POOL_IDLE_SECONDS), for either engine.
ENGINE_KEEPALIVE_SECONDS = 5.0
DEFAULT_POOL_IDLE_SECONDS = 3.0
INVOKE_ENDPOINT_TIMEOUT_SECONDS = 60.0  # InvokeEndpoint: containers must respond within 60 s (API reference)
# A non-streamed answer must leave the container before SageMaker gives up, with room for its front end.
DEFAULT_GENERATION_BUDGET_SECONDS = INVOKE_ENDPOINT_TIMEOUT_SECONDS - 10.0
# The engine's own limit, as a share of the budget: it counts generation only (from the first token) and
# stops at the next newline, so the rest of the budget is for queueing, the prompt and that last line.
SOFT_LIMIT_FRACTION = 0.6
WATCH_SECONDS = 0.1  # how often a request waiting for the engine checks its client, budget and shutdown
ABORT_SECONDS = 1.0  # on shutdown, time for requests still running to send their clean 503 / last SSE event
RELAYED_HEADERS = ("content-type", "cache-control")
NAMES_IN_ERROR = 10  # a 400 for an unknown `model` names this many of the served names (then how many more)


@dataclass(frozen=True)
class Route:
    """One accepted body shape: the keys that make it, the engine path it goes to, whether it generates tokens
    (only those get the engine's time limit and may stream)."""

    name: str
    keys: tuple[str, ...]  # all present: the body is this shape
    path: str
    generates: bool

    def describe(self) -> str:
        return f"{self.name} ({' + '.join(self.keys)})"


# The engine paths exist on both engines behind this adapter: the pinned llama-server (tools/server/server.cpp:
# /v1/chat/completions, /v1/completions, /v1/embeddings, /v1/rerank; bodies in server-context.cpp:
# handle_embeddings_impl reads "input", post_rerank "query" and "documents") and vLLM 0.32's OpenAI server
# (vllm/entrypoints/pooling/embed/api_router.py /v1/embeddings with EmbeddingRequest.input,
# pooling/scoring/api_router.py /v1/rerank with RerankRequest.query/.documents). The gateway uses the same paths
# (containers/router/slm_router/gateway.py GATEWAY_PATHS).
ROUTES = (
    Route("OpenAI chat", ("messages",), "/v1/chat/completions", generates=True),
    Route("completion", ("prompt",), "/v1/completions", generates=True),
    Route("OpenAI embeddings", ("input",), "/v1/embeddings", generates=False),
    Route("rerank", ("query", "documents"), "/v1/rerank", generates=False),
)
ACCEPTED_SHAPES = ", ".join(r.describe() for r in ROUTES)


def route_for(payload: object) -> Route | str:
    """The route of a parsed body, or why there is none (one line naming every accepted shape)."""
    if not isinstance(payload, dict):
        return f"body must be a JSON object of one shape: {ACCEPTED_SHAPES}"
    matched = [r for r in ROUTES if all(k in payload for k in r.keys)]
    if len(matched) == 1:
        return matched[0]
    if matched:
        return (
            f"body matches {' and '.join(r.describe() for r in matched)}: send exactly one shape of {ACCEPTED_SHAPES}"
        )
    return f"body must be one of {ACCEPTED_SHAPES}; got keys {', '.join(sorted(map(str, payload))) or 'none'}"


@dataclass
class AdapterStats:
    accepted: int = 0
    rejected_busy: int = 0  # 429
    rejected_unavailable: int = 0  # 503 before reaching the engine
    stale_retries: int = 0  # requests re-sent once on a fresh connection
    upstream_errors: int = 0  # 502/504
    over_budget: int = 0  # non-streamed requests cut at the generation budget (504)
    client_gone: int = 0  # requests whose client left before the answer: engine task cancelled
    aborted: int = 0  # requests still running when the drain ended (503 / SSE error event)


class EngineUnavailable(Exception):
    pass


class _StaleConnection(Exception):
    """The engine closed a pooled keep-alive connection before answering: the request was not processed."""


class _ClientGone(Exception):
    """The client closed its connection while the engine was still working on its request."""


class _Aborted(Exception):
    """The adapter is stopping and the drain time is over."""


class _OverBudget(Exception):
    """A non-streamed request reached its generation budget."""


def _client_gone(reader: asyncio.StreamReader) -> bool:
    # EOF (FIN) or a reset with nothing left unread: SageMaker never pipelines, so no request can be lost.
    return reader.exception() is not None or reader.at_eof()


class EnginePool(KeepAlivePool):
    """Keep-alive connections to the engine (http1.KeepAlivePool); a connection that cannot be opened is
    EngineUnavailable (503). A pooled one the engine closed anyway shows up as an immediate EOF on use and
    the request is re-sent once (see _forward)."""

    def __init__(self, host: str, port: int, *, max_idle: int, idle_seconds: float, connect_timeout: float = 2.0):
        super().__init__(host, port, max_idle=max_idle, idle_seconds=idle_seconds, connect_timeout=connect_timeout)

    async def acquire(self, *, fresh: bool = False) -> tuple[Connection, bool]:
        conn = None if fresh else self.take_idle()
        if conn is not None:
            return conn, True
        try:
            return await self.connect(), False
        except (TimeoutError, OSError) as e:
            raise EngineUnavailable(f"engine not reachable: {e}") from None


class HttpFront(Http1Server):
    """SageMaker's side of the container: http1.Http1Server (the accept loop, keep-alive connections, malformed
    requests, a graceful stop) on port 8080. A subclass answers each request in `_dispatch`; the single-model
    adapter below and the multi-model one (mme_adapter.py) share it."""

    log = logging.getLogger("sagemaker-adapter")
    abort_seconds = ABORT_SECONDS

    async def start(self, host: str = "0.0.0.0", port: int = 8080) -> int:
        return await super().start(host, port)

    async def close(self, grace: float = 10.0) -> None:
        await super().close(grace)

    @staticmethod
    async def _send(writer: asyncio.StreamWriter, data: bytes, keep_alive: bool) -> bool:
        writer.write(data)
        await writer.drain()
        return keep_alive


class SageMakerAdapter(HttpFront):
    """One engine behind /ping and /invocations. The multi-model adapter runs one per loaded model, unstarted,
    for its `invoke` (admission, time budget, cancellation, relay)."""

    def __init__(
        self,
        engine_host: str,
        engine_port: int,
        *,
        max_in_flight: int,
        retry_after: int = 1,
        pool_idle_seconds: float = DEFAULT_POOL_IDLE_SECONDS,
        request_timeout: float = 600.0,  # streamed requests: longest silence between two events
        generation_budget: float = DEFAULT_GENERATION_BUDGET_SECONDS,  # non-streamed requests: answer by then
        max_body_bytes: int = 6 * 1024 * 1024,  # SageMaker's real-time payload limit
        client_idle_timeout: float = 75.0,  # longer than SageMaker's front end keeps idle connections
        adapters: Sequence[BundledAdapter] = (),  # LoRA adapters the engine loaded, in id order (module docstring)
        base: str | None = None,  # the base's name (the engine's alias): required with adapters
    ):
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight must be >= 1, got {max_in_flight}")
        if not 0 < generation_budget <= INVOKE_ENDPOINT_TIMEOUT_SECONDS:
            raise ValueError(
                f"generation_budget must be in (0, {INVOKE_ENDPOINT_TIMEOUT_SECONDS:.0f}] s, got {generation_budget}"
            )
        if adapters and not base:
            raise ValueError("base (the model's name) is required with adapters")
        super().__init__(max_body_bytes=max_body_bytes, client_idle_timeout=client_idle_timeout)
        self.adapters = tuple(adapters)
        self.base = base
        self._adapter_ids = {a.name: i for i, a in enumerate(self.adapters)}
        self.generation_budget = generation_budget
        self.engine = (engine_host, engine_port)
        self.max_in_flight = max_in_flight
        self.retry_after = retry_after
        self.request_timeout = request_timeout
        self.pool = EnginePool(engine_host, engine_port, max_idle=max_in_flight + 2, idle_seconds=pool_idle_seconds)
        self.stats = AdapterStats()
        self.in_flight = 0  # admitted /invocations (the admission bound)
        self._aborting = False  # the drain is over: requests still running are answered 503 and cut
        self._engine_conns: set[Connection] = set()  # engine connections of requests being answered

    # --- lifecycle ---------------------------------------------------------------------------------

    def abort_in_flight(self) -> None:
        self._aborting = True
        for conn in list(self._engine_conns):
            conn.close()

    def release(self) -> None:
        self.pool.close()

    def retarget(self, port: int) -> None:
        """The engine was restarted on another loopback port (mme_adapter: a crashed child): new requests go there;
        idle connections to the dead one are dropped."""
        self.pool.close()
        self.pool.port = port
        self.engine = (self.engine[0], port)

    # --- connections -------------------------------------------------------------------------------

    async def _dispatch(self, req: Request, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Answer one request; False when the connection must close."""
        path = req.path
        if path == "/ping":
            if req.method not in ("GET", "HEAD"):
                return await self._send(
                    writer,
                    json_error(405, "use GET /ping", keep_alive=req.keep_alive, extra=[("Allow", "GET")]),
                    req.keep_alive,
                )
            healthy = await self.engine_healthy()
            if healthy:
                body = b'{"status":"ok"}'
                head = encode_head(
                    200,
                    [
                        ("Content-Type", "application/json"),
                        ("Content-Length", str(len(body))),
                        ("Connection", "keep-alive" if req.keep_alive else "close"),
                    ],
                )
                return await self._send(writer, head + (b"" if req.method == "HEAD" else body), req.keep_alive)
            return await self._send(
                writer,
                json_error(
                    503, "model loading or engine down", keep_alive=req.keep_alive, retry_after=self.retry_after
                ),
                req.keep_alive,
            )
        if path == "/invocations":
            if req.method != "POST":
                return await self._send(
                    writer,
                    json_error(405, "use POST /invocations", keep_alive=req.keep_alive, extra=[("Allow", "POST")]),
                    req.keep_alive,
                )
            return await self.invoke(req, reader, writer)
        return await self._send(
            writer,
            json_error(
                404, f"no route {path}: this endpoint serves GET /ping and POST /invocations", keep_alive=req.keep_alive
            ),
            req.keep_alive,
        )

    # --- /ping -------------------------------------------------------------------------------------

    async def engine_healthy(self, timeout: float = 1.5) -> bool:  # SageMaker wants /ping within 2 s
        """llama-server's /health: 200 once the model is loaded, 503 while loading."""
        host, port = self.engine
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
        except (TimeoutError, OSError):
            return False
        try:
            writer.write(f"GET /health HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n\r\n".encode())
            await writer.drain()
            head = await asyncio.wait_for(read_head(reader), timeout)
            return head is not None and head.start_line.split(" ")[1:2] == ["200"]
        except (TimeoutError, OSError, asyncio.IncompleteReadError, HttpError):
            return False
        finally:
            writer.close()

    # --- /invocations ------------------------------------------------------------------------------

    async def invoke(self, req: Request, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Answer one inference request (a POST body) through the engine; False when the connection must close."""
        ka = req.keep_alive
        received = time.monotonic()
        if self.in_flight >= self.max_in_flight:
            self.stats.rejected_busy += 1
            return await self._send(
                writer,
                json_error(
                    429, f"busy: {self.max_in_flight} requests in flight", keep_alive=ka, retry_after=self.retry_after
                ),
                ka,
            )
        try:
            payload = json.loads(req.body)
        except (ValueError, UnicodeDecodeError):
            return await self._send(writer, json_error(400, "body must be JSON", keep_alive=ka), ka)
        route = route_for(payload)
        if isinstance(route, str):
            return await self._send(writer, json_error(400, route, keep_alive=ka), ka)
        assert isinstance(payload, dict)  # route_for found a shape
        if self.adapters:
            selected = self.select_adapter(payload)
            if isinstance(selected, str):
                return await self._send(writer, json_error(400, selected, keep_alive=ka), ka)
            payload = selected
        streamed = route.generates and payload.get("stream") is True
        # Only a generation gets the engine's own time limit; every other body reaches the engine as sent (with
        # adapters: as selected).
        if route.generates and not streamed:
            body = self._within_budget(payload)
        else:
            body = json.dumps(payload).encode() if self.adapters else req.body
        deadline = None if streamed else received + self.generation_budget
        self.in_flight += 1
        self.stats.accepted += 1
        try:
            try:
                conn, head = await self._forward(route.path, body, reader, deadline)
            except EngineUnavailable as e:
                self.stats.rejected_unavailable += 1
                return await self._send(
                    writer, json_error(503, str(e), keep_alive=ka, retry_after=self.retry_after), ka
                )
            except _ClientGone:
                self.stats.client_gone += 1
                log.info("client left before the answer: engine request cancelled")
                return False
            except _OverBudget:
                self.stats.over_budget += 1
                message = (
                    f"no answer within the {self.generation_budget:.0f} s budget of a non-streamed request (InvokeEndpoint "
                    "waits 60 s): generation cancelled; ask for fewer max_tokens, or stream it with "
                    'InvokeEndpointWithResponseStream ("stream": true)'
                )
                return await self._send(writer, json_error(504, message, keep_alive=False), False)
            except _Aborted:
                self.stats.aborted += 1
                return await self._send(
                    writer,
                    json_error(503, "endpoint shutting down: retry", keep_alive=False, retry_after=self.retry_after),
                    False,
                )
            except (TimeoutError, HttpError, ConnectionError, asyncio.IncompleteReadError) as e:
                self.stats.upstream_errors += 1
                status = 504 if isinstance(e, asyncio.TimeoutError) else 502
                return await self._send(
                    writer, json_error(status, f"engine error: {type(e).__name__}", keep_alive=ka), ka
                )
            return await self._relay(conn, head, writer, ka)
        finally:
            self.in_flight -= 1

    def select_adapter(self, payload: dict[str, Any]) -> dict[str, Any] | str:
        """The body for the engine of a base with adapters (module docstring), or the 400's message."""
        if LORA_FIELD in payload:
            return f"`{LORA_FIELD}` is set by this endpoint: name the adapter in `model` instead ({self._served()})"
        model = payload.get("model")
        if model is None or model == self.base:
            return isolated({**payload, LORA_FIELD: base_lora()})
        adapter_id = self._adapter_ids.get(model) if isinstance(model, str) else None
        if adapter_id is None:
            return f"model {model!r} is not served by this endpoint: send {self._served()}"
        scale = self.adapters[adapter_id].scale
        return isolated({**payload, "model": self.base, LORA_FIELD: request_lora(adapter_id, scale)})

    def _served(self) -> str:
        names = [a.name for a in self.adapters]
        shown = ", ".join(repr(n) for n in names[:NAMES_IN_ERROR])
        more = f" and {len(names) - NAMES_IN_ERROR} more" if len(names) > NAMES_IN_ERROR else ""
        return f"model {self.base!r} (the base, also when model is left out) or an adapter: {shown}{more}"

    def _within_budget(self, payload: dict) -> bytes:
        """The body with the engine's own time limit set below the budget, so a long answer comes back cut
        (finish_reason "length") rather than cancelled. llama-server counts t_max_predict_ms from the first
        generated token and stops at the first newline after it: the adapter's hard deadline stays."""
        soft_ms = int(self.generation_budget * 1000 * SOFT_LIMIT_FRACTION)
        asked = payload.get("t_max_predict_ms")
        if not (isinstance(asked, int) and not isinstance(asked, bool) and 0 < asked <= soft_ms):
            payload["t_max_predict_ms"] = soft_ms
        return json.dumps(payload).encode()

    async def _forward(
        self, path: str, body: bytes, client: asyncio.StreamReader, deadline: float | None
    ) -> tuple[Connection, Head]:
        host, port = self.engine
        request = (
            f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: keep-alive\r\n\r\n"
        ).encode() + body
        for attempt in (0, 1):
            conn, reused = await self.pool.acquire(fresh=attempt > 0)
            self._engine_conns.add(conn)
            try:
                conn.writer.write(request)
                await conn.writer.drain()
                head = await self._head_or_stop(conn, client, deadline)
                if head is None:
                    raise _StaleConnection()
                return conn, head
            except (_StaleConnection, ConnectionResetError, BrokenPipeError):
                conn.close()
                self._engine_conns.discard(conn)
                if self._aborting:
                    raise _Aborted() from None
                if reused and attempt == 0:
                    # Nothing came back on a reused connection: the engine closed it idle and never read the
                    # request, so re-sending cannot run the generation twice.
                    self.stats.stale_retries += 1
                    continue
                raise EngineUnavailable("engine closed the connection") from None
            except BaseException as e:
                # Closing the engine connection is what makes llama-server cancel the request.
                conn.close()
                self._engine_conns.discard(conn)
                if self._aborting and not isinstance(e, (asyncio.CancelledError, _Aborted)):
                    raise _Aborted() from None
                raise
        raise AssertionError("unreachable")

    async def _head_or_stop(
        self, conn: Connection, client: asyncio.StreamReader, deadline: float | None
    ) -> Head | None:
        """The engine's response head, unless first the client leaves, the budget ends or the drain is over."""
        loop = asyncio.get_running_loop()
        idle_limit = loop.time() + self.request_timeout
        head = asyncio.ensure_future(read_head(conn.reader))
        try:
            while True:
                done, _ = await asyncio.wait({head}, timeout=WATCH_SECONDS)
                if done:
                    return head.result()
                if self._aborting:
                    raise _Aborted()
                if _client_gone(client):
                    raise _ClientGone()
                now = time.monotonic()
                if deadline is not None and now >= deadline:
                    raise _OverBudget()
                if loop.time() >= idle_limit:
                    raise TimeoutError()
        finally:
            if not head.done():
                head.cancel()
                with contextlib.suppress(BaseException):
                    await head

    async def _relay(self, conn: Connection, head: Head, writer: asyncio.StreamWriter, keep_alive: bool) -> bool:
        """Stream the engine's response to the client as it arrives (no buffering of whole bodies)."""
        status = head.status
        reusable = head.reusable
        out = [(name.title(), head.headers[name]) for name in RELAYED_HEADERS if name in head.headers]
        if status == 503:
            out.append(("Retry-After", str(self.retry_after)))
        conn_header = ("Connection", "keep-alive" if keep_alive else "close")
        released = False
        chunked_head_sent = False

        def engine_body_read() -> None:
            # Hand the engine connection back as soon as its response is fully read, before the client has
            # the last bytes: a request that follows at once finds it idle instead of opening another.
            nonlocal released
            released = True
            self._engine_conns.discard(conn)
            if reusable and not self._aborting:
                self.pool.release(conn)
            else:
                conn.close()

        try:
            length = head.content_length()
            if head.chunked or length is None:
                writer.write(encode_head(status, out + [("Transfer-Encoding", "chunked"), conn_header]))
                chunked_head_sent = True
                source = iter_chunked(conn.reader) if head.chunked else iter_until_eof(conn.reader)
                reusable = reusable and head.chunked
                # One deadline pushed forward per chunk (an idle timeout between SSE events), rather than
                # wait_for per chunk, which would create a task per token.
                loop = asyncio.get_running_loop()
                async with asyncio.timeout(self.request_timeout) as idle:
                    async for data in source:
                        writer.write(encode_chunk(data))
                        await writer.drain()
                        idle.reschedule(loop.time() + self.request_timeout)
                engine_body_read()
                writer.write(LAST_CHUNK)
            else:
                writer.write(encode_head(status, out + [("Content-Length", str(length)), conn_header]))
                remaining = length
                while remaining:
                    data = await asyncio.wait_for(conn.reader.read(min(remaining, 1 << 16)), self.request_timeout)
                    if not data:
                        raise asyncio.IncompleteReadError(b"", remaining)
                    remaining -= len(data)
                    if not remaining:
                        engine_body_read()
                    writer.write(data)
                    await writer.drain()
                if not released:  # empty body
                    engine_body_read()
            await writer.drain()
        except BaseException:
            # The client left or the engine broke mid-body: closing the engine connection makes llama-server
            # cancel the generation and free the slot. The client connection cannot carry on either.
            if not released:
                conn.close()
                self._engine_conns.discard(conn)
            if self._aborting and chunked_head_sent:
                # Shutting down mid-stream: end the event stream cleanly with an error event.
                self.stats.aborted += 1
                event = b'data: {"error": {"code": 503, "message": "endpoint shutting down", "type": "unavailable_error"}}\n\n'
                with contextlib.suppress(Exception):
                    writer.write(encode_chunk(event) + LAST_CHUNK)
                    await writer.drain()
                return False
            raise
        return keep_alive


async def serve_engine(
    adapter: SageMakerAdapter,
    command: list[str],
    *,
    host: str,
    port: int,
    drain_seconds: float,
    engine_stop_seconds: float,
    engine: str,
    env: dict[str, str] | None = None,
) -> int:
    """SageMaker mode around one engine process (llama-server, or vLLM in its image): bind the adapter first, so
    /ping answers 503 (not connection refused) while the engine loads; then run until SIGTERM (drain, stop the
    engine, exit 0) or until the engine dies (its exit code, so the platform replaces the container instead of
    answering 503 forever)."""
    bound = await adapter.start(host, port)
    log.info("adapter on %s:%d, max in flight %d; engine: %s", host, bound, adapter.max_in_flight, " ".join(command))
    # Its own process group (setsid), so what the engine starts (vLLM's EngineCore and workers) can be killed with
    # it; no other process can join that group, so its id stays the engine's until the last member is gone.
    proc = await asyncio.create_subprocess_exec(*command, env=env, start_new_session=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    engine_exit = asyncio.create_task(proc.wait())
    stopping = asyncio.create_task(stop.wait())
    await asyncio.wait({engine_exit, stopping}, return_when=asyncio.FIRST_COMPLETED)
    if engine_exit.done():
        stopping.cancel()
        log.error("%s exited with %s", engine, proc.returncode)
        _kill_group(proc.pid)  # whatever it started and left behind
        await adapter.close(grace=0)
        return proc.returncode or 1
    log.info("stopping: draining requests in flight for up to %.0fs", drain_seconds)
    await adapter.close(grace=drain_seconds)
    proc.terminate()
    # asyncio.wait, not wait_for: wait_for cancels the task it times out on, and awaiting that task again
    # raised CancelledError (the container exited 1 with a traceback instead of killing the engine).
    await asyncio.wait({engine_exit}, timeout=engine_stop_seconds)
    if not engine_exit.done():
        log.warning("%s did not exit %.0fs after SIGTERM: SIGKILL to its process group", engine, engine_stop_seconds)
    _kill_group(proc.pid)  # the engine if it is still running, and whatever of its group outlived it
    await engine_exit  # reaped: no zombie is left behind
    return 0


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # no member left
        os.killpg(pgid, signal.SIGKILL)


# Stopping: SageMaker sends SIGTERM, then SIGKILL 30 s later ("This command sends the SIGTERM signal, then it
# sends the SIGKILL signal 30 seconds later",
# docs.aws.amazon.com/sagemaker/latest/dg/your-algorithms-inference-code.html).
# Everything below is derived from that one figure: drain + abort + engine stop + margin = 30 s.
SIGKILL_AFTER_SECONDS = 30.0
SHUTDOWN_MARGIN_SECONDS = 5.0  # interpreter exit, signal delivery, a loaded host


def max_drain_seconds(engine_stop_seconds: float) -> float:
    """The longest drain that leaves the abort, the engine's stop and the margin inside SageMaker's 30 s."""
    return SIGKILL_AFTER_SECONDS - SHUTDOWN_MARGIN_SECONDS - engine_stop_seconds - ABORT_SECONDS


def time_limits(drain: float, budget: float, *, engine_stop_seconds: float) -> str | None:
    """Why ADAPTER_DRAIN_SECONDS = `drain` or ADAPTER_GENERATION_BUDGET_SECONDS = `budget` cannot work, or None."""
    most = max_drain_seconds(engine_stop_seconds)
    if not 0 <= drain <= most:
        return (
            f"ADAPTER_DRAIN_SECONDS must be in 0..{most:.0f}, got {drain:g}: SageMaker kills the container "
            f"{SIGKILL_AFTER_SECONDS:.0f} s after SIGTERM, and stopping the engine needs the rest"
        )
    if not 0 < budget <= INVOKE_ENDPOINT_TIMEOUT_SECONDS:
        return (
            f"ADAPTER_GENERATION_BUDGET_SECONDS must be in (0, {INVOKE_ENDPOINT_TIMEOUT_SECONDS:.0f}], got {budget:g}: "
            "InvokeEndpoint waits at most 60 s for an answer"
        )
    return None


# --- the adapter's settings from the environment (both engines' entrypoints) ---------------------------------

# SageMaker's port for the container: SAGEMAKER_BIND_TO_PORT in inference pipelines, 8080 otherwise
# (docs.aws.amazon.com/sagemaker/latest/dg/inference-pipeline-real-time.html).
SAGEMAKER_PORT = 8080


@dataclass(frozen=True)
class AdapterSettings:
    """What SageMaker's side of the container runs with, for either engine, single- or multi-model."""

    host: str
    port: int
    retry_after: int
    pool_idle_seconds: float  # idle engine connections are dropped after this (before the engine's 5 s keep-alive)
    drain_seconds: float  # on SIGTERM, how long requests being answered may take to finish
    generation_budget: float  # a non-streamed request is answered within this many seconds
    engine_stop_seconds: float  # after the drain and the clean 503s, how long the engine may take to stop

    @property
    def shutdown_seconds(self) -> float:
        """The longest SIGTERM -> exit: drain, then the clean 503s, then the engine's stop."""
        return self.drain_seconds + ABORT_SECONDS + self.engine_stop_seconds


def adapter_settings(env: Mapping[str, str], *, engine_stop_seconds: float) -> AdapterSettings:
    """ADAPTER_* and SAGEMAKER_BIND_TO_PORT (README: containers/llama-server "SageMaker mode")."""
    drain = env_float(env, "ADAPTER_DRAIN_SECONDS", max_drain_seconds(engine_stop_seconds))
    budget = env_float(env, "ADAPTER_GENERATION_BUDGET_SECONDS", DEFAULT_GENERATION_BUDGET_SECONDS)
    problem = time_limits(drain, budget, engine_stop_seconds=engine_stop_seconds)
    if problem:
        raise EngineConfigError(problem)
    return AdapterSettings(
        host=env_str(env, "ADAPTER_HOST", "0.0.0.0"),
        port=env_int(env, "SAGEMAKER_BIND_TO_PORT", SAGEMAKER_PORT, minimum=1),
        retry_after=env_int(env, "ADAPTER_RETRY_AFTER_SECONDS", 1, minimum=0),
        pool_idle_seconds=env_float(env, "ADAPTER_POOL_IDLE_SECONDS", DEFAULT_POOL_IDLE_SECONDS, minimum=0),
        drain_seconds=drain,
        generation_budget=budget,
        engine_stop_seconds=engine_stop_seconds,
    )


def engine_port(env: Mapping[str, str], name: str, adapter_port: int) -> int:
    """The engine's loopback port from `name`: 8081, or 8082 when the adapter has 8081."""
    port = env_int(env, name, 8081 if adapter_port != 8081 else 8082, minimum=1)
    if port == adapter_port:
        raise EngineConfigError(f"{name} must differ from the adapter port {adapter_port}")
    return port


E = TypeVar("E")


@dataclass(frozen=True)
class SageMakerPlan(Generic[E]):
    """One engine behind the adapter (SageMaker mode of either image): the engine's config, its command line, the
    adapter's settings and its admission bound."""

    engine: E  # the engine's config, bound to 127.0.0.1:engine_port
    engine_port: int
    command: list[str]
    adapter: AdapterSettings
    max_in_flight: int  # the engine's slots (llama-server) or sequences (vLLM) + the queue depth
    env: dict[str, str] | None = None  # the engine's environment; None: this process's
    adapters: tuple[BundledAdapter, ...] = ()  # LoRA adapters the command loads, in id order (llama-server)
    model_name: str | None = None  # the base's name clients may send as `model` (with adapters)

    @property
    def shutdown_seconds(self) -> float:
        return self.adapter.shutdown_seconds

    def make_adapter(self, cls: type[SageMakerAdapter] = SageMakerAdapter) -> SageMakerAdapter:
        a = self.adapter
        return cls(
            "127.0.0.1",
            self.engine_port,
            max_in_flight=self.max_in_flight,
            retry_after=a.retry_after,
            pool_idle_seconds=a.pool_idle_seconds,
            generation_budget=a.generation_budget,
            adapters=self.adapters,
            base=self.model_name,
        )

    async def serve(self, adapter: SageMakerAdapter, *, engine: str) -> int:
        """Run until SIGTERM (exit 0) or until the engine dies (its exit code): serve_engine."""
        a = self.adapter
        return await serve_engine(
            adapter,
            self.command,
            host=a.host,
            port=a.port,
            drain_seconds=a.drain_seconds,
            engine_stop_seconds=a.engine_stop_seconds,
            engine=engine,
            env=self.env,
        )
