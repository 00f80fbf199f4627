"""Issue 13 end to end on loopback: the gateway (`python -m slm_router`) in front of a pool of TWO real
llama-servers in router mode (`--models-preset` with four models, `--models-max 2`), plus a third replica URL
that does not resolve (the pool's StatefulSet scaled to 2 of 3).

The four models are byte copies of the SmolLM2 stand-in under distinct names. With replication 1 each model has
one home replica; the names are chosen (by the gateway's own hashing, over the replicas' real URLs) so that
three models live on replica 0 and one on replica 1: replica 0 must then unload its least recently used model.
Where a request landed is read from the engines themselves (GET /v1/models: each model's status).

What deploys is what runs: the preset is the library's `render_preset` (k8s/charts/model_pool_chart.py) and the pool
entry of the gateway config its `gateway_pool` (k8s/charts/router_chart.py), with threads and context scaled down.
The tests run in file order on shared processes (as tests/runtime/engine/test_router_mode.py does).
"""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from cpu_inference.engines.pool_preset import PoolModel, render_preset
from cpu_inference.k8s.charts.router_chart import gateway_pool
from slm_router.affinity import home_set
from tests.runtime.router.harness import metric, running_router
from tests.support.engine import free_port, stop_process, wait_healthy

pytestmark = pytest.mark.engine

POOL = "small"
RETRY_AFTER = 4
SCALED_DOWN = "http://pool-small-2.pool-small.invalid:8080"  # no DNS record: replica 2 of 3 is not running


def _pick_models(replicas: list[str]) -> tuple[list[str], str]:
    """Three names whose home (replication 1, replicas 0 and 1 live) is replica 0, and one whose home is 1."""
    live = [True, True, False]
    on0 = [n for n in (f"farm-{k:03d}" for k in range(200)) if home_set(n, replicas, live, 1) == [0]][:3]
    on1 = next(n for n in (f"farm-{k:03d}" for k in range(200)) if home_set(n, replicas, live, 1) == [1])
    return on0, on1


def _start_replica(binary: Path, preset: Path, port: int, log: Path) -> subprocess.Popen:
    """One pool replica: llama-server in router mode over the preset, at most 2 models loaded (autoload is on)."""
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [
                str(binary),
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--models-preset",
                str(preset),
                "--models-max",
                "2",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_healthy(f"http://127.0.0.1:{port}", proc, timeout=60)
    except BaseException:
        stop_process(proc)
        raise
    return proc


def _statuses(base: str) -> dict[str, str]:
    data = httpx.get(f"{base}/v1/models", timeout=30).json()["data"]
    return {m["id"]: m["status"]["value"] for m in data}


def _loaded(base: str) -> set[str]:
    return {name for name, status in _statuses(base).items() if status == "loaded"}


def _chat(url: str, model: str, max_tokens: int = 2) -> httpx.Response:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "Hi"}],
        "max_tokens": max_tokens,
        "ignore_eos": True,
    }
    return httpx.post(f"{url}/v1/chat/completions", json=body, timeout=240)


@pytest.fixture(scope="module")
def farm(llama_server_bin: Path, smollm2_gguf: Path, tmp_path_factory: pytest.TempPathFactory):
    work = tmp_path_factory.mktemp("pool")
    ports = [free_port(), free_port()]
    replicas = [f"http://127.0.0.1:{p}" for p in ports] + [SCALED_DOWN]
    on0, on1 = _pick_models(replicas)
    names = [*on0, on1]
    for name in names:  # distinct files, as the farm's S3 prefix holds one GGUF per model
        shutil.copyfile(smollm2_gguf, work / f"{name}.gguf")
    preset = work / "preset.ini"
    preset.write_text(
        render_preset(
            [PoolModel(n, f"{n}.gguf", ctx_size=256, parallel=1, threads=1) for n in names], model_dir=str(work)
        )
    )
    gateway_cfg = {
        "mode": "gateway",
        "listen_host": "127.0.0.1",
        "listen_port": free_port(),
        "log_level": "DEBUG",
        "timeouts": {"connect_s": 2, "first_byte_s": 120, "total_s": 180},
        "gateway": {
            "pools": [gateway_pool(POOL, 1, names, replicas).to_dict()],
            "retry_after_s": RETRY_AFTER,
            "cold_load_timeout_s": 120,
            "health_interval_s": 0.5,
        },
    }
    procs = [_start_replica(llama_server_bin, preset, port, work / f"r{i}.log") for i, port in enumerate(ports)]
    try:
        with running_router(gateway_cfg, work / "gateway") as gw:
            yield {
                "gw": gw,
                "r0": replicas[0],
                "r1": replicas[1],
                "procs": procs,
                "ports": ports,
                "on0": on0,
                "on1": on1,
                "work": work,
                "preset": preset,
                "cfg": gateway_cfg,
                "bin": llama_server_bin,
            }
    finally:
        for proc in procs:  # the router unloads its children on SIGTERM
            stop_process(proc, timeout=30)


def _replica_requests(gw_url: str, replica: str) -> float:
    return metric(gw_url, "gateway_pool_requests_total", pool=POOL, replica=replica, code="200")


def test_requests_land_only_on_the_models_home_replica(farm):
    gw, r0, r1 = farm["gw"].url, farm["r0"], farm["r1"]
    a1, b1 = farm["on0"][0], farm["on1"]
    assert metric(gw, "gateway_pool_replica_up", pool=POOL, replica="2") == 0  # unresolvable from the first probe
    assert _loaded(r0) == _loaded(r1) == set()
    for model in (a1, a1, b1):
        resp = _chat(gw, model)
        assert resp.status_code == 200, resp.text
        assert resp.json()["model"] == model and resp.headers["x-gateway-model"] == model
    # The engines say where each model went: a1 only on replica 0, b1 only on replica 1.
    assert (_loaded(r0), _loaded(r1)) == ({a1}, {b1})
    assert (_replica_requests(gw, "0"), _replica_requests(gw, "1")) == (2, 1)
    # While a request is in progress, the pool's in-flight gauge (KEDA's signal for the pool) counts it.
    body = {
        "model": a1,
        "messages": [{"role": "user", "content": "Tell a story."}],
        "max_tokens": 200,
        "ignore_eos": True,
        "stream": True,
    }
    with httpx.stream("POST", f"{gw}/v1/chat/completions", json=body, timeout=240) as held:
        assert held.status_code == 200
        lines = held.iter_lines()
        next(lines)
        assert metric(gw, "gateway_pool_in_flight", pool=POOL) == 1
        assert metric(gw, "gateway_in_flight", model=a1) == 1
    deadline = time.monotonic() + 30
    while metric(gw, "gateway_pool_in_flight", pool=POOL) != 0:
        assert time.monotonic() < deadline
        time.sleep(0.1)


def test_an_unloaded_model_loads_on_first_request_and_lru_unloads_at_the_cap(farm):
    gw, r0, r1 = farm["gw"].url, farm["r0"], farm["r1"]
    a1, a2, a3 = farm["on0"]
    assert _statuses(r0)[a2] == "unloaded"
    resp = _chat(gw, a2)
    assert resp.status_code == 200 and resp.json()["choices"][0]["message"]["content"]
    assert _loaded(r0) == {a1, a2}  # --models-max 2 reached
    assert _chat(gw, a1).status_code == 200  # a1 is now the most recently used, a2 the least
    resp = _chat(gw, a3)
    assert resp.status_code == 200, resp.text
    assert _loaded(r0) == {a1, a3} and _statuses(r0)[a2] == "unloaded"  # the LRU model was unloaded
    assert _loaded(r1) == {farm["on1"]}  # the other replica never saw replica 0's models


def test_a_cold_load_beyond_the_timeout_is_503_with_retry_after(farm, tmp_path):
    """A second gateway whose cold-load budget (0.2 s) is shorter than a model's load: 503 + Retry-After, not a hang."""
    cfg = {**farm["cfg"], "listen_port": free_port(), "gateway": {**farm["cfg"]["gateway"], "cold_load_timeout_s": 0.2}}
    a2 = farm["on0"][1]
    assert _statuses(farm["r0"])[a2] == "unloaded"
    with running_router(cfg, tmp_path) as g:
        t0 = time.monotonic()
        resp = _chat(g.url, a2)
        assert time.monotonic() - t0 < 5
        assert resp.status_code == 503 and resp.headers["retry-after"] == str(RETRY_AFTER)
        assert "gateway.cold_load_timeout_s=0.2s" in resp.json()["error"]["message"]
        assert metric(g.url, "gateway_pool_requests_total", pool=POOL, replica="0", code="503") == 1
        assert metric(g.url, "gateway_backend_unavailable_total", model=a2) == 1
    # The load goes on without the client: the retry the Retry-After asks for finds the model (via the main gateway).
    resp = _chat(farm["gw"].url, a2)
    assert resp.status_code == 200, resp.text


def test_a_dead_replica_moves_its_models_to_the_survivor_and_gets_them_back(farm):
    gw, r0 = farm["gw"].url, farm["r0"]
    b1, r1 = farm["on1"], farm["r1"]
    stop_process(farm["procs"][1], timeout=30)  # replica 1 goes away (its pod is deleted)
    before0 = _replica_requests(gw, "0")
    resp = _chat(gw, b1)  # refused on replica 1: tried on replica 0 at once (nothing had been sent)
    assert resp.status_code == 200, resp.text
    assert resp.json()["model"] == b1
    assert b1 in _loaded(r0)
    assert _replica_requests(gw, "0") == before0 + 1
    assert metric(gw, "gateway_pool_replica_up", pool=POOL, replica="1") == 0
    # The StatefulSet recreates pool-small-1 under the same identity: once the probe sees it, b1 goes back home.
    farm["procs"][1] = _start_replica(farm["bin"], farm["preset"], farm["ports"][1], farm["work"] / "r1-again.log")
    deadline = time.monotonic() + 30
    while metric(gw, "gateway_pool_replica_up", pool=POOL, replica="1") != 1:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    before1 = _replica_requests(gw, "1")
    assert _chat(gw, b1).status_code == 200
    assert _loaded(r1) == {b1} and _replica_requests(gw, "1") == before1 + 1


def test_a_hot_model_spreads_to_its_next_replica(farm, tmp_path):
    """A gateway with hot_in_flight 1: while one request for a model is in progress on its home replica, the next
    one goes to the model's next replica in its ranking, which loads it there too."""
    pool = {**farm["cfg"]["gateway"]["pools"][0], "hot_in_flight": 1}
    cfg = {**farm["cfg"], "listen_port": free_port(), "gateway": {**farm["cfg"]["gateway"], "pools": [pool]}}
    a3, r1 = farm["on0"][2], farm["r1"]
    assert a3 not in _loaded(r1)
    with running_router(cfg, tmp_path) as g:
        body = {
            "model": a3,
            "messages": [{"role": "user", "content": "Tell a story."}],
            "max_tokens": 200,
            "ignore_eos": True,
            "stream": True,
        }
        with httpx.stream("POST", f"{g.url}/v1/chat/completions", json=body, timeout=240) as held:
            assert held.status_code == 200
            lines = held.iter_lines()
            next(lines)  # in progress on replica 0
            resp = _chat(g.url, a3)
            assert resp.status_code == 200 and resp.json()["model"] == a3
        assert a3 in _loaded(r1)
        assert (_replica_requests(g.url, "0"), _replica_requests(g.url, "1")) == (1, 1)
    # Quiet again, the model is answered at home only (the main gateway, default hot_in_flight).
    before = _replica_requests(farm["gw"].url, "1")
    assert _chat(farm["gw"].url, a3).status_code == 200
    assert _replica_requests(farm["gw"].url, "1") == before
