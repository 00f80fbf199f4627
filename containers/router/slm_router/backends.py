"""Generation backends: where a chat request is answered (the SLM, or the LLM it escalates to).

Every backend takes an OpenAI chat body and gives an OpenAI-shaped answer (JSON, or SSE when streaming),
or raises UpstreamError while nothing has reached the client yet, so the router can still fall back.
Generations are never retried: one may already be running upstream (only a stale pooled connection,
which the upstream never read from, is re-sent by the HTTP client).
"""

from __future__ import annotations

import inspect
import json
import os
from collections.abc import Callable
from typing import Any

from .answer import Answer, Backend, unavailable_status
from .client import HttpClient, UpstreamError
from .config import Config, Timeouts

__all__ = ["Answer", "ApiKey", "Backend", "OpenAIBackend", "make_llm", "make_slm", "unavailable_status"]


class OpenAIBackend:
    """An OpenAI-compatible /chat/completions (llama-server, vLLM, a hosted API)."""

    def __init__(
        self,
        upstream: str,
        client: HttpClient,
        path: str,
        timeouts: Timeouts,
        *,
        model: str = "",
        auth: Callable[[], Any] | None = None,
    ):
        self.upstream = upstream
        self.client = client
        self.path = path
        self.timeouts = timeouts
        self.model = model
        self.auth = auth or (lambda: None)

    async def complete(self, body: dict[str, Any], stream: bool) -> Answer:
        if self.model:
            body = {**body, "model": self.model}
        headers = [
            ("Content-Type", "application/json"),
            ("Accept", "text/event-stream" if stream else "application/json"),
        ]
        raw_body = json.dumps(body).encode()
        key = await _resolved(self.auth())
        resp = await self._send(raw_body, headers, key)
        if resp.status == 401 and key:
            # The router's own key was refused: re-read it (a rotated secret) and try once more. The LLM did not
            # start a generation, so this is not a retried generation.
            resp.close()
            refresh = getattr(self.auth, "refresh", None)
            new_key = await refresh() if refresh else None
            if not new_key:
                raise UpstreamError("status", f"{self.upstream} refused the router's API key (401)", 401)
            resp = await self._send(raw_body, headers, new_key)
            if resp.status == 401:
                resp.close()
                raise UpstreamError("status", f"{self.upstream} refused the router's refreshed API key (401)", 401)
        content_type = resp.header("content-type", "application/json")
        if resp.status == 200 and stream:
            return Answer(200, content_type, chunks=resp.iter(self.timeouts.idle_s), close=resp.close)
        try:
            raw = await resp.read(self.timeouts.total_s)
        except Exception as e:
            resp.close()
            raise UpstreamError(
                "timeout" if isinstance(e, TimeoutError) else "protocol", f"body not complete ({type(e).__name__})"
            ) from None
        if unavailable_status(resp.status):
            raise UpstreamError("status", f"{self.upstream} answered {resp.status}: {raw[:200]!r}", resp.status)
        return Answer(resp.status, content_type, body=raw)

    async def _send(self, raw_body: bytes, headers: list[tuple[str, str]], key: str | None) -> Any:
        if key:
            headers = [*headers, ("Authorization", f"Bearer {key}")]
        return await self.client.request("POST", self.path, raw_body, headers, head_timeout=self.timeouts.first_byte_s)

    async def aclose(self) -> None:
        self.client.close()
        aclose = getattr(self.auth, "aclose", None)
        if aclose:
            await aclose()


async def _resolved(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


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


def make_slm(cfg: Config) -> Backend:
    if cfg.slm_endpoint_name:
        from . import aws  # botocore only when the SLM is a SageMaker endpoint

        return aws.SageMakerBackend(
            cfg.slm_endpoint_name,
            cfg.timeouts,
            upstream="slm",
            region=cfg.slm_region,
            endpoint_url=cfg.slm_endpoint_url,
            model_id=cfg.slm_model,
        )
    client = HttpClient(cfg.slm_url, connect_timeout=cfg.timeouts.connect_s)
    return OpenAIBackend("slm", client, "/v1/chat/completions", cfg.timeouts, model=cfg.slm_model)


def make_llm(cfg: Config) -> Backend:
    e = cfg.escalation
    if e.kind == "openai":
        client = HttpClient(e.url, connect_timeout=cfg.timeouts.connect_s)
        if e.api_key_secret_arn:
            from .secret_key import SecretApiKey  # botocore only when a secret is configured

            auth: Callable[[], Any] = SecretApiKey(e, cfg.timeouts)
        else:
            auth = ApiKey(e.api_key_file, e.api_key_env)
        return OpenAIBackend("llm", client, "/chat/completions", cfg.timeouts, model=e.model_id, auth=auth)
    from . import aws  # botocore only when an AWS escalation is configured

    if e.kind == "sagemaker":
        return aws.SageMakerBackend.for_escalation(e, cfg.timeouts)
    return aws.BedrockBackend(e, cfg.timeouts)
