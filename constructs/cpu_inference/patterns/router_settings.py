"""The SLM pre-filter's decision settings, as the router service reads them (containers/router/README.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping


@dataclass(frozen=True)
class RouterSettings:
    """labels: the classes the SLM must choose from (constrained output). slm_labels: those the SLM answers
    itself. confidence_threshold: the label probability below which the request escalates anyway.
    few_shot: `{text, label}` examples in the cached classification prefix. instructions: the classification
    system prompt (`{labels}` is replaced; default: the router's own, written for simple/complex).
    replicas_min/max: router scaling."""

    labels: tuple[str, ...] = ("simple", "complex")
    slm_labels: tuple[str, ...] = ("simple",)
    confidence_threshold: float = 0.7
    few_shot: tuple[Mapping[str, str], ...] = ()
    instructions: str | None = None
    replicas_min: int = 2
    replicas_max: int = 6

    def validate(self) -> None:
        if len(set(self.labels)) < 2 or len(set(self.labels)) != len(self.labels):
            raise ValueError(f"RouterSettings.labels needs at least two distinct labels, got {list(self.labels)}")
        unknown = [x for x in self.slm_labels if x not in self.labels]
        if not self.slm_labels or unknown or set(self.slm_labels) == set(self.labels):
            raise ValueError(f"RouterSettings.slm_labels must be a non-empty strict subset of labels {list(self.labels)}, got {list(self.slm_labels)}")
        if not 0 <= self.confidence_threshold <= 1:
            raise ValueError(f"RouterSettings.confidence_threshold must be within 0..1, got {self.confidence_threshold}")
        for i, shot in enumerate(self.few_shot):
            if set(shot) != {"text", "label"} or shot["label"] not in self.labels:
                raise ValueError(f"RouterSettings.few_shot[{i}] needs keys text and label, label one of {list(self.labels)}")
        if not 1 <= self.replicas_min <= self.replicas_max:
            raise ValueError(f"RouterSettings: need 1 ≤ replicas_min ({self.replicas_min}) ≤ replicas_max ({self.replicas_max})")

    def router_config(self) -> dict[str, Any]:
        config: dict[str, Any] = {
            "labels": list(self.labels),
            "slm_labels": list(self.slm_labels),
            "confidence_threshold": self.confidence_threshold,
        }
        if self.few_shot:  # else the router's own examples for the default labels
            config["few_shot"] = [dict(s) for s in self.few_shot]
        if self.instructions:
            config["instructions"] = self.instructions
        return config
