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
("model arch and LoRA arch mismatch"), `adapter.type` is "lora" ("expect adapter.type to be 'lora'"), and then its
tensors fit the base's (`shape_problem`: every `<t>.lora_a`/`<t>.lora_b` pair names a base tensor `<t>`, with the
shapes the engine requires). `adapter_problem` checks the same before an adapter is copied, so a wrong one fails its
catalog entry instead of the pods that load it. The shapes come from the tensor-info section, which follows the
key/values (`read_header`; ggml/src/gguf.cpp gguf_init_from_file_impl, the pin: name string, uint32 n_dims <= 4,
n_dims x int64 ne — ggml order, ne[0] first, unset dims 1 —, uint32 type, uint64 offset): a base's header is read
through its vocabulary up to the first tensor's data, never further."""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, field
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
CHUNK = 256 * 1024  # bytes of the first ranged read: an adapter's whole header, or a base's general.* keys
MAX_CHUNK = 4 * 1024 * 1024  # each further read doubles up to this: a base's 2-10 MB header in a few GETs
GGML_MAX_DIMS = 4  # ggml/include/ggml.h of the pin; gguf.cpp refuses a tensor info with more dims
LORA_A, LORA_B = ".lora_a", ".lora_b"  # llama-adapter.cpp:276-289 (the pin): the adapter tensors' name suffixes
NORM_SUFFIX = "_norm.weight"  # llama-adapter.cpp:290-293: an adapter's norm vectors are skipped by the engine
TOKEN_EMBD = "token_embd.weight"  # llama-adapter.cpp:326: its pair is laid out the other way (see shape_problem)
MAX_HEADER_BYTES = 64 * 1024 * 1024  # a header past this is not read further (a base's vocabulary is ~10 MB)


class GgufHeaderError(DownloadError):
    """The bytes are not a readable GGUF header; str() is one line naming the file."""


class _Reader:
    """Sequential reads over `read_range(start, end_inclusive)` in CHUNK-sized ranged reads."""

    def __init__(self, read_range: Callable[[int, int], bytes | bytearray], size: int, label: str) -> None:
        self.read_range, self.size, self.label = read_range, size, label
        self.pos, self.buf, self.buf_start, self.chunk = 0, b"", 0, CHUNK

    def read(self, n: int) -> bytes:
        end = self.pos + n
        if end > min(self.size, MAX_HEADER_BYTES):
            raise GgufHeaderError(f"{self.label}: the GGUF header ends past the file or {MAX_HEADER_BYTES} bytes")
        if not (self.buf_start <= self.pos and end <= self.buf_start + len(self.buf)):
            want = max(n, self.chunk)
            self.buf = bytes(self.read_range(self.pos, min(self.pos + want, self.size) - 1))
            self.buf_start = self.pos
            self.chunk = min(self.chunk * 2, MAX_CHUNK)  # a long header (a base's vocabulary) in few reads
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


def _open(r: _Reader) -> tuple[int, int]:
    """Magic and version checked; (tensor count, key/value count)."""
    if r.read(4) != MAGIC:
        raise GgufHeaderError(f"{r.label} is not a GGUF file (no GGUF magic)")
    version = r.unpack("<I")
    if version not in VERSIONS:
        raise GgufHeaderError(f"{r.label}: GGUF version {version} is not supported")
    return r.unpack("<Q"), r.unpack("<Q")


def _key_value(r: _Reader, keys: frozenset[str], found: dict[str, Any]) -> None:
    key = r.string()
    kind = r.unpack("<I")
    if key in keys and kind in _SCALARS:
        found[key] = r.unpack(_SCALARS[kind])
    elif key in keys and kind == _STRING:
        found[key] = r.string()
    else:
        _skip_value(r, kind)


def read_keys(
    read_range: Callable[[int, int], bytes | bytearray], size: int, keys: frozenset[str], *, label: str
) -> dict[str, Any]:
    """The scalar/string values of `keys` present in the header (absent keys are left out); stops when all are found."""
    r = _Reader(read_range, size, label)
    _, n_kv = _open(r)
    found: dict[str, Any] = {}
    for _ in range(n_kv):
        _key_value(r, keys, found)
        if len(found) == len(keys):
            break
    return found


@dataclass(frozen=True)
class GgufHeader:
    """What the adapter check reads of a GGUF: the wanted keys' values and every tensor's shape."""

    keys: dict[str, Any]
    tensors: dict[str, tuple[int, ...]] = field(default_factory=dict)  # name -> ne[0..3] (ggml order, padded with 1)


def read_header(
    read_range: Callable[[int, int], bytes | bytearray], size: int, keys: frozenset[str], *, label: str
) -> GgufHeader:
    """The values of `keys` and every tensor info's shape: the key/values, then the tensor infos that follow them
    (gguf.cpp, the pin: name, uint32 n_dims, n_dims int64 ne, uint32 type, uint64 offset) — no tensor data."""
    r = _Reader(read_range, size, label)
    n_tensors, n_kv = _open(r)
    found: dict[str, Any] = {}
    for _ in range(n_kv):
        _key_value(r, keys, found)
    tensors: dict[str, tuple[int, ...]] = {}
    for _ in range(n_tensors):
        name = r.string()
        n_dims = r.unpack("<I")
        if n_dims > GGML_MAX_DIMS:
            raise GgufHeaderError(f"{label}: tensor {name!r} has {n_dims} dimensions (GGUF allows {GGML_MAX_DIMS})")
        ne = struct.unpack(f"<{n_dims}q", r.read(8 * n_dims)) if n_dims else ()
        tensors[name] = tuple(ne) + (1,) * (GGML_MAX_DIMS - n_dims)  # gguf.cpp: dims past n_dims are 1
        r.skip(4 + 8)  # type, data offset
    return GgufHeader(found, tensors)


def _dims(ne: tuple[int, ...]) -> str:
    """A shape as GGUF stores it (ne[0] first), trailing 1s dropped: [576, 8]."""
    n = len(ne)
    while n > 1 and ne[n - 1] == 1:
        n -= 1
    return "[" + ", ".join(str(d) for d in ne[:n]) + "]"


def shape_problem(
    adapter: dict[str, tuple[int, ...]], base: dict[str, tuple[int, ...]], *, adapter_label: str, base_label: str
) -> str | None:
    """Why the engine would refuse the adapter's tensors over the base's, or None — llama-adapter.cpp
    llama_adapter_lora_init_impl of the pin, in its order: pair `<t>.lora_a`/`<t>.lora_b` by name (lines 274-297: the
    suffix removed with replace_all; `*_norm.weight` skipped; any other name "has unexpected suffix"), then per pair in
    name order (a std::map, line 269): both halves present (328-330), the base has `<t>` (333-336), and the shapes
    (358-371) — token_embd: base ne[0] == b ne[1] and base ne[1] == a ne[1]; any other: base ne[0] == a ne[0],
    base ne[1] == b ne[1] ("has incorrect shape"), and a ne[1] == b ne[0] (the rank; "lora_a tensor is not
    transposed")."""
    fix = "convert an adapter trained on this base model (the engine would refuse to load it)"
    pairs: dict[str, dict[str, tuple[int, ...]]] = {}
    for name, ne in adapter.items():
        if name.endswith(LORA_A):
            pairs.setdefault(name.replace(LORA_A, ""), {})["a"] = ne
        elif name.endswith(LORA_B):
            pairs.setdefault(name.replace(LORA_B, ""), {})["b"] = ne
        elif not name.endswith(NORM_SUFFIX):
            return (
                f"{adapter_label} has tensor {name!r}, which is neither {LORA_A} nor {LORA_B} (the engine refuses: "
                "LoRA tensor has unexpected suffix) — name a LoRA GGUF made by convert_lora_to_gguf.py"
            )
    for name in sorted(pairs):
        a, b = pairs[name].get("a"), pairs[name].get("b")
        if a is None or b is None:
            return (
                f"{adapter_label} has {name}{LORA_B if a is None else LORA_A} without its "
                f"{name}{LORA_A if a is None else LORA_B} (the engine refuses: LoRA tensor pair is missing one "
                f"component) — {fix}"
            )
        model = base.get(name)
        if model is None:
            return (
                f"{adapter_label} adapts tensor {name!r}, which its base {base_label} does not have (the engine refuses: "
                f"LoRA tensor does not exist in base model) — {fix}"
            )
        if name.endswith(TOKEN_EMBD):  # B non-transposed, A and B flipped (llama-adapter.cpp:359-363)
            fits, rank_fits = model[0] == b[1] and model[1] == a[1], True
        else:
            fits, rank_fits = model[0] == a[0] and model[1] == b[1], a[1] == b[0]
        if not fits or not rank_fits:
            why = "tensor has incorrect shape" if not fits else "lora_a tensor is not transposed"
            return (
                f"{adapter_label}: tensor {name!r} has {LORA_A} {_dims(a)} and {LORA_B} {_dims(b)}, which do not fit "
                f"its base {base_label}'s {_dims(model)} (GGUF dims, ne[0] first; the engine refuses: {why}) — {fix}"
            )
    return None


def adapter_problem(adapter: GgufHeader, base: GgufHeader, *, adapter_label: str, base_label: str) -> str | None:
    """Why the engine would refuse to load the adapter over the base (llama-adapter.cpp's checks, in order), or None."""
    return _meta_problem(adapter.keys, base.keys, adapter_label=adapter_label, base_label=base_label) or shape_problem(
        adapter.tensors, base.tensors, adapter_label=adapter_label, base_label=base_label
    )


def _meta_problem(adapter: dict[str, Any], base: dict[str, Any], *, adapter_label: str, base_label: str) -> str | None:
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
