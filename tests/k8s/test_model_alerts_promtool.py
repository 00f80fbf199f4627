"""The dedicated models' alerts (one rule per engine and kind, joined on namespace/app to per-model parameter series)
fire for the right model, and only it, on synthetic series, evaluated by Prometheus' own rule engine: `promtool test
rules` (https://prometheus.io/docs/prometheus/latest/configuration/unit_testing_rules/), from the cache (`make
promtool`, scripts/build_promtool.sh).

Five dedicated models whose constants differ, so that a join on the wrong model (or engine) changes what fires:
alpha (llama.cpp, 4 slots, 4 GiB, baseline 20 tok/s, 2 replicas), beta (8 slots, 8 GiB, no baseline: its median of
the previous day), gamma (replicas_min 0, no pod), epsilon (expected up, no series), delta (vLLM, 16 slots, 6 GiB,
baseline 10 tok/s)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from cpu_inference.monitoring.alerts import ModelAlertSpec, rule_groups, rule_groups_yaml
from tests.k8s.test_farm_alerts_promtool import promtool

NS = "inference"
GIB = 1 << 30
MODELS = [
    ModelAlertSpec("alpha", slots=4, memory_limit_bytes=4 * GIB, replicas_min=2, baseline_tokens_per_second=20),
    ModelAlertSpec("beta", slots=8, memory_limit_bytes=8 * GIB),
    ModelAlertSpec("gamma", slots=2, memory_limit_bytes=2 * GIB, replicas_min=0, baseline_tokens_per_second=30),
    ModelAlertSpec("epsilon", slots=4, memory_limit_bytes=4 * GIB, replicas_min=2),
    ModelAlertSpec("delta", slots=16, memory_limit_bytes=6 * GIB, engine="vllm", baseline_tokens_per_second=10),
]
ALERTS = {
    f"{p}{kind}"
    for p in ("Llama", "Vllm")
    for kind in ("RequestsQueued", "SlotsSaturated", "TokenThroughputLow", "MemoryNearLimit", "MetricsMissing")
} | {"VllmKvCacheHigh"}
PODS = {"alpha": ("alpha-7d9f8c6b5-abcde", "alpha-7d9f8c6b5-fghij"), "beta": ("beta-5f6c7b8d9-klmno",)}
DELTA_POD = "delta-6c7d8f9b4-pqrst"


def _pod(app: str, pod: str) -> str:
    return f'namespace="{NS}",app="{app}",pod="{pod}"'


def _llama(app: str, pod: str, *, running: int, deferred: int, tokens: str, seconds: str) -> list[dict[str, str]]:
    sel = _pod(app, pod)
    return [
        {"series": f"llamacpp:requests_processing{{{sel}}}", "values": f"{running}x400"},
        {"series": f"llamacpp:requests_deferred{{{sel}}}", "values": f"{deferred}x400"},
        {"series": f"llamacpp:tokens_predicted_total{{{sel}}}", "values": tokens},
        {"series": f"llamacpp:tokens_predicted_seconds_total{{{sel}}}", "values": seconds},
    ]


def _delta(*, running: int, waiting: int, kv: float, tokens_per_second: int) -> list[dict[str, str]]:
    sel = _pod("delta", DELTA_POD)
    return [
        {"series": f"vllm:num_requests_running{{{sel}}}", "values": f"{running}x400"},
        {"series": f"vllm:num_requests_waiting{{{sel}}}", "values": f"{waiting}x400"},
        {"series": f"vllm:kv_cache_usage_perc{{{sel}}}", "values": f"{kv}x400"},
        # one observation per generated token after the first: count/sum = tokens per second per sequence
        {"series": f"vllm:inter_token_latency_seconds_count{{{sel}}}", "values": f"0+{tokens_per_second * 30}x400"},
        {"series": f"vllm:inter_token_latency_seconds_sum{{{sel}}}", "values": "0+30x400"},
    ]


def _memory(pod: str, container: str, used: int) -> dict[str, str]:
    # cAdvisor's series: no pod labels (no `app`), the container's name (k8s/specs/scrape.py cadvisor job)
    return {
        "series": f'container_memory_working_set_bytes{{namespace="{NS}",pod="{pod}",container="{container}"}}',
        "values": f"{used}x400",
    }


def _expected(alert: str, labels: dict[str, str], value: str | None = None) -> dict[str, Any]:
    rule = next(r for g in rule_groups(NS, MODELS)["groups"] for r in g["rules"] if r.get("alert") == alert)
    annotations = {}
    for k, v in rule["annotations"].items():
        for name, label in labels.items():
            v = v.replace(f"{{{{ $labels.{name} }}}}", label)
        if value is not None:
            v = v.replace("{{ $value | humanizePercentage }}", value)
        assert "{{" not in v, v
        annotations[k] = v
    return {
        "exp_labels": {"namespace": NS, **labels, "severity": rule["labels"]["severity"]},
        "exp_annotations": annotations,
    }


def _run(tmp_path: Path, tests: list[dict[str, Any]]) -> subprocess.CompletedProcess[str]:
    (tmp_path / "rules.yaml").write_text(rule_groups_yaml(NS, MODELS))
    doc = {"rule_files": ["rules.yaml"], "evaluation_interval": "30s", "tests": tests}
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return subprocess.run(
        [promtool(), "test", "rules", "tests.yaml"], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )


def busy() -> dict[str, Any]:
    """alpha: 7 of 2×4 slots busy (87.5%), one pod at 3.75 of 4 GiB, decoding 7.5 tok/s (< 50% of 20); beta: 6 of 8
    busy (75%), 2 queued, 6 of 8 GiB; delta: 15 of 16 busy, KV 90%, 5.625 of 6 GiB, 4 tok/s (< 50% of 10); epsilon:
    expected up, no series; gamma: no series, replicas_min 0. A pool pod's engine container uses 30 GiB (not a
    dedicated model: no limit to compare with)."""
    a1, a2 = PODS["alpha"]
    (b1,) = PODS["beta"]
    series = [
        *_llama("alpha", a1, running=4, deferred=0, tokens="0+300x400", seconds="0+40x400"),
        *_llama("alpha", a2, running=3, deferred=0, tokens="0+300x400", seconds="0+40x400"),
        *_llama("beta", b1, running=6, deferred=2, tokens="0+1200x400", seconds="0+30x400"),
        *_delta(running=15, waiting=0, kv=0.9, tokens_per_second=4),
        _memory(a1, "llama-server", 4026531840),  # 3.75 GiB: 93.75% of alpha's 4 GiB (47% of beta's 8 GiB)
        _memory(a2, "llama-server", 3 * GIB),  # 75%
        _memory(b1, "llama-server", 6 * GIB),  # 75% of beta's 8 GiB (150% of alpha's 4 GiB)
        _memory(DELTA_POD, "vllm", 6039797760),  # 5.625 GiB: 93.75% of delta's 6 GiB
        _memory("pool-small-0", "llama-server", 30 * GIB),
    ]
    at = "20m"
    fired = {
        "LlamaSlotsSaturated": [_expected("LlamaSlotsSaturated", {"app": "alpha"}, "87.5%")],
        "VllmSlotsSaturated": [_expected("VllmSlotsSaturated", {"app": "delta"}, "93.75%")],
        "LlamaRequestsQueued": [_expected("LlamaRequestsQueued", {"app": "beta"})],
        "LlamaMemoryNearLimit": [_expected("LlamaMemoryNearLimit", {"app": "alpha", "pod": a1}, "93.75%")],
        "VllmMemoryNearLimit": [_expected("VllmMemoryNearLimit", {"app": "delta", "pod": DELTA_POD}, "93.75%")],
        "LlamaTokenThroughputLow": [_expected("LlamaTokenThroughputLow", {"app": "alpha"})],
        "VllmTokenThroughputLow": [_expected("VllmTokenThroughputLow", {"app": "delta"})],
        "VllmKvCacheHigh": [_expected("VllmKvCacheHigh", {"app": "delta"})],
        "LlamaMetricsMissing": [_expected("LlamaMetricsMissing", {"app": "epsilon"})],
    }
    checks = [{"eval_time": at, "alertname": a, "exp_alerts": fired.get(a, [])} for a in sorted(ALERTS)]
    # Before its `for`, nothing fires.
    checks += [{"eval_time": "4m", "alertname": a, "exp_alerts": []} for a in sorted(fired)]
    return {"name": "busy", "interval": "30s", "input_series": series, "alert_rule_test": checks}


def quiet() -> dict[str, Any]:
    """Every model with series well under every threshold; gamma (replicas_min 0) without pods."""
    a1, a2 = PODS["alpha"]
    (b1,) = PODS["beta"]
    series = [
        *_llama("alpha", a1, running=1, deferred=0, tokens="0+1200x400", seconds="0+30x400"),
        *_llama("alpha", a2, running=2, deferred=0, tokens="0+1200x400", seconds="0+30x400"),
        *_llama("beta", b1, running=4, deferred=0, tokens="0+1200x400", seconds="0+30x400"),
        *_llama("epsilon", "epsilon-6b7c8d9f5-uvwxy", running=0, deferred=0, tokens="0x400", seconds="0x400"),
        *_delta(running=2, waiting=0, kv=0.3, tokens_per_second=12),
        _memory(a1, "llama-server", 2 * GIB),
        _memory(b1, "llama-server", 4 * GIB),
        _memory(DELTA_POD, "vllm", 3 * GIB),
    ]
    checks: list[dict[str, Any]] = [
        {"eval_time": t, "alertname": a, "exp_alerts": []} for t in ("20m", "3h") for a in sorted(ALERTS)
    ]
    return {"name": "quiet", "interval": "30s", "input_series": series, "alert_rule_test": checks}


def median_baseline() -> dict[str, Any]:
    """beta has no measured baseline: its own median of the previous day (an hour back) is the baseline. Fast (40
    tok/s) for 90 minutes, then 10 tok/s: under 50% of 40 — quiet while its median has no day of data before."""
    (b1,) = PODS["beta"]
    series = _llama("beta", b1, running=2, deferred=0, tokens="0+1200x179 216000+300x300", seconds="0+30x480")
    return {
        "name": "median baseline",
        "interval": "30s",
        "input_series": series,
        "alert_rule_test": [
            {"eval_time": "80m", "alertname": "LlamaTokenThroughputLow", "exp_alerts": []},
            {
                "eval_time": "140m",
                "alertname": "LlamaTokenThroughputLow",
                "exp_alerts": [_expected("LlamaTokenThroughputLow", {"app": "beta"})],
            },
        ],
    }


def test_each_dedicated_model_alert_fires_for_its_model_only(tmp_path: Path) -> None:
    proc = _run(tmp_path, [busy(), quiet(), median_baseline()])
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_rules_are_one_per_engine_and_kind_whatever_the_number_of_models() -> None:
    """The parameters carry the models: 5 or 300 models, the same rules (names and count)."""
    many = [ModelAlertSpec(f"m-{i:03d}", slots=4, memory_limit_bytes=4 * GIB) for i in range(300)]

    def names(models: list[ModelAlertSpec]) -> list[str]:
        return [r.get("alert") or r["record"] for g in rule_groups(NS, models)["groups"] for r in g["rules"]]

    assert names(many) == names(many[:2])
    assert sorted(a for a in names(MODELS) if a in ALERTS) == sorted(ALERTS)


def test_two_namespaces_in_one_workspace_alert_on_their_own_series(tmp_path: Path) -> None:
    """Two patterns' rule groups namespaces in one AMP workspace record the same names: each namespace's rules read
    and record its own series only. `alpha` runs in both, with other constants; the router of `inference` is slow."""
    other = [ModelAlertSpec("alpha", slots=8, memory_limit_bytes=16 * GIB)]
    (tmp_path / "a.yaml").write_text(rule_groups_yaml(NS, MODELS, p95_latency_slo_seconds=0.5, router_app="router"))
    (tmp_path / "b.yaml").write_text(rule_groups_yaml("other", other, p95_latency_slo_seconds=0.5, router_app="router"))
    a1, a2 = PODS["alpha"]
    series = [
        *_llama("alpha", a1, running=4, deferred=0, tokens="0+1200x400", seconds="0+30x400"),
        *_llama("alpha", a2, running=3, deferred=0, tokens="0+1200x400", seconds="0+30x400"),
        {"series": 'llamacpp:requests_processing{namespace="other",app="alpha",pod="alpha-1-a"}', "values": "6x400"},
    ]
    # router_request_seconds: every answer of `inference` over 1 s (p95 at the last finite bucket, 1 s), every one of
    # `other` under 0.25 s.
    buckets = {NS: {"0.25": 0, "0.5": 0, "1": 0, "+Inf": 10}, "other": {"0.25": 10, "0.5": 10, "1": 10, "+Inf": 10}}
    series += [
        {
            "series": f'router_request_seconds_bucket{{namespace="{ns}",app="router",pod="r-0",le="{le}"}}',
            "values": f"0+{per_step}x400",
        }
        for ns, counts in buckets.items()
        for le, per_step in counts.items()
    ]
    latency = next(
        r
        for g in rule_groups(NS, MODELS, p95_latency_slo_seconds=0.5, router_app="router")["groups"]
        for r in g["rules"]
        if r.get("alert") == "InferenceLatencyP95AboveSlo"
    )
    doc = {
        "rule_files": ["a.yaml", "b.yaml"],
        "evaluation_interval": "30s",
        "tests": [
            {
                "interval": "30s",
                "input_series": series,
                "alert_rule_test": [
                    {
                        "eval_time": "20m",
                        "alertname": "LlamaSlotsSaturated",
                        "exp_alerts": [_expected("LlamaSlotsSaturated", {"app": "alpha"}, "87.5%")],
                    },
                    {
                        "eval_time": "20m",
                        "alertname": "InferenceLatencyP95AboveSlo",
                        "exp_alerts": [
                            {
                                "exp_labels": {"namespace": NS, "severity": "critical"},
                                "exp_annotations": latency["annotations"],
                            }
                        ],
                    },
                ],
            }
        ],
    }
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    proc = subprocess.run(
        [promtool(), "test", "rules", "tests.yaml"], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
