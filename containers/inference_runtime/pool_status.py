"""The contract between a farm pool replica's supervisor and the gateway (stdlib only; every image ships it).

A pooled model's copy lands in S3 (the catalog's fan-out copies models one by one, off the deploy's critical path),
so a pool replica can be asked for a model whose weights are not there yet, or whose copy failed. The supervisor
(containers/llama-server/pool_supervisor.py) serves only the landed models to its router and answers, on a small
side port, what it knows about every model of its preset; the gateway (containers/router/slm_router/gateway.py)
asks it when the router does not know a model, to answer the client clearly:

    copying      503 + Retry-After: "model X is being copied (n of N landed)"
    copy_failed  500 naming the copy's failure (a client retry cannot fix it; the operator re-runs the copy)
    landed       the model is in the router's list (a 400 "not found" then means the preset is still stale)

The same port serves the supervisor's Prometheus metrics (cold loads per model; bounded: a few series per model
that ever loaded, whatever the number of requests).
"""

from __future__ import annotations

DEFAULT_STATUS_PORT = 8081  # LLAMA_POOL_STATUS_PORT: the supervisor's side port (0 = off)
# The supervisor's variables (the pool chart and `cpu-inference local` set them; containers/llama-server/README.md).
STATUS_PORT_ENV = "LLAMA_POOL_STATUS_PORT"
COPY_FAILED_FILE_ENV = "LLAMA_POOL_COPY_FAILED_FILE"  # the failure marker's file name (catalog.COPY_FAILED_NAME)
STATE_DIR_ENV = "LLAMA_POOL_STATE_DIR"  # writable: the router's effective preset (default: under the temp dir)
STATUS_PATH = "/status"  # GET /status (every model) or /status?model=<name> (one model)
METRICS_PATH = "/metrics"

# States of one model in a replica's preset.
COPYING = "copying"
COPY_FAILED = "copy_failed"
LANDED = "landed"
STATES = (COPYING, COPY_FAILED, LANDED)

# Keys of the JSON answers: {"total": N, "landed": n, "models": {name: {"state": ..., "reason": ...}}} for every
# model, and {"model": name, "state": ..., "reason": ..., "landed": n, "total": N, "adapters": [...],
# "adapters_pending": {...}} for one.
TOTAL = "total"
LANDED_COUNT = "landed"
MODELS = "models"
MODEL = "model"
STATE = "state"
REASON = "reason"
# A base model's LoRA adapters (inference_runtime/lora.py) in /status?model=<base>: ADAPTERS, the adapters its router
# serves now, in id order (each path as its preset section names it: what the child's GET /lora-adapters echoes), and
# ADAPTERS_PENDING, {path: {"state": copying | copy_failed, "reason": ...}} for those of its configured section not
# served yet. A base's section lists only its landed adapters, so the ids shift while one is copying: the gateway
# looks each adapter's path up in ADAPTERS (its id = its position there) and answers 503 "being copied" for a pending
# one, never a request with another adapter's id.
ADAPTERS = "adapters"
ADAPTERS_PENDING = "adapters_pending"

# How long a client should wait before asking again for a model that is being copied: a copy of a small model
# takes tens of seconds to minutes, and the supervisor notices a landed file within its poll.
COPYING_RETRY_AFTER_SECONDS = 30

# The supervisor's metric names (Prometheus text exposition; the alert rules and the farm report read these).
COLD_LOADS = "pool_model_cold_loads_total"  # counter {model}: loads completed on this replica
COLD_LOAD_SECONDS = "pool_model_cold_load_seconds_total"  # counter {model}: seconds spent in those loads
LOAD_FAILURES = "pool_model_load_failures_total"  # counter {model}: loads that ended failed
COLD_LOAD_HISTOGRAM = "pool_cold_load_seconds"  # histogram, no model label: the replica's load-time distribution
UNLOADS = "pool_model_unloads_total"  # counter, no label: models unloaded (evicted or reloaded)
MODELS_BY_STATE = "pool_models"  # gauge {state}: copying / copy_failed / landed / loaded
LOADED = "loaded"  # MODELS_BY_STATE's extra label value: models running on this replica now (a subset of landed)
# COLD_LOAD_HISTOGRAM's buckets (le, seconds): a ~100 MB stand-in loads in ~0.5 s, a few-GB model in seconds.
COLD_LOAD_BUCKETS = (0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0)
COPY_FAILED_MODEL = "pool_model_copy_failed"  # gauge {model} = 1, only for a model whose copy failed
