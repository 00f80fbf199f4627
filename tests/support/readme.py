"""Run a subsystem README's ```python blocks as written (what a user copies), returning their globals."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any


def run_only_python_block(readme: Path) -> dict[str, Any]:
    (code,) = re.findall(r"```python\n(.*?)```", readme.read_text(), re.S)
    scope: dict[str, Any] = {}
    exec(compile(code, str(readme), "exec"), scope)
    return scope


def run_python_blocks(readme: Path) -> list[dict[str, Any]]:
    """Every ```python block of `readme`, each run on its own (a user copies one), in order: their globals."""
    out = []
    for i, code in enumerate(re.findall(r"```python\n(.*?)```", readme.read_text(), re.S)):
        scope: dict[str, Any] = {}
        exec(compile(code, f"{readme}#block{i}", "exec"), scope)
        out.append(scope)
    return out
