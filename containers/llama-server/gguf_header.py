"""The shape a KV cache estimate needs, from a GGUF file's metadata (stdlib only; reads the header, never tensors).

Format (ggml docs/gguf.md, and gguf-py's GGUFReader in the pinned tree, which the tests compare against): magic
"GGUF", uint32 version (2 or 3), uint64 tensor count, uint64 key/value count, then each key/value: string key
(uint64 length + UTF-8), uint32 value type, value. Arrays: uint32 item type, uint64 count, items.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

# GGUFValueType: UINT8 INT8 UINT16 INT16 UINT32 INT32 FLOAT32 BOOL STRING ARRAY UINT64 INT64 FLOAT64
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9
F16_BYTES = 2  # llama-server's default KV cache type (--cache-type-k/-v f16)


class GgufError(ValueError):
    pass


@dataclass(frozen=True)
class KvShape:
    architecture: str
    layers: int
    kv_heads_total: int  # the sum over layers of the KV heads (a per-layer array, or layers x a scalar)
    key_length: int
    value_length: int

    @property
    def kv_bytes_per_token(self) -> int:
        """f16 K and V of one token across every layer."""
        return self.kv_heads_total * (self.key_length + self.value_length) * F16_BYTES


def _read(f: IO[bytes], fmt: str) -> Any:
    size = struct.calcsize(fmt)
    data = f.read(size)
    if len(data) != size:
        raise GgufError("truncated GGUF header")
    return struct.unpack(fmt, data)[0]


def _string(f: IO[bytes]) -> bytes:
    n = _read(f, "<Q")
    data = f.read(n)
    if len(data) != n:
        raise GgufError("truncated GGUF header")
    return data


def _value(f: IO[bytes], kind: int, keep: bool) -> Any:
    if kind in _SCALARS:
        return _read(f, _SCALARS[kind])
    if kind == _STRING:
        return _string(f).decode("utf-8", "replace")
    if kind == _ARRAY:
        item, n = _read(f, "<I"), _read(f, "<Q")
        if keep:
            return [_value(f, item, keep) for _ in range(n)]
        # Skipped unread (the tokenizer's vocabulary, scores, merges: 10^5 items) by seeking past them.
        if item in _SCALARS:
            f.seek(n * struct.calcsize(_SCALARS[item]), 1)
        elif item == _STRING:
            for _ in range(n):
                f.seek(_read(f, "<Q"), 1)
        else:
            for _ in range(n):
                _value(f, item, keep)
        return None
    raise GgufError(f"unknown GGUF value type {kind}")


def read_metadata(path: Path, arrays: Callable[[str], bool] = lambda key: True) -> dict[str, Any]:
    """The key/value metadata; an array is unpacked only when `arrays(key)`, else skipped (and absent)."""
    with open(path, "rb", buffering=1 << 20) as f:
        if f.read(4) != b"GGUF":
            raise GgufError(f"{path} is not a GGUF file")
        version = _read(f, "<I")
        if version not in (2, 3):
            raise GgufError(f"{path}: GGUF version {version} is not supported")
        _read(f, "<Q")  # tensor count
        meta: dict[str, Any] = {}
        for _ in range(_read(f, "<Q")):
            key = _string(f).decode("utf-8", "replace")
            kind = _read(f, "<I")
            keep = kind != _ARRAY or arrays(key)
            value = _value(f, kind, keep)
            if keep:
                meta[key] = value
        return meta


def kv_shape(path: Path) -> KvShape:
    """Layers, KV heads and head sizes from `<arch>.block_count`, `<arch>.attention.head_count(_kv)`,
    `<arch>.attention.key_length/value_length` (else embedding_length / head_count), as llama.cpp reads them
    (src/llama-model.cpp load_hparams: n_head_kv defaults to n_head, n_embd_head_k to n_embd / n_head)."""
    # Per-layer head counts may be arrays (e.g. OpenELM); every other array is skipped.
    meta = read_metadata(path, lambda key: key.endswith((".attention.head_count", ".attention.head_count_kv")))
    arch = meta.get("general.architecture")
    if not isinstance(arch, str):
        raise GgufError(f"{path}: no general.architecture")

    def get(key: str) -> Any:
        return meta.get(f"{arch}.{key}")

    layers = get("block_count")
    heads = get("attention.head_count")
    if not isinstance(layers, int) or layers < 1 or heads is None:
        raise GgufError(f"{path}: no {arch}.block_count / {arch}.attention.head_count")
    kv = get("attention.head_count_kv")
    kv = heads if kv is None else kv
    kv_total = sum(kv[:layers]) if isinstance(kv, list) else layers * int(kv)
    head_max = max(heads) if isinstance(heads, list) else int(heads)
    embd = get("embedding_length")
    default_dim = int(embd) // head_max if isinstance(embd, int) and head_max else 0
    key_length = int(get("attention.key_length") or default_dim)
    value_length = int(get("attention.value_length") or default_dim)
    if key_length < 1 or value_length < 1:
        raise GgufError(f"{path}: no head size ({arch}.attention.key_length or embedding_length)")
    return KvShape(arch, layers, kv_total, key_length, value_length)
