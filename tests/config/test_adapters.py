"""models[].adapters: LoRA adapters over a base model (issue 26). Served by a model-farm on EKS over a llama.cpp base;
each refusal is one line naming the key and the fix (through `cpu-inference validate` as users see it)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from cpu_inference import sizing
from cpu_inference.config import ConfigError, parse
from cpu_inference.config.rules import model_spec
from cpu_inference.config.schema import ADAPTER_SIZE_MB
from cpu_inference.engines.adapter_hosting import adapter_hosting_problem

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def _adapter(name: str, **kw) -> dict:
    return {"name": name, "source": {"hf_repo": "acme/adapters-GGUF", "file": f"{name}.gguf", "revision": COMMIT}, **kw}


def _base(name: str = "base", adapters: list[dict] | None = None, **kw) -> dict:
    return {
        "name": name,
        "source": {"hf_repo": "acme/base-GGUF", "file": f"{name}.gguf"},
        "parameters_billions": 0.135,
        "adapters": adapters if adapters is not None else [_adapter("support-json"), _adapter("legal-tone")],
        **kw,
    }


def _doc(*models: dict, target: str = "eks", pattern: str = "model-farm") -> dict:
    return {"target": target, "pattern": pattern, "models": list(models)}


def _errors(doc: dict) -> list[str]:
    with pytest.raises(ConfigError) as exc:
        parse(yaml.safe_dump(doc, sort_keys=False))
    return str(exc.value).splitlines()


def test_adapters_parse_with_their_defaults() -> None:
    config = parse(yaml.safe_dump(_doc(_base(adapters=[_adapter("a1"), _adapter("a2", scale=0.5, size_mb=8)]))))
    a1, a2 = config.models[0].adapters
    assert (a1.name, a1.scale, a1.size_mb, a1.source.file) == ("a1", 1.0, ADAPTER_SIZE_MB, "a1.gguf")
    assert (a2.scale, a2.size_mb) == (0.5, 8)


def test_sizing_counts_the_adapters_in_the_base_memory() -> None:
    with_two = parse(yaml.safe_dump(_doc(_base(adapters=[_adapter("a1", size_mb=8), _adapter("a2")]))))
    without = parse(yaml.safe_dump(_doc(_base(adapters=[]))))
    grown = sizing.weights_bytes(model_spec(with_two.models[0])) - sizing.weights_bytes(model_spec(without.models[0]))
    assert grown == int((8 + ADAPTER_SIZE_MB) * 1e6)


def test_a_file_neither_gguf_nor_peft_is_refused_naming_the_file_key() -> None:
    # A PEFT source (no file) is converted by the catalog copy: tests/config/test_adapter_peft.py.
    bad = {"name": "bad", "source": {"hf_repo": "acme/lora", "file": "adapter.bin", "revision": COMMIT}}
    assert _errors(_doc(_base(adapters=[_adapter("ok"), bad]))) == [
        "config.yaml: models[0].adapters[1].source.file: 'adapter.bin' is neither a GGUF adapter (<adapter>.gguf) nor "
        "a PEFT adapter's adapter_model.safetensors — name the .gguf, or leave source.file out for a PEFT repo "
        "(adapter_config.json + adapter_model.safetensors, converted by the catalog copy)"
    ]


def test_names_are_unique_across_models_and_adapters() -> None:
    doc = _doc(
        _base("base", adapters=[_adapter("tuned"), _adapter("other")]),
        _base("second", adapters=[_adapter("tuned"), _adapter("base")]),
    )
    assert _errors(doc) == [
        "config.yaml: models[1].adapters[0].name: 'tuned' is already the name of models[0].adapters[0] — every model "
        "and adapter name must be unique (clients send it as `model`)",
        "config.yaml: models[1].adapters[1].name: 'base' is already the name of models[0] — every model and adapter "
        "name must be unique (clients send it as `model`)",
    ]


def test_a_vllm_base_is_refused() -> None:
    vllm = {
        "name": "vbase",
        "engine": "vllm",
        "source": {"hf_repo": "acme/base"},
        "parameters_billions": 0.135,
        "adapters": [_adapter("x")],
    }
    assert _errors(_doc(vllm)) == [
        "config.yaml: models[0].adapters: adapters are GGUF LoRA adapters for engine llama.cpp; vbase runs engine "
        "vllm — remove adapters, or use engine: llama.cpp"
    ]


def test_the_slm_prefilter_refuses_adapters() -> None:
    doc = _doc(_base(role="slm"), pattern="slm-prefilter")
    doc["escalation"] = {"kind": "openai", "url": "https://llm.example.com/v1"}
    assert _errors(doc) == [
        "config.yaml: models[0].adapters: adapters are served by a model-farm only so far (the slm-prefilter's router "
        "calls its models by their own names) — remove adapters, or use pattern: model-farm"
    ]


@pytest.mark.parametrize("scale", [0, -1, 4.5])
def test_scale_is_bounded(scale: float) -> None:
    (line,) = _errors(_doc(_base(adapters=[_adapter("a", scale=scale)])))
    assert line.startswith("config.yaml: models[0].adapters[0].scale: ")


def test_a_group_default_adapter_is_named_at_the_defaults() -> None:
    doc = {
        "target": "eks",
        "pattern": "model-farm",
        "model_groups": [
            {
                "defaults": {
                    "source": {"hf_repo": "acme/base-GGUF"},
                    "parameters_billions": 0.135,
                    "adapters": [{"name": "shared", "source": {"hf_repo": "acme/lora", "file": "adapter.bin"}}],
                },
                "models": [{"name": "m1", "source": {"file": "m1.gguf"}}],
            }
        ],
    }
    assert _errors(doc) == [
        "config.yaml: model_groups[0].defaults.adapters[0].source.file: 'adapter.bin' is neither a GGUF adapter "
        "(<adapter>.gguf) nor a PEFT adapter's adapter_model.safetensors — name the .gguf, or leave source.file out "
        "for a PEFT repo (adapter_config.json + adapter_model.safetensors, converted by the catalog copy)"
    ]


def _validate(tmp_path: Path, doc: dict) -> tuple[subprocess.CompletedProcess, Path]:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    run = subprocess.run(
        [sys.executable, "-m", "cpu_inference.cli.main", "validate", str(path)], capture_output=True, text=True
    )
    assert "Traceback" not in run.stderr
    return run, path


def test_target_sagemaker_refuses_a_pooled_base_by_validate_in_one_line(tmp_path: Path) -> None:
    doc = _doc(_base(), target="sagemaker")
    doc["farm"] = {"pools": [{"name": "default", "instance_type": "ml.c7g.2xlarge"}]}
    run, path = _validate(tmp_path, doc)
    assert run.returncode != 0
    lines = [x for x in (run.stdout + run.stderr).splitlines() if "adapters" in x]
    problem = adapter_hosting_problem("sagemaker", pooled=True, hosting="endpoints", copy="catalog")
    assert lines == [f"{path}: models[0].adapters: base: {problem}"]


def test_target_sagemaker_accepts_a_dedicated_base_by_validate(tmp_path: Path) -> None:
    """A dedicated base is served by its own endpoint, its adapters selected by `model` (the catalog's `lora` bundle:
    tests/patterns/test_adapter_farm_sagemaker.py, tests/runtime/engine/test_sagemaker_lora.py)."""
    doc = _doc(_base(serving="dedicated", instance_type="ml.c7g.2xlarge"), target="sagemaker")
    run, _ = _validate(tmp_path, doc)
    assert run.returncode == 0, run.stdout + run.stderr


def test_a_dedicated_base_on_eks_is_accepted_with_its_adapters_in_order() -> None:
    """Its pods fetch the adapters and load them in config order (tests/patterns/test_dedicated_adapter_farm.py,
    tests/runtime/router/test_gateway_dedicated_adapters.py)."""
    config = parse(yaml.safe_dump(_doc(_base(serving="dedicated"))))
    (m,) = config.models
    assert config.serving_of(m) == "dedicated"
    assert [a.name for a in m.adapters] == ["support-json", "legal-tone"]
