"""Run a subsystem README's only ```python block as written (what a user copies), returning its globals."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any


def run_only_python_block(readme: Path) -> dict[str, Any]:
    (code,) = re.findall(r"```python\n(.*?)```", readme.read_text(), re.S)
    scope: dict[str, Any] = {}
    exec(compile(code, str(readme), "exec"), scope)
    return scope
