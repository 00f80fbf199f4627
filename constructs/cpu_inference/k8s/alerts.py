"""Alerts and a dashboard for the field-notes metric table, as Prometheus rule files (Amazon Managed
Prometheus rule groups namespaces take the same YAML) and Grafana dashboard JSON. Plain Python.

| signal (field notes)          | source                                                      | rule                              |
|-------------------------------|-------------------------------------------------------------|-----------------------------------|
| in-flight requests            | `llamacpp:requests_processing`                              | slots ≥ 85% busy for 10 m (warning) |
| queued requests               | `llamacpp:requests_deferred`                                | any queue for 5 m (warning)       |
| token throughput              | `rate(llamacpp:tokens_predicted_total)` / `rate(llamacpp:tokens_predicted_seconds_total)`: decode tok/s per sequence, load-independent | < 50% of baseline under load for 10 m |
| end-to-end latency p95 vs SLO | the router's `router_request_seconds` / the gateway's `gateway_request_seconds{model}` histogram (llama-server has none); time to the response head | p95 > SLO for 10 m (critical) |
| KV-cache utilization          | llama.cpp exposes no ratio: KV is allocated per slot, so busy slots / slots is the proxy (recorded) | with the in-flight rule |
| container memory vs limit     | cAdvisor `container_memory_working_set_bytes` (kubelet) / the limit sizing rendered | > 85% for 5 m (warning) |
| scaling input missing         | `absent(llamacpp:requests_processing)` for a model with min ≥ 1 replicas | 10 m (warning): KEDA is blind |

The throughput baseline is `baseline_tokens_per_second` when given (measure it with `cpu-inference bench`),
else the model's own median over the previous day (recorded), so it calibrates itself after a day.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import yaml

RUNNING = "llamacpp:requests_processing"
WAITING = "llamacpp:requests_deferred"
TOKENS = "llamacpp:tokens_predicted_total"
DECODE_SECONDS = "llamacpp:tokens_predicted_seconds_total"
PROMPT_TOKENS = "llamacpp:prompt_tokens_total"
LATENCY = {"router": "router_request_seconds", "gateway": "gateway_request_seconds"}
MEMORY = "container_memory_working_set_bytes"
ENGINE_CONTAINER = "llama-server"

SLOT_ALERT_RATIO = 0.85
MEMORY_ALERT_RATIO = 0.85
THROUGHPUT_ALERT_RATIO = 0.5


@dataclass(frozen=True)
class ModelAlertSpec:
    """name: the model's `app` label; slots / memory_limit_bytes: from its sizing; replicas_min: 0 mutes the
    missing-metrics alert (a cold model has no pod); baseline_tokens_per_second: decode tok/s per sequence
    measured under load, or None to use the recorded median of the previous day."""

    name: str
    slots: int
    memory_limit_bytes: int
    replicas_min: int = 1
    baseline_tokens_per_second: float | None = None


def _sel(namespace: str, app: str | None = None) -> str:
    return f'namespace="{namespace}"' + (f',app="{app}"' if app else "")


def rule_groups(
    namespace: str,
    models: Sequence[ModelAlertSpec],
    *,
    p95_latency_slo_seconds: float | None = None,
    router_app: str | None = None,
    router_mode: str = "router",
) -> dict[str, Any]:
    """A Prometheus rule file: one recording group and one alerting group for the models of `namespace`.
    The latency SLO is checked on the router's histogram (`router_mode` router: overall; gateway: per model)."""
    if not models:
        raise ValueError("rule_groups: no models to alert on")
    ns = _sel(namespace)
    by = "namespace, app"
    record: list[dict[str, Any]] = [
        {"record": "cpu_inference:requests_processing:sum", "expr": f"sum by ({by}) ({RUNNING}{{{ns}}})"},
        {"record": "cpu_inference:requests_deferred:sum", "expr": f"sum by ({by}) ({WAITING}{{{ns}}})"},
        {"record": "cpu_inference:tokens_per_second:rate5m", "expr": f"sum by ({by}) (rate({TOKENS}{{{ns}}}[5m]))"},
        {"record": "cpu_inference:prompt_tokens_per_second:rate5m", "expr": f"sum by ({by}) (rate({PROMPT_TOKENS}{{{ns}}}[5m]))"},
        # tokens / decode-seconds: per-sequence decode speed; `> 0` drops idle windows (0/0).
        {"record": "cpu_inference:decode_tokens_per_second:ratio5m",
         "expr": f"(sum by ({by}) (rate({TOKENS}{{{ns}}}[5m])) / sum by ({by}) (rate({DECODE_SECONDS}{{{ns}}}[5m]))) > 0"},
        {"record": "cpu_inference:decode_tokens_per_second:median1d",
         "expr": "quantile_over_time(0.5, cpu_inference:decode_tokens_per_second:ratio5m[1d] offset 1h)"},
    ]
    alerts: list[dict[str, Any]] = [
        _alert("LlamaRequestsQueued", f"cpu_inference:requests_deferred:sum{{{ns}}} > 0", "5m", "warning",
               "{{ $labels.app }}: requests queued for 5 minutes",
               "A sustained queue means latency is about to degrade: KEDA is at max replicas or new nodes are not arriving."),
    ]
    for m in models:
        sel = _sel(namespace, m.name)
        record.append({
            "record": "cpu_inference:slot_utilization:ratio",
            "expr": f"sum by ({by}) ({RUNNING}{{{sel}}}) / ({m.slots} * count by ({by}) ({RUNNING}{{{sel}}}))",
        })
        alerts.append(_alert(
            "LlamaSlotsSaturated", f'cpu_inference:slot_utilization:ratio{{{sel}}} >= {SLOT_ALERT_RATIO}', "10m", "warning",
            f"{m.name}: ≥ {SLOT_ALERT_RATIO:.0%} of the {m.slots} slots per replica busy for 10 minutes",
            "Each slot holds its KV cache: the pods are near their concurrency (and KV) capacity.",
        ))
        baseline = (f"{m.baseline_tokens_per_second:g}" if m.baseline_tokens_per_second
                    else f"cpu_inference:decode_tokens_per_second:median1d{{{sel}}}")
        alerts.append(_alert(
            "LlamaTokenThroughputLow",
            f"(cpu_inference:decode_tokens_per_second:ratio5m{{{sel}}} < {THROUGHPUT_ALERT_RATIO} * {baseline})"
            f" and on({by}) (cpu_inference:requests_processing:sum{{{sel}}} > 0)",
            "10m", "warning",
            f"{m.name}: decode speed under {THROUGHPUT_ALERT_RATIO:.0%} of its baseline while serving",
            "CPU contention (noisy neighbours, throttling, wrong thread count) or a slower instance family.",
        ))
        limit = m.memory_limit_bytes
        alerts.append(_alert(
            "LlamaMemoryNearLimit",
            f'max by (namespace, pod) ({MEMORY}{{namespace="{namespace}",container="{ENGINE_CONTAINER}",pod=~"{m.name}-[a-z0-9]+-[a-z0-9]+"}})'
            f" > {MEMORY_ALERT_RATIO} * {limit}",
            "5m", "warning",
            f"{m.name}: memory above {MEMORY_ALERT_RATIO:.0%} of its {limit // (1024 * 1024)} MiB limit",
            "The pod will be OOM-killed at the limit: raise the sizing (context, slots) or the node type.",
        ))
        if m.replicas_min > 0:
            alerts.append(_alert(
                "LlamaMetricsMissing", f"absent({RUNNING}{{{sel}}})", "10m", "warning",
                f"{m.name}: no llama-server metrics for 10 minutes",
                "KEDA scales on these series; without them replicas stay where they are. Check the pods and the scraper.",
            ))
    if p95_latency_slo_seconds is not None:
        if router_app is None:
            raise ValueError("rule_groups: a latency SLO needs router_app (the latency histogram is the router's)")
        if router_mode not in LATENCY:
            raise ValueError(f"rule_groups: router_mode must be one of {sorted(LATENCY)}")
        rsel = _sel(namespace, router_app)
        per = "le, model" if router_mode == "gateway" else "le"
        p95 = f"histogram_quantile(0.95, sum by ({per}) (rate({LATENCY[router_mode]}_bucket{{{rsel}}}[5m])))"
        record.append({"record": "cpu_inference:router_latency_seconds:p95", "expr": p95})
        alerts.append(_alert(
            "InferenceLatencyP95AboveSlo", f"cpu_inference:router_latency_seconds:p95 > {p95_latency_slo_seconds:g}", "10m", "critical",
            f"p95 latency{' of {{ $labels.model }}' if router_mode == 'gateway' else ''} above the {p95_latency_slo_seconds * 1000:.0f} ms SLO for 10 minutes",
            "Check queued requests and slot saturation first; then the escalation upstream.",
        ))
    return {"groups": [
        {"name": f"cpu-inference-{namespace}-recording", "interval": "30s", "rules": record},
        {"name": f"cpu-inference-{namespace}-alerts", "interval": "30s", "rules": alerts},
    ]}


def _alert(name: str, expr: str, for_: str, severity: str, summary: str, description: str) -> dict[str, Any]:
    return {"alert": name, "expr": expr, "for": for_, "labels": {"severity": severity},
            "annotations": {"summary": summary, "description": description}}


def rule_groups_yaml(*args: Any, **kwargs: Any) -> str:
    return yaml.safe_dump(rule_groups(*args, **kwargs), sort_keys=False)


def dashboard(namespace: str, models: Sequence[ModelAlertSpec], *, router_app: str | None = None, router_mode: str = "router",
              title: str | None = None) -> dict[str, Any]:
    """A Grafana dashboard (JSON model) over the same series: one row of panels for all models."""
    ns = _sel(namespace)
    panels: list[tuple[str, str, str]] = [
        ("Requests processing", f"sum by (app) ({RUNNING}{{{ns}}})", "short"),
        ("Requests queued", f"sum by (app) ({WAITING}{{{ns}}})", "short"),
        ("Generated tokens/s", f"sum by (app) (rate({TOKENS}{{{ns}}}[5m]))", "short"),
        ("Decode tok/s per sequence", f"sum by (app) (rate({TOKENS}{{{ns}}}[5m])) / sum by (app) (rate({DECODE_SECONDS}{{{ns}}}[5m]))", "short"),
        ("Prompt tokens/s", f"sum by (app) (rate({PROMPT_TOKENS}{{{ns}}}[5m]))", "short"),
        ("Replicas scraped", f"count by (app) ({RUNNING}{{{ns}}})", "short"),
        ("Memory working set (engine)", f'max by (pod) ({MEMORY}{{namespace="{namespace}",container="{ENGINE_CONTAINER}"}})', "bytes"),
    ]
    if router_app and router_mode == "gateway":
        rsel = _sel(namespace, router_app)
        panels += [
            ("Gateway p95 latency", f"histogram_quantile(0.95, sum by (le, model) (rate({LATENCY['gateway']}_bucket{{{rsel}}}[5m])))", "s"),
            ("Refused: backend unavailable (cold/starting)", f"sum by (model) (rate(gateway_backend_unavailable_total{{{rsel}}}[5m]))", "reqps"),
        ]
    elif router_app:
        rsel = _sel(namespace, router_app)
        panels += [
            ("Router p95 latency", f"histogram_quantile(0.95, sum by (le, route) (rate({LATENCY['router']}_bucket{{{rsel}}}[5m])))", "s"),
            ("Escalation ratio", f'sum(rate(router_requests_total{{{rsel},route="llm"}}[5m])) / sum(rate(router_requests_total{{{rsel}}}[5m]))', "percentunit"),
        ]
    return {
        "title": title or f"CPU inference — {namespace}",
        "uid": f"cpu-inference-{namespace}"[:40],
        "schemaVersion": 39,
        "tags": ["cpu-inference", "llama.cpp"],
        "time": {"from": "now-6h", "to": "now"},
        "templating": {"list": [{"name": "datasource", "type": "datasource", "query": "prometheus"}]},
        "annotations": {"list": []},
        "panels": [
            {
                "id": i + 1,
                "type": "timeseries",
                "title": t,
                "datasource": {"type": "prometheus", "uid": "${datasource}"},
                "gridPos": {"h": 8, "w": 12, "x": (i % 2) * 12, "y": (i // 2) * 8},
                "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
                "targets": [{"refId": "A", "expr": expr, "legendFormat": "{{app}}{{pod}}{{route}}{{model}}"}],
            }
            for i, (t, expr, unit) in enumerate(panels)
        ],
        "description": f"Models: {', '.join(m.name for m in models)}",
    }


# Amazon Managed Prometheus alert manager (AMP user guide, "Creating an alert manager configuration" and
# "Configure alert manager to send messages to your Amazon SNS topic"): a YAML document whose
# `alertmanager_config` is the Alertmanager configuration as a string; SNS is the only receiver AMP
# supports, its `sigv4` block must name the region, and `api_url` / `http_config` are not allowed.
ALERT_RECEIVER = "sns"
ALERT_SUBJECT = "[{{ .Status | toUpper }}] {{ .CommonLabels.alertname }} {{ .CommonLabels.namespace }}"


def alertmanager_config(topic_arn: str, region: str) -> dict[str, Any]:
    """Every alert goes to the SNS topic, grouped per alert and namespace; critical ones repeat hourly."""
    return {
        "route": {
            "receiver": ALERT_RECEIVER,
            "group_by": ["alertname", "namespace"],
            "group_wait": "30s",
            "group_interval": "5m",
            "repeat_interval": "4h",
            "routes": [{"receiver": ALERT_RECEIVER, "match": {"severity": "critical"}, "repeat_interval": "1h"}],
        },
        "receivers": [{
            "name": ALERT_RECEIVER,
            "sns_configs": [{
                "topic_arn": topic_arn,
                "sigv4": {"region": region},
                "subject": ALERT_SUBJECT,
                "attributes": {"source": "cpu-inference"},
            }],
        }],
    }


def alertmanager_definition(topic_arn: str, region: str) -> str:
    """The AMP workspace's AlertManagerDefinition text (topic_arn/region may be CDK tokens: kept on one line)."""
    inner = yaml.safe_dump(alertmanager_config(topic_arn, region), sort_keys=False, width=float("inf"))
    return "alertmanager_config: |\n" + "".join(f"  {line}\n" for line in inner.splitlines())
