"""`cpu-inference eval`: run a labelled dataset through a candidate and a baseline endpoint and gate
the candidate on a threshold fixed before the run (candidate metric >= baseline metric - threshold)."""

from __future__ import annotations

import json
import re
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cpu_inference.evaluation.client import ChatClient, chat_body
from cpu_inference.evaluation.tasks import TASKS, ClassificationTask, Example, ExtractionTask, RoutingTask, Task

DEFAULT_MAX_TOKENS = {"classification": 24, "routing": 24, "extraction": 256}


def parse_threshold(text: str) -> float:
    """'5pp' or '5' -> 0.05 (percentage points of a metric in [0, 1]); '0.05' is 0.05 *points*, so
    the unit is always points — say `5pp` to be unambiguous."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(pp|%)?\s*", text)
    if not m:
        raise ValueError(f"--threshold {text!r}: expected percentage points like 5pp")
    value = float(m.group(1))
    if value > 100:
        raise ValueError(f"--threshold {text!r}: more than 100 points")
    return value / 100.0


def _gold_field(task: str) -> tuple[str, ...]:
    return {"classification": ("label",), "routing": ("tool", "label"), "extraction": ("expected",)}[task]


def load_dataset(path: str | Path, task: str) -> list[Example]:
    """JSONL rows: {"text", "label"} (classification), {"text", "tool"|"label"} (routing),
    {"text", "expected": {...}} (extraction). Errors name the line."""
    if task not in TASKS:
        raise ValueError(f"--task {task!r}: expected one of {', '.join(TASKS)}")
    p = Path(path)
    examples = []
    for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:  # the ValueError json.loads raises, with .msg
            raise ValueError(f"{p}:{n}: not JSON ({exc.msg})") from exc
        if not isinstance(row, dict) or not isinstance(row.get("text"), str) or not row["text"].strip():
            raise ValueError(f"{p}:{n}: expected an object with a non-empty string `text`")
        gold = next((row[k] for k in _gold_field(task) if k in row), None)
        if task == "extraction":
            if not isinstance(gold, dict):
                raise ValueError(f"{p}:{n}: extraction rows need `expected`: an object")
        elif not isinstance(gold, str) or not gold:
            raise ValueError(f"{p}:{n}: {task} rows need `{_gold_field(task)[0]}`: a non-empty string")
        examples.append(Example(row["text"], gold, n))
    if not examples:
        raise ValueError(f"{p}: no examples")
    return examples


def load_tools(path: str | Path) -> tuple[list[str], dict[str, str]]:
    """Tools file: an OpenAI `tools` list ([{"type": "function", "function": {"name", "description"}}])
    or a {name: description} object."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if isinstance(data, dict):
        return list(data), {str(k): str(v) for k, v in data.items()}
    names, desc = [], {}
    for item in data:
        fn = item.get("function", item) if isinstance(item, dict) else None
        if not isinstance(fn, dict) or not fn.get("name"):
            raise ValueError(f"{path}: every tool needs function.name")
        names.append(fn["name"])
        if fn.get("description"):
            desc[fn["name"]] = fn["description"]
    return names, desc


def load_labels(spec: str) -> tuple[list[str], dict[str, str]]:
    """`a,b,c`, or a .json file: a list of labels or {label: description} (descriptions go into the prompt)."""
    if spec.endswith(".json"):
        data = json.loads(Path(spec).read_text(encoding="utf-8"))
        if isinstance(data, dict):
            return [str(k) for k in data], {str(k): str(v) for k, v in data.items()}
        if isinstance(data, list) and all(isinstance(x, str) for x in data):
            return list(data), {}
        raise ValueError(f"{spec}: expected a list of labels or an object {{label: description}}")
    return [s.strip() for s in spec.split(",") if s.strip()], {}


def make_task(
    task: str,
    examples: Sequence[Example],
    *,
    constrained: bool = True,
    schema: dict[str, Any] | None = None,
    tools: tuple[list[str], dict[str, str]] | None = None,
    labels: tuple[list[str], dict[str, str]] | None = None,
) -> Task:
    if task == "extraction":
        if schema is None:
            raise ValueError("--task extraction needs --schema FILE (the JSON schema of the expected objects)")
        return ExtractionTask(schema, constrained=constrained)
    seen = list(dict.fromkeys(e.gold for e in examples))
    if task == "routing":
        names, desc = tools if tools else (seen, {})
        unknown = sorted(set(seen) - set(names))
        if unknown:
            raise ValueError(f"dataset routes to tools missing from --tools: {', '.join(unknown)}")
        return RoutingTask(names, constrained=constrained, descriptions=desc)
    names, desc = labels if labels else (sorted(seen), {})
    unknown = sorted(set(seen) - set(names))
    if unknown:
        raise ValueError(f"dataset has labels missing from --labels: {', '.join(unknown)}")
    return ClassificationTask(names, constrained=constrained, descriptions=desc)


def stratified(examples: Sequence[Example], n: int, key: Callable[[Example], str]) -> list[Example]:
    """The first n examples taken round-robin across classes (file order within a class): a subset or
    a set of shots that covers every class, deterministically."""
    groups: dict[str, list[Example]] = defaultdict(list)
    for e in examples:
        groups[key(e)].append(e)
    picked: list[Example] = []
    depth = 0
    while len(picked) < min(n, len(examples)):
        for g in groups.values():
            if depth < len(g) and len(picked) < n:
                picked.append(g[depth])
        depth += 1
    return sorted(picked, key=lambda e: e.line)


@dataclass(frozen=True)
class Prediction:
    line: int
    raw: str
    parsed: Any
    latency_s: float
    prompt_tokens: int | None = None
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "line": self.line,
            "raw": self.raw,
            "parsed": self.parsed,
            "latency_ms": round(self.latency_s * 1000, 1),
            "prompt_tokens": self.prompt_tokens,
            "error": self.error,
        }


def predict(
    client: ChatClient,
    task: Task,
    examples: Sequence[Example],
    shots: Sequence[Example] = (),
    *,
    max_tokens: int,
    concurrency: int = 2,
    model: str | None = None,
    on_done: Callable[[Prediction], None] | None = None,
) -> list[Prediction]:
    """One greedy (temperature 0) request per example; results in example order."""
    extra = task.request_extra()

    def one(example: Example) -> Prediction:
        body = chat_body(task.messages(example.text, shots), max_tokens=max_tokens, stream=False, model=model, **extra)
        r = client.chat(body, stream=False)
        pred = Prediction(example.line, r.text, task.parse(r.text) if r.ok else None, r.e2e_s, r.prompt_tokens, r.error)
        if on_done is not None:
            on_done(pred)
        return pred

    with ThreadPoolExecutor(max_workers=max(1, concurrency), thread_name_prefix="eval") as pool:
        return list(pool.map(one, examples))


@dataclass(frozen=True)
class GateResult:
    metric: str
    candidate: float
    baseline: float
    threshold: float

    @property
    def delta(self) -> float:
        return self.candidate - self.baseline

    @property
    def passed(self) -> bool:
        # Rounded to 1e-9 so that e.g. 0.7 - 0.05 vs 0.65 is not decided by float noise.
        return round(self.candidate - (self.baseline - self.threshold), 9) >= 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "candidate": self.candidate,
            "baseline": self.baseline,
            "threshold": self.threshold,
            "delta": round(self.delta, 4),
            "rule": "candidate >= baseline - threshold",
            "passed": self.passed,
        }

    def sentence(self) -> str:
        verdict = "PASS" if self.passed else "FAIL"
        return f"{verdict}: candidate {self.metric} {self.candidate:.1%} vs baseline {self.baseline:.1%} ({self.delta * 100:+.1f} pp; allowed -{self.threshold * 100:g} pp)"


def gate(metric: str, candidate: dict[str, Any], baseline: dict[str, Any], threshold: float) -> GateResult:
    return GateResult(metric, float(candidate[metric]), float(baseline[metric]), threshold)


def evaluate(
    client: ChatClient,
    task: Task,
    examples: Sequence[Example],
    shots: Sequence[Example],
    *,
    max_tokens: int,
    concurrency: int,
    model: str | None = None,
    on_done: Callable[[Prediction], None] | None = None,
) -> dict[str, Any]:
    t0 = time.perf_counter()
    preds = predict(
        client, task, examples, shots, max_tokens=max_tokens, concurrency=concurrency, model=model, on_done=on_done
    )
    metrics = task.score(examples, [p.parsed for p in preds])
    errors = [p.error for p in preds if p.error]
    return {
        "endpoint": client.description,
        "model": model,
        "metrics": metrics,
        "errors": len(errors),
        "first_errors": list(dict.fromkeys(errors))[:3],
        "seconds": round(time.perf_counter() - t0, 2),
        "predictions": [{**p.to_dict(), "gold": e.gold} for p, e in zip(preds, examples, strict=True)],
    }
