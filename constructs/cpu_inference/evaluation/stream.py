"""Incremental parsing of OpenAI chat-completion streams (server-sent events).

The same parser serves HTTP responses and SageMaker PayloadPart events: SageMaker splits the container's
bytes at arbitrary points, so lines are reassembled across chunks before they are interpreted."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


class StreamError(Exception):
    """The server reported an error inside the stream, or the stream was malformed."""


@dataclass
class ChatStream:
    """Feed raw bytes; collects text, the time of the first generated token and the usage block."""

    clock: Callable[[], float] = time.perf_counter
    text_parts: list[str] = field(default_factory=list)
    first_token_at: float | None = None
    content_chunks: int = 0
    usage: dict[str, Any] | None = None
    timings: dict[str, Any] | None = None
    finish_reason: str | None = None
    done: bool = False
    _buffer: bytes = b""

    def feed(self, data: bytes) -> None:
        self._buffer += data
        while True:
            nl = self._buffer.find(b"\n")
            if nl < 0:
                return
            line, self._buffer = self._buffer[:nl].rstrip(b"\r"), self._buffer[nl + 1 :]
            self._line(line)

    def close(self) -> None:
        if self._buffer.strip():
            self._line(self._buffer.rstrip(b"\r"))
        self._buffer = b""

    @property
    def text(self) -> str:
        return "".join(self.text_parts)

    def _line(self, line: bytes) -> None:
        if not line or line.startswith(b":"):
            return  # event separator or SSE comment (keep-alive)
        if line.startswith(b"error:"):
            raise StreamError(line[6:].decode(errors="replace").strip())
        if not line.startswith(b"data:"):
            return  # `event:` / `id:` fields carry nothing we use
        payload = line[5:].strip()
        if payload == b"[DONE]":
            self.done = True
            return
        try:
            event = json.loads(payload)
        except ValueError as exc:
            raise StreamError(f"malformed stream event: {payload[:200]!r}") from exc
        if "error" in event:
            err = event["error"]
            raise StreamError(err.get("message", str(err)) if isinstance(err, dict) else str(err))
        if event.get("usage"):
            self.usage = event["usage"]
        if event.get("timings"):
            self.timings = event["timings"]
        for choice in event.get("choices") or []:
            delta = choice.get("delta") or {}
            piece = delta.get("content") or delta.get("reasoning_content")
            if piece:
                if self.first_token_at is None:
                    self.first_token_at = self.clock()
                self.content_chunks += 1
                if delta.get("content"):
                    self.text_parts.append(delta["content"])
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]
