"""A `lora` bundle on local disk, laid out exactly as the catalog copy writes it under catalog.lora_prefix(entry) and
as SageMaker downloads that prefix into /opt/ml/model (ModelDataSource S3Prefix): the base GGUF under its own file
name, each adapter as lora/<name>.gguf, and lora.json from the catalog's own writer (catalog.lora_manifest) — so the
container's tests read the very layout the worker writes (tests/runtime/model_download/test_catalog_lora_bundle.py
checks the two agree)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path

from model_download.catalog import LORA_MANIFEST, CatalogAdapter, CatalogEntry, lora_manifest


def bundle_entry(base: Path, adapters: Sequence[tuple[str, Path, float]], *, name: str = "base") -> CatalogEntry:
    """The catalog entry of such a bundle (a placeholder Hub source: only the names, files and scales matter here)."""
    return CatalogEntry(
        name=name,
        hf_repo="local/bundle",
        file=base.name,
        layouts=("lora",),
        adapters=tuple(
            CatalogAdapter(name=a, hf_repo="local/bundle", file=path.name, scale=scale) for a, path, scale in adapters
        ),
    )


def _place(src: Path, dst: Path) -> None:
    """A hard link when it can (the models are read-only and large), else a copy."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)


def write_lora_bundle(
    dest: Path, base: Path, adapters: Sequence[tuple[str, Path, float]], *, name: str = "base"
) -> Path:
    """Write the bundle of `base` and `adapters` ((name, adapter GGUF, scale), in id order) into the directory
    `dest`; returns the manifest's path (what LLAMA_LORA_MANIFEST names)."""
    entry = bundle_entry(base, adapters, name=name)
    entry.validate()
    dest.mkdir(parents=True, exist_ok=True)
    _place(base, dest / entry.basename)
    for adapter, (_, path, _) in zip(entry.adapters or (), adapters, strict=True):
        _place(path, dest / adapter.member)
    manifest = dest / LORA_MANIFEST
    manifest.write_bytes(lora_manifest(entry))  # last, as the worker seals a bundle
    return manifest
