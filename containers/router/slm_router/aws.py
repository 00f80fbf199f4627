"""Escalation to an LLM on AWS: a SageMaker endpoint (the engine container takes OpenAI chat bodies at
/invocations) or a Bedrock model (Converse API, translated to and from OpenAI chat).

botocore is synchronous: calls run on a dedicated thread pool (a stream holds one thread while it lasts)
and streamed events are handed to the event loop as they arrive. botocore's own retries are off:
a generation may already be running, and the router's fallback is the retry.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import botocore.session
from botocore.config import Config as BotoConfig
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    EventStreamError,
    NoCredentialsError,
    ReadTimeoutError,
)

from inference_runtime.http1 import error_body

from .answer import Answer, unavailable_status
from .client import UpstreamError
from .config import Escalation, Timeouts

_POOL = ThreadPoolExecutor(max_workers=64, thread_name_prefix="aws")
_DONE = object()
# Errors that mean "the LLM cannot answer now" even though AWS answered 4xx: the router's own credentials
# or quota, not the client's request.
_UNAVAILABLE_CODES = {
    "ThrottlingException",
    "ServiceUnavailableException",
    "ServiceUnavailable",
    "ModelNotReadyException",
    "InternalServerException",
    "InternalFailure",
    "AccessDeniedException",
    "UnrecognizedClientException",
    "ExpiredTokenException",
    "ModelTimeoutException",
    "InternalDependencyException",
    "TooManyRequestsException",
}


def make_client(service: str, region: str, endpoint_url: str, t: Timeouts) -> Any:
    """A botocore client without retries; empty region / endpoint_url mean AWS_REGION or the SDK chain / the
    public endpoint (botocore itself reads only AWS_DEFAULT_REGION, not the AWS_REGION other SDKs use)."""
    cfg = BotoConfig(
        connect_timeout=t.connect_s,
        read_timeout=max(t.total_s, t.first_byte_s, t.idle_s),
        retries={"total_max_attempts": 1},
        max_pool_connections=64,
        user_agent_extra="slm-router",
    )
    return botocore.session.get_session().create_client(
        service,
        region_name=region or os.environ.get("AWS_REGION") or None,
        endpoint_url=endpoint_url or None,
        config=cfg,
    )


def _mapped(exc: BaseException) -> UpstreamError | Answer:
    """An AWS failure as UpstreamError (fall back), or as the client's own 4xx Answer (pass through)."""
    if isinstance(exc, (EndpointConnectionError, ConnectTimeoutError, ConnectionClosedError)):
        return UpstreamError("connect", type(exc).__name__)
    if isinstance(exc, ReadTimeoutError):
        return UpstreamError("timeout", type(exc).__name__)
    if isinstance(exc, NoCredentialsError):
        return UpstreamError("connect", "no AWS credentials for the escalation")
    if isinstance(exc, ClientError):
        err = exc.response.get("Error", {})
        code, message = err.get("Code", ""), err.get("Message", "")
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 500)
        if code == "ModelError":
            # SageMaker answers 424 for any non-2xx of the container; the container's own status is the modeled
            # member OriginalStatusCode (botocore sagemaker-runtime: ModelError = Message, OriginalStatusCode,
            # OriginalMessage, LogStreamArn; no Retry-After). Its 429 (the engine adapter is full) is overload:
            # the caller falls back / retries the idempotent classification. Without a status it is a failed
            # upstream (502), never a 424 for the router's client.
            original = exc.response.get("OriginalStatusCode")
            status = int(original) if isinstance(original, int) or str(original or "").isdigit() else 502
            message = exc.response.get("OriginalMessage") or message
        if code in _UNAVAILABLE_CODES or unavailable_status(status):
            return UpstreamError("status", f"{code or status}: {message[:200]}", status)
        return Answer(status, "application/json", body=error_body(status, f"{code}: {message}"))
    if isinstance(exc, BotoCoreError):
        return UpstreamError("protocol", type(exc).__name__)
    raise exc


async def _call(fn: Callable[..., Any], timeout: float, **kwargs: Any) -> Any:
    """Run a botocore call on the pool; raises UpstreamError, or returns an Answer for a client error."""
    loop = asyncio.get_running_loop()
    try:
        return await asyncio.wait_for(loop.run_in_executor(_POOL, lambda: fn(**kwargs)), timeout)
    except TimeoutError:
        raise UpstreamError("timeout", f"no answer within {timeout}s") from None
    except (BotoCoreError, ClientError) as e:
        mapped = _mapped(e)
        if isinstance(mapped, UpstreamError):
            raise mapped from None
        return mapped


async def _relay_events(
    events: Iterable[Any], convert: Callable[[Any], bytes | None], idle_s: float, tail: bytes = b""
) -> AsyncIterator[bytes]:
    """Iterate a botocore EventStream on the pool and yield each converted event as it arrives."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue = asyncio.Queue()  # unbounded: a token stream is small, and the pump never blocks

    def pump() -> None:
        try:
            for event in events:
                loop.call_soon_threadsafe(queue.put_nowait, event)
        except Exception as e:  # delivered to the consumer, which maps it
            loop.call_soon_threadsafe(queue.put_nowait, e)
        finally:
            loop.call_soon_threadsafe(queue.put_nowait, _DONE)

    loop.run_in_executor(_POOL, pump)
    while True:
        item = await asyncio.wait_for(queue.get(), idle_s)
        if item is _DONE:
            break
        if isinstance(item, EventStreamError):
            raise UpstreamError("protocol", f"stream error event: {item}")
        if isinstance(item, Exception):
            mapped = (
                _mapped(item)
                if isinstance(item, (BotoCoreError, ClientError))
                else UpstreamError("protocol", repr(item))
            )
            raise mapped if isinstance(mapped, UpstreamError) else UpstreamError("protocol", "client error mid-stream")
        data = convert(item)
        if data:
            yield data
    if tail:
        yield tail


def _closer(stream: Any) -> Callable[[], None]:
    def close() -> None:
        with contextlib.suppress(Exception):
            stream.close()  # unblocks the pump thread

    return close


class SageMakerBackend:
    """The OpenAI chat body as is to InvokeEndpoint(WithResponseStream); the engine answers in OpenAI shape
    (JSON, or SSE bytes carried in PayloadPart events, relayed unchanged). Used for the LLM (escalation kind
    sagemaker) and for the SLM (slm_endpoint_name)."""

    def __init__(
        self,
        endpoint_name: str,
        timeouts: Timeouts,
        *,
        upstream: str = "llm",
        region: str = "",
        endpoint_url: str = "",
        model_id: str = "",
        inference_component: str = "",
        target_model: str = "",
        client: Any = None,
    ):
        self.upstream = upstream
        self.endpoint_name, self.model_id, self.inference_component = endpoint_name, model_id, inference_component
        self.target_model = target_model
        self.t = timeouts
        self.client = client or make_client("sagemaker-runtime", region, endpoint_url, timeouts)

    @classmethod
    def for_escalation(cls, e: Escalation, timeouts: Timeouts) -> SageMakerBackend:
        return cls(
            e.endpoint_name,
            timeouts,
            upstream="llm",
            region=e.region,
            endpoint_url=e.endpoint_url,
            model_id=e.model_id,
            inference_component=e.inference_component,
            target_model=e.target_model,
        )

    def _kwargs(self, body: dict[str, Any]) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "EndpointName": self.endpoint_name,
            "Body": json.dumps(body).encode(),
            "ContentType": "application/json",
        }
        if self.inference_component:
            kwargs["InferenceComponentName"] = self.inference_component
        if self.target_model:
            kwargs["TargetModel"] = self.target_model
        return kwargs

    async def invoke(self, body: dict[str, Any], timeout: float) -> Answer:
        """One non-streamed InvokeEndpoint, head and body within `timeout`."""
        deadline = time.monotonic() + timeout
        resp = await _call(self.client.invoke_endpoint, timeout, Accept="application/json", **self._kwargs(body))
        if isinstance(resp, Answer):
            return resp
        data = await _call(resp["Body"].read, max(0.001, deadline - time.monotonic()))
        return Answer(200, resp.get("ContentType") or "application/json", body=data)

    async def complete(self, body: dict[str, Any], stream: bool) -> Answer:
        if self.model_id:
            body = {**body, "model": self.model_id}
        if not stream:
            return await self.invoke(body, self.t.total_s)
        if self.target_model:
            return await self._whole_as_sse(body)
        resp = await _call(
            self.client.invoke_endpoint_with_response_stream,
            self.t.first_byte_s,
            Accept="text/event-stream",
            **self._kwargs(body),
        )
        if isinstance(resp, Answer):
            return resp
        events = resp["Body"]

        def convert(event: dict[str, Any]) -> bytes | None:
            if "PayloadPart" in event:
                return event["PayloadPart"].get("Bytes") or None
            raise UpstreamError("protocol", f"SageMaker stream error: {json.dumps(event, default=str)[:200]}")

        return Answer(
            200,
            resp.get("ContentType") or "text/event-stream",
            chunks=_relay_events(events, convert, self.t.idle_s),
            close=_closer(events),
        )

    async def _whole_as_sse(self, body: dict[str, Any]) -> Answer:
        """A multi-model endpoint cannot stream: InvokeEndpointWithResponseStream has no TargetModel member (botocore
        sagemaker-runtime). The answer is asked for whole and replayed to the client as chat.completion.chunk SSE."""
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        answer = await self.invoke(
            {k: v for k, v in body.items() if k not in ("stream", "stream_options")}, self.t.total_s
        )
        if answer.status != 200:
            return answer
        try:
            doc = json.loads(answer.body)
            choices = doc["choices"]
        except (ValueError, KeyError, TypeError):
            raise UpstreamError(
                "protocol", "the multi-model endpoint's answer is not an OpenAI chat completion"
            ) from None
        head = {
            "id": doc.get("id", f"chatcmpl-{uuid.uuid4().hex}"),
            "object": "chat.completion.chunk",
            "created": doc.get("created", int(time.time())),
            "model": doc.get("model", self.model_id),
        }

        def sse(chunk_choices: list[dict[str, Any]], **extra: Any) -> bytes:
            return b"data: " + json.dumps({**head, "choices": chunk_choices, **extra}).encode() + b"\n\n"

        pieces = []
        for c in choices:
            message = c.get("message") or {}
            delta = {"role": message.get("role", "assistant"), "content": message.get("content") or ""}
            if message.get("tool_calls"):
                delta["tool_calls"] = [{"index": i, **call} for i, call in enumerate(message["tool_calls"])]
            pieces.append(sse([{"index": c.get("index", 0), "delta": delta, "finish_reason": None}]))
            pieces.append(
                sse([{"index": c.get("index", 0), "delta": {}, "finish_reason": c.get("finish_reason") or "stop"}])
            )
        if include_usage and doc.get("usage"):
            pieces.append(sse([], usage=doc["usage"]))
        pieces.append(b"data: [DONE]\n\n")

        async def replay() -> AsyncIterator[bytes]:
            for piece in pieces:
                yield piece

        return Answer(200, "text/event-stream", chunks=replay())

    async def aclose(self) -> None:
        self.client.close()


class SageMakerTransport:
    """The classifier's transport when the SLM is a SageMaker endpoint: the same post_json() as HttpClient, with
    /v1/chat/completions sent to InvokeEndpoint (the engine's /invocations takes the body byte for byte: grammar,
    logprobs and cache_prompt included). Other paths (/tokenize) are not reachable through SageMaker: 404."""

    def __init__(self, backend: SageMakerBackend):
        self.backend = backend

    async def post_json(self, path: str, payload: dict[str, Any], *, timeout: float) -> tuple[int, Any]:
        if path != "/v1/chat/completions":
            return 404, {"error": {"code": 404, "message": f"{path} is not reachable through SageMaker Runtime"}}
        answer = await self.backend.invoke(payload, timeout)
        try:
            return answer.status, json.loads(answer.body) if answer.body else None
        except ValueError:
            return answer.status, answer.body

    def close(self) -> None:
        pass  # the backend owns the botocore client


_STOP_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "tool_use": "tool_calls",
    "content_filtered": "content_filter",
    "guardrail_intervened": "content_filter",
}


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    return ""


def converse_request(body: dict[str, Any], model_id: str) -> dict[str, Any]:
    """OpenAI chat → Bedrock Converse. Raises ValueError for what Converse cannot take as text chat."""
    system: list[dict[str, str]] = []
    messages: list[dict[str, Any]] = []
    for i, msg in enumerate(body.get("messages") or []):
        role = msg.get("role") if isinstance(msg, dict) else None
        text = _text(msg.get("content")) if isinstance(msg, dict) else ""
        if role in ("system", "developer"):
            system.append({"text": text})
        elif role in ("user", "assistant"):
            if messages and messages[-1]["role"] == role:  # Converse wants user/assistant turns alternating
                messages[-1]["content"].append({"text": text})
            else:
                messages.append({"role": role, "content": [{"text": text}]})
        else:
            raise ValueError(
                f"messages[{i}].role {role!r}: the Bedrock escalation takes system, user and assistant text messages"
            )
    req: dict[str, Any] = {"modelId": model_id, "messages": messages}
    if system:
        req["system"] = system
    inference: dict[str, Any] = {}
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    if isinstance(max_tokens, int) and max_tokens > 0:
        inference["maxTokens"] = max_tokens
    if isinstance(body.get("temperature"), (int, float)):
        inference["temperature"] = float(body["temperature"])
    if isinstance(body.get("top_p"), (int, float)):
        inference["topP"] = float(body["top_p"])
    stop = body.get("stop")
    if stop:
        inference["stopSequences"] = [stop] if isinstance(stop, str) else list(stop)
    if inference:
        req["inferenceConfig"] = inference
    return req


def chat_completion(resp: dict[str, Any], model_id: str) -> dict[str, Any]:
    """Bedrock Converse answer → OpenAI chat completion."""
    content = ((resp.get("output") or {}).get("message") or {}).get("content") or []
    usage = resp.get("usage") or {}
    return {
        "id": f"chatcmpl-{(resp.get('ResponseMetadata') or {}).get('RequestId') or uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model_id,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "".join(b.get("text", "") for b in content)},
                "finish_reason": _STOP_REASONS.get(resp.get("stopReason", ""), "stop"),
            }
        ],
        "usage": {
            "prompt_tokens": usage.get("inputTokens", 0),
            "completion_tokens": usage.get("outputTokens", 0),
            "total_tokens": usage.get("totalTokens", 0),
        },
    }


class BedrockBackend:
    """Bedrock Converse / ConverseStream behind the OpenAI chat API (text turns; SSE chunks when streaming)."""

    upstream = "llm"

    def __init__(self, e: Escalation, timeouts: Timeouts):
        self.e, self.t = e, timeouts
        self.client = make_client("bedrock-runtime", e.region, e.endpoint_url, timeouts)

    async def complete(self, body: dict[str, Any], stream: bool) -> Answer:
        try:
            req = converse_request(body, self.e.model_id)
        except ValueError as err:
            return Answer(400, "application/json", body=error_body(400, str(err)))
        if not stream:
            resp = await _call(self.client.converse, self.t.total_s, **req)
            if isinstance(resp, Answer):
                return resp
            return Answer(200, "application/json", body=json.dumps(chat_completion(resp, self.e.model_id)).encode())
        resp = await _call(self.client.converse_stream, self.t.first_byte_s, **req)
        if isinstance(resp, Answer):
            return resp
        events = resp["stream"]
        chunk_id = f"chatcmpl-{uuid.uuid4().hex}"
        created = int(time.time())
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))

        def sse(choices: list[dict[str, Any]], **extra: Any) -> bytes:
            doc = {
                "id": chunk_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": self.e.model_id,
                "choices": choices,
                **extra,
            }
            return b"data: " + json.dumps(doc).encode() + b"\n\n"

        def convert(event: dict[str, Any]) -> bytes | None:
            if "messageStart" in event:
                return sse([{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}])
            if "contentBlockDelta" in event:
                text = (event["contentBlockDelta"].get("delta") or {}).get("text")
                return sse([{"index": 0, "delta": {"content": text}, "finish_reason": None}]) if text else None
            if "messageStop" in event:
                reason = _STOP_REASONS.get(event["messageStop"].get("stopReason", ""), "stop")
                return sse([{"index": 0, "delta": {}, "finish_reason": reason}])
            if "metadata" in event and include_usage:
                u = event["metadata"].get("usage") or {}
                return sse(
                    [],
                    usage={
                        "prompt_tokens": u.get("inputTokens", 0),
                        "completion_tokens": u.get("outputTokens", 0),
                        "total_tokens": u.get("totalTokens", 0),
                    },
                )
            if any(k.endswith("Exception") for k in event):
                raise UpstreamError("protocol", f"Bedrock stream error: {json.dumps(event, default=str)[:200]}")
            return None

        return Answer(
            200,
            "text/event-stream",
            chunks=_relay_events(events, convert, self.t.idle_s, tail=b"data: [DONE]\n\n"),
            close=_closer(events),
        )

    async def aclose(self) -> None:
        self.client.close()
