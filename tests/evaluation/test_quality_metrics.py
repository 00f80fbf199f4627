"""Pure quality metrics, answer parsing, the gate rule, and the committed example datasets."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

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
from cpu_inference.evaluation.quality import (
    GateResult,
    load_dataset,
    load_labels,
    load_tools,
    make_task,
    parse_threshold,
    stratified,
)
from cpu_inference.evaluation.tasks import ClassificationTask, Example, ExtractionTask, RoutingTask


def test_per_class_f1_on_a_worked_example() -> None:
    gold = ["a", "a", "a", "b", "b", "c"]
    pred = ["a", "a", "b", "b", INVALID, "a"]
    scores = per_class(gold, pred, ["a", "b", "c"])
    # a: tp 2, fp 1 (the c), fn 1 -> P 2/3, R 2/3; b: tp 1, fp 1, fn 1 -> 1/2, 1/2; c: 0.
    assert (
        scores["a"].precision == pytest.approx(2 / 3)
        and scores["a"].recall == pytest.approx(2 / 3)
        and scores["a"].f1 == pytest.approx(2 / 3)
    )
    assert scores["b"].f1 == pytest.approx(0.5) and scores["b"].support == 2
    assert scores["c"].f1 == 0.0 and scores["c"].support == 1
    assert macro_f1(scores) == pytest.approx((2 / 3 + 0.5 + 0) / 3)
    assert accuracy(gold, pred) == pytest.approx(3 / 6)


def test_per_class_and_confusion_refuse_unpaired_predictions() -> None:
    """A prediction list shorter than the gold list is a caller bug: scored anyway, zip() would drop the unpaired
    gold labels and report a recall that never happened (here 1.0 for `b`, whose only example went unscored)."""
    with pytest.raises(ValueError):
        per_class(["a", "b"], ["a"], ["a", "b"])
    with pytest.raises(ValueError):
        confusion(["a", "b"], ["a"], ["a", "b"])


def test_exact_match_normalizes_only_formatting() -> None:
    assert exact_match({"order_id": "58213", "amount": 45.9}, {"amount": 45.90, "order_id": " 58213 "})
    assert exact_match({"email": "Ana@Example.com"}, {"email": "ana@example.com"})
    assert exact_match({"amount": 7}, {"amount": 7.0})
    assert not exact_match({"amount": 7}, {"amount": 7.5})
    assert not exact_match({"order_id": "58213", "email": None}, {"order_id": "58213"})
    assert not exact_match({"x": 1}, None)
    assert field_matches({"a": 1, "b": "x", "c": None}, {"a": 1, "b": "y", "c": None}) == (2, 3)


def test_schema_validity() -> None:
    schema = json.loads((Path(__file__).parents[2] / "examples/eval/order-fields.schema.json").read_text())
    assert schema_errors({"order_id": "1", "email": None, "amount": 2.5}, schema) == []
    assert schema_errors({"order_id": 1, "email": None, "amount": 2.5}, schema)  # wrong type
    assert schema_errors({"order_id": "1", "email": None}, schema)  # missing required


def test_classification_parsing_constrained_and_free_text() -> None:
    task = ClassificationTask(["billing", "technical_issue", "shipping"])
    assert task.parse('"shipping"') == "shipping"
    assert task.parse('{"label": "billing"}') == "billing"
    assert task.parse("Technical issue.") == "technical_issue"
    assert task.parse("I think this is about shipping, not billing") == "shipping"
    assert task.parse("no idea") is None
    rf = task.response_format()
    assert rf["type"] == "json_schema" and rf["json_schema"]["schema"]["enum"] == [
        "billing",
        "technical_issue",
        "shipping",
    ]
    assert ClassificationTask(["a", "b"], constrained=False).response_format() is None
    # Stops cut the grammar's optional trailing whitespace; the answer then lacks its closing quote.
    assert task.request_extra()["stop"] == ['" ', '"\n'] and task.parse('"shipping') == "shipping"
    assert "stop" not in ClassificationTask(["a", "b"], constrained=False).request_extra()


def test_few_shot_messages_alternate_user_and_assistant() -> None:
    task = ClassificationTask(["billing", "shipping"], descriptions={"billing": "charges and invoices"})
    shots = [Example("charged twice", "billing", 1), Example("where is my parcel", "shipping", 2)]
    msgs = task.messages("refund please", shots)
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert msgs[2]["content"] == '"billing"' and msgs[-1]["content"] == "refund please"
    assert "billing: charges and invoices" in msgs[0]["content"]


def test_extraction_parsing_tolerates_fences_and_prose() -> None:
    task = ExtractionTask({"type": "object", "properties": {"a": {"type": "integer"}}})
    assert task.parse('```json\n{"a": 1}\n```') == {"a": 1}
    assert task.parse('Here you go: {"a": 2} hope it helps') == {"a": 2}
    assert task.parse("nothing") is None
    with pytest.raises(ValueError, match="object"):
        ExtractionTask({"type": "string"})


def test_routing_scores_tool_accuracy() -> None:
    task = RoutingTask(["get_order_status", "issue_refund"])
    examples = [Example("where", "get_order_status", 1), Example("money back", "issue_refund", 2)]
    scored = task.score(examples, ["get_order_status", None])
    assert (
        scored["tool_accuracy"] == 0.5
        and scored["invalid"] == 1
        and set(scored["per_tool"]) == {"get_order_status", "issue_refund"}
    )


@pytest.mark.parametrize(
    ("text", "value"), [("5pp", 0.05), ("5", 0.05), ("2.5 pp", 0.025), ("0pp", 0.0), ("10%", 0.10)]
)
def test_threshold_is_in_percentage_points(text: str, value: float) -> None:
    assert parse_threshold(text) == pytest.approx(value)


@pytest.mark.parametrize("text", ["five", "-5pp", "101pp", ""])
def test_bad_thresholds(text: str) -> None:
    with pytest.raises(ValueError):
        parse_threshold(text)


def test_gate_rule_candidate_at_least_baseline_minus_threshold() -> None:
    assert GateResult("accuracy", 0.65, 0.70, 0.05).passed  # exactly on the line passes (no float noise)
    assert not GateResult("accuracy", 0.6499, 0.70, 0.05).passed
    assert GateResult("accuracy", 0.80, 0.70, 0.0).passed
    failed = GateResult("accuracy", 0.30, 0.60, 0.05)
    assert not failed.passed and failed.sentence().startswith("FAIL") and "-30.0 pp" in failed.sentence()


def test_stratified_subset_covers_every_class_deterministically() -> None:
    examples = [Example(f"t{i}", lb, i) for i, lb in enumerate("aaaaabbbcc")]
    picked = stratified(examples, 5, lambda e: e.gold)
    assert Counter(e.gold for e in picked) == {"a": 2, "b": 2, "c": 1}
    assert picked == stratified(examples, 5, lambda e: e.gold)
    assert [e.line for e in picked] == sorted(e.line for e in picked)


def test_committed_intent_dataset(repo_root: Path) -> None:
    path = repo_root / "examples/eval/intent-classification.jsonl"
    examples = load_dataset(path, "classification")
    counts = Counter(e.gold for e in examples)
    assert len(examples) >= 100 and 3 <= len(counts) <= 5
    assert max(counts.values()) - min(counts.values()) <= 2  # balanced, so accuracy is not dominated by one class
    assert len({e.text for e in examples}) == len(examples)
    shots = load_dataset(repo_root / "examples/eval/intent-few-shot.jsonl", "classification")
    assert not {s.text for s in shots} & {e.text for e in examples}, "few-shot examples must not leak into the eval set"
    assert {s.gold for s in shots} == set(counts)
    names, desc = load_labels(str(repo_root / "examples/eval/intent-labels.json"))
    assert set(names) == set(counts) and all(desc.values())
    # The first 30 (the test subset) cover every label evenly.
    assert set(Counter(e.gold for e in stratified(examples, 30, lambda e: e.gold)).values()) == {6}


def test_committed_routing_and_extraction_examples(repo_root: Path) -> None:
    routes = load_dataset(repo_root / "examples/eval/tool-routing.jsonl", "routing")
    tools = load_tools(repo_root / "examples/eval/support-tools.json")
    assert isinstance(make_task("routing", routes, tools=tools), RoutingTask)
    rows = load_dataset(repo_root / "examples/eval/order-extraction.jsonl", "extraction")
    schema = json.loads((repo_root / "examples/eval/order-fields.schema.json").read_text())
    assert all(schema_errors(r.gold, schema) == [] for r in rows)


def test_dataset_errors_name_the_line(tmp_path: Path) -> None:
    bad = tmp_path / "d.jsonl"
    bad.write_text('{"text": "ok", "label": "a"}\n{"text": "no label"}\n')
    with pytest.raises(ValueError, match=r"d.jsonl:2: classification rows need `label`"):
        load_dataset(bad, "classification")
    with pytest.raises(ValueError, match="missing from --tools"):
        make_task("routing", [Example("x", "unknown_tool", 1)], tools=(["a", "b"], {}))
