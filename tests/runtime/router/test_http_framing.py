"""inference_runtime.http1's server side with h11 framing the requests (issue 24), on a bare Http1Server that echoes
what it parsed: pipelined requests keep their order and bytes (h11 starts fresh per request, the bytes read past one
carry over), a body that arrives byte by byte, and the refusals h11 adds (RFC 9112 §3.2: a 1.1 request without Host)
or keeps (431 for an over-long head). The hostile-bytes cases through the real fronts are test_http_layer.py."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from inference_runtime.http1 import READ_SIZE, Http1Server, Request, encode_head


class Echo(Http1Server):
    async def _dispatch(self, req: Request, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        body = json.dumps(
            {"method": req.method, "target": req.target, "body": req.body.decode(), "headers": req.head.headers}
        ).encode()
        writer.write(
            encode_head(
                200, [("Content-Length", str(len(body))), ("Connection", "keep-alive" if req.keep_alive else "close")]
            )
            + body
        )
        await writer.drain()
        return req.keep_alive


@pytest.fixture(scope="module")
def port() -> Iterator[int]:
    loop = asyncio.new_event_loop()
    server = Echo(max_body_bytes=4096, client_idle_timeout=10)
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield asyncio.run_coroutine_threadsafe(server.start("127.0.0.1", 0), loop).result(10)
    asyncio.run_coroutine_threadsafe(server.close(grace=1), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)


def exchange(port: int, *pieces: bytes, pause: float = 0.0) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        for piece in pieces:
            s.sendall(piece)
            time.sleep(pause)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
    return out


def answers(raw: bytes) -> list[dict]:
    found = []
    while raw:
        head, rest = raw.split(b"\r\n\r\n", 1)
        length = int(
            next(line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:"))
        )
        found.append({"status": int(head.split(b" ", 2)[1]), **json.loads(rest[:length])})
        raw = rest[length:]
    return found


def test_pipelined_requests_are_answered_in_order_with_their_own_bytes(port: int) -> None:
    one = b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc"
    two = b"POST /b?q=1 HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nde\r\n1;ext=1\r\nf\r\n0\r\nTrailer: t\r\n\r\n"
    three = b"GET /c HTTP/1.1\r\nHost: x\r\nX-Twice: 1\r\nx-twice: 2\r\nConnection: close\r\n\r\n"
    got = answers(exchange(port, one + two + three))
    assert [(a["status"], a["method"], a["target"], a["body"]) for a in got] == [
        (200, "POST", "/a", "abc"),
        (200, "POST", "/b?q=1", "def"),
        (200, "GET", "/c", ""),
    ]
    assert got[2]["headers"]["x-twice"] == "1, 2" and got[2]["headers"]["connection"] == "close"


def test_a_request_that_arrives_byte_by_byte_is_the_same_request(port: int) -> None:
    raw = b"POST /slow HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello"
    (got,) = answers(exchange(port, *(raw[i : i + 1] for i in range(len(raw))), pause=0.001))
    assert (got["status"], got["target"], got["body"]) == (200, "/slow", "hello")


def test_http_1_0_keep_alive_rules(port: int) -> None:
    got = answers(exchange(port, b"GET /old HTTP/1.0\r\n\r\n"))  # 1.0: no Host needed, closes by default
    assert [(a["status"], a["target"]) for a in got] == [(200, "/old")]


@pytest.mark.parametrize(
    ("raw", "status"),
    [
        (b"GET / HTTP/1.1\r\nContent-Length: 0\r\n\r\n", 400),  # no Host (RFC 9112 §3.2)
        (b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (READ_SIZE + 10) + b"\r\n\r\n", 431),
        (b"GET / HTTP/1.1\r\nX-Big: " + b"a" * (READ_SIZE + 10) + b"\r\n\r\n", 431),  # too large before anything else
        (b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!", 400),  # two lengths
        (b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 4097\r\n\r\n", 413),
    ],
)
def test_refused_with_one_answer_and_a_close(port: int, raw: bytes, status: int) -> None:
    response = exchange(port, raw)
    assert response.startswith(f"HTTP/1.1 {status} ".encode()), response[:200]
    assert b"Connection: close" in response.split(b"\r\n\r\n", 1)[0] and b'"error"' in response
