"""Real llama-server instances shared by the evaluation tests (one per model for the whole package), and
the SageMaker container's own /invocations adapter in front of the SmolLM2 one."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.evaluation.sagemaker_emulator import sagemaker_container
from tests.support.engine import llama_server

# Four slots as the sizing gives small instances; 4096 context = 1024 per slot, room for few-shot prompts.
# --no-repack: the locally built binary (GGML_NATIVE) picks the AMX buffer type on CPUs that advertise
# amx_tile, and on hosts whose kernel does not grant AMX tile state to the process (this VM) its first
# `ldtilecfg` segfaults while loading the model. Repacking only changes speed, never these tests' results.
# -t 1: llama.cpp's threads meet at a barrier every op, so on a shared 2-vCPU machine a second thread that
# gets preempted stalls both (benchmarks/README.md measured the collapse); one thread stays predictable.
SERVER_ARGS = ("--metrics", "-t", "1", "-np", "4", "-c", "4096", "--no-repack")


@pytest.fixture(scope="package")
def smol_url(llama_server_bin: Path, smollm2_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    log = tmp_path_factory.mktemp("smol") / "llama-server.log"
    with llama_server(llama_server_bin, smollm2_gguf, *SERVER_ARGS, log=log) as url:
        yield url


@pytest.fixture(scope="package")
def gemma_url(llama_server_bin: Path, gemma_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    log = tmp_path_factory.mktemp("gemma") / "llama-server.log"
    with llama_server(llama_server_bin, gemma_gguf, *SERVER_ARGS, log=log) as url:
        yield url


@pytest.fixture(scope="package")
def sagemaker_container_url(smol_url: str) -> Iterator[str]:
    """The image's SageMaker-mode front (GET /ping, POST /invocations) in front of the SmolLM2 engine,
    run in-process on its own event loop."""
    with sagemaker_container(smol_url, max_in_flight=8) as url:
        yield url
