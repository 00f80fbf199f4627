"""A loopback OpenAI-compatible endpoint that answers every dataset example with its gold label.

It is the reference point that makes the gate's exit codes deterministic: against it a real model must
fail (it cannot beat 100 %), and as the candidate it must pass. The real engine stays on the other side."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


class OracleModel:
    def __init__(self, dataset: Path, gold_field: str = "label") -> None:
        rows = [json.loads(line) for line in dataset.read_text(encoding="utf-8").splitlines() if line.strip()]
        self.answers = {r["text"]: r[gold_field] for r in rows}
        self.requests = 0
        oracle = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body are separate writes; avoid delayed-ACK stalls

            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                oracle.requests += 1
                question = body["messages"][-1]["content"]
                # Answer in the constrained format the eval requested (a JSON string) when it asked for one.
                label = oracle.answers.get(question, "")
                content = json.dumps(label) if body.get("response_format") else label
                data = json.dumps(
                    {
                        "object": "chat.completion",
                        "choices": [
                            {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}
                        ],
                        "usage": {"prompt_tokens": 0, "completion_tokens": 1},
                    }
                ).encode()
                self.send_response(200 if self.path == "/v1/chat/completions" else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> OracleModel:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
