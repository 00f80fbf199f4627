"""A pool's hot models (farm.pools[].preload) in the rendered preset: `load-on-startup = true` in exactly their
sections (a preset-only key of the pinned router: common/arg.cpp common_params_add_preset_options), read back with
the runtime's own preset parser (containers/llama-server/pool_mode.read_preset, the engine's INI grammar). The
engine checks of the key itself: tests/runtime/engine/test_pool_preload.py."""

from __future__ import annotations

import importlib
import sys
from dataclasses import replace

import aws_cdk as cdk
import pytest
import yaml

from cpu_inference import sizing
from cpu_inference.config import parse
from cpu_inference.engines.pool_preset import LOAD_ON_STARTUP, PoolModel, pool_preset, render_preset
from cpu_inference.k8s.charts.model_pool_chart import PRESET_FILE, ModelPoolChartProps
from cpu_inference.patterns import ModelFarm
from cpu_inference.patterns.from_config import model_farm_props
from cpu_inference.sizing.pools import pool_plan
from tests.runtime.engine.serving import ENGINE_DIR

ENV = cdk.Environment(account="123456789012", region="us-east-1")
NAMES = ("a", "b", "c", "d")
# The container's modules are plain top-level modules next to entrypoint.py (tests/runtime/engine/conftest.py).
if str(ENGINE_DIR) not in sys.path:
    sys.path.insert(0, str(ENGINE_DIR))
pool_mode = importlib.import_module("pool_mode")


def _hot(preset: str) -> dict[str, str]:
    """Sections that carry the key, and its value."""
    sections = pool_mode.read_preset(PRESET_FILE, text=preset)
    return {n: s[LOAD_ON_STARTUP] for n, s in sections.items() if LOAD_ON_STARTUP in s}


def test_render_preset_writes_the_key_in_exactly_the_preloaded_sections() -> None:
    models = [PoolModel(n, f"{n}/0000000000000001/m.gguf", ctx_size=512, preload=n in ("b", "d")) for n in NAMES]
    text = pool_preset(models)
    assert _hot(text) == {"b": "true", "d": "true"}
    assert pool_mode.GLOBAL_SECTION in pool_mode.read_preset(PRESET_FILE, text=text)
    # Nothing else changes: the same preset without preload differs by those two lines only.
    plain = pool_preset([replace(m, preload=False) for m in models])
    assert [line for line in text.splitlines() if line not in plain.splitlines()] == [f"{LOAD_ON_STARTUP} = true"] * 2
    assert _hot(render_preset([replace(m, preload=False) for m in models])) == {}
    # The engine's flags of a model (its engine.json on SageMaker) never carry it: a preset-only key.
    assert LOAD_ON_STARTUP not in models[1].flags()
    with pytest.raises(ValueError, match="options key 'load-on-startup'"):
        PoolModel("x", "x/1/x.gguf", ctx_size=512, options={LOAD_ON_STARTUP: "true"}).validate()


def _plan(models_max: int | None = 2):
    spec = sizing.ModelSpec(parameters_billions=0.135, quantization="Q4_K_M", context_window=2048, task="chat")
    return pool_plan({n: spec for n in NAMES}, cpu=4, memory_bytes=16 << 30, models_max=models_max)


def _from_plan(preload: tuple[str, ...], models_max: int | None = 2) -> ModelPoolChartProps:
    return ModelPoolChartProps.from_plan(
        name="small",
        image="123456789012.dkr.ecr.us-east-1.amazonaws.com/llama-server@sha256:" + "b" * 64,
        plan=_plan(models_max),
        paths={n: f"{n}/0000000000000001/m.gguf" for n in NAMES},
        bucket_name="cpu-inference-models-123456789012",
        region="us-east-1",
        preload=preload,
    )


def test_chart_props_mark_the_preloaded_models_and_refuse_what_the_engine_would_not_start() -> None:
    p = _from_plan(("c", "a"))
    assert [m.name for m in p.models if m.preload] == ["a", "c"]
    p.validate()
    assert _hot(pool_preset(p.models)) == {"a": "true", "c": "true"}
    with pytest.raises(ValueError, match=r"preload 3 models to load at start but pool small holds 2 at once"):
        _from_plan(("a", "b", "c"))
    with pytest.raises(ValueError, match=r"preload \['zz'\] are not models of pool small"):
        _from_plan(("a", "zz"))
    # Props built by hand are checked too (models_max lowered below the preloaded count).
    with pytest.raises(ValueError, match=r"models with preload: 2 models to load at start but pool small holds 1"):
        replace(p, models_max=1).validate()


def test_a_farm_from_config_renders_the_preload_into_its_pool_configmap() -> None:
    doc = {
        "target": "eks",
        "pattern": "model-farm",
        "models": [
            {
                "name": n,
                "source": {"hf_repo": f"acme/{n}-GGUF", "file": "m-Q4_K_M.gguf"},
                "parameters_billions": 0.135,
                "task": "chat",
            }
            for n in NAMES
        ],
        "farm": {"pools": [{"name": "small", "models_max": 3, "preload": ["d", "b"]}]},
    }
    config = parse(yaml.safe_dump(doc, sort_keys=False))
    app = cdk.App()
    farm = ModelFarm(cdk.Stack(app, "Farm", env=ENV), "Farm", props=model_farm_props(config))
    assert farm.workloads is not None
    chart = farm.workloads.pool_charts["small"]
    assert _hot(chart.preset) == {"b": "true", "d": "true"}
    (configmap,) = [o for o in chart.to_json() if o["kind"] == "ConfigMap"]
    assert configmap["data"][PRESET_FILE] == chart.preset


def test_the_local_farm_preloads_the_same_models_within_its_capped_models_max() -> None:
    """`cpu-inference local` renders its pool's preset with the same function and preload; when this machine caps
    models_max (local_pools.cap_pools) it preloads no more than the cap (more would stop the router at start)."""
    from cpu_inference.cli.local_pools import plan_pools

    doc = {
        "target": "eks",
        "pattern": "model-farm",
        "models": [
            {"name": n, "source": {"hf_repo": f"acme/{n}-GGUF", "file": "m.gguf"}, "parameters_billions": 0.135}
            for n in NAMES
        ],
        "farm": {"pools": [{"name": "small", "models_max": 3, "preload": ["d", "b", "a"]}]},
    }
    config = parse(yaml.safe_dump(doc, sort_keys=False))
    (pool,) = plan_pools(config, None)
    assert _hot(pool_preset(pool.pool_models())) == {"a": "true", "b": "true", "d": "true"}
    pool.models_max = 2  # what cap_pools does on a small machine
    assert _hot(pool_preset(pool.pool_models())) == {"b": "true", "d": "true"}
    (only_b,) = plan_pools(config, ["b", "c"])  # --models: a preloaded model not started here is not in the preset
    assert _hot(pool_preset(only_b.pool_models())) == {"b": "true"}
