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


def test_one_rule_says_where_the_cache_is() -> None:
    """Python finds the cache through cpu_inference._resources.cache_dir() and the build scripts through
    scripts/cache_lib.sh: no other file builds the path from the home directory or reads CPU_INFERENCE_CACHE itself
    (a test reading a path no `make test` step creates passes only on a machine someone prepared by hand)."""
    owners = {ROOT / "constructs" / "cpu_inference" / "_resources.py", ROOT / "scripts" / "cache_lib.sh", Path(__file__)}
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "*.py", "*.sh", "Makefile"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.split()
    python = ("Path.home()", 'environ.get("CPU_INFERENCE_CACHE"', 'environ["CPU_INFERENCE_CACHE"]')
    shell = ("CPU_INFERENCE_CACHE:-", "CPU_INFERENCE_CACHE ?=", "CPU_INFERENCE_CACHE=")
    offenders = []
    for name in files:
        path = ROOT / name
        if path in owners or not path.is_file():
            continue
        needles = python if path.suffix == ".py" else shell
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            code = line.split("#", 1)[0]
            if any(needle in code for needle in needles):
                offenders.append(f"{name}:{n}: {line.strip()}")
    assert offenders == [], "\n".join(offenders)
