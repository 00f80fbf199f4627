"""Closed-loop load: `concurrency` workers each send their next request as soon as the previous one
returns, until `requests` requests were sent (or a time budget runs out). Threads rather than asyncio
because botocore (the SageMaker path) is synchronous; timings are taken around each blocking call."""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cpu_inference.evaluation.client import ChatClient, ChatResult, chat_body

# Used when no --prompt-file is given: short support-desk prompts, the workload CPU serving targets.
DEFAULT_PROMPTS = (
    "My card was charged twice for the same order. Can you explain what happened?",
    "How do I reset my password if I no longer have access to my email?",
    "The app crashes every time I open the settings page on Android.",
    "Where is my package? The tracking number has not updated for five days.",
    "Please cancel my subscription at the end of this billing period.",
    "Summarize the difference between a refund and a store credit in two sentences.",
    "Can I change the delivery address after the order has shipped?",
    "Write a short, polite reply to a customer whose invoice shows the wrong VAT number.",
)


def load_prompts(path: str | Path | None) -> list[list[dict[str, Any]]]:
    """Prompts as chat message lists.

    A `.jsonl` file holds one object per line with `messages` (a chat list), `prompt` or `text` (a user
    message) — so an eval dataset doubles as a prompt file; any other file is one prompt per line."""
    if path is None:
        return [[{"role": "user", "content": p}] for p in DEFAULT_PROMPTS]
    p = Path(path)
    lines = [ln for ln in p.read_text(encoding="utf-8").splitlines() if ln.strip()]
    prompts: list[list[dict[str, Any]]] = []
    if p.suffix == ".jsonl":
        for n, line in enumerate(lines, 1):
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:  # the ValueError json.loads raises, with .msg
                raise ValueError(f"{p}:{n}: not JSON ({exc.msg})") from exc
            if isinstance(row, dict) and isinstance(row.get("messages"), list):
                prompts.append(row["messages"])
            elif isinstance(row, dict) and isinstance(row.get("prompt") or row.get("text"), str):
                prompts.append([{"role": "user", "content": row.get("prompt") or row["text"]}])
            else:
                raise ValueError(f"{p}:{n}: expected an object with `messages`, `prompt` or `text`")
    else:
        prompts = [[{"role": "user", "content": ln.strip()}] for ln in lines]
    if not prompts:
        raise ValueError(f"{p}: no prompts")
    return prompts


@dataclass(frozen=True)
class LoadSettings:
    max_tokens: int = 64
    stream: bool = True
    model: str | None = None
    ignore_eos: bool = False  # llama-server/vLLM extension: fixed output length for comparable runs
    max_seconds: float = 600.0  # per level; requests not yet sent when it expires are skipped

    def body(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        extra = {"ignore_eos": True} if self.ignore_eos else {}
        return chat_body(messages, max_tokens=self.max_tokens, stream=self.stream, model=self.model, **extra)


def run_level(
    client: ChatClient,
    prompts: Sequence[list[dict[str, Any]]],
    *,
    concurrency: int,
    requests: int,
    settings: LoadSettings,
    on_result: Callable[[ChatResult], None] | None = None,
    prompt_offset: int = 0,
) -> list[ChatResult]:
    """Send `requests` requests with `concurrency` in flight; returns the results in completion order."""
    if concurrency < 1 or requests < 1:
        raise ValueError("concurrency and requests must be >= 1")
    counter = itertools.count()
    lock = threading.Lock()
    results: list[ChatResult] = []
    deadline = time.monotonic() + settings.max_seconds

    def worker() -> None:
        while True:
            with lock:
                i = next(counter)
            if i >= requests or time.monotonic() > deadline:
                return
            messages = prompts[(prompt_offset + i) % len(prompts)]
            result = client.chat(settings.body(messages), stream=settings.stream)
            with lock:
                results.append(result)
            if on_result is not None:
                on_result(result)

    with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix=f"load-c{concurrency}") as pool:
        for f in [pool.submit(worker) for _ in range(concurrency)]:
            f.result()
    return results
