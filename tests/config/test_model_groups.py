"""model_groups: a farm of hundreds of models written compactly (defaults per group, one short entry per model),
expanded into Config.models with every error at the place the user wrote it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from cpu_inference.config import ConfigError, load, parse
from cpu_inference.config.schema import Config

ROOT = Path(__file__).resolve().parents[2]

GROUP = {
    "defaults": {
        "source": {"hf_repo": "acme/farm-GGUF", "revision": "abc123"},
        "parameters_billions": 0.135,
        "task": "embedding",
        "context_window": 512,
    },
    "models": [
        {"name": "m-0", "source": {"file": "m-0.gguf"}},
        {"name": "m-1", "source": {"file": "m-1.gguf", "revision": "main"}, "task": "rerank"},
        {"name": "m-2", "source": {"hf_repo": "other/repo-GGUF", "file": "m-2.gguf"}, "parameters_billions": 0.5},
        {"name": "m-3", "source": {"file": "m-3.gguf"}},
    ],
}
HOT = {
    "name": "hot",
    "serving": "dedicated",
    "source": {"hf_repo": "acme/hot-GGUF", "file": "hot.gguf"},
    "parameters_billions": 0.6,
}


def _doc(**over) -> dict:
    doc = {"pattern": "model-farm", "models": [HOT], "model_groups": [GROUP]}
    doc.update(over)
    return yaml.safe_load(yaml.safe_dump(doc))


def _errors(doc: dict) -> list[str]:
    with pytest.raises(ConfigError) as exc:
        parse(yaml.safe_dump(doc, sort_keys=False))
    return str(exc.value).splitlines()


def test_entries_merge_over_defaults_with_source_key_by_key() -> None:
    config = parse(yaml.safe_dump(_doc()))
    assert [m.name for m in config.models] == ["hot", "m-0", "m-1", "m-2", "m-3"]  # listed models first
    m0, m1, m2 = config.models[1:4]
    assert (m0.source.hf_repo, m0.source.file, m0.source.revision) == ("acme/farm-GGUF", "m-0.gguf", "abc123")
    assert (m0.task, m0.context_window, m0.parameters_billions) == ("embedding", 512, 0.135)
    assert (m1.source.revision, m1.task) == ("main", "rerank")
    assert (m2.source.hf_repo, m2.source.revision, m2.parameters_billions) == ("other/repo-GGUF", "abc123", 0.5)
    assert config.model_groups == []  # expanded: Config.models holds every model
    assert (config.model_path(0), config.model_path(2)) == ("models[0]", "model_groups[0].models[1]")
    assert config.key_path(2, "task") == "model_groups[0].models[1].task"
    assert config.key_path(2, "context_window") == "model_groups[0].defaults.context_window"


def test_an_expanded_config_round_trips() -> None:
    config = parse(yaml.safe_dump(_doc()))
    again = Config.model_validate(config.model_dump())
    assert [m.name for m in again.models] == [m.name for m in config.models]


def test_models_may_be_empty_when_groups_give_models() -> None:
    doc = _doc()
    del doc["models"]
    assert len(parse(yaml.safe_dump(doc)).models) == 4


def test_no_model_at_all_is_one_line() -> None:
    assert _errors({"pattern": "model-farm", "models": []}) == [
        "config.yaml: models: no model to serve — list models under models: or model_groups:"
    ]


def test_a_bad_key_in_defaults_is_reported_at_the_defaults() -> None:
    doc = _doc()
    doc["model_groups"][0]["defaults"]["quantizaton"] = "Q8_0"
    doc["model_groups"][0]["defaults"]["source"]["revison"] = "main"
    assert _errors(doc) == [
        "config.yaml: model_groups[0].defaults.source.revison: unknown key — did you mean 'revision'?",
        "config.yaml: model_groups[0].defaults.quantizaton: unknown key — did you mean 'quantization'?",
    ]


def test_a_name_in_defaults_is_refused() -> None:
    doc = _doc()
    doc["model_groups"][0]["defaults"]["name"] = "x"
    assert _errors(doc) == [
        "config.yaml: model_groups[0].defaults.name: a name is per model — give each entry of model_groups[0].models its own name"
    ]


def test_every_bad_entry_is_reported_at_its_entry_in_one_run() -> None:
    doc = _doc()
    entries = doc["model_groups"][0]["models"]
    entries[3]["quantization"] = "Q9"  # wrong on its own
    entries[1].update(
        context_per_slot=9000, parameters_billions=0.2
    )  # wrong only once merged (context_window 512 from defaults)
    del entries[2]["parameters_billions"]
    doc["model_groups"][0]["defaults"].pop("parameters_billions")  # now missing where an entry does not set it
    entries[0]["parameters_billions"] = 0.1
    lines = _errors(doc)
    assert lines[0].startswith("config.yaml: model_groups[0].models[3].quantization: 'Q9' is not allowed — use 'Q2_K'")
    assert lines[1:] == [
        "config.yaml: model_groups[0].models[1]: context_per_slot (9000) exceeds context_window (512) — lower context_per_slot or raise context_window",
        "config.yaml: model_groups[0].models[2].parameters_billions: required — set it in this entry or in model_groups[0].defaults: parameter count in billions, e.g. 0.135 or 8",
    ]


def test_an_entry_needs_a_name() -> None:
    doc = _doc()
    del doc["model_groups"][0]["models"][2]["name"]
    assert _errors(doc) == [
        "config.yaml: model_groups[0].models[2].name: required — short DNS-safe name, unique in the config, e.g. smollm2-135m"
    ]


def test_names_are_unique_across_models_and_groups() -> None:
    doc = _doc()
    doc["model_groups"].append(
        {
            "models": [
                {**HOT, "serving": None},
                {"name": "m-3", "source": {"hf_repo": "a/b", "file": "x.gguf"}, "parameters_billions": 1},
            ]
        }
    )
    del doc["model_groups"][1]["models"][0]["serving"]
    assert _errors(doc) == [
        "config.yaml: model_groups[1].models[0].name: model name 'hot' appears twice (also models[0]) — model names must be unique",
        "config.yaml: model_groups[1].models[1].name: model name 'm-3' appears twice (also model_groups[0].models[3]) — model names must be unique",
    ]


def test_rule_errors_name_the_entry_or_the_defaults_once() -> None:
    doc = _doc(target="sagemaker")
    doc["model_groups"][0]["defaults"]["instance_type"] = "ml.m7g.xlarge"  # not a SageMaker hosting type
    doc["model_groups"][0]["models"][2]["instance_type"] = "ml.c7g.3xlarge"
    assert _errors(doc) == [
        "config.yaml: model_groups[0].defaults.instance_type: 'ml.m7g.xlarge' is not a SageMaker hosting instance type (not in ProductionVariantInstanceType) — use ml.m8g.xlarge (4 vCPUs, 16 GiB) (and 2 more models of this group)",
        "config.yaml: model_groups[0].models[2].instance_type: unknown instance type 'ml.c7g.3xlarge' — did you mean ml.c7g.xlarge?",
    ]


def test_the_old_schema_refused_model_groups_the_cli_accepts_them(tmp_path: Path) -> None:
    cfg = tmp_path / "farm.yaml"
    cfg.write_text(yaml.safe_dump(_doc()))
    out = subprocess.run(
        [sys.executable, "-m", "cpu_inference.cli.main", "validate", str(cfg)], capture_output=True, text=True, cwd=ROOT
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"{cfg}: ok — model-farm on eks, 5 model(s): 4 in 1 pool(s), 1 dedicated"


def test_the_farm_example_shows_pools_groups_and_a_hot_model() -> None:
    raw = yaml.safe_load((ROOT / "examples" / "model-farm-eks.yaml").read_text())
    assert len(raw["farm"]["pools"]) >= 2 and raw["model_groups"][0]["defaults"]
    assert all(len(entry) <= 6 for group in raw["model_groups"] for entry in group["models"])  # compact entries
    config = load(ROOT / "examples" / "model-farm-eks.yaml")
    serving = {m.name: config.serving_of(m) for m in config.models}
    assert serving["qwen3-0-6b"] == "dedicated" and config.models[0].replicas.min >= 2  # the hot one
    pooled = [m for m in config.models if serving[m.name] == "pool"]
    assert len(pooled) >= 15 and {config.pool_of(m).name for m in pooled} == {p.name for p in config.farm.pools}
