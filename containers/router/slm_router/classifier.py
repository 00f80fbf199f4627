"""Ask the SLM for one label under a grammar and read how sure it was from the first token's alternatives.

The request is a chat with a fixed prefix (instructions + few-shot turns, identical for every request)
and the text to classify as the last user turn, so llama.cpp's prompt cache (`cache_prompt`) only
evaluates the new suffix. A GBNF grammar `root ::= "label1" | "label2" ...` makes the answer always one
of the labels. llama-server reports `top_logprobs` from the raw softmax (before the grammar), so the
confidence is the probability mass of tokens that start the chosen label, normalized over the mass of
tokens that start any label (tokenization-agnostic: "simple", "sim", "s" all count for "simple").
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from .client import UpstreamError
from .config import Config


class ClassificationError(Exception):
    """The SLM answered but not with a usable classification (a 4xx, or no label/logprobs in the answer)."""


class _Truncated(ClassificationError):
    """max_tokens cut the answer before the labels diverged: ask again with room for the whole label."""


log = logging.getLogger("router")

FULL_LABEL_TOKENS = 32  # room for any label plus end-of-turn (the grammar ends the answer after the label)
MIN_CLASSIFIED_CHARS = 16  # a request is never cut below this many characters to fit the SLM's slot
# llama-server's error type for a prompt longer than a slot (tools/server/server-common.cpp, the pinned engine).
CONTEXT_EXCEEDED = "exceed_context_size_error"


@dataclass(frozen=True)
class Decision:
    label: str
    confidence: float  # P(label) among the labels, from the first token(s)
    distribution: dict[str, float]  # each label's share of the label mass at the first token
    latency_s: float
    attempts: int
    cached_tokens: int | None  # prompt tokens llama.cpp took from its cache (None if not reported)
    shortened: bool = False  # the request overflowed the SLM's slot and was classified on a shorter head and tail


def gbnf_literal(text: str) -> str:
    """A GBNF string literal (GBNF accepts JSON's escapes: \\" \\\\ \\n \\t \\uXXXX)."""
    return json.dumps(text)


def grammar_for(labels: Sequence[str]) -> str:
    return "root ::= " + " | ".join(gbnf_literal(label) for label in labels)


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI content parts: keep the text parts
        return "\n".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    return ""


def request_text(body: dict[str, Any], max_chars: int) -> str:
    """What the SLM classifies: the last user turn (the request at hand), head and tail if it is long."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ValueError("messages: a non-empty list is required")
    text = ""
    for msg in reversed(messages):
        if isinstance(msg, dict) and msg.get("role") == "user":
            text = _content_text(msg.get("content"))
            break
    if not text.strip():
        text = _content_text(messages[-1].get("content") if isinstance(messages[-1], dict) else "")
    return clip(text, max_chars)


def clip(text: str, max_chars: int) -> str:
    """A long text's head and tail (max_chars of them, joined by a 3-character ellipsis line)."""
    if len(text) > max_chars:
        half = max_chars // 2
        text = text[:half] + "\n…\n" + text[-half:]
    return text


def prefix_messages(cfg: Config) -> list[dict[str, str]]:
    """The fixed part of every classification request: the instructions, then the few-shot turns."""
    system = cfg.instructions.replace("{labels}", ", ".join(cfg.labels))
    prefix: list[dict[str, str]] = [{"role": "system", "content": system}]
    for ex in cfg.few_shot:
        prefix += [{"role": "user", "content": ex.text}, {"role": "assistant", "content": ex.label}]
    return prefix


def classification_messages(prefix: list[dict[str, str]], text: str) -> list[dict[str, str]]:
    """What the SLM reads for one classification (budget.py sizes the SLM's slots from exactly this)."""
    return [*prefix, {"role": "user", "content": text}]


def _piece(alt: dict[str, Any]) -> str:
    raw = alt.get("bytes")
    if isinstance(raw, list) and raw:
        return bytes(raw).decode("utf-8", "replace")
    return alt.get("token") or ""


def read_decision(
    content: str, positions: list[dict[str, Any]], labels: Sequence[str]
) -> tuple[str, float, dict[str, float]]:
    """(label, confidence, first-token distribution) from a grammar-constrained answer and its logprobs.

    At each generated position the alternatives are split by the labels they could still start. The step's
    factor is a lower bound of P(chosen label | some label): the visible mass consistent with the chosen
    label over the visible mass consistent with any label, plus what the *unseen* tail could hold for the
    other labels: each of their prefixes missing from the top list has at most the smallest listed
    probability, and all of them at most the unlisted mass. So when the model's favourites are not labels
    at all (the grammar then forces an unlikely token), the confidence is low instead of a spurious 1.0.
    Labels with distinct first tokens are decided at the first step; shared prefixes ("yes_a"/"yes_b")
    pass through factor 1 until they diverge.
    """
    label = content if content in labels else None
    if label is None:
        starts = [lab for lab in labels if content and lab.startswith(content)]
        if len(starts) > 1:
            raise _Truncated(f"answer {content!r} starts several labels")
        if len(starts) != 1:
            raise ClassificationError(f"constrained answer {content!r} is not one of the labels {list(labels)}")
        label = starts[0]
    if not positions:
        raise ClassificationError("the SLM returned no logprobs (needs llama-server's logprobs/top_logprobs support)")
    generated = ""
    confidence = 1.0
    distribution: dict[str, float] | None = None
    for pos in positions:
        candidates = [lab for lab in labels if lab.startswith(generated) and len(lab) > len(generated)]
        if label not in candidates or len(candidates) < 2:
            break
        top = pos.get("top_logprobs") or []
        # Keyed by token id (by text if ids are absent) so the generated token is counted once.
        alts = {a.get("id", _piece(a)): a for a in top}
        alts.setdefault(pos.get("id", _piece(pos)), pos)
        probs = {k: math.exp(float(a.get("logprob", -math.inf))) for k, a in alts.items()}
        mass = {lab: 0.0 for lab in candidates}
        union = chosen = 0.0  # visible mass consistent with any candidate / with the chosen label
        seen: set[str] = set()
        for key, alt in alts.items():
            piece = _piece(alt)
            fits = [lab for lab in candidates if piece and lab.startswith(generated + piece)]
            if not fits:
                continue
            seen.add(piece)
            union += probs[key]
            chosen += probs[key] if label in fits else 0.0
            for lab in fits:
                mass[lab] += probs[key]
        if distribution is None and union > 0:
            total = sum(mass.values())
            distribution = {lab: mass.get(lab, 0.0) / total for lab in labels}
        unlisted = max(0.0, 1.0 - sum(probs.values()))
        smallest = min((math.exp(float(a.get("logprob", -math.inf))) for a in top), default=1.0)
        rivals = {
            lab[len(generated) : k]
            for lab in candidates
            if lab != label
            for k in range(len(generated) + 1, len(lab) + 1)
        }
        rivals = {p for p in rivals if p not in seen and not label.startswith(generated + p)}
        hidden = min(unlisted, smallest * len(rivals))
        denominator = union + hidden
        confidence *= chosen / denominator if denominator > 0 else 0.0
        generated += _piece(pos)
    if distribution is None:
        distribution = {lab: 1.0 if lab == label else 0.0 for lab in labels}
    return label, confidence, distribution


class Transport(Protocol):
    """How the classifier reaches the SLM: client.HttpClient (slm_url) or aws.SageMakerTransport (slm_endpoint_name)."""

    async def post_json(self, path: str, payload: dict[str, Any], *, timeout: float) -> tuple[int, Any]: ...

    def close(self) -> None: ...


class Classifier:
    def __init__(self, cfg: Config, client: Transport, *, on_retry=None):
        self.cfg = cfg
        self.client = client
        self.grammar = grammar_for(cfg.labels)
        self.on_retry = on_retry or (lambda: None)
        self.prefix = prefix_messages(cfg)  # never mutated: a byte-identical prefix is what the prompt cache matches
        # Tokens to generate: the longest label in the SLM's tokenizer (calibrate()), so a one-token label costs
        # one sampling step and no end-of-turn step. Until calibrated, room for any label.
        self.max_tokens = FULL_LABEL_TOKENS
        self.calibrated = False

    async def calibrate(self) -> None:
        """Learn how many tokens the longest label takes (llama-server POST /tokenize). A shorter generation
        only ever yields a prefix of the label, which read_decision maps back to the label; when the prefix
        still fits several labels, classify() asks again with full room."""
        counts: list[int] = []
        for label in self.cfg.labels:
            status, payload = await self.client.post_json(
                "/tokenize", {"content": label}, timeout=self.cfg.timeouts.classify_s
            )
            # No llama-server /tokenize: a SageMaker endpoint serves only /invocations (404), vLLM's /tokenize takes
            # `prompt`, not `content` (400). Count the tokens of a constrained generation instead.
            if status in (400, 404) and not counts:
                counts = [await self._generated_tokens(label) for label in self.cfg.labels]
                break
            tokens = payload.get("tokens") if status == 200 and isinstance(payload, dict) else None
            if not isinstance(tokens, list) or not tokens:
                raise ClassificationError(f"SLM /tokenize answered {status}")
            counts.append(len(tokens))
        self.max_tokens = min(FULL_LABEL_TOKENS, max(counts))
        self.calibrated = True

    async def _generated_tokens(self, label: str) -> int:
        """The label's token count as the SLM generates it: a chat completion whose grammar allows only this label
        (the fixed prefix, so the prompt cache serves it); its logprobs list the generated tokens, the end-of-turn
        token after the label included, so the count stops where the label's text is complete."""
        body = {
            **self.request_body("Hello", max_tokens=FULL_LABEL_TOKENS),
            "grammar": grammar_for([label]),
            "structured_outputs": {"choice": [label]},
            "top_logprobs": 1,
        }
        status, payload = await self.client.post_json(
            "/v1/chat/completions", body, timeout=self.cfg.timeouts.classify_s
        )
        try:
            positions = payload["choices"][0]["logprobs"]["content"] if status == 200 else None
        except (KeyError, IndexError, TypeError):
            positions = None
        if not isinstance(positions, list) or not positions:
            raise ClassificationError(f"SLM answered {status} without logprobs while counting the tokens of {label!r}")
        text = ""
        for n, pos in enumerate(positions, 1):
            text += _piece(pos) if isinstance(pos, dict) else ""
            if len(text.strip()) >= len(label):
                return n
        return len(positions)

    def request_body(
        self, text: str, *, cache_prompt: bool | None = None, max_tokens: int | None = None
    ) -> dict[str, Any]:
        return {
            "messages": classification_messages(self.prefix, text),
            "grammar": self.grammar,
            # The same constraint for a vLLM SLM, which ignores `grammar` (unknown fields are dropped,
            # vllm/entrypoints/serve/engine/protocol.py) and takes StructuredOutputsParams.choice
            # (vllm/sampling_params.py); llama-server ignores this key. Both report logprobs before the constraint
            # (llama-server: raw softmax; vLLM: logprobs_mode "raw_logprobs", its default).
            "structured_outputs": {"choice": list(self.cfg.labels)},
            "temperature": 0.0,  # greedy: the most probable label the grammar allows
            "logprobs": True,
            "top_logprobs": self.cfg.top_logprobs,
            "max_tokens": max_tokens or self.max_tokens,
            "cache_prompt": self.cfg.cache_prompt if cache_prompt is None else cache_prompt,
            "stream": False,
        }

    async def classify(self, text: str, *, cache_prompt: bool | None = None) -> Decision:
        """Classify with retries and backoff (idempotent). Raises UpstreamError if the SLM stayed unavailable,
        ClassificationError if it answered with something unusable (not retried)."""
        body = self.request_body(text, cache_prompt=cache_prompt)
        r = self.cfg.retries
        start = time.perf_counter()
        last: UpstreamError | None = None
        attempt = 0
        shortened = False
        while attempt < r.classify_attempts:
            attempt += 1
            try:
                status, payload = await self.client.post_json(
                    "/v1/chat/completions", body, timeout=self.cfg.timeouts.classify_s
                )
            except UpstreamError as e:
                last = e
            else:
                if status == 200:
                    try:
                        label, conf, dist = self._parse(payload)
                    except _Truncated:
                        if body["max_tokens"] >= FULL_LABEL_TOKENS:
                            raise ClassificationError("the constrained answer never completed a label") from None
                        # The model tokenized the label more finely than /tokenize did: ask again with room
                        # for the whole label (not a failure, so not an attempt).
                        body = {**body, "max_tokens": FULL_LABEL_TOKENS}
                        attempt -= 1
                        continue
                    usage = payload.get("usage") or {}
                    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
                    return Decision(label, conf, dist, time.perf_counter() - start, attempt, cached, shortened)
                if status == 429 or status >= 500:
                    last = UpstreamError("status", f"SLM answered {status}", status)
                elif _context_exceeded(payload) and len(text) >= 2 * MIN_CLASSIFIED_CHARS:
                    # Text denser in tokens than the slot was sized for (budget.CHARS_PER_TOKEN, e.g. CJK): classify
                    # a shorter head and tail rather than escalate unclassified (not a failure, so not an attempt).
                    text, shortened = clip(text, len(text) // 2), True
                    body = {**self.request_body(text, cache_prompt=cache_prompt), "max_tokens": body["max_tokens"]}
                    log.info("classifying a shorter head and tail (%d characters): the SLM's slot is full", len(text))
                    attempt -= 1
                    continue
                else:
                    raise ClassificationError(
                        f"SLM refused the classification request with {status}: {_message(payload)}"
                    )
            if attempt < r.classify_attempts:
                self.on_retry()
                delay = min(r.backoff_max_s, r.backoff_base_s * 2 ** (attempt - 1))
                await asyncio.sleep(delay * (0.5 + random.random() / 2))  # jitter: replicas don't retry in step
        assert last is not None
        raise last

    def _parse(self, payload: Any) -> tuple[str, float, dict[str, float]]:
        try:
            choice = payload["choices"][0]
            content = choice["message"]["content"] or ""
            positions = (choice.get("logprobs") or {}).get("content") or []
        except (KeyError, IndexError, TypeError):
            raise ClassificationError("SLM answer is not a chat completion") from None
        return read_decision(content.strip(), positions, self.cfg.labels)


def _context_exceeded(payload: Any) -> bool:
    return (
        isinstance(payload, dict)
        and isinstance(payload.get("error"), dict)
        and payload["error"].get("type") == CONTEXT_EXCEEDED
    )


def _message(payload: Any) -> str:
    if isinstance(payload, dict) and isinstance(payload.get("error"), dict):
        return str(payload["error"].get("message", ""))[:200]
    return str(payload)[:200]
