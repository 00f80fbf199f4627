"""A small safetensors checkpoint repo on disk, as a Hub repo of a vLLM model holds it: two real safetensors shards
(the format's 8-byte little-endian header length + JSON header + tensor bytes), their index, config, generation
config and tokenizer files — plus what a snapshot must skip (a duplicate consolidated.safetensors that the index
does not name, pytorch_model.bin, original/, README.md, .gitattributes)."""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass
from pathlib import Path

from tests.runtime.model_download.fake_hub import FakeHub

MIB = 1024 * 1024
REPO = "acme-corp/tiny-llama"
MOVING = "acme-corp/tiny-llama-moving"
CORRUPT = "acme-corp/tiny-llama-corrupt"
BIN_ONLY = "acme-corp/tiny-llama-bin"
GATED = "acme-corp/tiny-llama-gated"
SHARD_1 = "model-00001-of-00002.safetensors"
SHARD_2 = "model-00002-of-00002.safetensors"
INDEX = "model.safetensors.index.json"
# The files a snapshot copies, and whether the fake Hub stores each with LFS (as the real repos do: weights and
# big tokenizers are LFS; small JSON is plain git).
SELECTED = {
    SHARD_1: True,
    SHARD_2: True,
    INDEX: False,
    "config.json": False,
    "generation_config.json": False,
    "tokenizer.json": True,
    "tokenizer_config.json": False,
    "special_tokens_map.json": False,
}
SKIPPED = {
    "consolidated.safetensors": True,
    "pytorch_model.bin": True,
    "original/consolidated.00.pth": True,
    "README.md": False,
    ".gitattributes": False,
}


def write_safetensors(path: Path, tensors: dict[str, int]) -> dict[str, str]:
    """A safetensors file of U8 tensors of the given byte sizes (random contents); its weight_map entries."""
    header: dict = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, size in tensors.items():
        header[name] = {"dtype": "U8", "shape": [size], "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # the format pads the header to 8 bytes
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        for size in tensors.values():
            f.write(os.urandom(size))
    return {name: path.name for name in tensors}


@dataclass
class SnapshotRepo:
    root: Path

    def path(self, name: str) -> Path:
        return self.root / name


def make_repo(root: Path) -> SnapshotRepo:
    root.mkdir(parents=True, exist_ok=True)
    (root / "original").mkdir(exist_ok=True)
    weight_map = write_safetensors(
        root / SHARD_1, {"model.embed_tokens.weight": 9 * MIB, "model.layers.0.mlp.weight": 3 * MIB}
    )
    weight_map |= write_safetensors(
        root / SHARD_2, {"model.layers.1.mlp.weight": 2 * MIB, "lm_head.weight": 1 * MIB + 17}
    )
    write_safetensors(root / "consolidated.safetensors", {"all": 1 * MIB})
    (root / INDEX).write_text(
        json.dumps({"metadata": {"total_size": 15 * MIB + 17}, "weight_map": weight_map}, indent=2)
    )
    (root / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["LlamaForCausalLM"],
                "model_type": "llama",
                "hidden_size": 64,
                "num_hidden_layers": 2,
                "torch_dtype": "bfloat16",
            }
        )
    )
    (root / "generation_config.json").write_text(json.dumps({"bos_token_id": 1, "eos_token_id": 2}))
    (root / "tokenizer.json").write_text(json.dumps({"version": "1.0", "model": {"type": "BPE", "vocab": {"a": 0}}}))
    (root / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ messages }}", "eos_token": "</s>"}))
    (root / "special_tokens_map.json").write_text(json.dumps({"eos_token": "</s>"}))
    (root / "pytorch_model.bin").write_bytes(os.urandom(MIB))
    (root / "original/consolidated.00.pth").write_bytes(os.urandom(MIB))
    (root / "README.md").write_text("# tiny\n")
    (root / ".gitattributes").write_text("*.safetensors filter=lfs diff=lfs merge=lfs -text\n")
    return SnapshotRepo(root)


def serve(
    hub: FakeHub, repo: str, files: SnapshotRepo, *, wrong_sha256: dict[str, str] | None = None, gated: bool = False
) -> None:
    """Put every file of the checkpoint (selected and skipped) into the fake Hub as `repo`."""
    for name, lfs in {**SELECTED, **SKIPPED}.items():
        hub.add_file(repo, name, files.path(name), lfs=lfs, sha256=(wrong_sha256 or {}).get(name), gated=gated)
