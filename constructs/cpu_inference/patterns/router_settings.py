"""The SLM pre-filter's decision settings, as the router service reads them (containers/router/README.md)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cpu_inference.sizing.slm_context import DEFAULT_ANSWER_MAX_TOKENS, RouterConfig, decision, slm_context_per_slot


@dataclass(frozen=True)
class RouterSettings:
    """labels: the classes the SLM must choose from (constrained output). slm_labels: those the SLM answers
    itself. confidence_threshold: the label probability below which the request escalates anyway.
    few_shot: `{text, label}` examples in the cached classification prefix. instructions: the classification
    system prompt (`{labels}` is replaced; default: the router's own, written for simple/complex).
    classify_max_chars: characters of a request the SLM classifies (default: the router's 2000).
    answer_max_tokens: room each SLM slot keeps for answering a simple request (default 512).
    The SLM's context per slot covers both (`slm_context_per_slot`). replicas_min/max: router scaling."""

    labels: tuple[str, ...] = ("simple", "complex")
    slm_labels: tuple[str, ...] = ("simple",)
    confidence_threshold: float = 0.7
    few_shot: tuple[Mapping[str, str], ...] = ()
    instructions: str | None = None
    classify_max_chars: int | None = None
    answer_max_tokens: int = DEFAULT_ANSWER_MAX_TOKENS
    replicas_min: int = 2
    replicas_max: int = 6

    def validate(self) -> None:
        if len(set(self.labels)) < 2 or len(set(self.labels)) != len(self.labels):
            raise ValueError(f"RouterSettings.labels needs at least two distinct labels, got {list(self.labels)}")
        unknown = [x for x in self.slm_labels if x not in self.labels]
        if not self.slm_labels or unknown or set(self.slm_labels) == set(self.labels):
            raise ValueError(
                f"RouterSettings.slm_labels must be a non-empty strict subset of labels {list(self.labels)}, got {list(self.slm_labels)}"
            )
        if not 0 <= self.confidence_threshold <= 1:
            raise ValueError(
                f"RouterSettings.confidence_threshold must be within 0..1, got {self.confidence_threshold}"
            )
        for i, shot in enumerate(self.few_shot):
            if set(shot) != {"text", "label"} or shot["label"] not in self.labels:
                raise ValueError(
                    f"RouterSettings.few_shot[{i}] needs keys text and label, label one of {list(self.labels)}"
                )
        if self.classify_max_chars is not None and self.classify_max_chars < 16:
            raise ValueError(
                f"RouterSettings.classify_max_chars must be ≥ 16 (the router's minimum), got {self.classify_max_chars}"
            )
        if self.answer_max_tokens < 1:
            raise ValueError(f"RouterSettings.answer_max_tokens must be ≥ 1, got {self.answer_max_tokens}")
        if not 1 <= self.replicas_min <= self.replicas_max:
            raise ValueError(
                f"RouterSettings: need 1 ≤ replicas_min ({self.replicas_min}) ≤ replicas_max ({self.replicas_max})"
            )

    def decision(self) -> RouterConfig:
        """The decision keys of the router config (few_shot / instructions / classify_max_chars left out when
        unset: the router's own defaults apply)."""
        return decision(
            labels=self.labels,
            slm_labels=self.slm_labels,
            confidence_threshold=self.confidence_threshold,
            few_shot=self.few_shot,
            instructions=self.instructions,
            classify_max_chars=self.classify_max_chars,
        )

    def router_config(self) -> dict[str, Any]:
        """decision() as its JSON object."""
        return self.decision().to_dict()

    def slm_context_per_slot(self) -> int:
        """Tokens one slot of the router's SLM must hold: the classification prompt, and a request + its answer."""
        return slm_context_per_slot(self.decision(), self.answer_max_tokens)
