"""The runtime code the images share is one real package (containers/inference_runtime), not symlinks: no symlink
anywhere in the repository, one import path, every image that runs it copies it and installs exactly its
hash-locked wheels, and the library's wheel can import it (slm_router does)."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONTAINERS = ROOT / "containers"
SHARED = CONTAINERS / "inference_runtime"
MODULES = {p.stem for p in SHARED.glob("*.py")} - {"__init__"}
# Where each image puts the package (beside its entrypoint, or on its PYTHONPATH).
TARGETS = {
    "llama-server": "/opt/llama/inference_runtime/",
    "router": "/opt/router/app/inference_runtime/",
    "vllm-cpu": "/opt/vllm/app/inference_runtime/",
}


def _pins() -> dict[str, str]:
    pins = {}
    for line in (SHARED / "requirements.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            m = re.fullmatch(r"([a-z0-9-]+)==(\S+) --hash=sha256:[0-9a-f]{64}", line)
            assert m, line
            pins[m.group(1)] = m.group(2)
    return pins


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def test_no_symlink_in_the_repository() -> None:
    # Every file git knows or would add (tracked, or untracked and not ignored), as it is in the working tree.
    files = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\0")
    assert len(files) > 100
    assert [f for f in files if f and (ROOT / f).is_symlink()] == []


def test_every_importer_uses_the_package_qualified_path() -> None:
    """No flat `import http1` / `from sagemaker_adapter import ...` anywhere in the runtime code or the tests."""
    flat = []
    for path in [*CONTAINERS.rglob("*.py"), *(ROOT / "tests").rglob("*.py")]:
        if "__pycache__" in path.parts:
            continue
        flat += [f"{path.relative_to(ROOT)}: {name}" for name in _imports(path) if name.split(".")[0] in MODULES]
    assert flat == []
    assert not [p for p in CONTAINERS.rglob("*.py") if p.stem in MODULES and p.parent != SHARED]  # one copy of each


def test_its_third_party_imports_are_exactly_its_hash_locked_wheels() -> None:
    imported = {name.split(".")[0] for path in SHARED.glob("*.py") for name in _imports(path)}
    third_party = imported - set(sys.stdlib_module_names) - {"__future__", "inference_runtime"}
    assert third_party == {name.replace("-", "_") for name in _pins()} == {"h11"}


def test_every_image_that_runs_it_copies_it_and_installs_its_wheels() -> None:
    for image, target in TARGETS.items():
        users = [
            p
            for p in (CONTAINERS / image).rglob("*.py")
            if any(n.split(".")[0] == "inference_runtime" for n in _imports(p))
        ]
        assert users, f"{image} no longer imports inference_runtime: drop it from TARGETS and its Dockerfile"
        text = (CONTAINERS / image / "Dockerfile").read_text()
        assert f"\nCOPY inference_runtime/ {target}\n" in text, image
        install = re.search(r"^COPY inference_runtime/requirements\.txt (\S+)\n", text, re.M)
        assert install, image
        run = re.search(rf"^RUN [^\n]*pip install[^\n]*(?:\\\n[^\n]*)*{re.escape(install.group(1))}", text, re.M)
        assert run and "--require-hashes" in run.group(0) and "--no-deps" in run.group(0), image


def test_the_library_depends_on_the_images_pin_and_its_wheel_ships_the_package() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    found = project["tool"]["setuptools"]["packages"]["find"]
    assert "containers" in found["where"] and "inference_runtime*" in found["include"]
    (spec,) = [d for d in project["project"]["dependencies"] if d.startswith("h11")]
    low, high = re.fullmatch(r"h11>=([\d.]+),<([\d.]+)", spec).groups()  # type: ignore[union-attr]
    pinned = tuple(int(x) for x in _pins()["h11"].split("."))
    assert tuple(int(x) for x in low.split(".")) <= pinned < tuple(int(x) for x in high.split("."))


def test_mypy_checks_the_vllm_entrypoint_with_the_shared_package() -> None:
    """`mypy` (pyproject's files) checks every runtime entrypoint but this one: it shares llama-server's module name
    `entrypoint`, so it gets its own run with the same config (the shared package's types included)."""
    out = subprocess.run(
        [str(Path(sys.executable).parent / "mypy"), "containers/vllm-cpu/entrypoint.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    files = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]["files"]
    assert {"containers/inference_runtime", "containers/llama-server", "containers/router/slm_router"} <= set(files)


# --- numbers from the environment: one helper (inference_runtime.env) ------------------------------------------

ENV_HELPERS = SHARED / "env.py"


def _env_number_parses(source: str) -> list[int]:
    """Lines where `int(...)` / `float(...)` reads the environment itself: `int(os.environ[...])`, `int(env.get(...))`,
    `int(env[name])`, or `int(raw)` where `raw` was read from the environment in the same function."""

    def reads_env(node: ast.AST) -> bool:
        for sub in ast.walk(node):
            target = (
                sub.value
                if isinstance(sub, ast.Subscript)
                else (
                    sub.func.value
                    if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) and sub.func.attr == "get"
                    else None
                )
            )
            if target is None:
                continue
            name = (
                target.attr if isinstance(target, ast.Attribute) else target.id if isinstance(target, ast.Name) else ""
            )
            if name in ("environ", "env"):
                return True
        return False

    lines = []
    tree = ast.parse(source)
    for scope in [tree, *(n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))]:
        from_env = {
            t.id
            for n in ast.walk(scope)
            if isinstance(n, ast.Assign) and reads_env(n.value)
            for t in n.targets
            if isinstance(t, ast.Name)
        }
        for n in ast.walk(scope):
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in ("int", "float") and n.args:
                arg = n.args[0]
                if reads_env(arg) or (isinstance(arg, ast.Name) and arg.id in from_env):
                    lines.append(n.lineno)
    return sorted(set(lines))


def test_every_number_read_from_the_environment_goes_through_inference_runtime_env() -> None:
    """No image's code parses a number from its environment by hand (the helpers used to exist seven times, with
    different messages): each goes through inference_runtime.env's env_int / env_float."""
    found = {
        str(p.relative_to(ROOT)): _env_number_parses(p.read_text(encoding="utf-8"))
        for p in CONTAINERS.rglob("*.py")
        if "__pycache__" not in p.parts and p != ENV_HELPERS
    }
    assert {path: lines for path, lines in found.items() if lines} == {}
    # The scan sees the shapes it forbids (the helpers this replaced), so the empty result above is not vacuous.
    assert _env_number_parses("import os\nx = int(os.environ['N'])\n") == [2]
    assert _env_number_parses("def f(env):\n    raw = env.get('N', '').strip()\n    return float(raw)\n") == [3]
    assert _env_number_parses("def f(env, name):\n    return int(env[name])\n") == [2]


def test_env_helpers_name_the_variable_and_what_it_must_be() -> None:
    import pytest

    from inference_runtime.env import EngineConfigError, env_float, env_int

    assert env_int({}, "N", 3) == 3 and env_int({"N": " "}, "N", None) is None and env_int({"N": " 7 "}, "N", 3) == 7
    assert env_float({"N": "0.5"}, "N", 1.0, minimum=0) == 0.5
    with pytest.raises(EngineConfigError, match=r"^N must be an integer, got 'two'$"):
        env_int({"N": "two"}, "N", 1)
    with pytest.raises(EngineConfigError, match=r"^N must be an integer >= 1, got 0$"):
        env_int({"N": "0"}, "N", 1, minimum=1)
    with pytest.raises(EngineConfigError, match=r"^N must be a number >= 0 \(seconds; 0 = off\), got -1$"):
        env_float({"N": "-1"}, "N", 1.0, minimum=0, hint="seconds; 0 = off")
