"""The `model_download` runtime package as a CDK asset root: a directory holding only `model_download/*.py`.

Found through cpu_inference._internal.resources (lambda/model_download of a checkout, or the copy a wheel ships), and
staged into a content-addressed temp directory so the asset hash changes only when the code does."""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

from cpu_inference._internal.resources import MODEL_DOWNLOAD, runtime_dir


def package_dir() -> Path:
    return runtime_dir(MODEL_DOWNLOAD)


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
