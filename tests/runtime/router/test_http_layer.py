"""The one HTTP layer (containers/inference_runtime/http1.py) against malformed input,
through both real fronts: the router as its image runs it (`python -m slm_router`) and the SageMaker adapter
(in-process, as entrypoint.py serves it). Raw bytes on a socket, because an HTTP client library refuses to
send most of these.

Every malformed message must get one 4xx answer and a closed connection, never a silently dropped connection,
a hang, or a body buffered past the limit. These failed on the layers before issue 15: the router had no
`Expect: 100-continue` (curl waits ~1 s before sending its body), and neither refused "²" as a Content-Length,
chunk sizes like 0x10 or 1_0, a chunk far beyond the body limit (read before the check), Content-Length
together with Transfer-Encoding, unknown transfer codings, over-long chunk lines or bad header names.
Neither front reaches an upstream here: the upstream ports are closed.
"""

from __future__ import annotations

import asyncio
import socket
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.runtime.router.harness import router_config, running_router
from tests.support.engine import free_port

ENGINE_DIR = Path(__file__).resolve().parents[3] / "containers" / "llama-server"
if str(ENGINE_DIR) not in sys.path:
    sys.path.insert(0, str(ENGINE_DIR))

from inference_runtime.sagemaker_adapter import SageMakerAdapter  # noqa: E402

MAX_BODY = 4096


class _AdapterThread:
    def __init__(self) -> None:
        self.adapter = SageMakerAdapter("127.0.0.1", free_port(), max_in_flight=2, max_body_bytes=MAX_BODY)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.port = asyncio.run_coroutine_threadsafe(self.adapter.start("127.0.0.1", 0), self.loop).result(10)

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.adapter.close(grace=1), self.loop).result(15)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@pytest.fixture(scope="module")
def router_port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    dead = f"http://127.0.0.1:{free_port()}"
    cfg = router_config(dead, dead, max_body_bytes=MAX_BODY, log_level="INFO")
    with running_router(cfg, tmp_path_factory.mktemp("router")):
        yield cfg["listen_port"]


@pytest.fixture(scope="module")
def adapter_port() -> Iterator[int]:
    a = _AdapterThread()
    try:
        yield a.port
    finally:
        a.close()


@pytest.fixture(params=["router", "adapter"])
def front(request: pytest.FixtureRequest) -> tuple[int, str]:
    """(port, POST path) of one real front."""
    if request.param == "router":
        return request.getfixturevalue("router_port"), "/v1/chat/completions"
    return request.getfixturevalue("adapter_port"), "/invocations"


def exchange(port: int, data: bytes, timeout: float = 5.0) -> bytes:
    """Send raw bytes, then read until the server closes (or `timeout`)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        out = b""
        try:
            while chunk := s.recv(65536):
                out += chunk
        except (TimeoutError, ConnectionResetError):
            pass
    return out


def status_of(response: bytes) -> int:
    assert response.startswith(b"HTTP/1.1 "), f"no HTTP answer, the connection was dropped or hung: {response[:200]!r}"
    return int(response.split(b" ", 2)[1])


def post_head(path: str, *headers: str) -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + "".join(h + "\r\n" for h in headers)
        + "\r\n"
    ).encode("latin-1")


MALFORMED = {
    # latin-1 "²" is a Unicode digit: str.isdigit() accepts it, int() does not (was: connection dropped).
    "superscript_content_length": (lambda p: post_head(p, "Content-Length: \xb2") + b"{}", 400),
    # Python's int(x, 16) accepts a 0x prefix and underscores; HTTP chunk sizes are plain hex (RFC 9112 §7.1).
    "chunk_size_0x": (lambda p: post_head(p, "Transfer-Encoding: chunked") + b"0x2\r\n{}\r\n0\r\n\r\n", 400),
    "chunk_size_underscore": (
        lambda p: post_head(p, "Transfer-Encoding: chunked") + b"1_0\r\n" + b"x" * 16 + b"\r\n0\r\n\r\n",
        400,
    ),
    # A 256 MiB chunk announced on a 4 KiB limit: refused at once (was: waited to buffer it, then 413).
    "chunk_beyond_the_limit": (
        lambda p: post_head(p, "Transfer-Encoding: chunked") + b"10000000\r\n" + b"x" * 100,
        413,
    ),
    # A chunk-size line longer than the reader's 64 KiB limit (was: LimitOverrunError, connection dropped).
    "endless_chunk_size_line": (
        lambda p: post_head(p, "Transfer-Encoding: chunked") + b"1" + b"0" * 70000 + b"\r\n",
        400,
    ),
    # Request smuggling: both framings at once (RFC 9112 §6.1); was: chunked used, Content-Length ignored.
    "content_length_and_chunked": (
        lambda p: post_head(p, "Content-Length: 2", "Transfer-Encoding: chunked") + b"2\r\n{}\r\n0\r\n\r\n",
        400,
    ),
    # A coding we cannot decode (RFC 9112 §6.1: 501); was: the body read by Content-Length as if plain.
    "unknown_transfer_coding": (lambda p: post_head(p, "Transfer-Encoding: gzip", "Content-Length: 2") + b"{}", 501),
    # Field names are tokens (RFC 9110 §5.1); was: "Bad Name" accepted as a header.
    "space_in_header_name": (lambda p: post_head(p, "Bad Name: x", "Content-Length: 2") + b"{}", 400),
    "unknown_http_version": (
        lambda p: post_head(p, "Content-Length: 2").replace(b"HTTP/1.1", b"HTTP/1.7", 1) + b"{}",
        400,
    ),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_requests_get_one_4xx_answer_and_a_closed_connection(front: tuple[int, str], case: str) -> None:
    port, path = front
    build, expected = MALFORMED[case]
    response = exchange(port, build(path))
    assert status_of(response) == expected, response[:300]
    assert b"Connection: close" in response.split(b"\r\n\r\n", 1)[0]
    assert b'"error"' in response  # the OpenAI error shape, like every other error of both fronts


def test_a_well_formed_chunked_request_still_reaches_the_handler(front: tuple[int, str]) -> None:
    """The control: the same framing done right passes the layer (the upstream is down, so the front answers
    with its own overload/unavailable status, not a parse error)."""
    port, path = front
    body = b'{"messages": [{"role": "user", "content": "hi"}]}'
    chunked = (
        post_head(path, "Transfer-Encoding: chunked", "Connection: close")
        + f"{len(body):x}\r\n".encode()
        + body
        + b"\r\n0\r\n\r\n"
    )
    assert status_of(exchange(port, chunked, timeout=30)) in (502, 503)


def test_expect_100_continue_is_answered_before_the_body_is_sent(front: tuple[int, str]) -> None:
    """curl sends `Expect: 100-continue` above 1 KiB and waits for `100 Continue` (1 s by default) before the body;
    SDKs may wait longer. The router did not answer it."""
    port, path = front
    body = b'{"messages": [{"role": "user", "content": "' + b"x" * 2000 + b'"}]}'
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(post_head(path, f"Content-Length: {len(body)}", "Expect: 100-continue", "Connection: close"))
        s.settimeout(0.5)
        try:
            interim = s.recv(1024)
        except TimeoutError:
            interim = b""
        assert interim == b"HTTP/1.1 100 Continue\r\n\r\n"
        s.settimeout(30)
        s.sendall(body)
        final = b""
        while chunk := s.recv(65536):
            final += chunk
    assert status_of(final) in (502, 503)


def test_expect_100_continue_over_the_limit_is_refused_without_the_body(front: tuple[int, str]) -> None:
    port, path = front
    response = exchange(port, post_head(path, f"Content-Length: {MAX_BODY + 1}", "Expect: 100-continue"))
    assert status_of(response) == 413
    assert b"100 Continue" not in response


class ClosesTheSecondRequest:
    """A peer whose keep-alive timeout fires just as the next request arrives: it answers the first request
    on each connection (keep-alive), reads the second and closes without a byte. The real engine does this
    only by chance (tests/runtime/engine/test_adapter_engine_connections.py), so the race is made certain here."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.connections = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    @staticmethod
    def _read_request(conn: socket.socket) -> bool:
        data = b""
        while b"\r\n\r\n" not in data:
            if not (chunk := conn.recv(65536)):
                return False
            data += chunk
        head, body = data.split(b"\r\n\r\n", 1)
        length = next(
            (int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")), 0
        )
        while len(body) < length:
            body += conn.recv(65536)
        return True

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            if self._read_request(conn):
                body = b'{"choices": [{"message": {"role": "assistant", "content": "hi"}}]}'
                conn.sendall(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                    + str(len(body)).encode()
                    + b"\r\nConnection: keep-alive\r\n\r\n"
                    + body
                )
                self._read_request(conn)

    def close(self) -> None:
        self.server.close()


def test_the_adapter_resends_once_when_the_engine_closes_a_pooled_connection_under_the_request() -> None:
    peer = ClosesTheSecondRequest()
    a = _AdapterThread()
    a.adapter.engine = ("127.0.0.1", peer.port)
    a.adapter.pool.port = peer.port
    body = b'{"messages": [{"role": "user", "content": "hi"}], "stream": true}'
    try:
        for _ in range(2):
            response = exchange(
                a.port, post_head("/invocations", f"Content-Length: {len(body)}", "Connection: close") + body
            )
            assert status_of(response) == 200 and b'"hi"' in response
        assert a.adapter.stats.stale_retries == 1 and peer.connections == 2
    finally:
        a.close()
        peer.close()


def test_the_router_client_resends_once_when_the_upstream_closes_a_pooled_connection_under_the_request() -> None:
    from slm_router.client import HttpClient

    peer = ClosesTheSecondRequest()

    async def twice() -> list[int]:
        client = HttpClient(f"http://127.0.0.1:{peer.port}", connect_timeout=2)
        try:
            return [(await client.post_json("/v1/chat/completions", {"messages": []}, timeout=10))[0] for _ in range(2)]
        finally:
            client.close()

    try:
        assert asyncio.run(twice()) == [200, 200]
        assert peer.connections == 2
    finally:
        peer.close()
