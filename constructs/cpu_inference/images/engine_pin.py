"""Read an image's pin file (engine-pin.env): KEY=VALUE lines that become docker build args.

Pure and strict: the values end up on a shell command line in the build project, so anything
outside a conservative character set is refused at synth with the file and line named.
"""

from __future__ import annotations

import re
from pathlib import Path

_KEY = re.compile(r"^[A-Z_][A-Z0-9_]*$")
# Versions, file names, hashes and URLs: no quotes, spaces or shell metacharacters.
_VALUE = re.compile(r"^[A-Za-z0-9._:/+@=,-]*$")


def parse_pin(text: str, source: str = "<pin>") -> dict[str, str]:
    """KEY=VALUE pairs in file order; blank lines and `#` comments are skipped."""
    pin: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        where = f"{source}:{number}"
        if not sep:
            raise ValueError(f"{where}: expected KEY=VALUE, got {line!r}")
        if not _KEY.match(key):
            raise ValueError(f"{where}: key {key!r} must match {_KEY.pattern}")
        if not _VALUE.match(value):
            raise ValueError(f"{where}: value of {key} has characters outside {_VALUE.pattern}: {value!r}")
        if key in pin:
            raise ValueError(f"{where}: {key} is set twice")
        pin[key] = value
    return pin


def read_pin(path: Path) -> dict[str, str]:
    return parse_pin(path.read_text(encoding="utf-8"), str(path))


def check_build_arg(key: str, value: str, source: str = "build_args") -> None:
    """The same rules for build args given in code, so every arg is safe on a command line."""
    if not _KEY.match(key):
        raise ValueError(f"{source}: key {key!r} must match {_KEY.pattern}")
    if not _VALUE.match(value):
        raise ValueError(f"{source}: value of {key} has characters outside {_VALUE.pattern}: {value!r}")
