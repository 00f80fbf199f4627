"""farm.pools[].preload: a pool's hot models, loaded when each replica starts (issue 25). Refused at validate when
the engine could not start with it: more than models_max of them (the pinned router throws "number of models to load
on startup (%zu) exceeds models_max (%d)", tools/server/server-models.cpp load_models ~line 848: a crash loop), a
model the pool does not serve, or target sagemaker (a multi-model endpoint loads what SageMaker decides)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from cpu_inference.config import ConfigError, parse
from cpu_inference.config.rules import plan_pool
from cpu_inference.patterns.from_config import farm_pools, model_farm_props


def _model(name: str, **kw) -> dict:
    return {
        "name": name,
        "source": {"hf_repo": "acme/farm-GGUF", "file": f"{name}.gguf"},
        "parameters_billions": 0.135,
        "task": "embedding",
        **kw,
    }


def _doc(pool: dict, target: str = "eks", names: tuple[str, ...] = ("a", "b", "c")) -> dict:
    return {
        "target": target,
        "pattern": "model-farm",
        "models": [_model(n) for n in names] + [_model("hot", serving="dedicated")],
        "farm": {"pools": [{"name": "small", **pool}]},
    }


def _errors(doc: dict) -> list[str]:
    with pytest.raises(ConfigError) as exc:
        parse(yaml.safe_dump(doc, sort_keys=False))
    return str(exc.value).splitlines()


def test_preload_reaches_the_pool_settings() -> None:
    config = parse(yaml.safe_dump(_doc({"models_max": 2, "preload": ["b", "a"]})))
    assert config.farm.pools[0].preload == ["b", "a"]
    (pool,) = farm_pools(config)
    assert pool.preload == ("b", "a")
    assert parse(yaml.safe_dump(_doc({}))).farm.pools[0].preload == []


def test_more_preloads_than_models_max_are_refused() -> None:
    assert _errors(_doc({"models_max": 2, "preload": ["a", "b", "c"]})) == [
        "config.yaml: farm.pools[0].preload: 3 models to load at start but pool small holds 2 at once (models_max; the "
        "engine would refuse to start) — preload at most 2, or raise models_max or memory"
    ]


def test_the_limit_is_the_sized_models_max_when_the_pool_sets_none() -> None:
    names = tuple(f"m{i}" for i in range(12))
    doc = _doc({"memory_gib": 1}, names=names)
    plan = plan_pool(parse(yaml.safe_dump(doc)), parse(yaml.safe_dump(doc)).farm.pools[0])
    assert plan is not None and 1 <= plan.models_max < len(names)
    ok = {**doc, "farm": {"pools": [{"name": "small", "memory_gib": 1, "preload": list(names[: plan.models_max])}]}}
    parse(yaml.safe_dump(ok))
    doc["farm"]["pools"][0]["preload"] = list(names[: plan.models_max + 1])
    (line,) = _errors(doc)
    assert line.startswith(
        f"config.yaml: farm.pools[0].preload: {plan.models_max + 1} models to load at start but pool small holds "
        f"{plan.models_max} at once"
    ), line


def test_a_model_the_pool_does_not_serve_is_refused() -> None:
    # "hot" is dedicated; "zz" does not exist: neither is a model of pool small.
    assert _errors(_doc({"preload": ["a", "hot", "zz"]})) == [
        "config.yaml: farm.pools[0].preload: ['hot', 'zz'] are not models of pool small — list only models that pool "
        "small serves"
    ]
    assert _errors(_doc({"preload": ["a", "a"]})) == [
        "config.yaml: farm.pools[0].preload: names ['a'] more than once — list each model once"
    ]


def test_preload_is_refused_on_sagemaker() -> None:
    doc = _doc({"instance_type": "ml.c7g.xlarge", "preload": ["a"]}, target="sagemaker")
    assert _errors(doc) == [
        "config.yaml: farm.pools[0].preload: a SageMaker multi-model endpoint loads models on their first invocation, "
        "as SageMaker decides — remove preload (it is for target eks)"
    ]
    # The library refuses it too (ModelFarmProps without config.yaml).
    del doc["farm"]["pools"][0]["preload"]
    props = model_farm_props(parse(yaml.safe_dump(doc)))
    pools = tuple(dataclasses.replace(p, preload=("a",)) for p in props.pools)
    with pytest.raises(ValueError, match="pool small: preload is for target eks"):
        dataclasses.replace(props, pools=pools).validate()


def test_cpu_inference_validate_names_the_key(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(_doc({"models_max": 1, "preload": ["a", "b"]}), sort_keys=False))
    run = subprocess.run(
        [sys.executable, "-m", "cpu_inference.cli.main", "validate", str(path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode != 0
    assert "farm.pools[0].preload: 2 models to load at start but pool small holds 1 at once" in run.stderr + run.stdout
    assert "Traceback" not in run.stderr
