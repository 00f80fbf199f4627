"""The three eval tasks: how each builds its prompt, constrains and parses the output, and scores.

Output is constrained with OpenAI's `response_format: json_schema` where it helps — llama-server turns
the schema into a grammar, so a small model cannot answer outside the label set or emit broken JSON;
that measures what the model knows rather than how well it follows formatting instructions."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from cpu_inference.evaluation.metrics import (
    INVALID,
    accuracy,
    confusion,
    exact_match,
    field_matches,
    macro_f1,
    per_class,
    schema_errors,
)

TASKS = ("classification", "extraction", "routing")


@dataclass(frozen=True)
class Example:
    text: str
    gold: Any  # a label / tool name (str) or the expected object (extraction)
    line: int


class Task:
    name: str
    primary_metric: str
    metrics: tuple[str, ...]

    def instructions(self) -> str:
        raise NotImplementedError

    def response_format(self) -> dict[str, Any] | None:
        raise NotImplementedError

    def render_answer(self, gold: Any) -> str:
        raise NotImplementedError

    def request_extra(self) -> dict[str, Any]:
        """Extra body fields: the output constraint, plus stops where the constraint leaves slack."""
        rf = self.response_format()
        return {"response_format": rf} if rf else {}

    def parse(self, text: str) -> Any:
        raise NotImplementedError

    def score(self, examples: Sequence[Example], predictions: Sequence[Any]) -> dict[str, Any]:
        raise NotImplementedError

    def strata(self, example: Example) -> str:
        """Key for stratified subsets and few-shot picks (the gold class where there is one)."""
        return str(example.gold) if isinstance(example.gold, str) else ""

    def messages(self, text: str, shots: Sequence[Example] = ()) -> list[dict[str, str]]:
        msgs = [{"role": "system", "content": self.instructions()}]
        for shot in shots:
            msgs += [
                {"role": "user", "content": shot.text},
                {"role": "assistant", "content": self.render_answer(shot.gold)},
            ]
        msgs.append({"role": "user", "content": text})
        return msgs


def _norm_label(text: str) -> str:
    return re.sub(r"[\s\-]+", "_", text.strip().strip("\"'`.").casefold())


class ClassificationTask(Task):
    name = "classification"
    primary_metric = "accuracy"
    metrics = ("accuracy", "macro_f1")

    def __init__(
        self, labels: Sequence[str], *, constrained: bool = True, descriptions: dict[str, str] | None = None
    ) -> None:
        if len(labels) < 2:
            raise ValueError(f"{self.name}: need at least 2 distinct labels, got {list(labels)}")
        self.labels = list(labels)
        self.constrained = constrained
        self.descriptions = descriptions or {}

    def _listing(self) -> str:
        return "\n".join(
            f"- {lb}: {self.descriptions[lb]}" if lb in self.descriptions else f"- {lb}" for lb in self.labels
        )

    def instructions(self) -> str:
        return f"Classify the customer's message into exactly one of these intents:\n{self._listing()}\nAnswer with the intent name only."

    def response_format(self) -> dict[str, Any] | None:
        if not self.constrained:
            return None
        return {
            "type": "json_schema",
            "json_schema": {"name": "label", "schema": {"type": "string", "enum": self.labels}},
        }

    def render_answer(self, gold: Any) -> str:
        return json.dumps(gold) if self.constrained else str(gold)

    def request_extra(self) -> dict[str, Any]:
        extra = super().request_extra()
        if self.constrained:
            # The schema grammar allows trailing whitespace after the closing quote and small models fill
            # max_tokens with it; stopping at quote+whitespace saves those tokens (parse() drops the quote).
            extra["stop"] = ['" ', '"\n']
        return extra

    def parse(self, text: str) -> str | None:
        text = text.strip()
        try:
            value = json.loads(text)
            if isinstance(value, dict) and len(value) == 1:
                value = next(iter(value.values()))
            if isinstance(value, str):
                text = value
        except ValueError:
            pass
        by_norm = {_norm_label(lb): lb for lb in self.labels}
        if _norm_label(text) in by_norm:
            return by_norm[_norm_label(text)]
        # Free-form answers: the label mentioned first.
        lowered = text.casefold()
        hits = [(lowered.find(lb.casefold()), lb) for lb in self.labels if lb.casefold() in lowered]
        hits += [
            (lowered.find(lb.casefold().replace("_", " ")), lb)
            for lb in self.labels
            if lb.casefold().replace("_", " ") in lowered
        ]
        return min(hits)[1] if hits else None

    def score(self, examples: Sequence[Example], predictions: Sequence[Any]) -> dict[str, Any]:
        gold = [e.gold for e in examples]
        pred = [p if p is not None else INVALID for p in predictions]
        scores = per_class(gold, pred, self.labels)
        return {
            "accuracy": round(accuracy(gold, pred), 4),
            "macro_f1": round(macro_f1(scores), 4),
            "per_class": {str(k): v.to_dict() for k, v in scores.items()},
            "confusion": confusion(gold, pred, self.labels),
            "invalid": sum(1 for p in predictions if p is None),
        }


class RoutingTask(ClassificationTask):
    """Pick the tool that should handle a request; scored as tool accuracy (+ per-tool F1)."""

    name = "routing"
    primary_metric = "tool_accuracy"
    metrics = ("tool_accuracy", "macro_f1")

    def instructions(self) -> str:
        return f"You route user requests to tools. Available tools:\n{self._listing()}\nAnswer with the name of the one tool that should handle the request."

    def response_format(self) -> dict[str, Any] | None:
        if not self.constrained:
            return None
        return {
            "type": "json_schema",
            "json_schema": {"name": "tool", "schema": {"type": "string", "enum": self.labels}},
        }

    def score(self, examples: Sequence[Example], predictions: Sequence[Any]) -> dict[str, Any]:
        scored = super().score(examples, predictions)
        scored["tool_accuracy"] = scored.pop("accuracy")
        scored["per_tool"] = scored.pop("per_class")
        return scored


def _first_json_object(text: str) -> Any:
    text = text.strip()
    fenced = re.search(r"```(?:json)?\s*(.*?)```", text, re.S)
    if fenced:
        text = fenced.group(1).strip()
    try:
        return json.loads(text)
    except ValueError:
        start = text.find("{")
        if start < 0:
            return None
        try:
            obj, _ = json.JSONDecoder().raw_decode(text[start:])
            return obj
        except ValueError:
            return None


class ExtractionTask(Task):
    name = "extraction"
    primary_metric = "exact_match"
    metrics = ("exact_match", "schema_validity", "field_accuracy")

    def __init__(self, schema: dict[str, Any], *, constrained: bool = True) -> None:
        if not isinstance(schema, dict) or schema.get("type") != "object":
            raise ValueError('extraction: the JSON schema must describe an object ("type": "object")')
        self.schema = schema
        self.constrained = constrained

    def instructions(self) -> str:
        return (
            "Extract the requested fields from the user's message. Reply with one JSON object that follows this JSON schema:\n"
            f"{json.dumps(self.schema)}\nUse null for a field the message does not mention."
        )

    def response_format(self) -> dict[str, Any] | None:
        if not self.constrained:
            return None
        return {"type": "json_schema", "json_schema": {"name": "extraction", "schema": self.schema}}

    def render_answer(self, gold: Any) -> str:
        return json.dumps(gold)

    def parse(self, text: str) -> Any:
        return _first_json_object(text)

    def score(self, examples: Sequence[Example], predictions: Sequence[Any]) -> dict[str, Any]:
        n = len(examples)
        exact = sum(1 for e, p in zip(examples, predictions, strict=True) if exact_match(e.gold, p))
        valid = sum(1 for p in predictions if p is not None and not schema_errors(p, self.schema))
        got = total = 0
        for e, p in zip(examples, predictions, strict=True):
            g, t = field_matches(e.gold, p)
            got, total = got + g, total + t
        return {
            "exact_match": round(exact / n, 4) if n else 0.0,
            "schema_validity": round(valid / n, 4) if n else 0.0,
            "field_accuracy": round(got / total, 4) if total else 0.0,
            "invalid": sum(1 for p in predictions if p is None),
        }
