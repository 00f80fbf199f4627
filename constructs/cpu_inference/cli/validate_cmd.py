"""`cpu-inference validate CONFIG [--sources]`: every problem as one line (key path — fix); warnings from the AWS
decision framework for CPU inference. Exit 2 on errors.

Offline by default. `--sources` also reads each LoRA adapter's source and its base model's from the Hub (HF_ENDPOINT,
HF_TOKEN: the same client as `cpu-inference download`, model_download.hub), ranged reads of the GGUF headers only, and
runs the catalog copy's own check (model_download.gguf_meta.adapter_problem: what llama.cpp's llama-adapter.cpp
refuses — type, architecture, every lora_a/lora_b tensor against the base's tensor shapes), so a wrong adapter is
named before a deploy instead of failing its copy. A PEFT adapter (no source.file) is a safetensors checkpoint whose
GGUF the copy makes: its adapter_config.json's base_model_name_or_path config.json architecture is compared with the
base GGUF's general.architecture; its shapes are checked at copy."""

from __future__ import annotations

import argparse
import json
import posixpath
import sys
from typing import TYPE_CHECKING

from cpu_inference.config import load, warnings_for

if TYPE_CHECKING:
    from cpu_inference.config.schema import Config
    from model_download.gguf_meta import GgufHeader
    from model_download.hub import Hub

# Hugging Face config.json `architectures[0]` -> the GGUF general.architecture the pin's converter writes for it: the
# class registered for that name (`@ModelBase.register(...)`) and its `model_arch` (vendor/llama.cpp of the pin:
# conversion/llama.py:17-34 LLAMA, qwen.py:48-58 QWEN2, qwen.py:159-162 QWEN3, gemma.py:17-21 GEMMA, gemma.py:73-77
# GEMMA2, gemma.py:125-129 GEMMA3, phi.py:39-42 PHI3; gguf-py/gguf/constants.py MODEL_ARCH_NAMES). The common bases
# only; another architecture is checked at copy (tests/cli/test_validate_sources.py keeps this equal to the pin).
HF_TO_GGUF_ARCH = {
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "llama",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3",
    "GemmaForCausalLM": "gemma",
    "Gemma2ForCausalLM": "gemma2",
    "Gemma3ForCausalLM": "gemma3",
    "Phi3ForCausalLM": "phi3",
}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("validate", help="check a config.yaml (errors name the key and the fix)")
    p.add_argument("config", nargs="?", default="config.yaml")
    p.add_argument("--strict", action="store_true", help="treat warnings as errors")
    p.add_argument(
        "--sources",
        action="store_true",
        help="also read each LoRA adapter's and its base's GGUF header from the Hub (HF_ENDPOINT, HF_TOKEN) and check "
        "the adapter fits its base (type, architecture, tensor shapes); without it validate never touches the network",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    config = load(args.config)
    warnings = warnings_for(config)
    for w in warnings:
        print(w.render(args.config), file=sys.stderr)
    if warnings and args.strict:
        return 2
    if getattr(args, "sources", False):
        from cpu_inference.cli.model_cache import default_hub

        problems = source_problems(config, default_hub())
        for line in problems:
            print(f"{args.config}: {line}", file=sys.stderr)
        if problems:
            return 2
    farm = ""
    if config.pattern == "model-farm":
        pooled = sum(1 for m in config.models if config.serving_of(m) == "pool")
        farm = f": {pooled} in {len(config.farm.pools)} pool(s), {len(config.models) - pooled} dedicated"
    print(f"{args.config}: ok — {config.pattern} on {config.target}, {len(config.models)} model(s){farm}")
    return 0


def _read_all(hub: Hub, repo: str, file: str, revision: str) -> bytes:
    info = hub.info(_ref(repo, file, revision))
    return bytes(hub.open(info).read_range(0, info.size - 1)) if info.size else b""


def _ref(repo: str, file: str, revision: str):  # noqa: ANN202 - model_download.hub.FileRef
    from model_download.hub import FileRef

    return FileRef(repo, file, revision)


def _header(hub: Hub, repo: str, file: str, revision: str, keys: frozenset[str]) -> GgufHeader:
    """The GGUF's keys and tensor shapes through ranged reads (gguf_meta.read_header: no tensor data)."""
    from model_download.gguf_meta import read_header

    source = hub.open(hub.info(_ref(repo, file, revision)))
    return read_header(lambda start, end: source.read_range(start, end), source.size, keys, label=source.label)


def source_problems(config: Config, hub: Hub) -> list[str]:
    """One line per adapter that would fail its copy or its engine load: `models[i].adapters[j].source: why — fix`."""
    from model_download.catalog import PEFT_CONFIG
    from model_download.errors import DownloadError
    from model_download.gguf_meta import ADAPTER_KEYS, ARCHITECTURE, adapter_problem
    from model_download.peft_convert import base_repo

    problems: list[str] = []
    for i, model in enumerate(config.models):
        adapters = getattr(model, "adapters", None) or []
        src, base_file = model.source, model.source.file
        if not adapters or not base_file:  # adapters serve over a llama.cpp GGUF only (config rules say so offline)
            continue
        base_label = f"{model.name} ({src.hf_repo}/{base_file})"
        try:
            base = _header(hub, src.hf_repo, base_file, src.revision, ADAPTER_KEYS)
        except DownloadError as exc:
            problems.append(
                f"models[{i}].source: cannot read the base's GGUF header ({exc}) — fix the source, or HF_ENDPOINT/HF_TOKEN"
            )
            continue
        for j, adapter in enumerate(adapters):
            key, a = f"models[{i}].adapters[{j}].source", adapter.source
            label = f"adapter {adapter.name} ({a.hf_repo}/{a.catalog_file})"
            try:
                if not a.peft:
                    problem = adapter_problem(
                        _header(hub, a.hf_repo, a.catalog_file, a.revision, ADAPTER_KEYS),
                        base,
                        adapter_label=label,
                        base_label=base_label,
                    )
                else:
                    config_file = posixpath.join(posixpath.dirname(a.catalog_file), PEFT_CONFIG)
                    adapter_config = json.loads(_read_all(hub, a.hf_repo, config_file, a.revision))
                    ref = base_repo(adapter_config if isinstance(adapter_config, dict) else {}, label)
                    hf_config = json.loads(_read_all(hub, ref.repo, ref.file, ref.revision))
                    names = hf_config.get("architectures") if isinstance(hf_config, dict) else None
                    hf_arch = names[0] if isinstance(names, list) and names else None
                    arch = HF_TO_GGUF_ARCH.get(str(hf_arch))
                    problem = None
                    if arch is None:
                        print(
                            f"{key}: {ref.repo}'s architecture {hf_arch!r} is checked at copy (the converter's "
                            "GGUF architecture for it is not known here)",
                            file=sys.stderr,
                        )
                    elif arch != base.keys.get(ARCHITECTURE):
                        problem = (
                            f"{label} was trained on {ref.repo} ({hf_arch}, GGUF architecture {arch!r}) but its base "
                            f"{base_label} is {base.keys.get(ARCHITECTURE)!r} (the engine refuses: model arch and "
                            "LoRA arch mismatch) — serve it over a base of its own architecture"
                        )
            except DownloadError as exc:
                problem = f"cannot read the adapter's source ({exc}) — fix the source, or HF_ENDPOINT/HF_TOKEN"
            except ValueError as exc:
                problem = f"{label}: {PEFT_CONFIG} or its base's config.json is not JSON ({exc}) — fix the source"
            if problem:
                problems.append(f"{key}: {problem}")
    return problems
