"""Quality metrics (pure): accuracy, per-class precision/recall/F1, exact match, JSON-schema validity."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

INVALID = "<invalid>"  # the prediction for an unparseable or failed response; always wrong


@dataclass(frozen=True)
class ClassScore:
    precision: float
    recall: float
    f1: float
    support: int

    def to_dict(self) -> dict[str, float | int]:
        return {
            "precision": round(self.precision, 4),
            "recall": round(self.recall, 4),
            "f1": round(self.f1, 4),
            "support": self.support,
        }


def accuracy(gold: Sequence[Hashable], predicted: Sequence[Hashable | None]) -> float:
    if len(gold) != len(predicted):
        raise ValueError("gold and predicted differ in length")
    if not gold:
        return 0.0
    return sum(g == p for g, p in zip(gold, predicted, strict=True)) / len(gold)


def per_class(
    gold: Sequence[Hashable], predicted: Sequence[Hashable | None], labels: Sequence[Hashable] | None = None
) -> dict[Hashable, ClassScore]:
    """Precision/recall/F1 for each gold label (F1 is 0 where precision + recall is 0)."""
    labels = list(labels) if labels is not None else sorted(set(gold), key=str)
    scores = {}
    for label in labels:
        tp = sum(1 for g, p in zip(gold, predicted, strict=True) if g == label and p == label)
        fp = sum(1 for g, p in zip(gold, predicted, strict=True) if g != label and p == label)
        fn = sum(1 for g, p in zip(gold, predicted, strict=True) if g == label and p != label)
        precision = tp / (tp + fp) if tp + fp else 0.0
        recall = tp / (tp + fn) if tp + fn else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        scores[label] = ClassScore(precision, recall, f1, tp + fn)
    return scores


def macro_f1(scores: dict[Hashable, ClassScore]) -> float:
    return sum(s.f1 for s in scores.values()) / len(scores) if scores else 0.0


def confusion(
    gold: Sequence[Hashable], predicted: Sequence[Hashable | None], labels: Sequence[Hashable]
) -> dict[str, dict[str, int]]:
    """gold label -> predicted label (including INVALID) -> count."""
    cols = [*map(str, labels), INVALID]
    table = {str(g): {c: 0 for c in cols} for g in labels}
    for g, p in zip(gold, predicted, strict=True):
        col = str(p) if p is not None and str(p) in table else INVALID
        table.setdefault(str(g), {c: 0 for c in cols})[col] += 1
    return table


def normalize(value: Any) -> Any:
    """Canonical form for exact match: strings trimmed, inner whitespace collapsed and casefolded; ints
    and floats compare by value; dict key order ignored."""
    if isinstance(value, str):
        return " ".join(value.split()).casefold()
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, list):
        return [normalize(v) for v in value]
    if isinstance(value, dict):
        return {str(k): normalize(v) for k, v in value.items()}
    return value


def exact_match(expected: Any, actual: Any) -> bool:
    return actual is not None and normalize(expected) == normalize(actual)


def field_matches(expected: dict[str, Any], actual: Any) -> tuple[int, int]:
    """(fields equal, fields expected) — partial credit to see *which* fields a model gets wrong."""
    if not isinstance(actual, dict):
        return 0, len(expected)
    return sum(1 for k, v in expected.items() if k in actual and normalize(actual[k]) == normalize(v)), len(expected)


def schema_errors(instance: Any, schema: dict[str, Any]) -> list[str]:
    """Validation errors of `instance` against a JSON schema (Draft 2020-12 unless $schema says otherwise)."""
    import jsonschema

    cls = jsonschema.validators.validator_for(schema)
    return [e.message for e in cls(schema).iter_errors(instance)]
