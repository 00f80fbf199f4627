"""Everything the README promises is importable from `cpu_inference`, and the pure side stays light."""

from __future__ import annotations

import subprocess
import sys

import cpu_inference


def test_every_public_name_resolves() -> None:
    missing = [name for name in cpu_inference.__all__ if getattr(cpu_inference, name, None) is None]
    assert missing == []


def test_config_and_sizing_do_not_start_jsii() -> None:
    code = "import sys, cpu_inference; cpu_inference.load_config; cpu_inference.sizing; print('aws_cdk' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
