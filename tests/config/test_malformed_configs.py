"""`cpu-inference validate` on malformed configs: one precise line each (key path — fix), exit 2, no traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
BASE = yaml.safe_load((ROOT / "config.yaml").read_text())


def _with(mutate) -> str:
    doc = yaml.safe_load(yaml.safe_dump(BASE))
    mutate(doc)
    return yaml.safe_dump(doc, sort_keys=False)


def _set(path: str, value):
    def mutate(doc):
        *parents, last = path.split(".")
        node = doc
        for key in parents:
            node = node[int(key)] if key.isdigit() else node.setdefault(key, {})
        if value is _DELETE:
            del node[last]
        else:
            node[int(last) if last.isdigit() else last] = value

    return mutate


_DELETE = object()

SECOND_MODEL = {
    "name": "gemma-270m",
    "source": {"hf_repo": "unsloth/gemma-3-270m-it-GGUF", "file": "gemma-3-270m-it-Q4_K_M.gguf"},
    "parameters_billions": 0.27,
    "task": "chat",
}

# (case id, mutation or raw YAML text, the exact line expected on stderr)
CASES = [
    (
        "unknown-key",
        _set("models.0.source.revison", "main"),
        "config.yaml: models[0].source.revison: unknown key — did you mean 'revision'?",
    ),
    ("unknown-top-level-key", _set("modles", []), "config.yaml: modles: unknown key — did you mean 'models'?"),
    (
        "wrong-type",
        _set("models.0.parameters_billions", "seven"),
        "config.yaml: models[0].parameters_billions: input should be a valid number, unable to parse string as a number (got 'seven') — parameter count in billions, e.g. 0.135 or 8",
    ),
    (
        "missing-model-file",
        lambda d: d["models"].append({**SECOND_MODEL, "source": {"hf_repo": "unsloth/gemma-3-270m-it-GGUF"}}),
        "config.yaml: models[1].source: file is required for engine llama.cpp — name the .gguf file in the repo (source.file), or set engine: vllm for a safetensors repo",
    ),
    (
        "file-not-gguf",
        _set("models.0.source.file", "model.safetensors"),
        "config.yaml: models[0].source.file: string should match pattern '^[^/].*\\.gguf$' (got 'model.safetensors') — the GGUF file name inside the repo (ends in .gguf); engine llama.cpp only — engine vllm copies the repo's safetensors checkpoint",
    ),
    (
        "negative-replicas",
        _set("models.0.replicas", {"min": -1, "max": 4}),
        "config.yaml: models[0].replicas.min: input should be greater than or equal to 0 (got -1) — minimum replicas (0 allows scale to zero on EKS)",
    ),
    (
        "replicas-min-above-max",
        _set("models.0.replicas", {"min": 5, "max": 2}),
        "config.yaml: models[0].replicas: min (5) is greater than max (2) — set min ≤ max",
    ),
    (
        "unknown-target",
        _set("target", "lambda"),
        "config.yaml: target: 'lambda' is not allowed — use 'eks' or 'sagemaker'",
    ),
    (
        "unknown-instance-type",
        lambda d: (d.update(target="sagemaker"), d.setdefault("sagemaker", {}).update(instance_type="ml.c7g.3xlarge")),
        "config.yaml: sagemaker.instance_type: unknown instance type 'ml.c7g.3xlarge' — did you mean ml.c7g.xlarge?",
    ),
    (
        "unknown-instance-family",
        _set("eks.instance_families", ["c7g", "c7gg"]),
        "config.yaml: eks.instance_families[1]: unknown instance family 'c7gg' — did you mean c7g?",
    ),
    (
        "model-too-big-for-instance",
        lambda d: (d.update(target="sagemaker"), d["models"][0].update(parameters_billions=70, task="batch")),
        "config.yaml: models[0]: smollm2-1-7b (70B Q4_K_M) needs 59.3 GiB but ml.c7g.2xlarge has 15.0 GiB usable — use a larger instance such as ml.r7gd.2xlarge",
    ),
    (
        "model-too-big-for-any-node",
        lambda d: (
            d["models"][0].update(parameters_billions=400, quantization="Q8_0", task="batch"),
            d["eks"].update(instance_families=["c7g"]),
        ),
        "config.yaml: models[0]: smollm2-1-7b (400B Q8_0) needs 593.7 GiB, more than the largest allowed node (c7g.16xlarge, 116.4 GiB allocatable) — allow r-family or larger instance types, or a smaller quantization",
    ),
    (
        "duplicate-model-name",
        lambda d: d["models"].append(dict(d["models"][0])),
        "config.yaml: models: model name 'smollm2-1-7b' appears twice — model names must be unique",
    ),
    (
        "escalation-missing",
        _set("escalation", _DELETE),
        "config.yaml: escalation: required for slm-prefilter — say where hard requests go (kind: openai | sagemaker | bedrock | model)",
    ),
    (
        "escalation-kind-field-missing",
        _set("escalation", {"kind": "openai"}),
        "config.yaml: escalation: kind openai needs escalation.url — fix this value",
    ),
    (
        "bad-sha256",
        _set("models.0.source.sha256", "abc123"),
        "config.yaml: models[0].source.sha256: string should match pattern '^[0-9a-f]{64}$' (got 'abc123') — expected sha256 of the file (64 hex chars); default: the one the Hub reports",
    ),
    (
        "unknown-router-label",
        _set("router.slm_labels", ["easy"]),
        "config.yaml: router: slm_labels ['easy'] are not in labels ['simple', 'complex'] — use labels from the list",
    ),
    (
        "two-slms",
        lambda d: d["models"].append({**SECOND_MODEL, "role": "slm"}),
        "config.yaml: models: slm-prefilter classifies with one SLM, found 2 (smollm2-1-7b, gemma-270m) — keep one role: slm and set role: llm on the escalation model",
    ),
    (
        "cpu-above-largest-node",
        lambda d: (d["models"][0].update(cpu=96), d["eks"].update(instance_families=["c7g"])),
        "config.yaml: models[0].cpu: 96 vCPUs is more than the largest allowed node can give (63.5) — lower cpu or allow larger instance types",
    ),
    (
        "invalid-yaml",
        "models:\n  - name: x\n   source: {}\n",
        "config.yaml: line 3, column 4: invalid YAML: expected <block end>, but found '<block mapping start>' — fix the syntax at that place",
    ),
    (
        "duplicate-key",
        "target: eks\ntarget: sagemaker\nmodels: []\n",
        "config.yaml: line 2, column 1: invalid YAML: duplicate key 'target' (first on line 1) — keep one — fix the syntax at that place",
    ),
    ("empty-file", "", "config.yaml: the file is empty — start from the repository's config.yaml"),
]


@pytest.mark.parametrize("case_id,mutation,expected", CASES, ids=[c[0] for c in CASES])
def test_validate_prints_one_precise_line(tmp_path: Path, case_id: str, mutation, expected: str) -> None:
    text = mutation if isinstance(mutation, str) else _with(mutation)
    cfg = tmp_path / "config.yaml"
    cfg.write_text(text)
    proc = subprocess.run(
        [sys.executable, "-m", "cpu_inference.cli.main", "validate", "config.yaml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stderr.splitlines() == [expected]


def test_at_least_fifteen_distinct_cases() -> None:
    assert len({c[0] for c in CASES}) >= 15


def test_default_config_is_valid() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "cpu_inference.cli.main", "validate", str(ROOT / "config.yaml")],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    assert "ok — slm-prefilter on eks" in proc.stdout


def test_missing_file_is_a_user_error(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "cpu_inference.cli.main", "validate", str(tmp_path / "nope.yaml")],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"{tmp_path / 'nope.yaml'}: file not found — pass the path of a config.yaml"
