"""Generation backends: where a chat request is answered (the SLM, or the LLM it escalates to).

Every backend takes an OpenAI chat body and gives an OpenAI-shaped answer (JSON, or SSE when streaming),
or raises UpstreamError while nothing has reached the client yet, so the router can still fall back.
Generations are never retried: one may already be running upstream (only a stale pooled connection,
which the upstream never read from, is re-sent by the HTTP client).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Callable, Protocol

from .client import HttpClient, UpstreamError
from .config import Config, Timeouts


@dataclass
class Answer:
    status: int
    content_type: str
    body: bytes = b""  # a complete answer (non-streamed, or an upstream 4xx)
    chunks: AsyncIterator[bytes] | None = None  # a streamed answer, relayed piece by piece
    close: Callable[[], None] = field(default=lambda: None)  # abandon the stream (client left)


class Backend(Protocol):
    upstream: str  # "slm" | "llm": metrics label and circuit breaker

    async def complete(self, body: dict[str, Any], stream: bool) -> Answer: ...

    async def aclose(self) -> None: ...


def unavailable_status(status: int) -> bool:
    """Statuses that mean "this upstream cannot answer now" (fall back) rather than "this request is wrong"."""
    return status == 429 or status >= 500


class OpenAIBackend:
    """An OpenAI-compatible /chat/completions (llama-server, vLLM, a hosted API)."""

    def __init__(self, upstream: str, client: HttpClient, path: str, timeouts: Timeouts, *, model: str = "",
                 auth: Callable[[], str | None] | None = None):
        self.upstream = upstream
        self.client = client
        self.path = path
        self.timeouts = timeouts
        self.model = model
        self.auth = auth or (lambda: None)

    async def complete(self, body: dict[str, Any], stream: bool) -> Answer:
        if self.model:
            body = {**body, "model": self.model}
        headers = [("Content-Type", "application/json"), ("Accept", "text/event-stream" if stream else "application/json")]
        key = self.auth()
        if key:
            headers.append(("Authorization", f"Bearer {key}"))
        resp = await self.client.request("POST", self.path, json.dumps(body).encode(), headers, head_timeout=self.timeouts.first_byte_s)
        content_type = resp.header("content-type", "application/json")
        if resp.status == 200 and stream:
            return Answer(200, content_type, chunks=resp.iter(self.timeouts.idle_s), close=resp.close)
        try:
            raw = await resp.read(self.timeouts.total_s)
        except Exception as e:
            resp.close()
            raise UpstreamError("timeout" if isinstance(e, TimeoutError) else "protocol", f"body not complete ({type(e).__name__})") from None
        if unavailable_status(resp.status):
            raise UpstreamError("status", f"{self.upstream} answered {resp.status}: {raw[:200]!r}", resp.status)
        return Answer(resp.status, content_type, body=raw)

    async def aclose(self) -> None:
        self.client.close()


class ApiKey:
    """The LLM's API key from a mounted secret file (re-read when it changes: rotation needs no restart)
    or from an env var."""

    def __init__(self, file: str = "", env: str = ""):
        self.file, self.env = file, env
        self._mtime: float | None = None
        self._value: str | None = None

    def __call__(self) -> str | None:
        if self.file:
            try:
                mtime = os.stat(self.file).st_mtime
            except OSError:
                return self._value  # a secret volume mid-update: keep the last key
            if mtime != self._mtime:
                with open(self.file, encoding="utf-8") as f:
                    self._value = f.read().strip() or None
                self._mtime = mtime
            return self._value
        if self.env:
            return os.environ.get(self.env) or None
        return None


def make_slm(cfg: Config) -> OpenAIBackend:
    client = HttpClient(cfg.slm_url, connect_timeout=cfg.timeouts.connect_s)
    return OpenAIBackend("slm", client, "/v1/chat/completions", cfg.timeouts, model=cfg.slm_model)


def make_llm(cfg: Config) -> Backend:
    e = cfg.escalation
    if e.kind == "openai":
        client = HttpClient(e.url, connect_timeout=cfg.timeouts.connect_s)
        return OpenAIBackend("llm", client, "/chat/completions", cfg.timeouts, model=e.model_id,
                             auth=ApiKey(e.api_key_file, e.api_key_env))
    from . import aws  # botocore only when an AWS escalation is configured

    if e.kind == "sagemaker":
        return aws.SageMakerBackend(e, cfg.timeouts)
    return aws.BedrockBackend(e, cfg.timeouts)
