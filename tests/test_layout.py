"""The source root `constructs/` must never become a package: it would shadow the `constructs` library."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_constructs_source_root_has_no_init() -> None:
    assert not (ROOT / "constructs" / "__init__.py").exists()


def test_no_bundled_copy_in_the_source_tree() -> None:
    # Only wheels carry cpu_inference/_bundled (setup.py's build_py); one in the checkout would shadow the live
    # containers/ and lambda/ trees (cpu_inference._internal.resources prefers it).
    assert not (ROOT / "constructs" / "cpu_inference" / "_bundled").exists()


def test_constructs_import_from_repo_root_is_the_library() -> None:
    code = (
        "import constructs, jsii, pathlib; from constructs import Construct;"
        "print(pathlib.Path(constructs.__file__).resolve()); print(Construct.__module__)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    assert "site-packages" in out[0], out
    assert not out[0].startswith(str(ROOT / "constructs")), out
    assert out[1] == "constructs"


def test_public_api_is_reexported() -> None:
    import cpu_inference

    for name in cpu_inference.__all__:
        assert getattr(cpu_inference, name) is not None, name


CACHE_ENV = "CPU_INFERENCE_CACHE"
HOME_CALL = "home"  # Path.home


def _cache_path_rules(path: Path) -> list[int]:
    """Lines of a Python file that build a cache path themselves: a call of Path.home, or a read of
    CPU_INFERENCE_CACHE (environ.get / getenv / environ[...]). Read with ast, so docstrings and comments that name
    the rule do not count. (Expanding `~` in a path the user gave is not a cache rule.)"""
    lines = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            name = node.func.attr
            if (
                name == HOME_CALL
                or name in ("get", "getenv")
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and node.args[0].value == CACHE_ENV
            ):
                lines.append(node.lineno)
        elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and node.slice.value == CACHE_ENV:
            lines.append(node.lineno)
    return lines


def test_one_rule_says_where_the_cache_is() -> None:
    """Python finds the cache through cpu_inference._internal.resources.cache_dir() and the build scripts through
    scripts/cache_lib.sh: no other file builds the path from the home directory or reads CPU_INFERENCE_CACHE itself
    (a test reading a path no `make test` step creates passes only on a machine someone prepared by hand)."""
    owners = {ROOT / "constructs" / "cpu_inference" / "_internal" / "resources.py", ROOT / "scripts" / "cache_lib.sh"}
    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "*.py", "*.sh", "Makefile"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    shell = ("CPU_INFERENCE_CACHE:-", "CPU_INFERENCE_CACHE ?=", "CPU_INFERENCE_CACHE=")
    offenders = []
    for name in files:
        path = ROOT / name
        if path in owners or not path.is_file():
            continue
        if path.suffix == ".py":
            offenders += [f"{name}:{n}" for n in _cache_path_rules(path)]
            continue
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if any(needle in line.split("#", 1)[0] for needle in shell):
                offenders.append(f"{name}:{n}: {line.strip()}")
    assert offenders == [], "\n".join(offenders)


def test_the_cache_rule_check_finds_each_form(tmp_path: Path) -> None:
    """The check above on the forms it must catch, and on prose that only names them."""
    sample = tmp_path / "sample.py"
    sample.write_text(
        f'"""Path.{HOME_CALL}() in a docstring"""\nimport os\nfrom pathlib import Path\n'
        f'a = Path.{HOME_CALL}()\nb = os.environ.get("{CACHE_ENV}")\nc = os.environ["{CACHE_ENV}"]\n'
        f'd = os.getenv("{CACHE_ENV}")  # Path.{HOME_CALL}()\ne = Path("~/x").expanduser()\n'
    )
    assert _cache_path_rules(sample) == [4, 5, 6, 7]
