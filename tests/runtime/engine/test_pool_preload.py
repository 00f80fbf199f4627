"""A pool's hot models load when the replica starts (farm.pools[].preload; issue 25), against the REAL pinned router.

The real `entrypoint.py pool` (supervisor + llama-server in router mode) runs the preset the chart renders
(pool_preset.pool_preset over PoolModels with preload: `load-on-startup = true`, a preset-only key of the pin:
common/arg.cpp common_params_add_preset_options). The pinned router loads those sections once it listens
(tools/server/server-models.cpp load_models ~line 840, server.cpp load_startup_models) and never on a reload
(~line 955). The supervisor gives the router only the landed sections (pool_landing.effective_preset), so a hot model
whose copy has not landed takes no place at start; once it lands (a reload) it loads on its first request.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from cpu_inference.engines.pool_preset import LOAD_ON_STARTUP, PoolModel, pool_preset
from inference_runtime.pool_status import COLD_LOADS, UNLOADS
from tests.runtime.engine.pool_support import POLL, call, chat, land, pool_env, router_models, run_pool, until

pytestmark = pytest.mark.engine


def _loads(pool_status: str) -> dict[str, float]:
    """The supervisor's cold loads per model, and its unloads under the key ''."""
    status, text = call(pool_status, "/metrics")
    assert status == 200, text
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == COLD_LOADS:
                out[s.labels["model"]] = s.value
            elif s.name == UNLOADS:
                out[""] = s.value
    return out


def test_a_preloaded_model_is_loaded_before_its_first_request_and_a_late_one_loads_on_demand(
    llama_server_bin: Path, smollm2_gguf: Path, tmp_path: Path
) -> None:
    farm = tmp_path / "farm"
    keys = {n: f"{n}/0123456789abcdef/{smollm2_gguf.name}" for n in ("hot", "cold", "late")}
    land(smollm2_gguf, farm / keys["hot"])
    land(smollm2_gguf, farm / keys["cold"])  # "late" (also preloaded) has not landed: the router does not see it
    models = [
        PoolModel("hot", keys["hot"], ctx_size=256, preload=True),
        PoolModel("cold", keys["cold"], ctx_size=256),
        PoolModel("late", keys["late"], ctx_size=256, preload=True),
    ]
    text = pool_preset(models, model_dir=str(farm))
    assert text.count(f"{LOAD_ON_STARTUP} = true") == 2
    preset = tmp_path / "preset.ini"
    preset.write_text(text)
    # models_max 2 = the two preloads: the late one must not take a place, or `cold` would evict `hot` below.
    env = pool_env(llama_server_bin, preset, LLAMA_MODELS_MAX="2")
    with run_pool(env, tmp_path) as pool:
        # Loaded with no request for it: GET /models is the only call made to the router.
        until(lambda: router_models(pool.base).get("hot") == "loaded", timeout=90)
        listed = router_models(pool.base)
        assert listed == {"hot": "loaded", "cold": "unloaded"}, listed  # "late": not in the router's list
        assert "(startup) loading model hot" in pool.text(), pool.text()[-2000:]

        before = _loads(pool.status)
        status, body = chat(pool.base, "hot")
        assert status == 200, body
        after = _loads(pool.status)
        assert after.get("hot", 0) == before.get("hot", 0), (before, after)  # its first request loaded nothing

        status, body = chat(pool.base, "cold")  # an ordinary first request: one cold load, counted
        assert status == 200, body
        after = _loads(pool.status)
        assert after["cold"] == 1, after
        assert after[""] == 0 and router_models(pool.base) == {"hot": "loaded", "cold": "loaded"}

        land(smollm2_gguf, farm / keys["late"])
        until(lambda: "late" in router_models(pool.base), timeout=30)
        time.sleep(4 * POLL)  # a few more polls: a reload never loads it (server-models.cpp ~955)
        assert router_models(pool.base)["late"] == "unloaded"
        status, body = chat(pool.base, "late")
        assert status == 200, body
        assert _loads(pool.status)["late"] == 1
