"""Just enough HTTP/1.1 over asyncio streams for a router on a trusted network (stdlib only).

Both directions: parse requests (server side) and responses (client side); Content-Length, chunked
and read-until-close bodies; keep-alive; no pipelining, no HTTP/2. TLS is the caller's business
(asyncio.open_connection(ssl=...)).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from http import HTTPStatus

CRLF = b"\r\n"
LAST_CHUNK = b"0\r\n\r\n"
MAX_CHUNK_LINE = 1024


class HttpError(Exception):
    """A message we refuse to parse; `status` is what a server answers before closing the connection."""

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

    @property
    def status(self) -> int:
        """Status code of a response head (502 if the start line is not a valid status line)."""
        parts = self.start_line.split(" ", 2)
        if len(parts) >= 2 and parts[0].startswith("HTTP/1.") and parts[1].isdigit():
            return int(parts[1])
        return 502


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
    lines = raw.decode("latin-1").split("\r\n")
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
        raise HttpError(431, "message head too large") from None
    return parse_head(raw[:-4])


async def iter_chunked(reader: asyncio.StreamReader) -> AsyncIterator[bytes]:
    """Data of each chunk of a chunked body as it arrives (trailers are read and dropped)."""
    while True:
        line = await reader.readuntil(CRLF)
        if len(line) > MAX_CHUNK_LINE:
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


async def iter_until_eof(reader: asyncio.StreamReader) -> AsyncIterator[bytes]:
    while data := await reader.read(1 << 16):
        yield data


async def iter_length(reader: asyncio.StreamReader, length: int) -> AsyncIterator[bytes]:
    remaining = length
    while remaining:
        data = await reader.read(min(remaining, 1 << 16))
        if not data:
            raise asyncio.IncompleteReadError(b"", remaining)
        remaining -= len(data)
        yield data


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


async def read_request(reader: asyncio.StreamReader, max_body: int) -> Request | None:
    head = await read_head(reader)
    if head is None:
        return None
    parts = head.start_line.split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise HttpError(400, "malformed request line")
    method, target, version = parts
    body = await read_body(reader, head, max_body)
    return Request(method, target, version, head, body)


def encode_head(status: int, headers: list[tuple[str, str]]) -> bytes:
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = "Status"
    lines = [f"HTTP/1.1 {status} {phrase}"] + [f"{k}: {v}" for k, v in headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def encode_request(method: str, target: str, host: str, headers: list[tuple[str, str]], body: bytes) -> bytes:
    lines = [f"{method} {target} HTTP/1.1", f"Host: {host}", *(f"{k}: {v}" for k, v in headers), f"Content-Length: {len(body)}"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def encode_chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + CRLF


def error_body(status: int, message: str) -> bytes:
    """OpenAI's error shape (llama-server uses it too), so clients parse one format."""
    kind = {400: "invalid_request_error", 404: "not_found_error", 405: "invalid_request_error", 413: "invalid_request_error",
            429: "rate_limit_error", 503: "unavailable_error"}.get(status, "server_error")
    return json.dumps({"error": {"code": status, "message": message, "type": kind}}).encode()
