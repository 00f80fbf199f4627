"""A loopback stand-in for the SageMaker Runtime and Bedrock Runtime front ends, in front of real engines.

botocore talks to it through `endpoint_url` exactly as to AWS (SigV4-signed REST-JSON requests; binary
application/vnd.amazon.eventstream responses for the streaming operations); it forwards the chat to a real
llama-server and frames the answer the way the services do. SageMaker endpoints are routed by name
(`endpoints`: name → engine URL, others go to `engine_url`), so the SLM and the LLM can both be "endpoints";
the body is forwarded as the engine container's /invocations does (OpenAI chat body byte for byte), or, for
names in `containers`, to a real SageMaker container's POST /invocations (the image's adapter). A non-200 from the
engine or container comes back as SageMaker returns it: HTTP 424 ModelError with botocore's modeled members
(OriginalStatusCode = the container's status; its Retry-After dropped). `fail_with` makes it answer an AWS error
instead.
"""

from __future__ import annotations

import json
import re
import struct
import threading
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx

from tests.evaluation.sagemaker_emulator import model_error_body


def event_message(headers: dict[str, str], payload: bytes) -> bytes:
    """One AWS event-stream message: prelude (lengths + CRC), string headers, payload, message CRC."""
    raw_headers = b"".join(
        bytes([len(k)]) + k.encode() + b"\x07" + struct.pack(">H", len(v)) + v.encode() for k, v in headers.items()
    )
    prelude = struct.pack(">II", 16 + len(raw_headers) + len(payload), len(raw_headers))
    message = prelude + struct.pack(">I", zlib.crc32(prelude)) + raw_headers + payload
    return message + struct.pack(">I", zlib.crc32(message))


def event(event_type: str, payload: bytes, content_type: str = "application/json") -> bytes:
    return event_message({":event-type": event_type, ":content-type": content_type, ":message-type": "event"}, payload)


@dataclass
class Seen:
    path: str
    authorization: str
    body: dict[str, Any]
    target_model: str = (
        ""  # InvokeEndpoint's TargetModel (header X-Amzn-SageMaker-Target-Model): a multi-model endpoint
    )


@dataclass
class AwsStandIn:
    engine_url: str
    endpoints: dict[str, str] = field(default_factory=dict)  # SageMaker endpoint name → engine URL
    containers: dict[str, str] = field(default_factory=dict)  # SageMaker endpoint name → container URL (/invocations)
    seen: list[Seen] = field(default_factory=list)
    fail_with: tuple[int, str] | None = None  # (HTTP status, x-amzn-ErrorType)
    url: str = ""
    _server: ThreadingHTTPServer | None = None

    def start(self) -> AwsStandIn:
        standin = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                body = json.loads(raw or b"{}")
                target = self.headers.get("X-Amzn-SageMaker-Target-Model", "")
                standin.seen.append(Seen(self.path, self.headers.get("Authorization", ""), body, target))
                if standin.fail_with:
                    status, code = standin.fail_with
                    self._send(
                        status,
                        json.dumps({"message": f"stand-in {code}"}).encode(),
                        "application/json",
                        {"x-amzn-ErrorType": code},
                    )
                    return
                if (m := re.fullmatch(r"/endpoints/([^/]+)/invocations(-response-stream)?", self.path)) and m[
                    1
                ] in standin.containers:
                    r = httpx.post(
                        f"{standin.containers[m[1]]}/invocations",
                        content=raw,
                        headers={"Content-Type": "application/json"},
                        timeout=300,
                    )
                    if r.status_code != 200:
                        return self._model_error(m[1], r)
                    if m[2]:
                        self._stream(event("PayloadPart", piece, "application/octet-stream") for piece in [r.content])
                    else:
                        self._send(200, r.content, r.headers.get("content-type", "application/json"))
                elif m := re.fullmatch(r"/endpoints/([^/]+)/invocations", self.path):
                    # A multi-model endpoint: "<endpoint>/<TargetModel>" names the engine of that model.
                    url = standin.endpoints.get(f"{m[1]}/{target}", standin.endpoints.get(m[1], standin.engine_url))
                    r = httpx.post(
                        f"{url}/v1/chat/completions",
                        content=raw,
                        headers={"Content-Type": "application/json"},
                        timeout=300,
                    )
                    if r.status_code != 200:
                        return self._model_error(m[1], r)
                    self._send(r.status_code, r.content, r.headers.get("content-type", "application/json"))
                elif m := re.fullmatch(r"/endpoints/([^/]+)/invocations-response-stream", self.path):
                    url = standin.endpoints.get(m[1], standin.engine_url)
                    self._stream(
                        event("PayloadPart", piece, "application/octet-stream")
                        for piece in standin._engine_stream(body, url)
                    )
                elif m := re.fullmatch(r"/model/([^/]+)/converse", self.path):
                    r = httpx.post(f"{standin.engine_url}/v1/chat/completions", json=_openai(body), timeout=300).json()
                    out = {
                        "output": {
                            "message": {
                                "role": "assistant",
                                "content": [{"text": r["choices"][0]["message"]["content"]}],
                            }
                        },
                        "stopReason": "max_tokens" if r["choices"][0]["finish_reason"] == "length" else "end_turn",
                        "usage": {
                            "inputTokens": r["usage"]["prompt_tokens"],
                            "outputTokens": r["usage"]["completion_tokens"],
                            "totalTokens": r["usage"]["total_tokens"],
                        },
                        "metrics": {"latencyMs": 1},
                    }
                    self._send(200, json.dumps(out).encode(), "application/json")
                elif m := re.fullmatch(r"/model/([^/]+)/converse-stream", self.path):
                    self._stream(standin._converse_events(body))
                else:
                    self._send(
                        404,
                        b'{"message": "unknown operation"}',
                        "application/json",
                        {"x-amzn-ErrorType": "UnknownOperationException"},
                    )
                del m

            def _model_error(self, endpoint: str, r: httpx.Response) -> None:
                """SageMaker's answer to a container's non-200: 424 ModelError, the container's status inside."""
                body = model_error_body(r.status_code, r.text[:300], endpoint_name=endpoint, region="us-east-1")
                self._send(424, body, "application/json", {"x-amzn-ErrorType": "ModelError"})

            def _send(self, status: int, data: bytes, content_type: str, headers: dict[str, str] | None = None) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.send_header("x-amzn-RequestId", "standin-request")
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def _stream(self, messages: Iterator[bytes]) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "application/vnd.amazon.eventstream")
                self.send_header("Transfer-Encoding", "chunked")
                self.send_header("x-amzn-RequestId", "standin-request")
                self.end_headers()
                for msg in messages:
                    self.wfile.write(f"{len(msg):x}\r\n".encode() + msg + b"\r\n")
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server:
            self._server.shutdown()
            self._server.server_close()

    def _engine_stream(self, body: dict[str, Any], url: str = "") -> Iterator[bytes]:
        with httpx.stream("POST", f"{url or self.engine_url}/v1/chat/completions", json=body, timeout=300) as r:
            yield from r.iter_raw()

    def _converse_events(self, body: dict[str, Any]) -> Iterator[bytes]:
        yield event("messageStart", json.dumps({"role": "assistant"}).encode())
        stop = "end_turn"
        usage = {"inputTokens": 0, "outputTokens": 0, "totalTokens": 0}
        buf = b""
        for piece in self._engine_stream({**_openai(body), "stream": True}):
            buf += piece
            while b"\n\n" in buf:
                line, buf = buf.split(b"\n\n", 1)
                data = line.decode().removeprefix("data: ").strip()
                if not data or data == "[DONE]":
                    continue
                chunk = json.loads(data)
                for choice in chunk.get("choices") or []:
                    text = (choice.get("delta") or {}).get("content")
                    if text:
                        yield event(
                            "contentBlockDelta", json.dumps({"contentBlockIndex": 0, "delta": {"text": text}}).encode()
                        )
                    if choice.get("finish_reason") == "length":
                        stop = "max_tokens"
                    usage["outputTokens"] += 1 if text else 0
        yield event("contentBlockStop", json.dumps({"contentBlockIndex": 0}).encode())
        yield event("messageStop", json.dumps({"stopReason": stop}).encode())
        yield event("metadata", json.dumps({"usage": usage, "metrics": {"latencyMs": 1}}).encode())


def _openai(converse: dict[str, Any]) -> dict[str, Any]:
    """Bedrock Converse request → the OpenAI chat body the engine takes."""
    messages = (
        [{"role": "system", "content": " ".join(s["text"] for s in converse.get("system", []))}]
        if converse.get("system")
        else []
    )
    messages += [
        {"role": m["role"], "content": "".join(c.get("text", "") for c in m["content"])} for m in converse["messages"]
    ]
    cfg = converse.get("inferenceConfig") or {}
    out: dict[str, Any] = {"messages": messages}
    if "maxTokens" in cfg:
        out["max_tokens"] = cfg["maxTokens"]
    if "temperature" in cfg:
        out["temperature"] = cfg["temperature"]
    return out
