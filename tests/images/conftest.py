"""Fixtures for the image construct tests: small build contexts that carry the repo's real engine pin."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.images.contexts import DOCKERFILE, REAL_PIN


@pytest.fixture(scope="session")
def real_pin() -> dict[str, str]:
    from cpu_inference.images.engine_pin import read_pin

    return read_pin(REAL_PIN)


@pytest.fixture(scope="module")
def make_context(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    """make_context(name, dockerfile=DOCKERFILE, pin=None, files={}) -> a context directory."""

    def make(
        name: str, *, dockerfile: str = DOCKERFILE, pin: str | None = None, files: dict[str, str] | None = None
    ) -> Path:
        context = tmp_path_factory.mktemp(name)
        (context / "Dockerfile").write_text(dockerfile)
        if pin is None:
            shutil.copy(REAL_PIN, context / "engine-pin.env")
        else:
            (context / "engine-pin.env").write_text(pin)
        for rel, text in (files or {}).items():
            (context / rel).parent.mkdir(parents=True, exist_ok=True)
            (context / rel).write_text(text)
        return context

    return make
