"""gateway.pools (issue 13's multi-model pools) in the router's one config definition, and the gateway process
with a pool none of whose replicas is there (no engine needed: the replicas are an unresolvable name and a
refused port)."""

from __future__ import annotations

import time

import httpx
import pytest

from slm_router import config as rc
from tests.runtime.router.harness import metric, running_router
from tests.support.engine import free_port

REPLICAS = [
    "http://pool-default-0.pool-default.model-farm.svc.cluster.local:8080",
    "http://pool-default-1.pool-default.model-farm.svc.cluster.local:8080",
]
POOL = {"name": "default", "replication": 2, "models": ["m-0001", "m-0002"], "replicas": REPLICAS}


def gateway(**g) -> dict:
    return {"mode": "gateway", "gateway": g}


def test_the_contract_example_loads_and_existing_configs_stay_valid():
    # The shape of /tmp/farm_contract.md ("gateway" of the router config the library's router chart renders).
    cfg = rc.from_dict(
        gateway(
            models=[{"name": "hot-1", "url": "http://hot-1.model-farm.svc.cluster.local:8080"}],
            pools=[POOL],
            cold_load_timeout_s=60,
            health_interval_s=5,
            retry_after_s=5,
        )
    )
    g = cfg.gateway
    assert (g.cold_load_timeout_s, g.health_interval_s, g.retry_after_s) == (60.0, 5.0, 5)
    assert g.pools == (
        rc.GatewayPool("default", ("m-0001", "m-0002"), tuple(REPLICAS), replication=2, hot_in_flight=4),
    )
    # The supervisor's status side port: the one default (inference_runtime/pool_status.py), 0 = none.
    assert g.pools[0].status_port == 8081
    assert rc.from_dict(gateway(pools=[{**POOL, "status_port": 0}])).gateway.pools[0].status_port == 0
    # A pool alone is a valid gateway; a config without pools keeps its meaning (and defaults).
    assert rc.from_dict(gateway(pools=[POOL])).gateway.models == ()
    old = rc.from_dict(gateway(models=[{"name": "a", "url": "http://a:8080"}])).gateway
    assert (old.pools, old.cold_load_timeout_s, old.health_interval_s) == ((), 60.0, 5.0)


@pytest.mark.parametrize(
    ("g", "message"),
    [
        (
            {"pools": [{**POOL, "models": ["hot-1"]}], "models": [{"name": "hot-1", "url": "http://h:8080"}]},
            "gateway.pools[0].models[0]: 'hot-1' is also in gateway.models; a model is dedicated or pooled, not both",
        ),
        (
            {"pools": [POOL, {**POOL, "name": "medium", "models": ["m-0009", "m-0002"]}]},
            "gateway.pools[1].models[1]: 'm-0002' is also in pool 'default'; a model belongs to exactly one pool",
        ),
        ({"pools": [{**POOL, "models": ["a", "a"]}]}, "gateway.pools[0].models[1]: 'a' is twice in this pool"),
        ({"pools": [POOL, {**POOL, "models": ["x"]}]}, "gateway.pools[1].name: pool 'default' appears twice"),
        ({"pools": [{**POOL, "replication": 0}]}, "gateway.pools[0].replication: must be >= 1, got 0"),
        ({"pools": [{**POOL, "hot_in_flight": 0}]}, "gateway.pools[0].hot_in_flight: must be >= 1"),
        ({"pools": [{**POOL, "replicas": []}]}, "gateway.pools[0].replicas: needs at least one replica root URL"),
        (
            {"pools": [{**POOL, "replicas": ["pool-default-0:8080"]}]},
            "gateway.pools[0].replicas[0]: must be an http(s) URL",
        ),
        ({"pools": [{**POOL, "replicas": [REPLICAS[0], REPLICAS[0]]}]}, "gateway.pools[0].replicas[1]:"),
        (
            {"pools": [{**POOL, "models": []}], "models": [{"name": "a", "url": "http://a"}]},
            "gateway.pools[0].models: a pool needs",
        ),
        ({"pools": [{**POOL, "models": [" m"]}]}, "gateway.pools[0].models[0]: must be non-empty printable text"),
        ({"pools": [{"name": "default", "models": ["a"]}]}, "gateway.pools[0].replicas: required"),
        ({"pools": [{**POOL, "slots": 2}]}, "gateway.pools[0].slots: unknown key"),
        (
            {"pools": {"default": POOL}},
            "gateway.pools: must be a list of {name, replication, models, replicas} objects",
        ),
        ({"pools": [{**POOL, "status_port": 70000}]}, "gateway.pools[0].status_port: must be within 1..65535"),
        ({"pools": [{**POOL, "status_port": -1}]}, "gateway.pools[0].status_port: must be within 1..65535"),
        (
            {"pools": [{**POOL, "status_port": 8080}]},
            "gateway.pools[0].status_port: 8080 is the port of replicas[0]",
        ),
        ({"pools": [POOL], "cold_load_timeout_s": 0}, "gateway.cold_load_timeout_s: must be > 0"),
        ({"pools": [POOL], "health_interval_s": -1}, "gateway.health_interval_s: must be > 0"),
        ({"pools": []}, "gateway.models: mode gateway needs at least one {name, url} (or a pool in gateway.pools)"),
    ],
)
def test_pool_errors_name_the_key(g, message):
    with pytest.raises(rc.ConfigError) as e:
        rc.from_dict(gateway(**g))
    assert message in str(e.value)


def test_a_pool_with_no_replica_there_answers_503_with_retry_after_at_once(tmp_path):
    """replica 0: a name that does not resolve (RFC 6761 .invalid, as a StatefulSet scaled below it leaves no DNS
    record); replica 1: a refused port. Both are dead from the first probe; the request gets 503 + Retry-After
    without waiting for any timeout, and the other models are listed and routed as before."""
    pool = {
        "name": "small",
        "replication": 1,
        "models": ["m-1", "m-2"],
        "replicas": ["http://pool-small-0.invalid:8080", f"http://127.0.0.1:{free_port()}"],
    }
    cfg = {
        "mode": "gateway",
        "listen_host": "127.0.0.1",
        "listen_port": free_port(),
        "gateway": {
            "models": [{"name": "hot", "url": f"http://127.0.0.1:{free_port()}"}],
            "pools": [pool],
            "retry_after_s": 3,
            "cold_load_timeout_s": 30,
            "health_interval_s": 0.5,
        },
        "timeouts": {"connect_s": 5},
    }
    with running_router(cfg, tmp_path) as g:
        for replica in ("0", "1"):
            assert metric(g.url, "gateway_pool_replica_up", pool="small", replica=replica) == 0
        t0 = time.monotonic()
        resp = httpx.post(
            f"{g.url}/v1/chat/completions",
            json={"model": "m-2", "messages": [{"role": "user", "content": "hi"}]},
            timeout=30,
        )
        assert time.monotonic() - t0 < 1.0
        assert resp.status_code == 503 and resp.headers["retry-after"] == "3"
        assert "no live replica in pool 'small'" in resp.json()["error"]["message"]
        assert metric(g.url, "gateway_requests_total", model="m-2", code="503") == 1
        # The pool's wake-up signal when it is scaled to zero (its in-flight gauge never rises: 503 at once).
        assert metric(g.url, "gateway_pool_requests_total", pool="small", replica="none", code="503") == 1
        assert metric(g.url, "gateway_pool_in_flight", pool="small") == 0
        listed = httpx.get(f"{g.url}/v1/models", timeout=10).json()["data"]
        assert [(m["id"], m.get("pool")) for m in listed] == [("hot", None), ("m-1", "small"), ("m-2", "small")]
        assert httpx.get(f"{g.url}/ready", timeout=10).json()["pools_live_replicas"] == {"small": 0}
        unknown = httpx.post(f"{g.url}/v1/embeddings", json={"model": "m-3", "input": "x"}, timeout=10)
        assert unknown.status_code == 404 and unknown.json()["error"]["known_models"] == ["hot", "m-1", "m-2"]


def test_a_404_names_at_most_20_models_of_a_large_farm(tmp_path):
    """A farm of 1,000 pooled models: the 404 stays small and points at GET /v1/models, which lists them all."""
    names = [f"m-{i:04d}" for i in range(1000)]
    pool = {"name": "big", "models": names, "replicas": [f"http://127.0.0.1:{free_port()}"]}
    cfg = {"mode": "gateway", "listen_host": "127.0.0.1", "listen_port": free_port(), "gateway": {"pools": [pool]}}
    with running_router(cfg, tmp_path) as g:
        resp = httpx.post(f"{g.url}/v1/chat/completions", json={"model": "nope"}, timeout=10)
        assert resp.status_code == 404 and len(resp.content) < 2000
        err = resp.json()["error"]
        assert err["known_models"] == names[:20]
        assert err["message"].endswith("m-0019, … (980 more: GET /v1/models)")
        assert [m["id"] for m in httpx.get(f"{g.url}/v1/models", timeout=10).json()["data"]] == names
        # Pooled models' series appear with their first request, not 1,000 × ~20 idle ones at start.
        assert "m-0500" not in httpx.get(f"{g.url}/metrics", timeout=10).text
