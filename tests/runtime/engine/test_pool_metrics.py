"""Cold-load metrics of a pool replica (issue 25): the supervisor's /metrics on its side port.

The pinned router has no per-model metrics in router mode (its /metrics needs ?model=, test_router_mode.py); the
supervisor times each load from the router's own model events (GET /models/sse; pool_status_server.py). Names:
containers/inference_runtime/pool_status.py. The exposition is written by hand (the image is stdlib only) and parsed
here with prometheus_client's parser, the reference implementation of the text format.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from inference_runtime.pool_status import (
    COLD_LOAD_BUCKETS,
    COLD_LOAD_HISTOGRAM,
    COLD_LOAD_SECONDS,
    COLD_LOADS,
    COPY_FAILED,
    COPY_FAILED_MODEL,
    COPYING,
    LANDED,
    LOAD_FAILURES,
    MODELS_BY_STATE,
    UNLOADS,
)
from tests.runtime.engine.pool_support import call, chat, land, pool_env, run_pool, write_preset


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _m(name: str, **labels: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    return name, tuple(sorted(labels.items()))


@pytest.mark.engine
def test_cold_loads_failures_and_evictions_are_counted_per_model(
    llama_server_bin: Path, smollm2_gguf: Path, tmp_path: Path
) -> None:
    farm = tmp_path / "farm"
    files = {n: farm / n / "0123456789abcdef" / smollm2_gguf.name for n in ("a", "b", "broken", "later")}
    land(smollm2_gguf, files["a"])
    land(smollm2_gguf, files["b"])
    files["broken"].parent.mkdir(parents=True)
    files["broken"].write_bytes(b"GGUF" + b"\0" * 4096)  # landed, but no model: its child exits while loading
    env = pool_env(llama_server_bin, write_preset(tmp_path / "preset.ini", files), LLAMA_MODELS_MAX="1")
    with run_pool(env, tmp_path) as pool:
        _, before = call(pool.status, "/metrics")
        walls: dict[str, list[float]] = {"a": [], "b": []}
        for name in ("a", "b", "a"):  # models_max 1: each load evicts the other (the LRU victim)
            t = time.monotonic()
            status, body = chat(pool.base, name)
            walls[name].append(time.monotonic() - t)
            assert status == 200, body
        status, body = chat(pool.base, "broken")
        assert status == 500 and "failed to load" in body["error"]["message"], body
        time.sleep(0.3)  # the last event (the broken child's exit) is already in; leave the follower a beat
        status, text = call(pool.status, "/metrics")
    assert status == 200
    got = _samples(text)
    assert got[_m(COLD_LOADS, model="a")] == 2 and got[_m(COLD_LOADS, model="b")] == 1
    assert got[_m(COLD_LOADS, model="broken")] == 0
    assert got[_m(LOAD_FAILURES, model="broken")] == 1 and got[_m(LOAD_FAILURES, model="a")] == 0
    # Each load happens inside the request that triggered it: spawn -> ready is shorter than that request.
    a_seconds, b_seconds = (
        got[_m(COLD_LOAD_SECONDS, model="a")],
        got[_m(COLD_LOAD_SECONDS, model="b")],
    )
    assert 0.02 < a_seconds < sum(walls["a"]) and 0.01 < b_seconds < walls["b"][0], (a_seconds, b_seconds, walls)
    assert got[_m(COLD_LOAD_HISTOGRAM + "_count")] == 3
    assert got[_m(COLD_LOAD_HISTOGRAM + "_sum")] == pytest.approx(a_seconds + b_seconds, abs=1e-5)
    assert got[_m(COLD_LOAD_HISTOGRAM + "_bucket", le="+Inf")] == 3
    # a for b, b for a, a for broken: three evictions at models_max 1 (a failed load is not an unload).
    assert got[_m(UNLOADS)] == 3
    assert got[_m(MODELS_BY_STATE, state=LANDED)] == 3 and got[_m(MODELS_BY_STATE, state=COPYING)] == 1
    assert got[_m(MODELS_BY_STATE, state="loaded")] == 0 and got[_m(MODELS_BY_STATE, state=COPY_FAILED)] == 0
    assert not [k for k in got if k[0] == COPY_FAILED_MODEL]
    # Series appear with a model's first load only: a model never asked for has none.
    assert not [k for k in got if ("model", "later") in k[1]]
    assert not [k for k in _samples(before) if dict(k[1]).get("model")], before  # no per-model series before a load


def _one_thousand() -> tuple[str, int]:
    from pool_landing import ModelStatus
    from pool_status_server import ColdLoads, Published

    clock = iter(x * 0.01 for x in range(100_000))
    loads = ColdLoads(clock=lambda: next(clock))
    names = [f"m-{i:04d}-0123456789abcdef" for i in range(1000)]  # farm names are <name>; ids make them longer
    for i, name in enumerate(names):
        loads.event({"model": name, "event": "model_status", "data": {"status": "loading"}})
        loads.event({"model": name, "event": "status_change", "data": {"status": "loading"}})
        loads.event({"model": name, "event": "status_change", "data": {"status": "loaded", "info": {}}})
        if i:  # models_max 1: each load evicted the previous one
            loads.event(
                {"model": names[i - 1], "event": "status_change", "data": {"status": "unloaded", "exit_code": 0}}
            )
    text = loads.exposition(Published({n: ModelStatus(LANDED) for n in names}))
    return text, sum(1 for line in text.splitlines() if line and not line.startswith("#"))


def test_a_thousand_models_that_each_loaded_once_stay_a_bounded_scrape() -> None:
    """Series: 3 per model that loaded (loads, seconds, failures) + the histogram (buckets, +Inf, sum, count) +
    unloads + 4 state gauges = 3,017 for 1,000 models, ~170 KB a scrape (numbers in containers/llama-server/README.md).
    """
    text, series = _one_thousand()
    fixed = (len(COLD_LOAD_BUCKETS) + 3) + 1 + 4
    assert series == 3 * 1000 + fixed == 3017
    size = len(text.encode())
    assert size < 220_000, size
    got = _samples(text)  # the reference parser reads every line
    assert len(got) == series
    assert got[_m(COLD_LOADS, model="m-0999-0123456789abcdef")] == 1
    assert got[_m(UNLOADS)] == 999 and got[_m(COLD_LOAD_HISTOGRAM + "_count")] == 1000
    print(f"1,000 models: {series} series, {size} bytes")


def test_only_a_spawn_starts_a_cold_load_and_label_values_are_escaped() -> None:
    from pool_landing import ModelStatus
    from pool_status_server import ColdLoads, Published

    now = [0.0]
    loads = ColdLoads(clock=lambda: now[0])
    odd = 'm"1\\x'
    loads.event({"model": odd, "event": "model_status", "data": {"status": "loading"}})
    now[0] = 0.75
    loads.event({"model": odd, "event": "status_change", "data": {"status": "loaded"}})
    # --sleep-idle-seconds: sleeping -> loading -> loaded again without a spawn is a wake, not a cold load.
    loads.event({"model": odd, "event": "status_change", "data": {"status": "sleeping"}})
    loads.event({"model": odd, "event": "status_change", "data": {"status": "loading"}})
    now[0] = 5.0
    loads.event({"model": odd, "event": "status_change", "data": {"status": "loaded"}})
    loads.event({"model": None, "event": "models_reload"})  # a reload names no model
    text = loads.exposition(Published({odd: ModelStatus(LANDED), "x": ModelStatus(COPY_FAILED, "boom")}))
    got = _samples(text)
    assert got[_m(COLD_LOADS, model=odd)] == 1
    assert got[_m(COLD_LOAD_SECONDS, model=odd)] == 0.75
    assert (
        got[_m(COLD_LOAD_HISTOGRAM + "_bucket", le="0.5")] == 0
        and got[_m(COLD_LOAD_HISTOGRAM + "_bucket", le="1.0")] == 1
    )
    assert got[_m(COPY_FAILED_MODEL, model="x")] == 1 and got[_m(MODELS_BY_STATE, state=COPY_FAILED)] == 1
    assert got[_m(MODELS_BY_STATE, state="loaded")] == 1
