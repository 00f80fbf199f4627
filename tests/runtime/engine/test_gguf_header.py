"""The multi-model adapter's GGUF header reader (containers/llama-server/gguf_header.py) against upstream's own
reader: gguf-py's GGUFReader from the pinned llama.cpp tree (the sdist the engine is built from), on both real
stand-in models."""

from __future__ import annotations

import sys
import tarfile
from pathlib import Path

import pytest

from gguf_header import GgufError, kv_shape, read_metadata
from tests.support.engine import pinned_sdist


@pytest.fixture(scope="module")
def upstream_reader(tmp_path_factory: pytest.TempPathFactory):
    sdist = pinned_sdist()
    dest = tmp_path_factory.mktemp("gguf-py")
    with tarfile.open(sdist) as tar:
        members = [m for m in tar.getmembers() if "/vendor/llama.cpp/gguf-py/gguf/" in m.name]
        tar.extractall(dest, members=members, filter="data")
    (root,) = dest.glob("*/vendor/llama.cpp/gguf-py")
    sys.path.insert(0, str(root))
    try:
        from gguf.gguf_reader import GGUFReader

        yield GGUFReader
    finally:
        sys.path.remove(str(root))


def test_metadata_and_kv_shape_match_upstream(upstream_reader, smollm2_gguf: Path) -> None:
    """SmolLM2 (llama): no key_length in the file, so the head size comes from embedding_length / head_count."""
    path = smollm2_gguf
    fields = upstream_reader(str(path)).fields
    ours = read_metadata(path, lambda key: False)  # arrays skipped: every scalar and string
    theirs = {
        k: f.contents() for k, f in fields.items() if not k.startswith("GGUF.") and not isinstance(f.contents(), list)
    }
    assert ours.keys() == theirs.keys()
    for key, value in theirs.items():
        assert ours[key] == pytest.approx(value) if isinstance(value, float) else ours[key] == value, key
    arch = theirs["general.architecture"]
    shape = kv_shape(path)
    layers, kv_heads = theirs[f"{arch}.block_count"], theirs[f"{arch}.attention.head_count_kv"]
    key_length = theirs.get(
        f"{arch}.attention.key_length", theirs[f"{arch}.embedding_length"] // theirs[f"{arch}.attention.head_count"]
    )
    value_length = theirs.get(f"{arch}.attention.value_length", key_length)
    assert (shape.layers, shape.kv_heads_total, shape.key_length, shape.value_length) == (
        layers,
        layers * kv_heads,
        key_length,
        value_length,
    )
    print(f"{path.name}: {arch}, {shape.kv_bytes_per_token} KV bytes per token (f16)")


def test_not_a_gguf_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "x.gguf"
    bad.write_bytes(b"GGML\0\0\0\0")
    with pytest.raises(GgufError, match="is not a GGUF file"):
        kv_shape(bad)
    truncated = tmp_path / "t.gguf"
    truncated.write_bytes(b"GGUF\x03\0\0\0\0")
    with pytest.raises(GgufError, match="truncated"):
        kv_shape(truncated)


def test_explicit_head_sizes_and_gqa(gemma_gguf: Path) -> None:
    """Gemma-3-270M sets attention.key_length/value_length (256) apart from embedding_length / head_count (640 / 4)
    and has one KV head for 4 query heads. Values as gguf-py's GGUFReader reads them from this file (checked once
    by hand: parsing its 262k-token vocabulary with gguf-py takes ~30 s here, too slow for every run)."""
    shape = kv_shape(gemma_gguf)
    assert (shape.architecture, shape.layers, shape.kv_heads_total, shape.key_length, shape.value_length) == (
        "gemma3",
        18,
        18,
        256,
        256,
    )
    assert shape.kv_bytes_per_token == 18 * 1 * (256 + 256) * 2
