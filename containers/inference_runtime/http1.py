"""HTTP/1.1 over asyncio streams: the ONE HTTP layer of every image (the SageMaker adapters, the router, the gateway).

Server side (`Http1Server`): requests are framed by h11 (pinned and hash-locked in requirements.txt beside this
file): the request line, header fields, Content-Length and chunked bodies, keep-alive, and the malformed input
RFC 9112 makes a server refuse (bad request lines and field names, a Content-Length that is not digits, chunk
sizes that are not plain hex, a transfer coding other than chunked: 501, a head beyond the limit: 431). On top of
h11, this module keeps what is ours: the accept loop, admission and drain, the client idle timeout, `Expect:
100-continue`, the body limit (413, before a byte of an over-large body or chunk is read), Content-Length together
with Transfer-Encoding refused (request smuggling, RFC 9112 §6.1: h11 would let chunked win), HTTP versions other
than 1.0/1.1 refused, and one 4xx in the OpenAI error shape before the connection closes (never a dropped
connection).

Client side (the router's upstream client, the adapter's engine relay): responses of our own upstreams, parsed
here (`read_head`, `iter_chunked`, `iter_length`, `iter_until_eof`) over one idle-connection pool
(`KeepAlivePool`). No HTTP/2; TLS is the caller's business (`KeepAlivePool(ssl=...)`).

Why h11 (issue 24): the wire format is what it exists for (spec-driven, pure Python, no dependency), and request
smuggling is the class of bug nobody wants to own. Why not a whole server framework (issue 15; figures in
containers/router/README.md "HTTP layer"): aiohttp or uvicorn would move the pinned admission, drain and
streaming behaviour onto new code. CPU per request: benchmarks/gateway.py measures the gateway before and after.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import ssl as ssl_lib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from http import HTTPStatus

import h11

CRLF = b"\r\n"
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
LAST_CHUNK = b"0\r\n\r\n"
MAX_CHUNK_LINE = 1024  # chunk size + extensions; a size line is a few bytes
MAX_TRAILER_LINES = 64
READ_SIZE = 1 << 16
_HEX = frozenset("0123456789abcdefABCDEF")
# RFC 9110 §5.6.2 token characters: header field names and methods.
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_ERROR_TYPES = {
    400: "invalid_request_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
    431: "invalid_request_error",
    501: "invalid_request_error",
    503: "unavailable_error",
    504: "timeout_error",
}


class HttpError(Exception):
    """A message we refuse to parse; `status` is what a server answers before closing the connection."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


def _is_token(text: str) -> bool:
    return _TOKEN.fullmatch(text) is not None


@dataclass
class Head:
    start_line: str
    headers: dict[str, str]  # lower-case names; repeated headers joined with ", "

    def header(self, name: str, default: str = "") -> str:
        return self.headers.get(name, default)

    @property
    def chunked(self) -> bool:
        """Chunked framing: chunked is the final transfer coding (RFC 9112 §6.3)."""
        codings = [c.strip().lower() for c in self.header("transfer-encoding").split(",") if c.strip()]
        return bool(codings) and codings[-1] == "chunked"

    def content_length(self) -> int | None:
        raw = self.header("content-length")
        if not raw:
            return None
        if not (raw.isascii() and raw.isdigit()):  # not int(): it takes "+5", " 5", "5_0" and "²"-like digits
            raise HttpError(400, "invalid Content-Length")
        return int(raw)

    @property
    def status(self) -> int:
        """Status code of a response head (502 if the start line is not a valid status line)."""
        parts = self.start_line.split(" ", 2)
        if len(parts) >= 2 and parts[0].startswith("HTTP/1.") and parts[1].isascii() and parts[1].isdigit():
            return int(parts[1])
        return 502

    @property
    def reusable(self) -> bool:
        """A response head after which the connection may carry another request (HTTP/1.1, no close)."""
        return self.start_line.startswith("HTTP/1.1 ") and "close" not in self.header("connection").lower()


@dataclass
class Request:
    method: str
    target: str
    version: str
    head: Head
    body: bytes

    @property
    def path(self) -> str:
        return self.target.split("?", 1)[0]

    @property
    def keep_alive(self) -> bool:
        conn = self.head.header("connection").lower()
        if self.version == "HTTP/1.0":
            return "keep-alive" in conn
        return "close" not in conn


def parse_head(raw: bytes) -> Head:
    """A message head without its final CRLF CRLF. latin-1 decodes every byte, so no decode error can escape."""
    lines = raw.decode("latin-1").split("\r\n")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep or not _is_token(name):  # also obs-fold (a leading space) and "Name :" (RFC 9112 §5.1)
            raise HttpError(400, "malformed header line")
        key = name.lower()
        value = value.strip(" \t")
        if (
            "\r" in value or "\n" in value or "\x00" in value
        ):  # bare CR / LF, NUL: never in a field value (RFC 9110 §5.5)
            raise HttpError(400, "malformed header value")
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    return Head(lines[0], headers)


async def read_head(reader: asyncio.StreamReader) -> Head | None:
    """One message head; None on a clean EOF before any byte (the peer closed an idle connection).
    The StreamReader's limit bounds the head size."""
    try:
        raw = await reader.readuntil(CRLF + CRLF)
    except asyncio.IncompleteReadError as e:
        if not e.partial:
            return None
        raise HttpError(400, "truncated head") from None
    except asyncio.LimitOverrunError:
        raise HttpError(431, "message head too large") from None
    return parse_head(raw[:-4])


async def _read_line(reader: asyncio.StreamReader, what: str) -> bytes:
    try:
        line = await reader.readuntil(CRLF)
    except asyncio.LimitOverrunError:
        raise HttpError(400, f"{what} too long") from None
    if len(line) > MAX_CHUNK_LINE:
        raise HttpError(400, f"{what} too long")
    return line


async def iter_chunked(reader: asyncio.StreamReader, max_bytes: int | None = None) -> AsyncIterator[bytes]:
    """Data of each chunk of a chunked body as it arrives (trailers are read and dropped). With `max_bytes`,
    a chunk that would take the body past it is refused (413) before it is read."""
    total = 0
    while True:
        line = await _read_line(reader, "chunk size line")
        size_text = line[:-2].split(b";", 1)[0].strip(b" \t").decode("latin-1")
        if not size_text or any(c not in _HEX for c in size_text):
            raise HttpError(400, "invalid chunk size")
        size = int(size_text, 16)
        if size == 0:
            for _ in range(MAX_TRAILER_LINES):
                if await _read_line(reader, "trailer line") == CRLF:
                    return
            raise HttpError(400, "too many trailer lines")
        total += size
        if max_bytes is not None and total > max_bytes:
            raise HttpError(413, f"body larger than {max_bytes} bytes")
        data = await reader.readexactly(size + 2)
        if data[-2:] != CRLF:
            raise HttpError(400, "chunk not terminated by CRLF")
        yield data[:-2]


async def iter_until_eof(reader: asyncio.StreamReader) -> AsyncIterator[bytes]:
    while data := await reader.read(READ_SIZE):
        yield data


async def iter_length(reader: asyncio.StreamReader, length: int) -> AsyncIterator[bytes]:
    remaining = length
    while remaining:
        data = await reader.read(min(remaining, READ_SIZE))
        if not data:
            raise asyncio.IncompleteReadError(b"", remaining)
        remaining -= len(data)
        yield data


_H11_MESSAGES = {431: "message head too large", 501: "unsupported Transfer-Encoding: only chunked is accepted"}


def _chunk_remaining(conn: h11.Connection) -> int:
    """Bytes of the current chunk that h11 has announced but not handed out yet. h11 reads a chunk's size line, then
    hands out its data as it arrives (Data events carry no size), so without this a 256 MiB chunk on a 4 KiB body
    limit would be refused only after 4 KiB of it. h11 0.16 keeps the count in ChunkedReader._bytes_in_chunk
    (h11/_readers.py); h11 is pinned (requirements.txt), and test_http_layer.py's chunk_beyond_the_limit case fails
    if that changes."""
    return getattr(getattr(conn, "_reader", None), "_bytes_in_chunk", 0)


class RequestReader:
    """The requests of one client connection, in order, framed by h11. The handlers write responses themselves (not
    through h11), so each request gets a fresh h11 state machine; bytes read past a request (a pipelined next one)
    are carried over to the next."""

    __slots__ = ("reader", "writer", "max_body", "_pending", "_fed", "_held")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter | None, max_body: int):
        self.reader, self.writer, self.max_body = reader, writer, max_body
        self._pending = b""
        self._fed = 0  # bytes given to the current request's h11 state machine while its head is incomplete
        self._held = b""  # bytes read past that bound, given to h11 once the head is complete

    def _feed_head(self, conn: h11.Connection, data: bytes) -> None:
        """Give h11 at most READ_SIZE + 1 bytes until the head is complete: h11 refuses a head (431) only while it is
        incomplete beyond its bound, so one completed by the read that crossed the bound would pass."""
        room = READ_SIZE + 1 - self._fed
        if len(data) > room:
            data, self._held = data[:room], data[room:]
        self._fed += len(data)
        conn.receive_data(data)

    def _poll(self, conn: h11.Connection, room: int | None) -> object:
        """h11's next event from what it holds (NEED_DATA: read more). `room`: None while reading the head, else the
        bytes the body may still take."""
        try:
            return conn.next_event()
        except h11.RemoteProtocolError as e:
            status = e.error_status_hint  # 400, or 431 (head beyond the bound), 501 (a coding other than chunked)
            if room is not None and status == 431:  # h11's buffer bound hit inside a body: a chunk-size line
                raise HttpError(400, "chunk size line too long") from None
            raise HttpError(status, _H11_MESSAGES.get(status) or f"malformed request: {str(e)[:100]}") from None

    async def _event(self, conn: h11.Connection, room: int | None) -> object:
        """h11's next event, reading as needed (a chunk announced beyond `room` is refused before it is read)."""
        while (event := self._poll(conn, room)) is h11.NEED_DATA:
            if room is not None and _chunk_remaining(conn) > room:
                raise HttpError(413, f"body larger than {self.max_body} bytes")
            data = await self.reader.read(READ_SIZE)  # b"" at EOF: h11 then ends or refuses the message
            if room is None:
                self._feed_head(conn, data)
            else:
                conn.receive_data(data)
        return event

    async def next(self) -> Request | None:
        """The next request (None on a clean EOF before any byte). A client that sent `Expect: 100-continue` (curl
        above 1 KiB, some SDKs) gets `100 Continue` at once instead of waiting ~1 s before it sends the body, or the
        413 without sending it at all."""
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=READ_SIZE)  # a longer head: 431
        # Bytes first: asking h11 for an event with nothing buffered only returns NEED_DATA.
        self._fed = 0
        self._feed_head(conn, self._pending or await self.reader.read(READ_SIZE))
        event = self._poll(conn, None)  # the whole head is usually in the first read: no await
        if event is h11.NEED_DATA:
            event = await self._event(conn, None)
        if not isinstance(event, h11.Request):  # ConnectionClosed: the peer closed an idle connection
            return None
        if self._held:
            conn.receive_data(self._held)
            self._held = b""
        if event.http_version == b"1.1":  # h11 takes any HTTP/<digit>.<digit>
            version = "HTTP/1.1"
        elif event.http_version == b"1.0":
            version = "HTTP/1.0"
        else:
            raise HttpError(400, "malformed request line: HTTP/1.1 or HTTP/1.0 only")
        headers: dict[str, str] = {}
        for name, value in event.headers:  # lower-case names, surrounding whitespace stripped (h11)
            key, text = name.decode("latin-1"), value.decode("latin-1")
            headers[key] = f"{headers[key]}, {text}" if key in headers else text
        method, target = event.method.decode("latin-1"), event.target.decode("latin-1")
        if "transfer-encoding" in headers:  # h11 accepts only chunked (else 501)
            if "content-length" in headers:  # request smuggling (RFC 9112 §6.1): h11 would let chunked win
                raise HttpError(400, "both Content-Length and Transfer-Encoding: send one")
            length = None
        else:
            length = int(headers.get("content-length") or 0)  # digits only (h11)
            if length > self.max_body:
                raise HttpError(413, f"body larger than {self.max_body} bytes")
        if self.writer is not None and conn.they_are_waiting_for_100_continue and length != 0:
            self.writer.write(CONTINUE)
        parts = []
        room = self.max_body
        # With a Content-Length, the message ends with its last body byte (h11 would next return EndOfMessage, which
        # costs a state-machine step per request): the loop stops there. Chunked bodies run to h11's EndOfMessage.
        left = length
        while left != 0:
            event = self._poll(conn, room)
            if event is h11.NEED_DATA:
                event = await self._event(conn, room)
            if type(event) is h11.Data:
                room -= len(event.data)
                if room < 0 or _chunk_remaining(conn) > room:
                    raise HttpError(413, f"body larger than {self.max_body} bytes")
                parts.append(event.data)
                if left is not None:
                    left -= len(event.data)
            elif type(event) is h11.EndOfMessage:
                break
        self._pending = conn.trailing_data[0]
        body = bytes(parts[0]) if len(parts) == 1 else b"".join(parts)  # h11's Data may be a bytearray slice
        return Request(method, target, version, Head(f"{method} {target} {version}", headers), body)


def status_line(status: int) -> bytes:
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = "Status"
    return f"HTTP/1.1 {status} {phrase}\r\n".encode("latin-1")


def encode_head(status: int, headers: list[tuple[str, str]]) -> bytes:
    return status_line(status) + b"".join(f"{k}: {v}\r\n".encode("latin-1") for k, v in headers) + CRLF


def encode_request(method: str, target: str, host: str, headers: list[tuple[str, str]], body: bytes) -> bytes:
    lines = [
        f"{method} {target} HTTP/1.1",
        f"Host: {host}",
        *(f"{k}: {v}" for k, v in headers),
        f"Content-Length: {len(body)}",
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def encode_chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + CRLF


def error_body(status: int, message: str, *, retry_after: int | None = None) -> bytes:
    """OpenAI's error shape (llama-server uses it too), so clients parse one format. With `retry_after`, the
    body carries it too (`error.retry_after_seconds`): behind SageMaker a caller sees only the body, as
    ModelError's OriginalMessage (with OriginalStatusCode), never the Retry-After header."""
    error: dict = {"code": status, "message": message, "type": _ERROR_TYPES.get(status, "server_error")}
    if retry_after is not None:
        error["retry_after_seconds"] = retry_after
    return json.dumps({"error": error}).encode()


def json_error(
    status: int,
    message: str,
    *,
    keep_alive: bool = True,
    retry_after: int | None = None,
    extra: list[tuple[str, str]] | None = None,
) -> bytes:
    """A complete error response: error_body() with Retry-After (when given) and the connection's fate."""
    body = error_body(status, message, retry_after=retry_after)
    headers = [("Content-Type", "application/json; charset=utf-8"), ("Content-Length", str(len(body)))]
    if retry_after is not None:
        headers.append(("Retry-After", str(retry_after)))
    headers += extra or []
    headers.append(("Connection", "keep-alive" if keep_alive else "close"))
    return encode_head(status, headers) + body


class Connection:
    """One client connection to an upstream, pooled between requests."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader, self.writer = reader, writer
        self.idle_since = time.monotonic()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.writer.close()


class KeepAlivePool:
    """Idle keep-alive connections to one host. Idle ones are dropped before the peer's own keep-alive timeout
    would close them (llama-server: 5 s), and one the peer already closed (EOF seen) is never handed out; the
    race that remains (the peer closes as the request leaves) shows up as EOF before any response byte, and
    the caller re-sends once on a fresh connection (the peer never read the request)."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        max_idle: int,
        idle_seconds: float,
        connect_timeout: float,
        ssl: ssl_lib.SSLContext | None = None,
    ):
        self.host, self.port = host, port
        self.max_idle = max_idle
        self.idle_seconds = idle_seconds
        self.connect_timeout = connect_timeout
        self.ssl = ssl
        self.closed_by_peer = 0  # idle connections found closed by the peer and dropped unused
        self._idle: list[Connection] = []

    def take_idle(self) -> Connection | None:
        now = time.monotonic()
        while self._idle:
            conn = self._idle.pop()
            if now - conn.idle_since < self.idle_seconds and not conn.reader.at_eof():
                return conn
            if conn.reader.at_eof():
                self.closed_by_peer += 1
            conn.close()
        return None

    async def connect(self) -> Connection:
        """A new connection; raises TimeoutError or OSError."""
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(self.host, self.port, ssl=self.ssl, limit=READ_SIZE), self.connect_timeout
        )
        return Connection(reader, writer)

    def release(self, conn: Connection) -> None:
        if len(self._idle) >= self.max_idle:
            conn.close()
            return
        conn.idle_since = time.monotonic()
        self._idle.append(conn)

    def close(self) -> None:
        while self._idle:
            self._idle.pop().close()


class Http1Server:
    """The server side of every front (the SageMaker adapters, the router, the gateway): the accept loop,
    sequential keep-alive requests, malformed requests (one 4xx, then close), the client idle timeout and a
    graceful stop. Subclasses answer each request in `_dispatch` (False: close the connection)."""

    log = logging.getLogger("http1")
    abort_seconds = 1.0  # after the drain, time for requests still running to send their clean last answer

    def __init__(self, *, max_body_bytes: int, client_idle_timeout: float):
        self.max_body_bytes = max_body_bytes
        self.client_idle_timeout = client_idle_timeout
        self._busy = 0  # requests being answered, any path (what a graceful stop waits for)
        self._closing = False
        self._server: asyncio.AbstractServer | None = None
        self._conns: set[asyncio.Task] = set()

    async def start(self, host: str, port: int) -> int:
        self._server = await asyncio.start_server(
            self._serve_conn, host, port, limit=READ_SIZE, reuse_address=True, backlog=1024
        )
        return self._server.sockets[0].getsockname()[1]

    async def close(self, grace: float) -> None:
        """Stop accepting, let requests being answered finish for up to `grace` seconds, then abort_in_flight()
        and give them `abort_seconds` to end cleanly, then close every connection (idle keep-alive ones at once)."""
        self._closing = True
        if self._server is not None:
            self._server.close()
        deadline = time.monotonic() + grace
        while self._busy and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        if self._busy:
            self.abort_in_flight()
            deadline = time.monotonic() + self.abort_seconds
            while self._busy and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
        for task in list(self._conns):
            task.cancel()
        await asyncio.gather(*self._conns, return_exceptions=True)
        self.release()

    def abort_in_flight(self) -> None:
        """The drain is over: end every request still running cleanly (within abort_seconds)."""

    def release(self) -> None:
        """Free what the subclass holds once every connection is closed."""

    def refuse(self, error: HttpError) -> bytes:
        """The answer to a request that could not be parsed (the connection closes after it)."""
        return json_error(error.status, error.message, keep_alive=False)

    async def _dispatch(self, req: Request, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        raise NotImplementedError

    async def _serve_conn(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._conns.add(task)
        requests = RequestReader(reader, writer, self.max_body_bytes)
        try:
            while not self._closing:
                try:
                    async with asyncio.timeout(self.client_idle_timeout):  # no Task per request, unlike wait_for
                        req = await requests.next()
                except HttpError as e:
                    writer.write(self.refuse(e))
                    await writer.drain()
                    return
                except (TimeoutError, asyncio.IncompleteReadError, ConnectionError):
                    return
                if req is None:
                    return
                self._busy += 1
                try:
                    keep = await self._dispatch(req, reader, writer)
                finally:
                    self._busy -= 1
                if not keep:
                    return
        except (ConnectionError, asyncio.CancelledError):
            pass
        except (TimeoutError, asyncio.IncompleteReadError, HttpError) as e:
            self.log.info("upstream response cut off mid-body: %s", type(e).__name__)
        except Exception:  # a bug must cost one connection, never the server
            self.log.exception("unexpected error while serving a connection")
        finally:
            self._conns.discard(task)
            with contextlib.suppress(Exception):
                writer.close()
