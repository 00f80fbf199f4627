"""Model affinity over a multi-model pool: which replica answers a request for a pooled model.

Every replica of a pool runs llama-server in router mode with the same preset, so any replica *can* answer any
model, but each one it answers costs a load (seconds) and a slot under --models-max. Scattering requests would
make every replica load every model. Instead each model has a small, stable home set:

- **Rendezvous (highest-random-weight) hashing**: for a model, rank the replicas by a hash of (model, replica
  identity) and take the top `replication` *live* ones. Identities are the replicas' stable URLs (StatefulSet
  ordinals), so the ranking never changes; a replica that dies or is scaled away only moves the models whose home
  set contained it (each to its next replica in its own ranking), and a replica that comes back only takes back
  those (Thaler & Ravishankar's HRW; KServe ModelMesh keeps models on few copies for the same reason).
- **Least busy in the home set**: the request goes to the home replica with the fewest requests in progress
  (all models together); ties go to the better-ranked one, so a quiet model is answered by its first replica.
- **Hot models spread**: while a model has `hot_in_flight` or more requests in progress per replica of its
  current set, the set grows by its next replica in ranking order, up to every live replica.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence


def weight(model: str, identity: str) -> int:
    """The rendezvous weight of (model, replica): 64 bits of BLAKE2b, uniform and stable across processes."""
    return int.from_bytes(hashlib.blake2b(f"{model}\0{identity}".encode(), digest_size=8).digest(), "big")


def ranking(model: str, identities: Sequence[str]) -> tuple[int, ...]:
    """Indexes of `identities`, best first, for this model (ties, astronomically rare, by index)."""
    return tuple(sorted(range(len(identities)), key=lambda i: (-weight(model, identities[i]), i)))


def home_set(model: str, identities: Sequence[str], live: Sequence[bool], replication: int) -> list[int]:
    """The model's home replicas: its `replication` best-ranked live ones (fewer if fewer are live)."""
    return [i for i in ranking(model, identities) if live[i]][:replication]


class PoolAffinity:
    """Liveness, requests in progress and the replica choice of one pool (one event loop: no locking)."""

    def __init__(self, replicas: Sequence[str], replication: int, hot_in_flight: int):
        self.replicas = tuple(replicas)
        self.replication = replication
        self.hot_in_flight = hot_in_flight
        self.live = [True] * len(self.replicas)  # until a probe or a connect failure says otherwise
        self.busy = [0] * len(self.replicas)  # requests in progress per replica
        self.model_in_flight: dict[str, int] = {}
        self._rankings: dict[str, tuple[int, ...]] = {}  # static: the identities never change

    def ranking(self, model: str) -> tuple[int, ...]:
        order = self._rankings.get(model)
        if order is None:
            order = self._rankings[model] = ranking(model, self.replicas)
        return order

    def candidates(self, model: str) -> list[int]:
        """Live replicas to try for this request, in order: the pick first, then the rest of the model's live
        ranking (a replica refusing the connection sent nothing, so the next one may be tried)."""
        live = [i for i in self.ranking(model) if self.live[i]]
        if not live:
            return []
        width = min(self.replication, len(live))
        in_flight = self.model_in_flight.get(model, 0)
        while width < len(live) and in_flight >= self.hot_in_flight * width:
            width += 1
        pick = min(live[:width], key=lambda i: self.busy[i])  # min() keeps the first (best-ranked) of equals
        return [pick] + [i for i in live if i != pick]

    def started(self, model: str, replica: int) -> None:
        self.busy[replica] += 1
        self.model_in_flight[model] = self.model_in_flight.get(model, 0) + 1

    def finished(self, model: str, replica: int) -> None:
        self.busy[replica] -= 1
        left = self.model_in_flight[model] - 1
        if left:
            self.model_in_flight[model] = left
        else:
            del self.model_in_flight[model]
