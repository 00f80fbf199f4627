"""`engine: llama.cpp | vllm` per model: what each engine loads, where vLLM cannot go, and the one line a wrong
combination gets (the key written and the fix)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from cpu_inference.config import ConfigError
from cpu_inference.config.loader import parse
from cpu_inference.config.rules import model_spec

ROOT = Path(__file__).resolve().parents[2]
VLLM_MODEL = {
    "name": "qwen3-0-6b",
    "engine": "vllm",
    "source": {"hf_repo": "Qwen/Qwen3-0.6B"},
    "parameters_billions": 0.6,
    "task": "chat",
}
GGUF_MODEL = {
    "name": "gemma-270m",
    "source": {"hf_repo": "unsloth/gemma-3-270m-it-GGUF", "file": "gemma-3-270m-it-Q4_K_M.gguf"},
    "parameters_billions": 0.27,
    "task": "classification",
}


def _farm(*models: dict, target: str = "eks") -> str:
    return yaml.safe_dump({"target": target, "pattern": "model-farm", "models": list(models)}, sort_keys=False)


def _problems(text: str) -> list[str]:
    with pytest.raises(ConfigError) as err:
        parse(text)
    return [p.render("config.yaml") for p in err.value.problems]


def test_a_vllm_model_takes_a_safetensors_repo_in_bfloat16_by_default() -> None:
    config = parse(_farm(VLLM_MODEL, GGUF_MODEL))
    vllm, gguf = config.models
    assert (vllm.engine, vllm.source.file, vllm.weights_dtype) == ("vllm", None, "bfloat16")
    assert (gguf.engine, gguf.dtype) == ("llama.cpp", None)
    spec = model_spec(vllm, config)
    assert (spec.engine, spec.dtype) == ("vllm", "bfloat16")


def test_in_a_model_farm_a_vllm_model_is_served_dedicated_and_a_gguf_one_pooled() -> None:
    config = parse(_farm(VLLM_MODEL, GGUF_MODEL))
    assert [config.serving_of(m) for m in config.models] == ["dedicated", "pool"]
    assert [m.name for m in config.pool_models("default")] == ["gemma-270m"]


@pytest.mark.parametrize(
    "change,expected",
    [
        (
            {"source": {"hf_repo": "Qwen/Qwen3-0.6B", "file": "qwen3-0.6b-q8_0.gguf"}},
            "models[0].source: engine vllm loads the repo's safetensors checkpoint, not a GGUF file — remove source.file (qwen3-0.6b-q8_0.gguf) or use engine: llama.cpp",
        ),
        (
            {"source": {"hf_repo": "Qwen/Qwen3-0.6B", "sha256": "a" * 64}},
            "models[0].source: sha256 pins one GGUF file; engine vllm copies several files — remove source.sha256 and pin the snapshot with revision: <full commit sha>",
        ),
        (
            {"quantization": "Q8_0"},
            "models[0].quantization: quantization is a GGUF setting; engine vllm runs the checkpoint in dtype — remove quantization (dtype defaults to bfloat16) or use engine: llama.cpp",
        ),
        (
            {"task": "embedding"},
            "models[0].task: task embedding stays on engine llama.cpp here (vLLM's pooling runner is not wired) — use engine: llama.cpp, or a generation task (chat, extraction, classification, routing, batch)",
        ),
        (
            {"serving": "pool"},
            "models[0].serving: engine vllm serves one model per process, so it cannot share a farm pool — remove serving: pool (the model gets its own replicas) or use engine: llama.cpp",
        ),
        ({"engine": "vllm-cpu"}, "models[0].engine: 'vllm-cpu' is not allowed — use 'llama.cpp' or 'vllm'"),
        ({"dtype": "int8"}, "models[0].dtype: 'int8' is not allowed — use 'bfloat16', 'float16' or 'float32'"),
    ],
)
def test_a_vllm_model_that_cannot_run_gets_one_line_naming_the_key(change: dict, expected: str) -> None:
    lines = _problems(_farm({**VLLM_MODEL, **change}))
    assert len(lines) == 1 and lines[0].startswith(f"config.yaml: {expected}"), lines


@pytest.mark.parametrize(
    "change,expected",
    [
        (
            {"source": {"hf_repo": "unsloth/gemma-3-270m-it-GGUF"}},
            "models[0].source: file is required for engine llama.cpp — name the .gguf file in the repo (source.file), or set engine: vllm for a safetensors repo",
        ),
        (
            {"dtype": "bfloat16"},
            "models[0].dtype: dtype is for engine vllm — llama.cpp runs the GGUF file's quantization: remove dtype, or set engine: vllm",
        ),
    ],
)
def test_a_llama_cpp_model_without_its_gguf_or_with_a_dtype_is_refused(change: dict, expected: str) -> None:
    lines = _problems(_farm({**GGUF_MODEL, **change}))
    assert lines == [f"config.yaml: {expected}"]


def test_model_groups_carry_the_engine_to_every_entry_and_errors_name_the_line_written() -> None:
    doc = {
        "target": "eks",
        "pattern": "model-farm",
        "model_groups": [
            {
                "defaults": {"engine": "vllm", "parameters_billions": 0.6, "task": "chat"},
                "models": [
                    {"name": "a", "source": {"hf_repo": "Qwen/Qwen3-0.6B"}},
                    {"name": "b", "source": {"hf_repo": "Qwen/Qwen3-0.6B"}, "quantization": "Q4_K_M"},
                ],
            }
        ],
    }
    lines = _problems(yaml.safe_dump(doc))
    assert len(lines) == 1 and lines[0].startswith(
        "config.yaml: model_groups[0].models[1].quantization: quantization is a GGUF setting"
    ), lines
    del doc["model_groups"][0]["models"][1]["quantization"]
    assert [m.engine for m in parse(yaml.safe_dump(doc)).models] == ["vllm", "vllm"]


def test_validate_and_size_show_a_vllm_model_in_its_dtype(tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text(
        _farm(VLLM_MODEL, GGUF_MODEL, target="sagemaker").replace(
            "target: sagemaker", "target: sagemaker\nsagemaker:\n  instance_type: ml.c7i.2xlarge"
        )
    )
    run = [sys.executable, "-m", "cpu_inference.cli.main"]
    ok = subprocess.run([*run, "validate", "config.yaml"], cwd=tmp_path, capture_output=True, text=True)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    size = subprocess.run(
        [*run, "size", "config.yaml"], cwd=tmp_path, capture_output=True, text=True, env={"COLUMNS": "240", "PATH": ""}
    )
    assert size.returncode == 0, size.stdout + size.stderr
    row = next(line for line in size.stdout.splitlines() if "qwen3-0-6b" in line)
    assert "bfloat16 (vLLM)" in row and "ml.c7i.2xlarge" in row


def test_validate_warns_where_vllm_costs_more_than_it_gives() -> None:
    from cpu_inference.config.loader import warnings_for

    small = {**VLLM_MODEL, "cpu": 2}
    big = {
        **VLLM_MODEL,
        "name": "qwen3-8b",
        "source": {"hf_repo": "Qwen/Qwen3-8B"},
        "parameters_billions": 8.2,
        "cpu": 15,
    }
    lines = [p.render("config.yaml") for p in warnings_for(parse(_farm(small, big)))]
    assert any(
        line.startswith(
            "config.yaml: warning: models[0].cpu: engine vllm keeps one CPU for its scheduler, so 2 vCPUs leave 1"
        )
        for line in lines
    ), lines
    assert any(
        line.startswith("config.yaml: warning: models[1].engine: bfloat16 weights of a 8.2B model are 3.3× the bytes")
        for line in lines
    ), lines
    assert not any("models[0].engine" in line or "models[1].cpu" in line for line in lines)
