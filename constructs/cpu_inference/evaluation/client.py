"""Chat clients for the two kinds of endpoint the tools measure.

- an OpenAI-compatible URL (llama-server, the EKS service): POST /v1/chat/completions, stdlib http.client
  with one keep-alive connection per thread;
- `sagemaker:NAME`: botocore's `sagemaker-runtime` (SigV4), InvokeEndpointWithResponseStream for streams
  and InvokeEndpoint otherwise; the container takes OpenAI chat bodies at /invocations.

Both return a `ChatResult` with the timings a benchmark needs; they never raise for a failed request
(a failure is a result with `error` set), so a load run counts errors instead of aborting. A refusal for lack
of capacity (HTTP 429/503; on SageMaker the container's 429/503 arrives as ModelError, HTTP 424, with the
container's status in OriginalStatusCode, or SageMaker's own throttling) is a failure with `rejected` set:
overload, counted apart from errors."""

from __future__ import annotations

import http.client
import json
import os
import threading
import time
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlsplit

from cpu_inference.evaluation.server import ServerInfo, from_models_body
from cpu_inference.evaluation.stream import ChatStream, StreamError


@dataclass(frozen=True)
class ChatResult:
    ok: bool
    started: float  # perf_counter at send
    e2e_s: float
    ttft_s: float | None = None  # None when the response was not streamed
    output_tokens: int | None = None
    prompt_tokens: int | None = None
    text: str = ""
    finish_reason: str | None = None
    error: str | None = None
    rejected: bool = False  # refused for lack of capacity (429/503), not failed

    @property
    def tpot_s(self) -> float | None:
        """Time per output token after the first (the decode rate a user sees)."""
        if self.ttft_s is None or not self.output_tokens or self.output_tokens < 2:
            return None
        return (self.e2e_s - self.ttft_s) / (self.output_tokens - 1)


class ChatClient(Protocol):
    description: str
    kind: str

    def chat(self, body: dict[str, Any], *, stream: bool) -> ChatResult: ...

    def server_info(self) -> ServerInfo: ...

    def close(self) -> None: ...


def chat_body(
    messages: list[dict[str, Any]],
    *,
    max_tokens: int,
    stream: bool,
    model: str | None = None,
    temperature: float = 0.0,
    **extra: Any,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "messages": messages,
        "max_tokens": max_tokens,
        "temperature": temperature,
        "stream": stream,
    }
    if stream:
        # The last chunk then carries the server's own token counts (OpenAI spec; llama-server honours it).
        body["stream_options"] = {"include_usage": True}
    if model:
        body["model"] = model
    body.update(extra)
    return body


def _from_stream(parsed: ChatStream, started: float, ended: float) -> ChatResult:
    usage = parsed.usage or {}
    out = usage.get("completion_tokens")
    if out is None:
        # Servers that ignore include_usage: llama-server-style streams send one token per chunk.
        out = parsed.content_chunks
    ttft = None if parsed.first_token_at is None else parsed.first_token_at - started
    return ChatResult(
        True, started, ended - started, ttft, out, usage.get("prompt_tokens"), parsed.text, parsed.finish_reason
    )


def _from_json(payload: bytes, started: float, ended: float) -> ChatResult:
    data = json.loads(payload)
    if "error" in data:
        err = data["error"]
        raise StreamError(err.get("message", str(err)) if isinstance(err, dict) else str(err))
    choice = (data.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    usage = data.get("usage") or {}
    return ChatResult(
        True,
        started,
        ended - started,
        None,
        usage.get("completion_tokens"),
        usage.get("prompt_tokens"),
        message.get("content") or "",
        choice.get("finish_reason"),
    )


OVERLOAD_STATUSES = (429, 503)  # "no capacity now, retry later" (the engine adapter's and llama-server's answers)
# SageMaker Runtime errors that are overload: its own throttling / not-ready answers (botocore sagemaker-runtime
# ModelNotReadyException 429, ServiceUnavailable 503) and a container's 429/503 wrapped in ModelError (424).
_SAGEMAKER_OVERLOAD_CODES = ("ModelNotReadyException", "ServiceUnavailable", "ThrottlingException")


def _failed(started: float, exc: BaseException | str, *, rejected: bool = False) -> ChatResult:
    msg = exc if isinstance(exc, str) else f"{type(exc).__name__}: {exc}"
    return ChatResult(False, started, time.perf_counter() - started, error=msg[:500], rejected=rejected)


def sagemaker_overload(response: dict[str, Any]) -> bool:
    """A botocore ClientError response that means overload: the container's 429/503 (ModelError's modeled
    OriginalStatusCode) or SageMaker's own throttling / model-not-ready answers."""
    code = response.get("Error", {}).get("Code", "")
    if code == "ModelError":
        return response.get("OriginalStatusCode") in OVERLOAD_STATUSES
    return code in _SAGEMAKER_OVERLOAD_CODES


class OpenAIClient:
    """POST {base}/v1/chat/completions (or the exact .../chat/completions URL given)."""

    kind = "openai"

    def __init__(self, url: str, *, timeout: float = 120.0, api_key: str | None = None) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"endpoint {url!r}: expected http(s)://host[:port][/path] or sagemaker:NAME")
        path = parts.path.rstrip("/")
        if not path.endswith("/chat/completions"):
            path = (path[:-3] if path.endswith("/v1") else path) + "/v1/chat/completions"
        self.scheme, self.host, self.port = parts.scheme, parts.hostname, parts.port
        self.path = path
        self.models_path = path[: -len("/chat/completions")] + "/models"
        self.timeout = timeout
        self.headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        if api_key:
            self.headers["Authorization"] = f"Bearer {api_key}"
        self.description = f"{parts.scheme}://{parts.netloc}{path}"
        self._local = threading.local()
        self._all: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()

    def _conn(self) -> http.client.HTTPConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            cls = http.client.HTTPSConnection if self.scheme == "https" else http.client.HTTPConnection
            conn = cls(self.host, self.port, timeout=self.timeout)
            self._local.conn = conn
            with self._lock:
                self._all.append(conn)
        return conn

    def _drop(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    def chat(self, body: dict[str, Any], *, stream: bool) -> ChatResult:
        body = {**body, "stream": stream}
        payload = json.dumps(body).encode()
        started = time.perf_counter()
        try:
            conn = self._conn()
            try:
                conn.request("POST", self.path, body=payload, headers=self.headers)
                resp = conn.getresponse()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                # A keep-alive connection the server closed while idle: retry once on a fresh one.
                self._drop()
                started = time.perf_counter()
                conn = self._conn()
                conn.request("POST", self.path, body=payload, headers=self.headers)
                resp = conn.getresponse()
            if resp.status != 200:
                detail = resp.read()[:300].decode(errors="replace")
                self._drop()
                return _failed(started, f"HTTP {resp.status}: {detail}", rejected=resp.status in OVERLOAD_STATUSES)
            if not stream or "event-stream" not in (resp.getheader("Content-Type") or ""):
                data = resp.read()
                return _from_json(data, started, time.perf_counter())
            parsed = ChatStream()
            while True:
                line = resp.readline()
                if not line:
                    break
                parsed.feed(line)
            # readline() stops at Content-Length without marking the response done; read() does, and the
            # keep-alive connection is then reusable (chunked streams, llama-server's, end either way).
            resp.read()
            parsed.close()
            return _from_stream(parsed, started, time.perf_counter())
        except (OSError, http.client.HTTPException, StreamError, ValueError) as exc:
            self._drop()
            return _failed(started, exc)

    def server_info(self) -> ServerInfo:
        """The engine behind the URL, from its GET /v1/models (never raises: unknown on any failure)."""
        source = f"GET {self.models_path}"
        cls = http.client.HTTPSConnection if self.scheme == "https" else http.client.HTTPConnection
        conn = cls(self.host, self.port, timeout=min(self.timeout, 10))
        try:
            conn.request(
                "GET", self.models_path, headers={k: v for k, v in self.headers.items() if k != "Content-Type"}
            )
            resp = conn.getresponse()
            body = resp.read()
            if resp.status != 200:
                return ServerInfo(None, source=source, detail=f"HTTP {resp.status}")
            return from_models_body(body, source=source)
        except (OSError, http.client.HTTPException) as exc:
            return ServerInfo(None, source=source, detail=f"{type(exc).__name__}: {exc}"[:200])
        finally:
            conn.close()

    def close(self) -> None:
        with self._lock:
            for conn in self._all:
                conn.close()
            self._all.clear()


class SageMakerClient:
    """sagemaker-runtime through botocore (SigV4 from the default credential chain)."""

    kind = "sagemaker"

    def __init__(
        self,
        endpoint_name: str,
        *,
        region: str | None = None,
        endpoint_url: str | None = None,
        timeout: float = 120.0,
        max_pool: int = 16,
        inference_component: str | None = None,
    ) -> None:
        import boto3
        from botocore.config import Config

        if not endpoint_name:
            raise ValueError("sagemaker:NAME needs an endpoint name")
        session = boto3.session.Session(region_name=region)
        if not session.region_name:
            raise ValueError("sagemaker endpoint: no AWS region — pass --region or set AWS_REGION")
        # No SDK retries: a retried request would hide its first attempt's latency from the benchmark.
        config = Config(
            max_pool_connections=max_pool,
            read_timeout=timeout,
            connect_timeout=min(timeout, 10),
            retries={"mode": "standard", "max_attempts": 1},
        )
        self.runtime = session.client("sagemaker-runtime", endpoint_url=endpoint_url, config=config)
        self.endpoint_name = endpoint_name
        self.inference_component = inference_component
        self.region = session.region_name
        self.description = f"sagemaker:{endpoint_name} ({self.region})"

    def _params(self, body: dict[str, Any]) -> dict[str, Any]:
        params: dict[str, Any] = {
            "EndpointName": self.endpoint_name,
            "Body": json.dumps(body).encode(),
            "ContentType": "application/json",
        }
        if self.inference_component:
            params["InferenceComponentName"] = self.inference_component
        return params

    def chat(self, body: dict[str, Any], *, stream: bool) -> ChatResult:
        from botocore.exceptions import BotoCoreError, ClientError

        body = {**body, "stream": stream}
        started = time.perf_counter()
        try:
            if not stream:
                resp = self.runtime.invoke_endpoint(Accept="application/json", **self._params(body))
                data = resp["Body"].read()
                return _from_json(data, started, time.perf_counter())
            resp = self.runtime.invoke_endpoint_with_response_stream(**self._params(body))
            parsed = ChatStream()
            for event in resp["Body"]:
                if "PayloadPart" in event:
                    parsed.feed(event["PayloadPart"].get("Bytes", b""))
                else:
                    # ModelStreamError / InternalStreamFailure arrive as events when not raised by botocore.
                    raise StreamError(json.dumps(event, default=str)[:300])
            parsed.close()
            return _from_stream(parsed, started, time.perf_counter())
        except ClientError as exc:
            return _failed(started, exc, rejected=sagemaker_overload(exc.response))
        except (BotoCoreError, StreamError, ValueError, OSError) as exc:
            return _failed(started, exc)

    def server_info(self) -> ServerInfo:
        # SageMaker Runtime reaches only the container's /invocations and /ping: no model list to ask.
        return ServerInfo(
            None, source="sagemaker", detail="a SageMaker endpoint does not expose the engine's /v1/models"
        )

    def close(self) -> None:
        self.runtime.close()


def make_client(
    endpoint: str,
    *,
    timeout: float = 120.0,
    region: str | None = None,
    sagemaker_endpoint_url: str | None = None,
    api_key_env: str | None = None,
    max_pool: int = 16,
    inference_component: str | None = None,
) -> ChatClient:
    """`http(s)://...` → OpenAIClient; `sagemaker:NAME` → SageMakerClient. ValueError on a bad spec."""
    if endpoint.startswith("sagemaker:"):
        return SageMakerClient(
            endpoint.split(":", 1)[1],
            region=region,
            endpoint_url=sagemaker_endpoint_url,
            timeout=timeout,
            max_pool=max_pool,
            inference_component=inference_component,
        )
    api_key = None
    if api_key_env:
        api_key = os.environ.get(api_key_env)
        if not api_key:
            raise ValueError(f"--api-key-env {api_key_env}: that environment variable is not set")
    return OpenAIClient(endpoint, timeout=timeout, api_key=api_key)
