"""Prometheus metrics of the router (prometheus-client's text exposition at GET /metrics)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.metrics_core import Metric

from inference_runtime.pool_status import COPY_FAILED, COPYING

ROUTES = ("slm", "llm")
FALLBACKS = ("none", "llm-unavailable", "slm-unavailable")
UPSTREAMS = ("slm", "llm")
REJECTIONS = ("overload", "draining")
# gateway_pool_missing_model_total's `state`: what a replica's supervisor said of a listed model its router did not
# know (pool_status.COPYING, COPY_FAILED; STALE_PRESET: landed, unknown to it, or no answer).
STALE_PRESET = "stale_preset"
MISSING_STATES = (COPYING, COPY_FAILED, STALE_PRESET)
# gateway_pool_status_lookups_total's `result`: the side port answered (200 or 404), or gave no usable answer.
ANSWERED, NO_ANSWER = "answered", "no_answer"
STATUS_LOOKUPS = (ANSWERED, NO_ANSWER)
CONTENT_TYPE = CONTENT_TYPE_LATEST
# gateway_request_seconds' upper bounds (s; prometheus_client adds +Inf). Per model, so each bound is one series per
# model with traffic (1,000 models: 1,000 series). What reads them: the p95-vs-SLO alert and the dashboard's p95
# (monitoring/alerts.py, histogram_quantile, which interpolates linearly inside a bucket: at a bound, "p95 above
# the SLO" is exactly "more than 5% slower than it"). So the SLOs in use are bounds: 0.5 s (an SLM, config.yaml)
# and 2 s (config.schema.FIRST_TOKEN_SLO_MS, the default); 0.8 and 1.5 s fall in (0.5, 1] and (1, 2]. 0.1 s: a warm
# small model's head; 5 s: a cold load of a GB-sized one; 30 s: beyond, to gateway.cold_load_timeout_s (60 s) or
# timeouts.first_byte_s (120 s), is +Inf. The other metric families do not read buckets (farm report and farm rules:
# _sum, _total). Trimmed from 13 bounds (issue 25): tests/runtime/router/test_gateway_series.py.
GATEWAY_LATENCY_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 30.0)
CREATED = "_created"


class Metrics:
    def __init__(self, labels: Sequence[str]):
        r = self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "router_requests",
            "Chat requests answered, by route (slm: answered by the SLM, llm: escalated) and fallback",
            ["route", "fallback"],
            registry=r,
        )
        self.decisions = Counter(
            "router_decisions", "Classifications by label and the route they chose", ["label", "route"], registry=r
        )
        self.decision_seconds = Histogram(
            "router_decision_seconds",
            "SLM classification latency, retries included",
            buckets=(0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.0, 5.0),
            registry=r,
        )
        self.confidence = Histogram(
            "router_confidence",
            "Confidence of the chosen label",
            ["label"],
            buckets=(0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95, 0.98, 0.99, 1.0),
            registry=r,
        )
        self.fallbacks = Counter(
            "router_fallbacks",
            "Requests answered by the other model because one was unavailable",
            ["reason"],
            registry=r,
        )
        self.upstream_failures = Counter(
            "router_upstream_failures",
            "Failed calls to an upstream (connect, timeout, protocol, status)",
            ["upstream", "reason"],
            registry=r,
        )
        self.classify_retries = Counter(
            "router_classify_retries", "Classification attempts retried after a failure", registry=r
        )
        self.classify_errors = Counter(
            "router_classification_errors", "Classifications that gave no label", ["reason"], registry=r
        )
        self.circuit_open = Gauge(
            "router_circuit_open", "1 while the upstream's circuit breaker is open", ["upstream"], registry=r
        )
        self.request_seconds = Histogram(
            "router_request_seconds",
            "Time from request to response head, by route",
            ["route"],
            buckets=(0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0),
            registry=r,
        )
        self.failed = Counter(
            "router_failed_requests", "Requests the router answered with its own 5xx", ["reason"], registry=r
        )
        self.stream_errors = Counter("router_stream_errors", "Streams cut after they started", ["route"], registry=r)
        self.rejected = Counter(
            "router_rejected_requests",
            "Requests refused before any work: overload (429) or draining (503)",
            ["reason"],
            registry=r,
        )
        self.in_flight = Gauge("router_in_flight", "Chat requests in progress (429 beyond max_in_flight)", registry=r)
        # Every series exists from the start at 0, so rate() and alerts see the first increment.
        for route in ROUTES:
            self.request_seconds.labels(route)
            self.stream_errors.labels(route)
            for fb in FALLBACKS:
                self.requests.labels(route, fb)
            for label in labels:
                self.decisions.labels(label, route)
        for label in labels:
            self.confidence.labels(label)
        for reason in FALLBACKS[1:]:
            self.fallbacks.labels(reason)
        for up in UPSTREAMS:
            self.circuit_open.labels(up).set(0)
        for reason in REJECTIONS:
            self.rejected.labels(reason)

    def breaker_changed(self, upstream: str, state: str) -> None:
        self.circuit_open.labels(upstream).set(1 if state == "open" else 0)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _WithoutCreated:
    """The registry's metric families without their `_created` samples (prometheus-client's text exposition adds one
    per labelled counter and histogram: the time the child was created). Nothing here reads them (rules, dashboards
    and the farm report use _total, _sum, _count, _bucket), and a farm's gateway would export one per model and code.
    prometheus_client.disable_created_metrics() does the same but for every registry of the process (a module
    global read at collect time: prometheus_client/metrics.py `_use_created`), so it is filtered here instead."""

    def __init__(self, registry: CollectorRegistry):
        self.registry = registry

    def collect(self) -> Iterator[Metric]:
        for family in self.registry.collect():
            created = family.name + CREATED
            family.samples = [s for s in family.samples if s.name != created]
            yield family


class GatewayMetrics:
    """Mode gateway. `model` is always a configured name (unknown names are counted without it: bounded cardinality).
    Series of dedicated models and of pools exist from the start; those of a pooled model appear with its first
    request (a farm of 1,000 pooled models would otherwise expose thousands of idle series), and its gateway_in_flight
    only while it has requests in progress. A pooled model with traffic: 11 series (gateway_requests_total per code
    returned, gateway_request_seconds' 8 buckets, _sum and _count); no `_created` series (_WithoutCreated). A LoRA
    adapter's requests are counted under the adapter's name (a configured name: bounded by the config), like a pooled
    model's (series from its first request); gateway_backend_unavailable_total under its BASE's name (slm_router/
    gateway.py: the base's backend is what scales from zero)."""

    def __init__(self, models: Sequence[str], pools: Mapping[str, int] | None = None):
        r = self.registry = CollectorRegistry(auto_describe=True)
        self._exposed = _WithoutCreated(r)
        self._always = frozenset(models)  # in-flight from the start (dedicated models)
        self._in_progress: dict[str, list] = {}  # model -> [requests in progress, its in-flight child]
        self.requests = Counter(
            "gateway_requests", "Requests answered, by model and HTTP status", ["model", "code"], registry=r
        )
        self.unavailable = Counter(
            "gateway_backend_unavailable",
            "Requests answered 503 because the model's backend was unavailable "
            "(scaled to zero, starting, overloaded or down); its rate is the scale-from-zero signal",
            ["model"],
            registry=r,
        )
        self.in_flight = Gauge("gateway_in_flight", "Requests in progress, by model", ["model"], registry=r)
        self.request_seconds = Histogram(
            "gateway_request_seconds",
            "Time from request to response head, by model",
            ["model"],
            buckets=GATEWAY_LATENCY_BUCKETS,
            registry=r,
        )
        self.unknown_model = Counter(
            "gateway_unknown_model", "Requests for a model name that is not configured (404)", registry=r
        )
        self.stream_errors = Counter("gateway_stream_errors", "Streams cut after they started", ["model"], registry=r)
        self.rejected = Counter(
            "gateway_rejected_requests",
            "Requests refused before any work: overload (429) or draining (503)",
            ["reason"],
            registry=r,
        )
        self.pool_in_flight = Gauge(
            "gateway_pool_in_flight",
            "Requests in progress for the models of a multi-model pool (the pool's scaling signal)",
            ["pool"],
            registry=r,
        )
        self.pool_requests = Counter(
            "gateway_pool_requests",
            "Requests a pool replica answered (replica: StatefulSet ordinal), by HTTP status returned",
            ["pool", "replica", "code"],
            registry=r,
        )
        self.pool_replica_up = Gauge(
            "gateway_pool_replica_up",
            "1 while the gateway counts the pool replica live (GET /health, connections)",
            ["pool", "replica"],
            registry=r,
        )
        self.pool_missing_model = Counter(
            "gateway_pool_missing_model",
            "Requests for a listed pooled model that the replica's router did not know, by what the replica's "
            "supervisor said: copying (503), copy_failed (500), stale_preset (landed or no answer: 503)",
            ["pool", "state"],
            registry=r,
        )
        self.pool_lost_child = Counter(
            "gateway_pool_lost_child",
            "Pooled requests sent again because the replica's router lost the model's process under them before it "
            "answered (500 `proxy error:`; slm_router/gateway.py lost_child)",
            ["pool"],
            registry=r,
        )
        self.pool_status_lookups = Counter(
            "gateway_pool_status_lookups",
            "Questions to pool replicas' status side ports (cached a few seconds per replica and model), by result",
            ["pool", "result"],
            registry=r,
        )
        for pool, replicas in (pools or {}).items():
            self.pool_in_flight.labels(pool).set(0)
            for state in MISSING_STATES:
                self.pool_missing_model.labels(pool, state)
            for result in STATUS_LOOKUPS:
                self.pool_status_lookups.labels(pool, result)
            self.pool_requests.labels(pool, "none", "503")  # no live replica (scaled to zero): the wake-up signal
            for i in range(replicas):
                self.pool_replica_up.labels(pool, str(i)).set(1)
                self.pool_requests.labels(pool, str(i), "200")
        for m in models:
            self.unavailable.labels(m)
            self._in_progress[m] = [0, self.in_flight.labels(m)]
            self._in_progress[m][1].set(0)
            self.request_seconds.labels(m)
            self.stream_errors.labels(m)
            for code in ("200", "503"):
                self.requests.labels(m, code)
        for reason in REJECTIONS:
            self.rejected.labels(reason)

    def started(self, model: str) -> None:
        entry = self._in_progress.get(model)
        if entry is None:  # the child looked up once per appearance: labels() takes a lock and builds its key
            entry = self._in_progress[model] = [0, self.in_flight.labels(model)]
        entry[0] += 1
        entry[1].inc()

    def finished(self, model: str) -> None:
        """A pooled model's gauge goes away at 0 (its series comes back with its next request)."""
        entry = self._in_progress[model]
        entry[0] -= 1
        if entry[0] or model in self._always:
            entry[1].dec()
        else:
            del self._in_progress[model]
            self.in_flight.remove(model)

    def render(self) -> bytes:
        return generate_latest(self._exposed)
