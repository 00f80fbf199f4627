"""Prometheus metrics of the router (prometheus-client's text exposition at GET /metrics)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

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


class GatewayMetrics:
    """Mode gateway. `model` is always a configured name (unknown names are counted without it: bounded cardinality).
    Series of dedicated models and of pools exist from the start; those of a pooled model appear with its first
    request (a farm of 1,000 pooled models would otherwise expose ~20,000 idle series)."""

    def __init__(self, models: Sequence[str], pools: Mapping[str, int] | None = None):
        r = self.registry = CollectorRegistry(auto_describe=True)
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
            buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0),
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
            self.in_flight.labels(m).set(0)
            self.request_seconds.labels(m)
            self.stream_errors.labels(m)
            for code in ("200", "503"):
                self.requests.labels(m, code)
        for reason in REJECTIONS:
            self.rejected.labels(reason)

    def render(self) -> bytes:
        return generate_latest(self.registry)
