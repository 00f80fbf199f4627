"""What every backend gives back (Answer), the Backend protocol, and which statuses mean "fall back".

Its own module so that aws (SageMakerBackend, BedrockBackend) need not import backends, which imports aws and
secret_key lazily (botocore only when configured): the slm_router import graph has no cycle
(tests/runtime/router/test_import_graph.py).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol


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
