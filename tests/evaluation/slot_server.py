"""A loopback OpenAI-compatible server with a known latency curve: `slots` requests are served at a
time, each holding its slot for `service_s`, the rest wait in a queue — how llama-server's slots behave.
Closed-loop latency is then service_s up to `slots` in flight and service_s * concurrency / slots above,
so the right answer of the p95 search is known in advance."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class SlotServer:
    def __init__(self, *, slots: int, service_s: float, tokens: int = 4) -> None:
        self.slots = threading.Semaphore(slots)
        self.service_s = service_s
        self.tokens = tokens
        srv = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body are two writes; no 40 ms delayed-ACK stall

            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with srv.slots:
                    time.sleep(srv.service_s)
                usage = {"prompt_tokens": 5, "completion_tokens": srv.tokens, "total_tokens": 5 + srv.tokens}
                if not body.get("stream"):
                    data = json.dumps(
                        {
                            "choices": [
                                {
                                    "index": 0,
                                    "message": {"role": "assistant", "content": "ok " * srv.tokens},
                                    "finish_reason": "length",
                                }
                            ],
                            "usage": usage,
                        }
                    ).encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                events = [
                    {"choices": [{"index": 0, "delta": {"content": "ok "}, "finish_reason": None}]}
                    for _ in range(srv.tokens)
                ]
                events.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]})
                events.append({"choices": [], "usage": usage})
                data = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + b"data: [DONE]\n\n"
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> SlotServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
