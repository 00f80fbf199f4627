"""Model affinity over a pool (slm_router/affinity.py): rendezvous hashing with a replication factor.

The properties the farm relies on, checked over many models: a replica leaving or coming back moves only the
models whose home set contained it (a mod-N hash, the naive alternative, moves most of them: the check has
teeth), homes are balanced over the replicas, every gateway replica computes the same homes, the busy-ness
choice stays inside the home set, and a hot model spreads wider in its own ranking order.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter

import pytest

from slm_router.affinity import PoolAffinity, home_set, ranking, weight
from tests.runtime.router.harness import ROUTER_DIR

REPLICAS = tuple(f"http://pool-small-{i}.pool-small.model-farm.svc.cluster.local:8080" for i in range(8))
MODELS = tuple(f"m-{i:04d}" for i in range(1000))
REPLICATION = 2


def homes(live: list[bool]) -> dict[str, list[int]]:
    return {m: home_set(m, REPLICAS, live, REPLICATION) for m in MODELS}


def mod_n_homes(live: list[bool]) -> dict[str, list[int]]:
    """The naive scheme: hash mod the number of live replicas (what rendezvous hashing is chosen over)."""
    alive = [i for i, up in enumerate(live) if up]
    return {m: [alive[(weight(m, "") + k) % len(alive)] for k in range(REPLICATION)] for m in MODELS}


@pytest.mark.parametrize("gone", [0, 3, 7])
def test_a_replica_leaving_moves_only_the_models_it_was_home_to(gone):
    all_live = [True] * len(REPLICAS)
    before = homes(all_live)
    after = homes([i != gone for i in range(len(REPLICAS))])
    for m in MODELS:
        if gone in before[m]:
            # It keeps its surviving home replica and gains exactly one: its next one in its own ranking.
            assert set(before[m]) - {gone} <= set(after[m]) and len(after[m]) == REPLICATION and gone not in after[m]
        else:
            assert after[m] == before[m]
    moved = sum(before[m] != after[m] for m in MODELS) / len(MODELS)
    assert moved == pytest.approx(REPLICATION / len(REPLICAS), abs=0.05)  # 1/4 of the models lost a home replica
    # ... and when it comes back (is added), exactly the models whose new home set contains it move: back to
    # their homes from before it left.
    back = homes(all_live)
    assert {m for m in MODELS if back[m] != after[m]} == {m for m in MODELS if gone in back[m]}
    assert back == before
    # The check can fail: hash mod N moves most models when one of 8 replicas leaves.
    naive_before, naive_after = mod_n_homes(all_live), mod_n_homes([i != gone for i in range(len(REPLICAS))])
    assert sum(naive_before[m] != naive_after[m] for m in MODELS) / len(MODELS) > 0.7


def test_homes_are_balanced_over_the_replicas():
    for n_live in (8, 5, 2):
        live = [i < n_live for i in range(len(REPLICAS))]
        load = Counter(r for h in homes(live).values() for r in h)
        expected = len(MODELS) * REPLICATION / n_live
        assert set(load) == set(range(n_live))
        assert max(load.values()) <= 1.15 * expected and min(load.values()) >= 0.85 * expected, (n_live, load)
        # The first-ranked (the replica a quiet model is answered by) is balanced as well.
        first = Counter(h[0] for h in homes(live).values())
        assert max(first.values()) <= 1.2 * len(MODELS) / n_live


def test_every_gateway_process_computes_the_same_homes():
    """Several gateway pods route independently: the weights must not depend on Python's per-process hash seed."""
    code = (
        "import json,sys; from slm_router.affinity import ranking; "
        "print(json.dumps([ranking(m, json.loads(sys.argv[1])) for m in ('m-0001', 'm-0002', 'emb/bge')]))"
    )
    runs = set()
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(ROUTER_DIR)}
        out = subprocess.run(
            [sys.executable, "-c", code, json.dumps(REPLICAS)], env=env, capture_output=True, text=True, check=True
        )
        runs.add(out.stdout)
    assert len(runs) == 1
    assert json.loads(runs.pop()) == [list(ranking(m, REPLICAS)) for m in ("m-0001", "m-0002", "emb/bge")]


def test_the_least_busy_home_replica_answers_and_never_one_outside_the_home_set():
    a = PoolAffinity(REPLICAS[:4], replication=2, hot_in_flight=4)
    m = "m-0042"
    first, second, *rest = a.ranking(m)
    assert a.candidates(m)[0] == first  # idle: the best-ranked home replica
    a.busy[first] = 3
    assert a.candidates(m)[0] == second
    a.busy[second] = 5
    assert a.candidates(m)[0] == first  # the least busy of the two, even though both are busy
    for r in rest:
        a.busy[r] = 0  # idle replicas outside the home set are not used for a model that is not hot
    assert a.candidates(m)[0] in (first, second)
    # The rest of the list is the failover order (a refused connection tries the next live one).
    assert sorted(a.candidates(m)) == [0, 1, 2, 3]
    a.live[first] = False  # its home set is now (second, rest[0]): rest[0] is idle, second has 5 in progress
    assert a.candidates(m)[0] == rest[0] and first not in a.candidates(m)
    a.busy[rest[0]] = 9
    assert a.candidates(m)[0] == second
    a.live = [False] * 4
    assert a.candidates(m) == []


def test_a_hot_model_spreads_to_its_next_replicas_and_back():
    a = PoolAffinity(REPLICAS[:4], replication=2, hot_in_flight=2)
    m = "m-0007"
    order = a.ranking(m)
    used = []
    for _ in range(8):  # 8 concurrent requests: the set grows to 3 at 4 in flight, to 4 at 6
        pick = a.candidates(m)[0]
        a.started(m, pick)
        used.append(pick)
    assert used[:4] == [order[0], order[1], order[0], order[1]]  # within the home set while < 2 per replica
    assert used[4] == order[2] and order[3] in used[6:]  # then wider, in the model's own ranking order
    assert Counter(used) == {r: 2 for r in order}
    for r in used:
        a.finished(m, r)
    assert a.model_in_flight == {} and a.busy == [0, 0, 0, 0]
    assert a.candidates(m)[0] == order[0]  # quiet again: back home
    # Another model's load counts for the least-busy choice but does not make this one hot.
    other = next(x for x in MODELS if a.ranking(x)[:2] == order[:2])
    for _ in range(6):
        a.started(other, order[0])
    assert a.candidates(m)[0] == order[1]


def test_replication_above_the_live_replicas_uses_all_of_them():
    assert sorted(home_set("m-1", REPLICAS[:3], [True, False, True], replication=5)) == [0, 2]
    assert ranking("m-1", ()) == ()
