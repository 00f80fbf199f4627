"""The `model_download` runtime package as a CDK asset root: a directory holding only `model_download/*.py`.

Found through the import system, so it works from a checkout (lambda/model_download) and from a wheel; staged
into a content-addressed temp directory so the asset hash changes only when the code does."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import tempfile
from pathlib import Path


def package_dir() -> Path:
    spec = importlib.util.find_spec("model_download")
    if spec is None or not spec.submodule_search_locations:
        raise ValueError("the model_download runtime package is not importable: pip install cdk-cpu-inference (or -e .)")
    return Path(next(iter(spec.submodule_search_locations)))


def staged_root() -> Path:
    src = package_dir()
    files = sorted(src.glob("*.py"))
    digest = hashlib.sha256()
    for f in files:
        digest.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
    root = Path(tempfile.gettempdir()) / f"cpu-inference-model-download-{digest.hexdigest()[:16]}"
    if not (root / "model_download").is_dir():
        tmp = Path(tempfile.mkdtemp(prefix="cpu-inference-model-download-"))
        (tmp / "model_download").mkdir()
        for f in files:
            shutil.copyfile(f, tmp / "model_download" / f.name)
        try:
            os.rename(tmp, root)
        except OSError:  # another synth staged the same content first
            shutil.rmtree(tmp, ignore_errors=True)
    return root
