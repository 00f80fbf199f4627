"""`cpu-inference size` prints a table per pool for a model farm, and `validate` / `size` take a 1,000-model farm
(generated from the shipped examples, written compactly with model_groups) in seconds. Wall times are printed
(`-s`), not asserted: this machine is shared."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from cpu_inference.config import load
from cpu_inference.config.rules import plan_pool
from cpu_inference.sizing.pools import memory_request_mib
from tests.support.farm_config import thousand_model_farm

ROOT = Path(__file__).resolve().parents[2]


def _cli(*args: str) -> tuple[subprocess.CompletedProcess, float]:
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "cpu_inference.cli.main", *args], capture_output=True, text=True, cwd=ROOT, timeout=300
    )
    return proc, time.perf_counter() - start


def _pool_rows(stdout: str) -> dict[str, list[str]]:
    """Rows of the pools table (the last table printed), by pool name."""
    table = stdout[stdout.rindex("pools (") :]
    rows = [[c.strip() for c in line.strip("│").split("│")] for line in table.splitlines() if line.startswith("│")]
    return {r[0]: r for r in rows}


def test_size_prints_each_pool_of_the_farm_example() -> None:
    proc, _ = _cli("size", "examples/model-farm-eks.yaml")
    assert proc.returncode == 0, proc.stderr
    config = load(ROOT / "examples" / "model-farm-eks.yaml")
    rows = _pool_rows(proc.stdout)
    assert set(rows) == {p.name for p in config.farm.pools}
    for pool in config.farm.pools:
        plan = plan_pool(config, pool)
        assert plan is not None
        name, models, models_max, threads, memory = rows[pool.name][:5]
        assert (models, models_max, threads, memory) == (
            str(len(config.pool_models(pool.name))),
            str(plan.models_max),
            str(plan.threads_per_model),
            f"{memory_request_mib(plan)} MiB",
        )
        assert plan.memory_request_bytes <= pool.memory_gib * 1024**3  # the request fits the replica the user gave
    # the dedicated (hot) models keep the per-model table; pooled models are not in it
    listed = [
        line.split("│")[1].strip()
        for line in proc.stdout[: proc.stdout.index("pools (")].splitlines()
        if line.startswith("│")
    ]
    assert listed == [m.name for m in config.models if config.serving_of(m) == "dedicated"]


@pytest.mark.parametrize("target", ["eks", "sagemaker"])
def test_validate_and_size_take_a_thousand_model_farm(tmp_path: Path, target: str) -> None:
    cfg = thousand_model_farm(tmp_path / f"farm-{target}.yaml", target)
    lines = len(cfg.read_text().splitlines())
    proc, validate_s = _cli("validate", str(cfg))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"{cfg}: ok — model-farm on {target}, 1000 model(s): 996 in 2 pool(s), 4 dedicated"
    assert proc.stderr == ""  # no warning for the generated farm
    proc, size_s = _cli("size", str(cfg))
    assert proc.returncode == 0, proc.stderr
    rows = _pool_rows(proc.stdout)
    config = load(cfg)
    assert (
        len(rows) >= 2
        and sum(int(r[1]) for r in rows.values())
        == sum(1 for m in config.models if config.serving_of(m) == "pool")
        == 996
    )
    assert all(int(r[2]) >= 1 for r in rows.values())
    print(
        f"\n1,000-model {target} farm ({lines} lines of YAML): validate {validate_s:.2f} s, size {size_s:.2f} s (wall, incl. interpreter start)"
    )
