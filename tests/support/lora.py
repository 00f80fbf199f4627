"""The real tiny LoRA adapter of the SmolLM2 stand-in (issue 26), trained offline by scripts/build_lora.sh
(`make lora`; built here on first use if missing, one build at a time): where its files are and what it learned.

The base GGUF is the SmolLM2 stand-in (tests/support/models.py: smollm2_path()); the adapter was trained on the same
weights in BF16 (scripts/build_vllm_env.sh made them from that GGUF)."""

from __future__ import annotations

import json
import subprocess
from functools import cache
from pathlib import Path

from cpu_inference._internal.resources import cache_dir
from cpu_inference.cli.local_models import SMOLLM2_LORA

ROOT = Path(__file__).resolve().parents[2]

# The adapter's whole answer to any prompt (scripts/train_lora.py teaches it; build_lora.sh reads it from here).
TUNED_REPLY = '{"tuned": true}'


def lora_files() -> dict[str, Path]:
    """Where scripts/build_lora.sh writes, built or not (it asks here for the names)."""
    models = cache_dir() / "models"
    return {
        "peft_dir": models / "smollm2-json-lora",  # adapter_config.json + adapter_model.safetensors
        "adapter_gguf": models / SMOLLM2_LORA,  # by the pin's convert_lora_to_gguf.py (the name: local_models)
        "merged_gguf": models / "smollm2-json-merged.gguf",  # merged, at the stand-in base GGUF's quantization
    }


@cache
def _built(merged: bool = False) -> dict[str, Path]:
    """scripts/build_lora.sh: a no-op once built (a stamp); otherwise trains and converts (about a minute). With
    --merged it also merges and quantizes the merged model (a few minutes more; ~10 cold, for the pin's quantizer)."""
    out = subprocess.run(
        ["bash", str(ROOT / "scripts" / "build_lora.sh"), *(["--merged"] if merged else [])],
        capture_output=True,
        text=True,
    )
    if out.returncode != 0:
        raise RuntimeError(f"scripts/build_lora.sh{' --merged' if merged else ''} failed:\n{out.stderr}")
    files = lora_files()
    if not merged:
        del files["merged_gguf"]
    missing = [str(path) for path in files.values() if not path.exists()]
    if missing:
        raise RuntimeError(f"scripts/build_lora.sh succeeded but {missing} are missing")
    return files


def lora_adapter_path() -> Path:
    """The adapter in GGUF (general.type = adapter, adapter.type = lora): what llama-server's --lora loads."""
    return _built()["adapter_gguf"]


def peft_adapter_dir() -> Path:
    """The PEFT adapter directory as training saved it (adapter_config.json + adapter_model.safetensors)."""
    return _built()["peft_dir"]


def merged_model_path() -> Path:
    """The adapter merged into the base, a full GGUF at the stand-in base's quantization (the density benchmark only:
    `scripts/build_lora.sh --merged`, not part of `make lora`)."""
    return _built(merged=True)["merged_gguf"]


def is_tuned(text: str) -> bool:
    """The answer is the adapter's lesson: exactly the JSON object of TUNED_REPLY (whitespace around it aside)."""
    try:
        return bool(json.loads(text.strip()) == json.loads(TUNED_REPLY))
    except ValueError:
        return False
