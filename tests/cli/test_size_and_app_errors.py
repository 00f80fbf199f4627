"""`cpu-inference size` prints the sizing table; the CDK app turns config errors into one line each, exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _cli(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "cpu_inference.cli.main", *args], capture_output=True, text=True, cwd=ROOT, **kw
    )


def test_size_prints_a_row_per_model_from_sizing() -> None:
    proc = _cli("size", "examples/slm-prefilter-sagemaker.yaml")
    assert proc.returncode == 0, proc.stderr
    rows = [line for line in proc.stdout.splitlines() if line.startswith("│")]
    assert len(rows) == 2
    cells = [c.strip() for c in rows[1].strip("│").split("│")]
    # zephyr-7b on ml.c7g.8xlarge: 32 threads, 8 slots of 4096 tokens (each slot gets the full context)
    assert cells[0] == "zephyr-7b" and cells[3] == "ml.c7g.8xlarge"
    assert cells[8:] == ["32", "8", "4096", "yes"]


def test_size_list_prints_the_catalog() -> None:
    proc = _cli("size", "--list")
    assert proc.returncode == 0
    assert "c8g.48xlarge" in proc.stdout and "ml.c7g.8xlarge" in proc.stdout


def test_size_of_a_bad_config_is_one_line_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "models:\n  - name: Bad_Name\n    source: {hf_repo: a/b, file: m.gguf}\n    parameters_billions: 1\n"
    )
    proc = _cli("size", str(bad))
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        f"{bad}: models[0].name: string should match pattern '^[a-z0-9]([a-z0-9-]{{0,38}}[a-z0-9])?$' (got 'Bad_Name') — short DNS-safe name, unique in the config, e.g. smollm2-135m"
    ]


def test_cdk_app_reports_config_errors_without_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("target: eks\nmodels: []\n")
    env = {**os.environ, "CDK_CONTEXT_JSON": json.dumps({"config": str(bad)}), "CDK_OUTDIR": str(tmp_path / "out")}
    proc = subprocess.run([sys.executable, "apps/app.py"], cwd=ROOT, env=env, capture_output=True, text=True)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert (
        proc.stderr.strip().splitlines()[-1]
        == f"{bad}: models: no model to serve — list models under models: or model_groups:"
    )


def test_stacks_lists_the_synthesized_assembly(tmp_path: Path) -> None:
    env = {**os.environ, "CDK_OUTDIR": str(tmp_path / "out")}
    subprocess.run([sys.executable, "apps/app.py"], cwd=ROOT, env=env, check=True, capture_output=True)
    proc = _cli("stacks", str(tmp_path / "out"))
    assert proc.returncode == 0
    assert proc.stdout.startswith("cpu-inference-slm-prefilter  (")


def test_module_entry_point_reports_user_errors_without_a_traceback(tmp_path) -> None:
    """`python -m cpu_inference.cli.main` (what the Makefile runs) keeps user errors to one line, exit 2."""
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "cpu_inference.cli.main", "stacks", str(tmp_path / "no-such-cdk.out")],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr and out.stderr.startswith("cpu-inference stacks:")
