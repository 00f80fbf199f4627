"""Synthesize every shipped config once per session (config.yaml and examples/*.yaml), with cdk-nag applied."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest

from cpu_inference.app import build_app
from cpu_inference.config import Config, load
from tests.support.cdk import apply_nag, synth, template_json

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = [ROOT / "config.yaml", *sorted((ROOT / "examples").glob("*.yaml"))]


@dataclass
class Synthesized:
    config: Config
    stack: cdk.Stack
    template: dict[str, Any]


def _ids() -> list[str]:
    return [p.relative_to(ROOT).as_posix() for p in CONFIGS]


@pytest.fixture(scope="session")
def synthesized() -> dict[str, Synthesized]:
    out: dict[str, Synthesized] = {}
    for path in CONFIGS:
        config = load(path)
        app, stack = build_app(config, app=cdk.App())
        apply_nag(app)
        synth(app)
        out[path.relative_to(ROOT).as_posix()] = Synthesized(config, stack, template_json(stack))
    return out


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "config_id" in metafunc.fixturenames:
        metafunc.parametrize("config_id", _ids())
