"""The source root `constructs/` must never become a package: it would shadow the `constructs` library."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_constructs_source_root_has_no_init() -> None:
    assert not (ROOT / "constructs" / "__init__.py").exists()


def test_no_bundled_copy_in_the_source_tree() -> None:
    # Only wheels carry cpu_inference/_bundled (setup.py's build_py); one in the checkout would shadow the live
    # containers/ and lambda/ trees (cpu_inference._resources prefers it).
    assert not (ROOT / "constructs" / "cpu_inference" / "_bundled").exists()


def test_constructs_import_from_repo_root_is_the_library() -> None:
    code = (
        "import constructs, jsii, pathlib; from constructs import Construct;"
        "print(pathlib.Path(constructs.__file__).resolve()); print(Construct.__module__)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    assert "site-packages" in out[0], out
    assert not out[0].startswith(str(ROOT / "constructs")), out
    assert out[1] == "constructs"


def test_public_api_is_reexported() -> None:
    import cpu_inference

    for name in cpu_inference.__all__:
        assert getattr(cpu_inference, name) is not None, name
