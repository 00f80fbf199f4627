"""The model farm's per-model rules (monitoring/farm_rules.py), rendered as AMP gets them, parsed by a real PromQL
parser (promql-parser: Python bindings of the Rust promql-parser crate, which follows Prometheus' grammar), and
checked against the series the gateway and the pool supervisors really export: the gateway's prometheus_client
registry (containers/router/slm_router/metrics.py) and the names of containers/inference_runtime/pool_status.py."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import promql_parser
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from cpu_inference.monitoring import farm_rules
from cpu_inference.monitoring.alerts import ModelAlertSpec, dashboard, rule_groups, rule_groups_yaml
from inference_runtime import pool_status

ROUTER_DIR = Path(__file__).resolve().parents[2] / "containers" / "router"
if str(ROUTER_DIR) not in sys.path:
    sys.path.insert(0, str(ROUTER_DIR))

from slm_router.metrics import GatewayMetrics  # noqa: E402 - the runtime package, from its own directory

NS, GATEWAY, POOLS = "model-farm", "gateway", ("small", "medium")
# The scrape job's labels (k8s/specs/scrape.py): the pod's labels (sanitized), namespace, pod, node.
SCRAPE_LABELS = {"namespace", "pod", "node", "app", "job", "instance", farm_rules.POOL_LABEL}
SUPERVISOR = {  # name -> labels, as pool_status documents them
    pool_status.COLD_LOADS: {"model"},
    pool_status.COLD_LOAD_SECONDS: {"model"},
    pool_status.LOAD_FAILURES: {"model"},
    pool_status.COPY_FAILED_MODEL: {"model"},
    pool_status.MODELS_BY_STATE: {"state"},
}
FARM_ALERTS = ("FarmModelFailing", "FarmModelAlwaysCold", "FarmModelCopyFailed", "FarmPoolCopyStalled")


def gateway_series() -> tuple[set[str], set[str]]:
    m = GatewayMetrics([], {p: 2 for p in POOLS})
    m.requests.labels("m-1", "200").inc()
    m.request_seconds.labels("m-1").observe(0.2)
    names, labels = set(), set()
    for family in text_string_to_metric_families(m.render().decode()):
        for s in family.samples:
            names.add(s.name)
            labels |= set(s.labels)
    return names, labels


def parts(expr: str) -> tuple[set[str], set[str], list[list[str]]]:
    """(metric names, label names used, the grouping of every aggregation) of a PromQL expression, from its AST."""
    names: set[str] = set()
    labels: set[str] = set()
    groupings: list[list[str]] = []

    def visit(node: Any) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            names.add(str(node.name))
            labels.update(m.name for m in node.matchers.matchers)
        elif isinstance(node, promql_parser.AggregateExpr) and node.modifier is not None:
            groupings.append(list(node.modifier.labels))
            labels.update(node.modifier.labels)
        elif isinstance(node, promql_parser.BinaryExpr) and node.modifier is not None and node.modifier.matching:
            labels.update(node.modifier.matching.labels)

    promql_parser.walk(promql_parser.parse(expr), visit)
    return names, labels, groupings


def all_rules(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for g in doc["groups"] for r in g["rules"]]


VARIANTS: dict[str, dict[str, Any]] = {
    "pools only": dict(models=[], pools=POOLS),
    "pools + dedicated + SLO": dict(
        models=[
            ModelAlertSpec("hot", slots=4, memory_limit_bytes=4 << 30),
            ModelAlertSpec("big", slots=8, memory_limit_bytes=16 << 30, engine="vllm"),
        ],
        pools=POOLS,
        p95_latency_slo_seconds=0.8,
    ),
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_rendered_rule_and_panel_parses_as_promql(variant: str) -> None:
    kw = dict(VARIANTS[variant])
    models = kw.pop("models")
    doc = yaml.safe_load(rule_groups_yaml(NS, models, router_app=GATEWAY, router_mode="gateway", **kw))
    exprs = [r["expr"] for r in all_rules(doc)]
    board = dashboard(NS, models, pools=POOLS, router_app=GATEWAY, router_mode="gateway")
    exprs += [p["targets"][0]["expr"] for p in board["panels"]]
    for expr in exprs:
        promql_parser.parse(expr)  # raises ValueError on a syntax error
    with pytest.raises(ValueError):  # the parser does reject broken PromQL
        promql_parser.parse(exprs[0][:-1])


def test_the_farm_rules_read_only_series_the_gateway_and_supervisors_export() -> None:
    doc = rule_groups(NS, [], pools=POOLS, router_app=GATEWAY, router_mode="gateway")
    rules = all_rules(doc)
    alerts = {r["alert"]: r for r in rules if "alert" in r}
    assert set(FARM_ALERTS) <= set(alerts)
    recorded = {r["record"] for r in rules if "record" in r}
    names, labels = gateway_series()
    exported = names | set(SUPERVISOR)
    known_labels = labels | SCRAPE_LABELS | set().union(*SUPERVISOR.values())
    for r in rules:
        used, used_labels, _ = parts(r["expr"])
        assert used <= exported | recorded, (r.get("alert") or r.get("record"), used - exported - recorded)
        assert used_labels <= known_labels, (r.get("alert") or r.get("record"), used_labels - known_labels)
    # The supervisor's series are read from the farm's pools only, the gateway's from the gateway.
    assert f'{farm_rules.POOL_LABEL}=~"medium|small"' in alerts["FarmModelCopyFailed"]["expr"]
    assert '"copying"' in alerts["FarmPoolCopyStalled"]["expr"] and '"landed"' in alerts["FarmPoolCopyStalled"]["expr"]


def test_recording_rules_stay_one_series_per_model() -> None:
    """1,000 models: every farm recording aggregates pod, replica and gateway pod away (by namespace, model)."""
    for r in farm_rules.farm_records(NS, GATEWAY, POOLS):
        _, _, groupings = parts(r["expr"])
        assert groupings and all(g == ["namespace", "model"] for g in groupings), r
        top = promql_parser.parse(r["expr"])
        sides = [top.lhs, top.rhs] if isinstance(top, promql_parser.BinaryExpr) else [top]
        assert all(isinstance(s, promql_parser.AggregateExpr) for s in sides), r  # nothing un-aggregated on top


def test_thresholds_are_the_named_constants() -> None:
    alerts = {a["alert"]: a for a in farm_rules.farm_alerts(NS, GATEWAY, POOLS, _alert)}
    failing, cold = alerts["FarmModelFailing"], alerts["FarmModelAlwaysCold"]
    assert f"> {farm_rules.MODEL_ERROR_RATIO}" in failing["expr"] and failing["for"] == farm_rules.MODEL_ERROR_FOR
    assert f">= {farm_rules.MODEL_ERROR_MIN_RPS}" in failing["expr"]
    assert f"> {farm_rules.ALWAYS_COLD_SHARE}" in cold["expr"]
    assert f">= {farm_rules.ALWAYS_COLD_MIN_REQUESTS_PER_HOUR}" in cold["expr"]
    assert alerts["FarmPoolCopyStalled"]["for"] == f"{farm_rules.COPY_STALL_MINUTES}m"
    # 503 (cold, scaled to zero, copying: retryable, each with its own alert) is not a failure.
    errors = next(r for r in farm_rules.farm_records(NS, GATEWAY, POOLS) if r["record"] == farm_rules.RECORD_ERRORS)
    assert 'code!="503"' in errors["expr"]


def _alert(name: str, expr: str, for_: str, severity: str, summary: str, description: str) -> dict[str, Any]:
    from cpu_inference.monitoring.alerts import _alert as real

    return real(name, expr, for_, severity, summary, description)


def test_the_dashboard_has_the_farm_panels() -> None:
    board = dashboard(NS, [], pools=POOLS, router_app=GATEWAY, router_mode="gateway")
    panels = {p["title"]: p for p in board["panels"]}
    for title in (
        "Top models by traffic",
        "Cold loads per model",
        "Mean cold-load time per model",
        "Idle models (no request in 30 d, among those seen)",
        "Copy states per pool",
    ):
        assert title in panels, title
    assert panels["Idle models (no request in 30 d, among those seen)"]["type"] == "table"
    assert len({p["id"] for p in board["panels"]}) == len(board["panels"])
    # Without pools (a dedicated-only namespace) the farm panels are absent.
    assert "Top models by traffic" not in {
        p["title"] for p in dashboard(NS, [], router_app=GATEWAY, router_mode="gateway")["panels"]
    }


def _selectors_and_matchings(expr: str) -> tuple[list[Any], list[list[str]]]:
    """The vector selectors of a PromQL expression and the labels of its vector matchings (on/ignoring)."""
    selectors: list[Any] = []
    matchings: list[list[str]] = []

    def visit(node: Any) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            selectors.append(node)
        elif isinstance(node, promql_parser.BinaryExpr) and node.modifier is not None and node.modifier.matching:
            matchings.append(list(node.modifier.matching.labels))

    promql_parser.walk(promql_parser.parse(expr), visit)
    return selectors, matchings


def test_dedicated_and_farm_rules_read_their_own_namespace_and_join_models_on_namespace_and_app() -> None:
    """Every namespace's rule group records the same names (cpu_inference:...), so every selector names the namespace
    (the dedicated models' median1d did not: two namespaces recorded each other's series); and every join between
    the dedicated models' series and their parameter series matches on (namespace, app), one model to one model."""
    kw = dict(VARIANTS["pools + dedicated + SLO"])
    models = kw.pop("models")
    doc = rule_groups(NS, models, router_app=GATEWAY, router_mode="gateway", **kw)
    for r in all_rules(doc):
        selectors, matchings = _selectors_and_matchings(r["expr"])
        name = str(r.get("alert") or r["record"])
        for s in selectors:
            assert any(m.name == "namespace" and m.value == NS for m in s.matchers.matchers), (name, s.name)
        if name.startswith(("Llama", "Vllm", "cpu_inference:slot_utilization", "cpu_inference:dedicated_model")):
            assert all(m == ["namespace", "app"] for m in matchings), (name, matchings)
    joined = [a for a in all_rules(doc) if a.get("alert", "").startswith(("Llama", "Vllm"))]
    assert joined and all(" on (namespace, app) " in a["expr"] for a in joined)
