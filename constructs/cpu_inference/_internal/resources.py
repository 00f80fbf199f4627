"""Where the runtime files are: the Docker build contexts and Lambda sources the constructs ship as assets and
the CLI runs (containers/llama-server, containers/router, containers/vllm-cpu, the package they share
containers/inference_runtime, lambda/model_download, lambda/image_build).

The one way the library finds them, in both places it runs from:
- an installed wheel: they are package data under `cpu_inference/_bundled/<same relative path>`, copied there
  at build time by the `build_py` command in setup.py (which loads THIS module for the list and the copy);
- a source checkout or an editable install (`pip install -e .`): `_bundled/` does not exist (an editable build
  copies nothing) and they are read in place from the checkout, so edits show up without a reinstall.

Why a `build_py` hook and not the alternatives: setuptools package-data can only include files inside a package
directory, and these directories must stay at the repository's top level (Docker contexts, Lambda roots);
symlinks into the package break in sdists and on Windows; `data-files` installs into `<prefix>/share`, which
importlib.resources cannot find; a custom PEP 517 backend would wrap every hook to do what one setuptools
command already does. `build_py` runs for wheels built from the tree and from the sdist (MANIFEST.in grafts the
directories into it), and setuptools' editable builds tell it so (`editable_mode`).

The copy skips only byte-code (`__pycache__/`, `*.pyc`), which every asset excludes anyway, so an asset
synthesized from a wheel has the same file set, and so the same hash, as one synthesized from a checkout.
The local cache directory's one rule (cache_dir) lives here too.
Stdlib only: setup.py imports this file by path before any dependency is installed."""

from __future__ import annotations

import fnmatch
import importlib.resources
import os
import shutil
from pathlib import Path

LLAMA_SERVER = "containers/llama-server"
ROUTER = "containers/router"
VLLM_CPU = "containers/vllm-cpu"
# The runtime package the three images share (each image's build context is containers/: its own directory and this).
INFERENCE_RUNTIME = "containers/inference_runtime"
MODEL_DOWNLOAD = "lambda/model_download"
IMAGE_BUILD = "lambda/image_build"
IC_SCALING = "lambda/ic_scaling"
RUNTIME_DIRS = (LLAMA_SERVER, ROUTER, VLLM_CPU, INFERENCE_RUNTIME, MODEL_DOWNLOAD, IMAGE_BUILD, IC_SCALING)
BUNDLED = "_bundled"
# Written by Python whenever the code runs or installs; never part of an image or a Lambda bundle.
BYTECODE = ("__pycache__", "*.pyc", "*.pyo")


def cache_dir() -> Path:
    """Where built engines, the vLLM test environment, the pinned sdist and local models are kept:
    $CPU_INFERENCE_CACHE, else $XDG_CACHE_HOME/cpu-inference, else ~/.cache/cpu-inference. The build scripts
    apply the same rule (scripts/cache_lib.sh); everything else asks here."""
    explicit = os.environ.get("CPU_INFERENCE_CACHE")
    if explicit:
        return Path(explicit)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "cpu-inference"


def _package_root() -> Path:
    root = importlib.resources.files("cpu_inference")  # the package, wherever this module sits in it
    if not isinstance(root, Path):  # a zipped install: assets need real directories
        raise FileNotFoundError(
            f"cpu_inference is installed as {root!r}; install cdk-cpu-inference unzipped (pip does)"
        )
    return root.resolve()


def runtime_dir(name: str) -> Path:
    """The directory of one runtime tree (one of RUNTIME_DIRS), from the wheel or the source checkout."""
    if name not in RUNTIME_DIRS:
        raise ValueError(f"unknown runtime directory {name!r}; one of {', '.join(RUNTIME_DIRS)}")
    package = _package_root()
    bundled = package / BUNDLED
    # constructs/cpu_inference -> the checkout's top level (no `_bundled/` is ever written into the source tree).
    where = bundled / name if bundled.is_dir() else package.parent.parent / name
    if not where.is_dir():
        raise FileNotFoundError(
            f"{name} is missing at {where}: reinstall cdk-cpu-inference from its wheel or sdist, or use a full source "
            "checkout (pip install -e .)"
        )
    return where


def runtime_files(source_root: Path) -> list[Path]:
    """The files of RUNTIME_DIRS under a source tree that ship, relative to it: everything but byte-code."""
    files = []
    for name in RUNTIME_DIRS:
        for path in sorted((source_root / name).rglob("*")):
            relative = path.relative_to(source_root)
            if path.is_file() and not any(fnmatch.fnmatch(part, p) for part in relative.parts for p in BYTECODE):
                files.append(relative)
    return files


def copy_runtime_dirs(source_root: Path, target_package: Path) -> list[Path]:
    """Copy runtime_files(source_root) into `<target_package>/_bundled/` (what setup.py's build_py does) and return
    the copies. Replaces any earlier copy, so a file deleted from the source never lingers in a reused build dir."""
    target = target_package / BUNDLED
    if target.exists():
        shutil.rmtree(target)
    copies = []
    for relative in runtime_files(source_root):
        (target / relative).parent.mkdir(parents=True, exist_ok=True)
        copies.append(Path(shutil.copy2(source_root / relative, target / relative)))
    return copies
