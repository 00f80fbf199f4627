"""Engines shared by the router test modules (started on first use, one of each per session): the SLM
(SmolLM2-135M, `--metrics -np 4`) and the stand-in LLM (Gemma-3-270M). `--alias` names them in every
answer's "model", so a test sees which engine really answered."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# This machine's CPU advertises AMX, but its hypervisor faults on AMX tile instructions: the natively built
# engine segfaults at its first matmul (gdb: ggml_backend_amx_mul_mat, reached through weight repacking).
# Repacking off (llama-server reads LLAMA_ARG_REPACK) avoids that path; export LLAMA_ARG_REPACK=1 to test with it.
os.environ.setdefault("LLAMA_ARG_REPACK", "0")

from tests.runtime.router.harness import LLM_ALIAS, LLM_ARGS, SLM_ALIAS, SLM_ARGS
from tests.support.engine import llama_server


@pytest.fixture(scope="session")
def slm(llama_server_bin: Path, smollm2_gguf: Path):
    with llama_server(llama_server_bin, smollm2_gguf, *SLM_ARGS, "--alias", SLM_ALIAS) as url:
        yield url


@pytest.fixture(scope="session")
def llm(llama_server_bin: Path, gemma_gguf: Path):
    with llama_server(llama_server_bin, gemma_gguf, *LLM_ARGS, "--alias", LLM_ALIAS) as url:
        yield url
