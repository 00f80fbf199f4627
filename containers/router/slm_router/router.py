"""The routing decision and its fallbacks, independent of HTTP.

classify (SLM) → label + confidence → SLM if label ∈ slm_labels and confidence ≥ threshold, else LLM.
LLM unavailable (circuit open or the call failed before any byte) → answer with the SLM, marked
"llm-unavailable"; SLM unavailable (classification or generation) → escalate, marked "slm-unavailable".
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass
from typing import Any

from .backends import Answer, Backend
from .breaker import CircuitBreaker
from .classifier import ClassificationError, Classifier, Decision, request_text
from .client import UpstreamError
from .config import Config
from .metrics import Metrics

log = logging.getLogger("router")

LLM_UNAVAILABLE = "llm-unavailable"
SLM_UNAVAILABLE = "slm-unavailable"


class BadRequest(Exception):
    pass


class NoUpstream(Exception):
    """Neither model could answer."""


@dataclass
class Routed:
    answer: Answer
    route: str  # the model that answered: slm | llm
    decision: Decision | None
    fallback: str | None

    def headers(self) -> list[tuple[str, str]]:
        out = [("x-router-route", self.route)]
        if self.decision is not None:
            out += [
                ("x-router-label", self.decision.label),
                ("x-router-confidence", f"{self.decision.confidence:.4f}"),
                ("x-router-decision-ms", f"{self.decision.latency_s * 1000:.1f}"),
            ]
        if self.fallback:
            out.append(("x-router-fallback", self.fallback))
        return out

    def body_field(self) -> dict[str, Any]:
        """Added to non-streamed JSON answers as "x_router" (OpenAI clients ignore unknown fields)."""
        d: dict[str, Any] = {"route": self.route, "fallback": self.fallback}
        if self.decision is not None:
            d.update(
                label=self.decision.label,
                confidence=round(self.decision.confidence, 4),
                distribution={k: round(v, 4) for k, v in self.decision.distribution.items()},
            )
        return d


class Router:
    def __init__(self, cfg: Config, slm: Backend, llm: Backend, classifier: Classifier, metrics: Metrics):
        self.cfg = cfg
        self.slm, self.llm = slm, llm
        self.classifier = classifier
        self.metrics = metrics
        b = cfg.breaker
        self.breakers = {
            name: CircuitBreaker(name, b.failure_threshold, b.reset_after_s, on_change=self._breaker_changed)
            for name in ("slm", "llm")
        }

    def _breaker_changed(self, name: str, state: str) -> None:
        log.warning("circuit breaker %s: %s", name, state)
        self.metrics.breaker_changed(name, state)

    async def decide(self, body: dict[str, Any]) -> tuple[Decision | None, bool]:
        """(the SLM's classification or None, whether the SLM was unavailable). Without a classification
        the request escalates."""
        try:
            text = request_text(body, self.cfg.classify_max_chars)
        except ValueError as e:
            raise BadRequest(str(e)) from None
        breaker = self.breakers["slm"]
        if not breaker.allow():
            self.metrics.classify_errors.labels("circuit-open").inc()
            return None, True
        try:
            decision = await self.classifier.classify(text)
        except UpstreamError as e:
            if e.status != 429:  # 429: the SLM is up but full (overload), not a failure that opens its circuit
                breaker.failure()
            self.metrics.upstream_failures.labels("slm", e.reason).inc()
            self.metrics.classify_errors.labels("slm-unavailable").inc()
            log.warning("classification failed, escalating: %s", e)
            return None, True
        except ClassificationError as e:
            breaker.success()  # the SLM is up; this request just could not be classified
            self.metrics.classify_errors.labels("unusable-answer").inc()
            log.warning("classification unusable, escalating: %s", e)
            return None, False
        breaker.success()
        self.metrics.decision_seconds.observe(decision.latency_s)
        self.metrics.confidence.labels(decision.label).observe(decision.confidence)
        return decision, False

    async def warm_up(self, attempts: int = 30, every_s: float = 2.0) -> None:
        """At start: learn the labels' token counts (the classification then generates only that many tokens)
        and classify once, so the SLM holds the fixed prefix in its prompt cache before real traffic. The SLM
        may still be loading: tried for about a minute, then left to real traffic (which works uncalibrated)."""
        for attempt in range(attempts):
            try:
                await self.classifier.calibrate()
                await self.classifier.classify("Hello")
                log.info("warm-up done: classification generates %d token(s)", self.classifier.max_tokens)
                return
            except Exception as e:  # noqa: BLE001 - any failure just means "not yet"
                if attempt == attempts - 1:
                    log.info("warm-up skipped: %s", e)
                    return
            await asyncio.sleep(every_s)

    def choose(self, decision: Decision | None) -> str:
        if decision is None:
            return "llm"
        ok = decision.label in self.cfg.slm_labels and decision.confidence >= self.cfg.confidence_threshold
        # A request that overflowed the SLM's slot even for classification cannot be answered in it either.
        ok = ok and not decision.shortened
        return "slm" if ok else "llm"

    async def route(self, body: Any) -> Routed:
        if not isinstance(body, dict):
            raise BadRequest("body must be a JSON object")
        stream = bool(body.get("stream", False))
        start = time.perf_counter()
        decision, slm_down = await self.decide(body)
        chosen = self.choose(decision)
        if decision is not None:
            self.metrics.decisions.labels(decision.label, chosen).inc()
        backends = {"slm": self.slm, "llm": self.llm}
        errors: list[str] = []
        for name in (chosen, "slm" if chosen == "llm" else "llm"):
            breaker = self.breakers[name]
            if not breaker.allow():
                errors.append(f"{name}: circuit open")
                continue
            try:
                answer = await backends[name].complete(body, stream)
            except UpstreamError as e:
                if e.status != 429:  # overload (429) falls back but does not open the circuit: the upstream is up
                    breaker.failure()
                self.metrics.upstream_failures.labels(name, e.reason).inc()
                errors.append(f"{name}: {e}")
                log.warning("%s unavailable: %s", name, e)
                continue
            breaker.success()
            if name == chosen:
                fallback = SLM_UNAVAILABLE if slm_down else None  # escalated only because the SLM was out
            else:
                fallback = LLM_UNAVAILABLE if name == "slm" else SLM_UNAVAILABLE
            if fallback:
                self.metrics.fallbacks.labels(fallback).inc()
            self.metrics.requests.labels(name, fallback or "none").inc()
            self.metrics.request_seconds.labels(name).observe(time.perf_counter() - start)
            return Routed(answer, name, decision, fallback)
        self.metrics.failed.labels("no-upstream").inc()
        raise NoUpstream("; ".join(errors))

    @staticmethod
    def mark_json(answer: Answer, routed: Routed) -> bytes:
        """The answer's JSON with the "x_router" field, when it is a JSON object; else unchanged."""
        if not answer.content_type.startswith("application/json") or answer.status != 200:
            return answer.body
        try:
            doc = json.loads(answer.body)
        except ValueError:
            return answer.body
        if not isinstance(doc, dict):
            return answer.body
        doc["x_router"] = routed.body_field()
        return json.dumps(doc).encode()
