"""Async HTTP/1.1 client for the upstreams (SLM and an OpenAI-compatible LLM) over http1's keep-alive pool."""

from __future__ import annotations

import asyncio
import json
import ssl
import time
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

from inference_runtime.http1 import (
    Connection,
    Head,
    HttpError,
    KeepAlivePool,
    encode_request,
    iter_chunked,
    iter_length,
    iter_until_eof,
    read_head,
)


class UpstreamError(Exception):
    """The upstream gave no usable answer and nothing of it reached the client yet (a fallback is possible).
    `reason`: connect | timeout | protocol | status; `status` is set for reason == status."""

    def __init__(self, reason: str, detail: str, status: int | None = None):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.status = status


class _Stale(Exception):
    """A pooled connection the peer had already closed: the request was never read, re-sending is safe."""


class Response:
    """A response whose head has arrived; read() or iter() the body exactly once (or close())."""

    def __init__(self, client: HttpClient, conn: Connection, head: Head, method: str):
        self._client, self._conn, self.head = client, conn, head
        self.status = head.status
        self._no_body = method == "HEAD" or self.status in (204, 304) or 100 <= self.status < 200
        self._done = False

    def header(self, name: str, default: str = "") -> str:
        return self.head.header(name, default)

    def _source(self) -> tuple[AsyncIterator[bytes], bool]:
        """The body iterator and whether the connection can be reused after it."""
        keep = self.head.reusable
        if self._no_body:
            return _empty(), keep
        if self.head.chunked:
            return iter_chunked(self._conn.reader), keep
        length = self.head.content_length()
        if length is None:
            return iter_until_eof(self._conn.reader), False
        return iter_length(self._conn.reader, length), keep

    async def iter(self, idle_timeout: float) -> AsyncIterator[bytes]:
        """Body pieces as they arrive; raises asyncio.TimeoutError if none arrives for idle_timeout seconds."""
        source, reusable = self._source()
        ok = False
        try:
            while True:
                try:
                    async with asyncio.timeout(idle_timeout):  # not wait_for: no Task per piece
                        data = await anext(source)
                except StopAsyncIteration:
                    break
                yield data
            ok = True
        finally:
            self._finish(reusable and ok)

    async def read(self, timeout: float, max_bytes: int = 64 << 20) -> bytes:
        if not self._no_body and not self.head.chunked and (length := self.head.content_length()) is not None:
            # The common answer (a JSON body with a Content-Length): one read of exactly that many bytes, no iterator.
            reusable = False
            try:
                if length > max_bytes:
                    raise HttpError(502, f"upstream body larger than {max_bytes} bytes")
                async with asyncio.timeout(timeout):
                    data = await self._conn.reader.readexactly(length) if length else b""
                reusable = self.head.reusable
                return data
            finally:
                self._finish(reusable)

        async def collect() -> bytes:
            parts, total = [], 0
            async for data in self.iter(timeout):
                total += len(data)
                if total > max_bytes:
                    raise HttpError(502, f"upstream body larger than {max_bytes} bytes")
                parts.append(data)
            return b"".join(parts)

        async with asyncio.timeout(timeout):
            return await collect()

    def close(self) -> None:
        """Abandon the body: closing the connection makes llama-server stop the generation and free the slot."""
        self._finish(False)

    def _finish(self, reusable: bool) -> None:
        if self._done:
            return
        self._done = True
        if reusable:
            self._client.pool.release(self._conn)
        else:
            self._conn.close()


async def _empty() -> AsyncIterator[bytes]:
    return
    yield b""  # pragma: no cover - makes this an async generator


class HttpClient:
    def __init__(
        self,
        base_url: str,
        *,
        connect_timeout: float,
        idle_seconds: float = 3.0,
        max_idle: int = 32,
        headers: list[tuple[str, str]] | None = None,
    ):
        u = urlsplit(base_url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"not an http(s) URL: {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self.host = u.hostname
        self.port = u.port or (443 if u.scheme == "https" else 80)
        self.prefix = u.path.rstrip("/")
        self.host_header = u.netloc.rsplit("@", 1)[-1]
        self.headers = list(headers or [])
        # idle_seconds below the peer's keep-alive timeout (llama-server: 5 s) so the stale-connection race stays rare.
        self.pool = KeepAlivePool(
            self.host,
            self.port,
            max_idle=max_idle,
            idle_seconds=idle_seconds,
            connect_timeout=connect_timeout,
            ssl=ssl.create_default_context() if u.scheme == "https" else None,
        )

    async def _connect(self) -> Connection:
        try:
            return await self.pool.connect()
        except TimeoutError:
            raise UpstreamError(
                "connect", f"{self.host}:{self.port} connect timed out after {self.pool.connect_timeout}s"
            ) from None
        except OSError as e:
            raise UpstreamError("connect", f"{self.host}:{self.port}: {e.strerror or e}") from None

    def close(self) -> None:
        self.pool.close()

    async def request(
        self,
        method: str,
        path: str,
        body: bytes = b"",
        headers: list[tuple[str, str]] | None = None,
        *,
        head_timeout: float,
    ) -> Response:
        """Send one request and wait for the response head. Raises UpstreamError when nothing usable came
        back (the caller decides whether to retry: only a stale pooled connection is re-sent here)."""
        raw = encode_request(method, self.prefix + path, self.host_header, self.headers + (headers or []), body)
        conn = self.pool.take_idle()
        for attempt in (0, 1):
            reused = conn is not None
            if conn is None:
                conn = await self._connect()
            try:
                conn.writer.write(raw)
                await conn.writer.drain()
                async with asyncio.timeout(head_timeout):  # not wait_for: no Task per request
                    head = await read_head(conn.reader)
                if head is None:
                    raise _Stale()
                return Response(self, conn, head, method)
            except (_Stale, ConnectionResetError, BrokenPipeError) as e:
                conn.close()
                conn = None
                if reused and attempt == 0:
                    continue
                raise UpstreamError("protocol", f"connection closed before a response ({type(e).__name__})") from None
            except TimeoutError:
                conn.close()
                raise UpstreamError("timeout", f"no response head within {head_timeout}s") from None
            except HttpError as e:
                conn.close()
                raise UpstreamError("protocol", e.message) from None
            except OSError as e:
                conn.close()
                raise UpstreamError("connect", str(e)) from None
            except BaseException:
                conn.close()
                raise
        raise AssertionError("unreachable")

    async def post_json(self, path: str, payload: dict[str, Any], *, timeout: float) -> tuple[int, Any]:
        """POST a JSON body and read the whole JSON answer within `timeout` seconds (head and body)."""
        deadline = time.monotonic() + timeout
        resp = await self.request(
            "POST", path, json.dumps(payload).encode(), [("Content-Type", "application/json")], head_timeout=timeout
        )
        try:
            raw = await resp.read(max(0.001, deadline - time.monotonic()))
        except TimeoutError:
            raise UpstreamError("timeout", f"body not complete within {timeout}s") from None
        except (HttpError, asyncio.IncompleteReadError, ConnectionError) as e:
            raise UpstreamError("protocol", f"broken body ({type(e).__name__})") from None
        finally:
            resp.close()
        try:
            return resp.status, json.loads(raw) if raw else None
        except ValueError:
            return resp.status, raw

    async def get(self, path: str, *, timeout: float) -> int:
        resp = await self.request("GET", path, head_timeout=timeout)
        try:
            await resp.read(timeout)
        finally:
            resp.close()
        return resp.status

    async def get_json(self, path: str, *, timeout: float, max_bytes: int = 1 << 20) -> tuple[int, Any]:
        """GET and read the whole answer within `timeout` seconds (head and body): (status, the body as JSON, or
        None when it is not JSON). Raises UpstreamError, or TimeoutError / HttpError while reading the body."""
        deadline = time.monotonic() + timeout
        resp = await self.request("GET", path, head_timeout=timeout)
        try:
            raw = await resp.read(max(0.001, deadline - time.monotonic()), max_bytes)
        finally:
            resp.close()
        try:
            return resp.status, json.loads(raw)
        except ValueError:
            return resp.status, None
