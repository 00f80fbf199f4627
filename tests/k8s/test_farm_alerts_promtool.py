"""The farm alerts fire (and stay quiet) on synthetic series, evaluated by Prometheus' own rule engine:
`promtool test rules` (https://prometheus.io/docs/prometheus/latest/configuration/unit_testing_rules/), extracted
from Debian's `prometheus` package into the cache by `make promtool` (scripts/build_promtool.sh, run by `make test`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from cpu_inference._internal.resources import cache_dir
from cpu_inference.config.schema import FIRST_TOKEN_SLO_MS
from cpu_inference.monitoring import farm_rules
from cpu_inference.monitoring.alerts import rule_groups_yaml

ROUTER_DIR = Path(__file__).resolve().parents[2] / "containers" / "router"
if str(ROUTER_DIR) not in sys.path:
    sys.path.insert(0, str(ROUTER_DIR))

from slm_router.metrics import GATEWAY_LATENCY_BUCKETS  # noqa: E402 - the runtime package, from its own directory

NS, GW, POOLS = "model-farm", "gateway", ("small",)
POOLS_WITH_LARGE = ("large", "small")
G = f'namespace="{NS}",app="{GW}"'
P = f'namespace="{NS}",{farm_rules.POOL_LABEL}="small"'


def promtool() -> str:
    found = cache_dir() / "promtool" / "usr" / "bin" / "promtool"
    assert found.is_file(), f"{found} is missing: run `make promtool` (scripts/build_promtool.sh)"
    return str(found)


def expected(alertname: str, labels: dict[str, str]) -> dict[str, Any]:
    rule = next(a for a in farm_rules.farm_alerts(NS, GW, POOLS, _alert) if a["alert"] == alertname)
    ann = {}
    for k, v in rule["annotations"].items():
        for name, value in labels.items():
            v = v.replace(f"{{{{ $labels.{name} }}}}", value)
        ann[k] = v
    return {"exp_labels": {**labels, "severity": rule["labels"]["severity"]}, "exp_annotations": ann}


def expected_pool_errors(pool: str) -> dict[str, Any]:
    from cpu_inference.monitoring.alerts import _pool_alerts

    rule = next(a for a in _pool_alerts(NS, GW, POOLS_WITH_LARGE) if a["alert"] == "GatewayPoolErrors")
    ann = {k: v.replace("{{ $labels.pool }}", pool) for k, v in rule["annotations"].items()}
    return {
        "exp_labels": {"namespace": NS, "pool": pool, "severity": rule["labels"]["severity"]},
        "exp_annotations": ann,
    }


def _alert(name: str, expr: str, for_: str, severity: str, summary: str, description: str) -> dict[str, Any]:
    from cpu_inference.monitoring.alerts import _alert as real

    return real(name, expr, for_, severity, summary, description)


def test_farm_alerts_fire_on_prometheus_rule_engine(tmp_path: Path) -> None:
    rules = rule_groups_yaml(NS, [], pools=POOLS_WITH_LARGE, router_app=GW, router_mode="gateway")
    (tmp_path / "rules.yaml").write_text(rules)
    series = [
        # failing: 1 req/s, 10% 500s; quiet: 10% 500s at 1 request a minute (under the minimum rate)
        {"series": f'gateway_requests_total{{{G},pod="gw-0",model="failing",code="200"}}', "values": "0+27x200"},
        {"series": f'gateway_requests_total{{{G},pod="gw-0",model="failing",code="500"}}', "values": "0+3x200"},
        {"series": f'gateway_requests_total{{{G},pod="gw-0",model="rare",code="200"}}', "values": "0+0.45x200"},
        {"series": f'gateway_requests_total{{{G},pod="gw-0",model="rare",code="500"}}', "values": "0+0.05x200"},
        # thrash: 2 requests a minute, each one a cold load on one of two replicas
        {"series": f'gateway_requests_total{{{G},pod="gw-0",model="thrash",code="200"}}', "values": "0+1x200"},
        {"series": f'pool_model_cold_loads_total{{{P},pod="pool-small-0",model="thrash"}}', "values": "0+0.5x200"},
        {"series": f'pool_model_cold_loads_total{{{P},pod="pool-small-1",model="thrash"}}', "values": "0+0.5x200"},
        # a model whose copy failed
        {"series": f'pool_model_copy_failed{{{P},pod="pool-small-0",model="broken"}}', "values": "1x200"},
        # pool "small" through the gateway: 30% of its answers are 503 for models still being copied, 2% other 5xx
        # (GatewayPoolErrors stays quiet); pool "large": 10% 500s (it fires)
        {"series": f'gateway_pool_requests_total{{{G},pod="gw-0",pool="small",code="200"}}', "values": "0+20.4x200"},
        {"series": f'gateway_pool_requests_total{{{G},pod="gw-0",pool="small",code="503"}}', "values": "0+9x200"},
        {"series": f'gateway_pool_requests_total{{{G},pod="gw-0",pool="small",code="500"}}', "values": "0+0.6x200"},
        {
            "series": f'gateway_pool_missing_model_total{{{G},pod="gw-0",pool="small",state="copying"}}',
            "values": "0+9x200",
        },
        {"series": f'gateway_pool_requests_total{{{G},pod="gw-0",pool="large",code="200"}}', "values": "0+27x200"},
        {"series": f'gateway_pool_requests_total{{{G},pod="gw-0",pool="large",code="500"}}', "values": "0+3x200"},
        # copying models, nothing landing
        {"series": f'pool_models{{{P},pod="pool-small-0",state="copying"}}', "values": "3x200"},
        {"series": f'pool_models{{{P},pod="pool-small-0",state="landed"}}', "values": "5x200"},
    ]
    pool = {"namespace": NS, farm_rules.POOL_LABEL: "small"}
    tests = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "30s",
        "tests": [
            {
                "interval": "30s",
                "input_series": series,
                "alert_rule_test": [
                    {
                        "eval_time": "20m",
                        "alertname": "FarmModelFailing",
                        "exp_alerts": [expected("FarmModelFailing", {"namespace": NS, "model": "failing"})],
                    },
                    {
                        "eval_time": "90m",
                        "alertname": "FarmModelAlwaysCold",
                        "exp_alerts": [expected("FarmModelAlwaysCold", {"namespace": NS, "model": "thrash"})],
                    },
                    {
                        "eval_time": "10m",
                        "alertname": "FarmModelCopyFailed",
                        "exp_alerts": [expected("FarmModelCopyFailed", {"namespace": NS, "model": "broken"})],
                    },
                    {"eval_time": "30m", "alertname": "FarmPoolCopyStalled", "exp_alerts": []},
                    {
                        "eval_time": "30m",
                        "alertname": "GatewayPoolErrors",
                        "exp_alerts": [expected_pool_errors("large")],
                    },
                    {
                        "eval_time": "99m",
                        "alertname": "FarmPoolCopyStalled",
                        "exp_alerts": [expected("FarmPoolCopyStalled", pool)],
                    },
                ],
            }
        ],
    }
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump(tests, sort_keys=False))
    proc = subprocess.run(
        [promtool(), "test", "rules", "tests.yaml"], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _latency_series(model: str, fast_s: float, slow_s: float, slow_share: float, per_min: float) -> list[dict]:
    """gateway_request_seconds of one model as the gateway exports it (its own bucket bounds): `per_min` requests a
    minute, `slow_share` of them taking `slow_s` to the response head and the others `fast_s`."""
    out = []
    for le in (*GATEWAY_LATENCY_BUCKETS, float("inf")):
        below = (fast_s <= le) * (1 - slow_share) + (slow_s <= le) * slow_share
        le_text = "+Inf" if le == float("inf") else repr(le)
        out.append(
            {
                "series": f'gateway_request_seconds_bucket{{{G},pod="gw-0",model="{model}",le="{le_text}"}}',
                "values": f"0+{per_min * below / 2:g}x60",
            }
        )
    return out


def test_the_p95_slo_alert_sees_every_request_slower_than_the_default_slo(tmp_path: Path) -> None:
    """histogram_quantile interpolates inside a bucket: with the default SLO (config.schema.FIRST_TOKEN_SLO_MS) a
    bucket bound, "p95 above the SLO" is exactly "more than 5% of the requests slower than it". `slow`: 8% of its
    requests take 2.2 s (the SLO is 2 s), it fires; `fine`: 3% do, it stays quiet."""
    slo = FIRST_TOKEN_SLO_MS / 1000
    rules = rule_groups_yaml(NS, [], pools=POOLS, router_app=GW, router_mode="gateway", p95_latency_slo_seconds=slo)
    (tmp_path / "rules.yaml").write_text(rules)
    rule = next(
        r
        for g in yaml.safe_load(rules)["groups"]
        for r in g["rules"]
        if r.get("alert") == "InferenceLatencyP95AboveSlo"
    )
    series = [*_latency_series("slow", 0.2, 2.2, 0.08, 60), *_latency_series("fine", 0.2, 2.2, 0.03, 60)]
    ann = {k: v.replace("{{ $labels.model }}", "slow") for k, v in rule["annotations"].items()}
    tests = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "30s",
        "tests": [
            {
                "interval": "30s",
                "input_series": series,
                "alert_rule_test": [
                    {
                        "eval_time": "25m",
                        "alertname": "InferenceLatencyP95AboveSlo",
                        "exp_alerts": [
                            {
                                "exp_labels": {"namespace": NS, "model": "slow", **rule["labels"]},
                                "exp_annotations": ann,
                            }
                        ],
                    }
                ],
            }
        ],
    }
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump(tests, sort_keys=False))
    proc = subprocess.run(
        [promtool(), "test", "rules", "tests.yaml"], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
