"""The few GGUF header keys the catalog checks a LoRA adapter by, read through ranged reads (the Hub or S3), never the
tensors: a header check costs one or two small GETs per file.

Format (ggml docs/gguf.md; gguf-py constants.GGUFValueType in the pinned llama.cpp tree): magic "GGUF", uint32
version (2 or 3), uint64 tensor count, uint64 key/value count, then each key/value: string key (uint64 length +
UTF-8), uint32 value type, value; arrays: uint32 item type, uint64 count, items. Reading stops once the wanted keys
are found (converters write `general.*` first), and arrays (a base model's vocabulary) are skipped unread where
their items have a fixed size. This is the lambda package's own reader: the copy job ships model_download/ alone
(artifacts/runtime_package.py), so it cannot import containers/llama-server/gguf_header.py, which reads whole local
files for the engine's KV-cache shape.

What the engine requires of an adapter (llama.cpp src/llama-adapter.cpp llama_adapter_lora_init_impl, the pin):
`general.type` is "adapter" ("expect general.type to be 'adapter'"), `general.architecture` is the base model's
("model arch and LoRA arch mismatch"), `adapter.type` is "lora" ("expect adapter.type to be 'lora'"). `adapter_problem`
checks the same before an adapter is copied, so a wrong one fails its catalog entry instead of the pods that load it."""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from .errors import DownloadError

MAGIC = b"GGUF"
VERSIONS = (2, 3)
# GGUFValueType: UINT8 INT8 UINT16 INT16 UINT32 INT32 FLOAT32 BOOL STRING ARRAY UINT64 INT64 FLOAT64
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9
ARCHITECTURE = "general.architecture"
GENERAL_TYPE = "general.type"
ADAPTER_TYPE = "adapter.type"
ADAPTER_KEYS = frozenset({ARCHITECTURE, GENERAL_TYPE, ADAPTER_TYPE})
CHUNK = 256 * 1024  # bytes per ranged read: an adapter's whole header, or a base's general.* keys
MAX_HEADER_BYTES = 64 * 1024 * 1024  # a header past this is not read further (a base's vocabulary is ~10 MB)


class GgufHeaderError(DownloadError):
    """The bytes are not a readable GGUF header; str() is one line naming the file."""


class _Reader:
    """Sequential reads over `read_range(start, end_inclusive)` in CHUNK-sized ranged reads."""

    def __init__(self, read_range: Callable[[int, int], bytes | bytearray], size: int, label: str) -> None:
        self.read_range, self.size, self.label = read_range, size, label
        self.pos, self.buf, self.buf_start = 0, b"", 0

    def read(self, n: int) -> bytes:
        end = self.pos + n
        if end > min(self.size, MAX_HEADER_BYTES):
            raise GgufHeaderError(f"{self.label}: the GGUF header ends past the file or {MAX_HEADER_BYTES} bytes")
        if not (self.buf_start <= self.pos and end <= self.buf_start + len(self.buf)):
            want = max(n, CHUNK)
            self.buf = bytes(self.read_range(self.pos, min(self.pos + want, self.size) - 1))
            self.buf_start = self.pos
        out = self.buf[self.pos - self.buf_start : end - self.buf_start]
        self.pos = end
        return out

    def skip(self, n: int) -> None:
        if self.pos + n > self.size:
            raise GgufHeaderError(f"{self.label}: truncated GGUF header")
        self.pos += n

    def unpack(self, fmt: str) -> Any:
        return struct.unpack(fmt, self.read(struct.calcsize(fmt)))[0]

    def string(self) -> str:
        return self.read(self.unpack("<Q")).decode("utf-8", "replace")


def _skip_value(r: _Reader, kind: int) -> None:
    if kind in _SCALARS:
        r.skip(struct.calcsize(_SCALARS[kind]))
    elif kind == _STRING:
        r.skip(r.unpack("<Q"))
    elif kind == _ARRAY:
        item, n = r.unpack("<I"), r.unpack("<Q")
        if item in _SCALARS:
            r.skip(n * struct.calcsize(_SCALARS[item]))
        else:
            for _ in range(n):
                _skip_value(r, item)
    else:
        raise GgufHeaderError(f"{r.label}: unknown GGUF value type {kind}")


def read_keys(
    read_range: Callable[[int, int], bytes | bytearray], size: int, keys: frozenset[str], *, label: str
) -> dict[str, Any]:
    """The scalar/string values of `keys` present in the header (absent keys are left out); stops when all are found."""
    r = _Reader(read_range, size, label)
    if r.read(4) != MAGIC:
        raise GgufHeaderError(f"{label} is not a GGUF file (no GGUF magic)")
    version = r.unpack("<I")
    if version not in VERSIONS:
        raise GgufHeaderError(f"{label}: GGUF version {version} is not supported")
    r.unpack("<Q")  # tensor count
    found: dict[str, Any] = {}
    for _ in range(r.unpack("<Q")):
        key = r.string()
        kind = r.unpack("<I")
        if key in keys and kind in _SCALARS:
            found[key] = r.unpack(_SCALARS[kind])
        elif key in keys and kind == _STRING:
            found[key] = r.string()
        else:
            _skip_value(r, kind)
        if len(found) == len(keys):
            break
    return found


def adapter_problem(
    adapter: dict[str, Any], base: dict[str, Any], *, adapter_label: str, base_label: str
) -> str | None:
    """Why the engine would refuse to load the adapter over the base (llama-adapter.cpp's checks), or None."""
    if adapter.get(GENERAL_TYPE) != "adapter":
        return (
            f"{adapter_label} is not an adapter (general.type {adapter.get(GENERAL_TYPE)!r}, the engine needs 'adapter') "
            "— name a LoRA GGUF made by the engine pin's convert_lora_to_gguf.py"
        )
    if adapter.get(ADAPTER_TYPE) != "lora":
        return (
            f"{adapter_label} is a {adapter.get(ADAPTER_TYPE)!r} adapter, the engine loads adapter.type 'lora' here "
            "— name a LoRA GGUF made by convert_lora_to_gguf.py"
        )
    if adapter.get(ARCHITECTURE) != base.get(ARCHITECTURE):
        return (
            f"{adapter_label} is for architecture {adapter.get(ARCHITECTURE)!r} but its base {base_label} is "
            f"{base.get(ARCHITECTURE)!r} (the engine refuses: model arch and LoRA arch mismatch) — serve it over a base "
            "of its own architecture"
        )
    return None
