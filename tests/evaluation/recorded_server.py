"""A loopback server that answers with bodies recorded from a real engine: GET /v1/models and a streamed
POST /v1/chat/completions (the same recorded answer to every request). The tests of evaluation/ use it for vLLM,
which they never start (the marked vLLM test group runs the real server); benchmarks/engines.py records the bodies
from the real vLLM CPU server (see recorded/README.md)."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

RECORDED = Path(__file__).parent / "recorded"


class RecordedServer:
    def __init__(self, directory: Path) -> None:
        models = (directory / "v1-models.json").read_bytes()
        stream = (directory / "chat-stream.sse").read_bytes()

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def log_message(self, *args: object) -> None:
                pass

            def _send(self, status: int, content_type: str, data: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802
                if self.path == "/v1/models":
                    self._send(200, "application/json", models)
                else:
                    self._send(404, "application/json", b'{"error": "not found"}')

            def do_POST(self) -> None:  # noqa: N802
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.path == "/v1/chat/completions":
                    self._send(200, "text/event-stream; charset=utf-8", stream)
                else:
                    self._send(404, "application/json", b'{"error": "not found"}')

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> RecordedServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
