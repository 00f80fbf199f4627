"""Just enough HTTP/1.1 over asyncio streams for a loopback reverse proxy (stdlib only).

Supports keep-alive, Content-Length and chunked bodies in both directions; no pipelining beyond
sequential requests on one connection, no HTTP/2, no TLS (the adapter sits behind SageMaker's front end).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from http import HTTPStatus

CRLF = b"\r\n"
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


class HttpError(Exception):
    """A request we refuse to parse; `status` is what to answer before closing the connection."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass
class Head:
    start_line: str
    headers: dict[str, str]  # lower-case names; repeated headers joined with ", "

    def header(self, name: str, default: str = "") -> str:
        return self.headers.get(name, default)

    @property
    def chunked(self) -> bool:
        return "chunked" in self.header("transfer-encoding").lower()

    def content_length(self) -> int | None:
        raw = self.header("content-length")
        if not raw:
            return None
        if not raw.isdigit():
            raise HttpError(400, "invalid Content-Length")
        return int(raw)


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


def _parse_head(raw: bytes) -> Head:
    try:
        text = raw.decode("latin-1")
    except UnicodeDecodeError:  # pragma: no cover - latin-1 decodes any byte
        raise HttpError(400, "undecodable head") from None
    lines = text.split("\r\n")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise HttpError(400, "malformed header line")
        key = name.lower()
        value = value.strip()
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
        raise HttpError(431, "request head too large") from None
    return _parse_head(raw[:-4])


async def iter_chunked(reader: asyncio.StreamReader, max_line: int = 1024) -> AsyncIterator[bytes]:
    """Data of each chunk of a chunked body as it arrives (trailers are read and dropped)."""
    while True:
        line = await reader.readuntil(CRLF)
        if len(line) > max_line:
            raise HttpError(400, "chunk size line too long")
        try:
            size = int(line.split(b";", 1)[0].strip(), 16)
        except ValueError:
            raise HttpError(400, "invalid chunk size") from None
        if size == 0:
            while await reader.readuntil(CRLF) != CRLF:
                pass
            return
        data = await reader.readexactly(size + 2)
        if data[-2:] != CRLF:
            raise HttpError(400, "chunk not terminated by CRLF")
        yield data[:-2]


async def read_body(reader: asyncio.StreamReader, head: Head, max_bytes: int) -> bytes:
    if head.chunked:
        parts: list[bytes] = []
        total = 0
        async for part in iter_chunked(reader):
            total += len(part)
            if total > max_bytes:
                raise HttpError(413, f"body larger than {max_bytes} bytes")
            parts.append(part)
        return b"".join(parts)
    length = head.content_length() or 0
    if length > max_bytes:
        raise HttpError(413, f"body larger than {max_bytes} bytes")
    return await reader.readexactly(length) if length else b""


async def read_request(reader: asyncio.StreamReader, max_body: int, writer: asyncio.StreamWriter | None = None) -> Request | None:
    head = await read_head(reader)
    if head is None:
        return None
    parts = head.start_line.split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise HttpError(400, "malformed request line")
    method, target, version = parts
    if head.header("expect").lower() == "100-continue":
        length = head.content_length()
        if length is not None and length > max_body:
            raise HttpError(413, f"body larger than {max_body} bytes")
        if writer is not None:  # clients that ask (curl, some SDKs) wait for this before sending the body
            writer.write(CONTINUE)
    body = await read_body(reader, head, max_body)
    return Request(method, target, version, head, body)


def status_line(status: int) -> bytes:
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = "Status"
    return f"HTTP/1.1 {status} {phrase}\r\n".encode("latin-1")


def encode_head(status: int, headers: list[tuple[str, str]]) -> bytes:
    return status_line(status) + b"".join(f"{k}: {v}\r\n".encode("latin-1") for k, v in headers) + CRLF


def encode_chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + CRLF


LAST_CHUNK = b"0\r\n\r\n"


def json_error(status: int, message: str, *, keep_alive: bool = True, retry_after: int | None = None, extra: list[tuple[str, str]] | None = None) -> bytes:
    """A complete response in llama-server's error shape, so clients parse one format. With `retry_after`,
    the body carries it too (`error.retry_after_seconds`): behind SageMaker a caller sees only the body, as
    ModelError's OriginalMessage (with OriginalStatusCode), never the Retry-After header."""
    kind = {400: "invalid_request_error", 404: "not_found_error", 405: "invalid_request_error", 413: "invalid_request_error",
            429: "rate_limit_error", 503: "unavailable_error", 504: "timeout_error"}.get(status, "server_error")
    error: dict = {"code": status, "message": message, "type": kind}
    if retry_after is not None:
        error["retry_after_seconds"] = retry_after
    body = json.dumps({"error": error}).encode()
    headers = [("Content-Type", "application/json; charset=utf-8"), ("Content-Length", str(len(body)))]
    if retry_after is not None:
        headers.append(("Retry-After", str(retry_after)))
    headers += extra or []
    headers.append(("Connection", "keep-alive" if keep_alive else "close"))
    return encode_head(status, headers) + body
