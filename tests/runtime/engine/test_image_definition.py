"""The image definition: lint-clean, built from the one engine pin, pinned bases, runtime CPU dispatch."""

from __future__ import annotations

import hashlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.runtime.engine.serving import ENGINE_DIR
from tests.support.engine import pinned_sdist

DOCKERFILE = ENGINE_DIR / "Dockerfile"
BUILD_SCRIPT = ENGINE_DIR / "build_engine.sh"
BIN = Path(sys.executable).parent


def _pin() -> dict[str, str]:
    pin = {}
    for line in (ENGINE_DIR / "engine-pin.env").read_text().splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            pin[key.strip()] = value.strip()
    return pin


def _code(path: Path) -> str:
    """The file without its comment lines."""
    return "\n".join(line for line in path.read_text().splitlines() if not line.lstrip().startswith("#"))


def _cmake_flags() -> list[str]:
    out = subprocess.run(
        ["bash", str(BUILD_SCRIPT), "--cmake-flags"],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "/usr/bin:/bin"},
    )
    return out.stdout.splitlines()


def _dropped_variants() -> set[str]:
    return set(re.findall(r'^rm -f "\$prefix/bin/libggml-cpu-([\w.]+)\.so"$', BUILD_SCRIPT.read_text(), re.M))


@pytest.fixture(scope="module")
def pinned_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The llama.cpp tree vendored in the pinned sdist (the cached file the engine build uses)."""
    pin = _pin()
    sdist = pinned_sdist()
    assert sdist.name == pin["LLAMA_CPP_PYTHON_SDIST"]
    digest = hashlib.sha256(sdist.read_bytes()).hexdigest()
    assert digest == pin["LLAMA_CPP_PYTHON_SHA256"], f"{sdist}: sha256 {digest} is not the pin"
    dest = tmp_path_factory.mktemp("pinned-sdist")
    subprocess.run(["tar", "-xzf", str(sdist), "-C", str(dest), "--wildcards", "*/vendor/llama.cpp/*"], check=True)
    (tree,) = dest.glob("*/vendor/llama.cpp")
    return tree


def test_hadolint_clean() -> None:
    result = subprocess.run([str(BIN / "hadolint"), str(DOCKERFILE)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_build_script_shellcheck_clean() -> None:
    result = subprocess.run([str(BIN / "shellcheck"), str(BUILD_SCRIPT)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_image_builds_the_pinned_sdist() -> None:
    text = DOCKERFILE.read_text()
    args = dict(re.findall(r"^ARG (LLAMA_CPP_PYTHON_\w+)=(\S+)$", text, re.M))
    pin = _pin()
    assert args == {
        k: pin[k] for k in ("LLAMA_CPP_PYTHON_VERSION", "LLAMA_CPP_PYTHON_SDIST", "LLAMA_CPP_PYTHON_SHA256")
    }
    url = re.search(r"^\s+(https://\S+)", text, re.M)
    assert url and url.group(1).endswith("/" + pin["LLAMA_CPP_PYTHON_SDIST"])
    assert "ADD --checksum=sha256:${LLAMA_CPP_PYTHON_SHA256}" in text
    assert 'build_engine.sh "/src/${LLAMA_CPP_PYTHON_SDIST}" "${LLAMA_CPP_PYTHON_SHA256}"' in text
    assert "sha256sum -c" in BUILD_SCRIPT.read_text()


def test_bases_are_pinned_by_digest() -> None:
    froms = re.findall(r"^FROM (\S+)", DOCKERFILE.read_text(), re.M)
    assert len(froms) == 2
    for image in froms:
        # ECR Public's Docker official-image mirror, not an anonymous Docker Hub pull (rate-limited in CodeBuild).
        assert re.fullmatch(r"public\.ecr\.aws/docker/library/[\w./-]+:[\w.-]+@sha256:[0-9a-f]{64}", image), image


def test_runtime_cpu_dispatch_not_the_build_hosts_isa() -> None:
    code = _code(DOCKERFILE)
    assert "CPU_ALL_VARIANTS" not in code  # the image never turns the variants off (only local quick checks do)
    assert "native" not in code and "native" not in _code(BUILD_SCRIPT)
    assert "CC=gcc-14" in code  # the arm64 armv9.2 (SME) variants need GCC >= 14
    flags = _cmake_flags()
    for flag in (
        "-DGGML_BACKEND_DL=ON",
        "-DGGML_CPU_ALL_VARIANTS=ON",
        "-DGGML_NATIVE=OFF",
        "-DBUILD_SHARED_LIBS=ON",
        "-DLLAMA_BUILD_SERVER=ON",
    ):
        assert flag in flags


# Variants the pinned tree must build for the targets this library sizes for.
X86_VARIANTS = {"x64", "sse42", "haswell", "skylakex", "icelake", "zen4", "sapphirerapids"}
ARM_VARIANTS = {
    "armv8.0_1",  # any arm64
    "armv8.2_1",  # dotprod: Graviton2 (Neoverse N1)
    "armv8.6_1",  # SVE + i8mm: Graviton3 (Neoverse V1)
    "armv8.6_2",  # + SVE2: Graviton4 (Neoverse V2)
    "armv9.2_2",  # + SME
}


@pytest.mark.parametrize(("arch", "expected"), [("x86_64", X86_VARIANTS), ("aarch64", ARM_VARIANTS)])
def test_pinned_tree_configures_one_cpu_module_per_isa_level(
    pinned_tree: Path, tmp_path: Path, arch: str, expected: set[str]
) -> None:
    """CMake-configure the pinned llama.cpp with exactly build_engine.sh's flags, for each image platform.

    aarch64 is configured as a cross target with this host's compiler: that proves which variants and
    -march flags the pinned CMake selects for arm64; that GCC 14 compiles them is proven by the native
    arm64 CodeBuild build (LlamaCppImage)."""
    cross = [] if arch == "x86_64" else ["-DCMAKE_SYSTEM_NAME=Linux", f"-DCMAKE_SYSTEM_PROCESSOR={arch}"]
    result = subprocess.run(
        ["cmake", "-S", str(pinned_tree), "-B", str(tmp_path / "build"), *_cmake_flags(), *cross],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    variants = dict(re.findall(r"^-- Adding CPU backend variant ggml-cpu-(\S+): ?(.*)$", result.stdout, re.M))
    assert expected <= set(variants), sorted(variants)
    assert not any("native" in f for f in variants.values()), variants
    if arch == "aarch64":
        assert variants["armv8.6_2"].startswith("-march=armv8.6-a+dotprod+fp16+sve+i8mm+sve2")
    else:
        assert "-mavx512f" in variants["skylakex"] and "-mavx512bf16" in variants["zen4"]
    # Every AMX module is left out of the image (the pinned AMX matmul segfaults; see build_engine.sh),
    # so a new AMX variant in a future pin fails here instead of crashing on a Xeon.
    amx = {name for name, f in variants.items() if "-mamx" in f}
    assert amx == (set() if arch == "aarch64" else {"sapphirerapids"})
    assert amx <= _dropped_variants()
    cache = (tmp_path / "build" / "CMakeCache.txt").read_text()
    assert "GGML_NATIVE:BOOL=OFF" in cache and "GGML_BACKEND_DL:BOOL=ON" in cache


def test_starts_as_root_for_sagemaker_and_ships_every_module() -> None:
    """SageMaker starts containers as root and expects root; `serve` drops to 65532 itself (test_privileges.py),
    and EKS pods set runAsUser 65532. The root USER carries a justified hadolint ignore."""
    text = DOCKERFILE.read_text()
    user = re.findall(r"^USER (\S+)", text, re.M)
    assert user[-1] == "0:0"
    assert re.search(r"SageMaker starts containers as root.*\n(#.*\n)*# hadolint ignore=DL3002\nUSER 0:0\n", text)
    # The build context is containers/: this image's directory and the shared runtime package.
    copied = set(re.search(r"^COPY (llama-server/entrypoint\.py[^\n]*) /opt/llama/$", text, re.M).group(1).split())  # type: ignore[union-attr]
    assert copied == {f"llama-server/{p.name}" for p in ENGINE_DIR.glob("*.py")}
    assert "\nCOPY inference_runtime/ /opt/llama/inference_runtime/\n" in text
    assert 'ENTRYPOINT ["python3", "/opt/llama/entrypoint.py"]' in text
    assert "EXPOSE 8080" in text
