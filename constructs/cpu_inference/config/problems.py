"""A config problem: where (key path), what is wrong and how to fix it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    path: str  # models[1].source.file ('' for the whole document)
    message: str  # what is wrong — how to fix it
    severity: str = "error"  # error | warning

    def render(self, filename: str) -> str:
        where = f"{self.path}: " if self.path else ""
        prefix = "warning: " if self.severity == "warning" else ""
        return f"{filename}: {prefix}{where}{self.message}"


class ConfigError(Exception):
    def __init__(self, filename: str, problems: list[Problem]):
        self.filename = filename
        self.problems = problems
        super().__init__("\n".join(p.render(filename) for p in problems))
