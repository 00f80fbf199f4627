"""One multi-model pool as the gateway sees it: a keep-alive client per replica, the affinity state and the
liveness of every replica (a background probe of GET /health every `health_interval_s`).

A replica is dead when its connection is refused or its name does not resolve (a StatefulSet scaled below the
replica's ordinal: the headless Service publishes no record for it), at once, whether a probe or a forwarded
request found it. A probe that times out or answers non-200 marks it dead only the second time in a row: a
replica busy loading a model may be slow to answer, and moving its models away costs every one of them a load.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from inference_runtime.http1 import HttpError

from .affinity import PoolAffinity
from .client import HttpClient, UpstreamError
from .config import Config, GatewayPool
from .metrics import GatewayMetrics

log = logging.getLogger("router.gateway.pool")

NO_REPLICA = "none"  # gateway_pool_requests_total's replica label when no replica of the pool was live
SLOW_PROBES_TO_DEAD = 2
PROBE_TIMEOUT_S = 2.0


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
        for c in (*self.clients, *self._probes):
            c.close()
