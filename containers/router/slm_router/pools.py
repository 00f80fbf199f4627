"""One multi-model pool as the gateway sees it: a keep-alive client per replica, the affinity state and the
liveness of every replica (a background probe of GET /health every `health_interval_s`).

A replica is dead when its connection is refused or its name does not resolve (a StatefulSet scaled below the
replica's ordinal: the headless Service publishes no record for it), at once, whether a probe or a forwarded
request found it. A probe that times out or answers non-200 marks it dead only the second time in a row: a
replica busy loading a model may be slow to answer, and moving its models away costs every one of them a load.

A replica's router that does not know a model the gateway lists (its "model '<name>' not found") is asked about on
the replica's status side port (inference_runtime/pool_status.py): `model_status` answers what its supervisor
says (copying, copy failed, landed), cached STATUS_CACHE_S per (replica, model) and asked once however many
requests wait for the same answer, so a thousand clients retrying a model that is being copied cost its replica
one small GET every few seconds.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlsplit

from inference_runtime import pool_status as ps
from inference_runtime.http1 import HttpError

from .affinity import PoolAffinity
from .client import HttpClient, UpstreamError
from .config import Config, GatewayPool
from .metrics import ANSWERED, NO_ANSWER, GatewayMetrics

log = logging.getLogger("router.gateway.pool")

NO_REPLICA = "none"  # gateway_pool_requests_total's replica label when no replica of the pool was live
SLOW_PROBES_TO_DEAD = 2
PROBE_TIMEOUT_S = 2.0
# The side port answers from the supervisor's memory (no S3 call on the request's path): a slow answer means it is
# not there, and the client is answered without it (the stale-preset 503) rather than kept waiting.
STATUS_TIMEOUT_S = 1.0
STATUS_CACHE_S = 5.0  # how long one answer of a replica's side port about one model is reused


@dataclass(frozen=True)
class ModelStatus:
    """What a replica's supervisor says of one model of its preset (pool_status: GET /status?model=X)."""

    state: str  # pool_status.COPYING | COPY_FAILED | LANDED
    reason: str  # the copy's failure, for COPY_FAILED
    landed: int  # models of the replica's preset whose copy landed
    total: int  # models of the replica's preset
    # A base's LoRA adapters (pool_status.ADAPTERS / ADAPTERS_PENDING): the paths its router serves, in id order, and
    # path -> (state, reason) of those configured but not served yet.
    adapters: tuple[str, ...] = ()
    adapters_pending: Mapping[str, tuple[str, str]] = field(default_factory=dict)


def status_url(replica_url: str, port: int) -> str:
    """The root of a replica's status side port: same host (the supervisor listens beside its router), plain HTTP."""
    host = urlsplit(replica_url).hostname or ""
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def parse_status(doc: Any) -> ModelStatus | None:
    """A /status?model=X answer, or None when it is not one (a state outside the contract included)."""
    if not isinstance(doc, dict) or doc.get(ps.STATE) not in ps.STATES:
        return None
    landed, total = doc.get(ps.LANDED_COUNT), doc.get(ps.TOTAL)
    reason = doc.get(ps.REASON)
    served, pending = doc.get(ps.ADAPTERS, []), doc.get(ps.ADAPTERS_PENDING, {})
    if not isinstance(served, list) or not all(isinstance(p, str) for p in served) or not isinstance(pending, dict):
        return None
    return ModelStatus(
        state=doc[ps.STATE],
        reason=reason if isinstance(reason, str) else "",
        landed=landed if isinstance(landed, int) else 0,
        total=total if isinstance(total, int) else 0,
        adapters=tuple(served),
        adapters_pending={
            str(path): (str(v.get(ps.STATE, "")), str(v.get(ps.REASON) or ""))
            for path, v in pending.items()
            if isinstance(v, dict)
        },
    )


class Pool:
    def __init__(self, spec: GatewayPool, cfg: Config, metrics: GatewayMetrics):
        self.spec = spec
        self.name = spec.name
        self.metrics = metrics
        self.interval = cfg.gateway.health_interval_s
        self.head_timeout = cfg.gateway.cold_load_timeout_s
        self.affinity = PoolAffinity(spec.replicas, spec.replication, spec.hot_in_flight)
        self.clients = [HttpClient(u, connect_timeout=cfg.timeouts.connect_s) for u in spec.replicas]
        probe_timeout = min(PROBE_TIMEOUT_S, self.interval)
        self._probes = [HttpClient(u, connect_timeout=probe_timeout, max_idle=1) for u in spec.replicas]
        self._probe_timeout = probe_timeout
        self._slow = [0] * len(spec.replicas)
        self._counted: dict[str, dict[str, Any]] = {}  # replica label -> status -> gateway_pool_requests_total child
        self._task: asyncio.Task | None = None
        self._status = (
            [
                HttpClient(status_url(u, spec.status_port), connect_timeout=STATUS_TIMEOUT_S, max_idle=2)
                for u in spec.replicas
            ]
            if spec.status_port
            else []
        )
        # (replica, model) -> (expiry on the monotonic clock, answer); bounded by the pool's models per replica.
        self._status_cache: dict[tuple[int, str], tuple[float, ModelStatus | None]] = {}
        self._status_asking: dict[tuple[int, str], asyncio.Task] = {}

    def replica_label(self, i: int) -> str:
        return str(i)  # the StatefulSet ordinal: replicas are listed in ordinal order

    def counter(self, replica: int) -> Callable[[str], None]:
        """Counts an answer of this replica in gateway_pool_requests_total by the status returned (each label set's
        child looked up once: labels() takes a lock and builds its key on every call)."""
        label = self.replica_label(replica)
        children = self._counted.setdefault(label, {})

        def count(code: str) -> None:
            child = children.get(code)
            if child is None:
                child = children[code] = self.metrics.pool_requests.labels(self.name, label, code)
            child.inc()

        return count

    def set_live(self, i: int, live: bool, why: str = "") -> None:
        if self.affinity.live[i] != live:
            if live:
                log.info("pool %s replica %d (%s) is live", self.name, i, self.spec.replicas[i])
            else:
                log.warning("pool %s replica %d (%s) is dead: %s", self.name, i, self.spec.replicas[i], why)
        self.affinity.live[i] = live
        self.metrics.pool_replica_up.labels(self.name, self.replica_label(i)).set(1 if live else 0)
        if live:
            self._slow[i] = 0

    async def probe(self, i: int) -> None:
        try:
            status = await self._probes[i].get("/health", timeout=self._probe_timeout)
        except UpstreamError as e:
            if e.reason == "connect":  # refused, or the name does not resolve (scaled down): dead now
                self.set_live(i, False, str(e))
                return
            status, why = 0, str(e)
        except (TimeoutError, HttpError, OSError, asyncio.IncompleteReadError) as e:
            status, why = 0, type(e).__name__
        else:
            why = f"GET /health answered {status}"
        if status == 200:
            self.set_live(i, True)
            return
        self._slow[i] += 1
        if self._slow[i] >= SLOW_PROBES_TO_DEAD:
            self.set_live(i, False, why)

    async def model_status(self, replica: int, model: str) -> ModelStatus | None:
        """What replica's supervisor says of `model` (None: no status port, no answer, or a model it does not know)."""
        if not self._status:
            return None
        key = (replica, model)
        cached = self._status_cache.get(key)
        if cached is not None and cached[0] > time.monotonic():
            return cached[1]
        task = self._status_asking.get(key)
        if task is None:
            task = self._status_asking[key] = asyncio.create_task(self._ask_status(replica, model))
        # shield: a client that goes away cancels its own wait, not the question the others wait on too
        return await asyncio.shield(task)

    async def _ask_status(self, replica: int, model: str) -> ModelStatus | None:
        key = (replica, model)
        answer: ModelStatus | None = None
        try:
            status, doc = await self._status[replica].get_json(
                f"{ps.STATUS_PATH}?model={quote(model, safe='')}", timeout=STATUS_TIMEOUT_S
            )
            answer = parse_status(doc) if status == 200 else None
            if answer is None and status != 404:  # 404: a model the supervisor's preset does not list (yet)
                log.warning(
                    "pool %s replica %d: GET %s?model=%s answered %d", self.name, replica, ps.STATUS_PATH, model, status
                )
            result = ANSWERED if status in (200, 404) else NO_ANSWER
        except (UpstreamError, TimeoutError, HttpError, OSError, asyncio.IncompleteReadError) as e:
            log.warning("pool %s replica %d: status port gave no answer about %s: %s", self.name, replica, model, e)
            result = NO_ANSWER
        except Exception:  # a bug here must not fail the request: the client gets the stale-preset answer
            log.exception("pool %s replica %d: status of %s", self.name, replica, model)
            result = NO_ANSWER
        finally:
            self._status_asking.pop(key, None)
        self.metrics.pool_status_lookups.labels(self.name, result).inc()
        self._status_cache[key] = (time.monotonic() + STATUS_CACHE_S, answer)
        return answer

    async def probe_all(self) -> None:
        await asyncio.gather(*(self.probe(i) for i in range(len(self.clients))))

    async def _probe_forever(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                await self.probe_all()
            except Exception:  # a probe bug must not stop the liveness updates for good
                log.exception("pool %s: health probe failed", self.name)

    def start_probing(self) -> None:
        self._task = asyncio.create_task(self._probe_forever())

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
        for c in (*self.clients, *self._probes, *self._status):
            c.close()
