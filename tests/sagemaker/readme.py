"""The README's marked code blocks (`<!-- example: NAME -->` right before a ```python fence)."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "constructs" / "cpu_inference" / "sagemaker" / "README.md"
_BLOCK = re.compile(r"<!-- example: (?P<name>[\w-]+) -->\n```python\n(?P<code>.*?)```", re.DOTALL)


def examples() -> dict[str, str]:
    found = {m["name"]: m["code"] for m in _BLOCK.finditer(README.read_text(encoding="utf-8"))}
    assert found, f"no marked examples in {README}"
    return found
