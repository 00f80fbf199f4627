"""Per-model operations of a model farm: recording and alert rules, dashboard panels, and the metric names the
`cpu-inference farm report` reads. Plain Python (no jsii).

Two sources, both per model and bounded (a pooled model's series appear with its first request / first load):
- the gateway (containers/router/slm_router/metrics.py): `gateway_requests_total{model,code}`,
  `gateway_request_seconds{model}` (time to the response head; `_sum` is the model's busy time);
- each pool replica's supervisor (names in containers/inference_runtime/pool_status.py):
  `pool_model_cold_loads_total{model}`, `pool_model_cold_load_seconds_total{model}`,
  `pool_model_load_failures_total{model}`, `pool_model_copy_failed{model}`, `pool_models{state}`.
The scrape job adds the pod's labels (k8s/specs/scrape.py): `namespace`, `pod`, `app`, and the pool pods'
`cpu-inference/pool` label as `cpu_inference_pool`. Every recording rule aggregates `by (namespace, model)` (or
`by (namespace, cpu_inference_pool)`), so it stays one series per model whatever the number of gateway pods and pool
replicas: 1,000 models = 1,000 series per recorded name.

Alerts (thresholds below, each with its reason):
- FarmModelFailing: non-503 5xx above MODEL_ERROR_RATIO of its answers at MODEL_ERROR_MIN_RPS or more, for 10 m;
- FarmModelAlwaysCold: cold loads / requests above ALWAYS_COLD_SHARE over 1 h with enough traffic, for 15 m;
- FarmModelCopyFailed: a pool replica reports `pool_model_copy_failed{model}` (the model answers 500);
- FarmPoolCopyStalled: a pool has models `copying` and none landed for COPY_STALL_MINUTES.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from inference_runtime.pool_status import (
    COLD_LOAD_SECONDS,
    COLD_LOADS,
    COPY_FAILED_MODEL,
    COPYING,
    LANDED,
    LOAD_FAILURES,
    MODELS_BY_STATE,
)

# The gateway's series (containers/router/slm_router/metrics.py GatewayMetrics; prometheus_client adds `_total` to a
# Counter and `_sum`/`_count`/`_bucket` to a Histogram in the text exposition).
REQUESTS = "gateway_requests_total"
REQUEST_SECONDS = "gateway_request_seconds"
IN_FLIGHT = "gateway_in_flight"
BACKEND_UNAVAILABLE = "gateway_backend_unavailable_total"
POOL_REPLICA_UP = "gateway_pool_replica_up"

# The pool pods' `cpu-inference/pool` label (k8s/charts/model_pool_chart.py pod_labels) as a series label: Kubernetes
# service discovery exposes each pod label as `__meta_kubernetes_pod_label_<labelname>` "with any unsupported
# characters converted to an underscore" (https://prometheus.io/docs/prometheus/latest/configuration/configuration/
# #kubernetes_sd_config), and the scrape job's labelmap copies it (k8s/specs/scrape.py).
POOL_LABEL = "cpu_inference_pool"

# Thresholds. 5% non-503 5xx: the pools' own error alert uses the same ratio (alerts.POOL_ERROR_ALERT_RATIO); 503 is
# left out because it is the retryable answer of a cold, scaled-to-zero or still-copying model, each watched apart.
MODEL_ERROR_RATIO = 0.05
SERVER_ERRORS = 'code=~"5..",code!="503"'
# Below 3 requests a minute one failure is a 33%+ ratio: page on a pattern, not on a single unlucky request.
MODEL_ERROR_MIN_RPS = 0.05
MODEL_ERROR_FOR = "10m"
# A model whose every other request loads it is being evicted between requests (models_max too small for the pool's
# working set, LRU thrash): a cold load costs ~0.7 s against ~0.1 s warm through the gateway (issue 25).
ALWAYS_COLD_SHARE = 0.5
# ≥ 12 requests an hour (one every 5 minutes): a rarer model is expected to be cold, that is what a pool is for.
ALWAYS_COLD_MIN_REQUESTS_PER_HOUR = 12
ALWAYS_COLD_WINDOW = "1h"
ALWAYS_COLD_FOR = "15m"
# The catalog copies a small model in tens of seconds to minutes (pool_status.COPYING_RETRY_AFTER_SECONDS); an hour
# with models waiting and none landing means the fan-out stopped (failed workers, throttling, permissions).
COPY_STALL_MINUTES = 60

RECORD_REQUESTS = "cpu_inference:model_requests:rate5m"
RECORD_REQUESTS_1H = "cpu_inference:model_requests:increase1h"
RECORD_ERRORS = "cpu_inference:model_errors:ratio5m"
RECORD_COLD_LOADS = "cpu_inference:model_cold_loads:rate5m"
RECORD_COLD_SHARE = "cpu_inference:model_cold_share:ratio1h"
RECORD_COLD_SECONDS = "cpu_inference:model_cold_load_seconds:mean1h"
RECORD_BUSY = "cpu_inference:model_busy_seconds:rate5m"

BY_MODEL = "namespace, model"
BY_POOL = f"namespace, {POOL_LABEL}"


def gateway_selector(namespace: str, router_app: str) -> str:
    return f'namespace="{namespace}",app="{router_app}"'


def pool_selector(namespace: str, pools: Sequence[str]) -> str:
    return f'namespace="{namespace}",{POOL_LABEL}=~"{"|".join(sorted(pools))}"'


def farm_records(namespace: str, router_app: str, pools: Sequence[str]) -> list[dict[str, Any]]:
    """One series per model (and per pool): pod, replica and gateway-pod labels are summed away."""
    g, p = gateway_selector(namespace, router_app), pool_selector(namespace, pools)

    def per_model(expr: str) -> str:
        return f"sum by ({BY_MODEL}) ({expr})"

    return [
        {"record": RECORD_REQUESTS, "expr": per_model(f"rate({REQUESTS}{{{g}}}[5m])")},
        {"record": RECORD_REQUESTS_1H, "expr": per_model(f"increase({REQUESTS}{{{g}}}[1h])")},
        {
            "record": RECORD_ERRORS,
            "expr": f"{per_model(f'rate({REQUESTS}{{{g},{SERVER_ERRORS}}}[5m])')} / "
            f"{per_model(f'rate({REQUESTS}{{{g}}}[5m])')}",
        },
        # Seconds to the response head summed over requests: the share of a pool's busy time a model takes.
        {"record": RECORD_BUSY, "expr": per_model(f"rate({REQUEST_SECONDS}_sum{{{g}}}[5m])")},
        {"record": RECORD_COLD_LOADS, "expr": per_model(f"rate({COLD_LOADS}{{{p}}}[5m])")},
        {
            "record": RECORD_COLD_SHARE,
            "expr": f"{per_model(f'increase({COLD_LOADS}{{{p}}}[{ALWAYS_COLD_WINDOW}])')} / "
            f"{per_model(f'increase({REQUESTS}{{{g}}}[{ALWAYS_COLD_WINDOW}])')}",
        },
        {
            "record": RECORD_COLD_SECONDS,
            "expr": f"{per_model(f'increase({COLD_LOAD_SECONDS}{{{p}}}[1h])')} / "
            f"{per_model(f'increase({COLD_LOADS}{{{p}}}[1h])')}",
        },
    ]


def farm_alerts(namespace: str, router_app: str, pools: Sequence[str], alert: Any) -> list[dict[str, Any]]:
    """`alert`: alerts._alert (name, expr, for, severity, summary, description)."""
    p = pool_selector(namespace, pools)
    ns = f'{{namespace="{namespace}"}}'
    stall = f"{COPY_STALL_MINUTES}m"
    return [
        alert(
            "FarmModelFailing",
            f"{RECORD_ERRORS}{ns} > {MODEL_ERROR_RATIO} and on ({BY_MODEL}) {RECORD_REQUESTS}{ns} >= {MODEL_ERROR_MIN_RPS}",
            MODEL_ERROR_FOR,
            "warning",
            f"{{{{ $labels.model }}}}: more than {MODEL_ERROR_RATIO:.0%} of its answers are 5xx (503 aside) for "
            f"{MODEL_ERROR_FOR}",
            "500 with type model_copy_failed: the catalog copy failed (FarmModelCopyFailed). Other 5xx come from the "
            "pool replica: its supervisor's and llama-server's logs (a model that fails to load, out of memory).",
        ),
        alert(
            "FarmModelAlwaysCold",
            f"{RECORD_COLD_SHARE}{ns} > {ALWAYS_COLD_SHARE} and on ({BY_MODEL}) "
            f"{RECORD_REQUESTS_1H}{ns} >= {ALWAYS_COLD_MIN_REQUESTS_PER_HOUR}",
            ALWAYS_COLD_FOR,
            "warning",
            f"{{{{ $labels.model }}}}: more than {ALWAYS_COLD_SHARE:.0%} of its requests load it cold (over "
            f"{ALWAYS_COLD_WINDOW}, ≥ {ALWAYS_COLD_MIN_REQUESTS_PER_HOUR} requests)",
            "It is evicted between its requests: raise the pool's models_max (or memory), move it to a pool with "
            "fewer busy models, or make it dedicated (serving: dedicated).",
        ),
        alert(
            "FarmModelCopyFailed",
            f"max by ({BY_MODEL}) ({COPY_FAILED_MODEL}{{{p}}}) > 0",
            "5m",
            "warning",
            "{{ $labels.model }}: its catalog copy failed; the gateway answers 500 model_copy_failed",
            "Read the failure marker (farm/<model>/<id>/copy-failed.json: reason, attempt) and re-run the catalog "
            "copy after fixing the source (Hub access, file name, size).",
        ),
        alert(
            "FarmPoolCopyStalled",
            f'(max by ({BY_POOL}) ({MODELS_BY_STATE}{{{p},state="{COPYING}"}}) > 0) unless on ({BY_POOL}) '
            f'(max by ({BY_POOL}) (delta({MODELS_BY_STATE}{{{p},state="{LANDED}"}}[{stall}])) > 0)',
            stall,
            "warning",
            f"pool {{{{ $labels.{POOL_LABEL} }}}}: models still copying and none landed for {COPY_STALL_MINUTES} minutes",
            "The catalog's copy fan-out has stopped: look at its last run (failed or throttled workers, permissions); "
            "the models answer 503 'being copied' meanwhile.",
        ),
    ]


def farm_panels(namespace: str, router_app: str, pools: Sequence[str]) -> list[tuple[str, str, str, str, str]]:
    """(title, expr, unit, legend, panel type) for the dashboard: the operator's per-model view."""
    ns = f'{{namespace="{namespace}"}}'
    p = pool_selector(namespace, pools)
    g = gateway_selector(namespace, router_app)
    return [
        ("Top models by traffic", f"topk(15, {RECORD_REQUESTS}{ns})", "reqps", "{{model}}", "timeseries"),
        (
            "Top models by busy time (share of pool time)",
            f"topk(15, {RECORD_BUSY}{ns})",
            "s",
            "{{model}}",
            "timeseries",
        ),
        ("Cold loads per model", f"topk(15, {RECORD_COLD_LOADS}{ns})", "ops", "{{model}}", "timeseries"),
        ("Mean cold-load time per model", f"topk(15, {RECORD_COLD_SECONDS}{ns})", "s", "{{model}}", "timeseries"),
        ("Cold share per model (1 h)", f"topk(15, {RECORD_COLD_SHARE}{ns})", "percentunit", "{{model}}", "timeseries"),
        # Pooled models never requested have no series (the gateway adds them on first request): the farm report
        # lists those from the config; this table shows the models seen once and idle for 30 days.
        (
            "Idle models (no request in 30 d, among those seen)",
            f"sum by (model) (increase({REQUESTS}{{{g}}}[30d])) == 0",
            "short",
            "{{model}}",
            "table",
        ),
        (
            "Copy states per pool",
            f"max by ({POOL_LABEL}, state) ({MODELS_BY_STATE}{{{p}}})",
            "short",
            f"{{{{{POOL_LABEL}}}}} {{{{state}}}}",
            "timeseries",
        ),
        ("Models whose copy failed", f"max by (model) ({COPY_FAILED_MODEL}{{{p}}}) > 0", "short", "{{model}}", "table"),
        (
            "Load failures per model",
            f"topk(15, sum by (model) (rate({LOAD_FAILURES}{{{p}}}[5m])))",
            "ops",
            "{{model}}",
            "timeseries",
        ),
    ]
