"""AWS decision framework for CPU inference: warnings, not errors (the user may know better)."""

from __future__ import annotations

from pathlib import Path

import yaml

from cpu_inference.config import parse, warnings_for

ROOT = Path(__file__).resolve().parents[2]


def _config(**changes):
    doc = yaml.safe_load((ROOT / "config.yaml").read_text())
    model = doc["models"][0]
    model.update(changes.pop("model", {}))
    doc.update(changes)
    return parse(yaml.safe_dump(doc))


def _messages(config) -> list[str]:
    return [w.render("config.yaml") for w in warnings_for(config)]


def test_default_config_has_no_warnings() -> None:
    assert _messages(_config()) == []


def test_70b_online_warns_offline_only() -> None:
    msgs = _messages(
        _config(model={"parameters_billions": 70, "task": "chat"}, eks={"instance_families": ["r7g", "r8g"]})
    )
    assert any("models[0]: 70B on CPU serves ~1–5 tok/s" in m for m in msgs), msgs


def test_70b_batch_does_not_warn() -> None:
    msgs = _messages(
        _config(model={"parameters_billions": 70, "task": "batch"}, eks={"instance_families": ["r7g", "r8g"]})
    )
    assert msgs == []


def test_mid_size_interactive_warns_batch() -> None:
    msgs = _messages(_config(model={"parameters_billions": 14, "task": "chat"}))
    assert msgs == [
        "config.yaml: warning: models[0]: 14B on CPU suits batch/async use — for interactive p95 targets prefer ≤ 8B or a GPU"
    ]


def test_tight_latency_and_high_rps_warn() -> None:
    msgs = _messages(_config(slo={"p95_latency_ms": 30, "peak_requests_per_second": 250}))
    assert any("slo.p95_latency_ms: 30 ms p95" in m for m in msgs)
    assert any("slo.peak_requests_per_second: 250 req/s" in m for m in msgs)


def test_bf16_for_7b_warns() -> None:
    msgs = _messages(_config(model={"parameters_billions": 7, "quantization": "BF16", "task": "batch"}))
    assert msgs == [
        "config.yaml: warning: models[0].quantization: BF16 for a 7B model is ~4–5× slower than Q4_K_M on CPU — use Q4_K_M (default), Q5_K_M or Q8_0"
    ]


def test_validate_strict_turns_warnings_into_exit_2(tmp_path: Path) -> None:
    import subprocess
    import sys

    doc = yaml.safe_load((ROOT / "config.yaml").read_text())
    doc["slo"]["p95_latency_ms"] = 20
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(doc))
    lax = subprocess.run(
        [sys.executable, "-m", "cpu_inference.cli.main", "validate", str(tmp_path / "c.yaml")],
        capture_output=True,
        text=True,
    )
    strict = subprocess.run(
        [sys.executable, "-m", "cpu_inference.cli.main", "validate", "--strict", str(tmp_path / "c.yaml")],
        capture_output=True,
        text=True,
    )
    assert lax.returncode == 0 and "warning: slo.p95_latency_ms" in lax.stderr
    assert strict.returncode == 2
