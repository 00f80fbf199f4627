"""The task matrix's llama.cpp paths, each started once per module from a synthesized config
(tests/support/task_matrix.py: the table; tests/support/matrix_paths.py: the paths)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.matrix_requests import EMBED_TEXTS, RERANK_DOCUMENTS, RERANK_QUERY, Reference
from tests.support.task_matrix import task_of


@pytest.fixture(scope="session")
def stand_in_files(minilm_gguf: Path, reranker_gguf: Path) -> Callable[[str], Path]:
    """config model -> the GGUF `cpu-inference local --stand-ins` serves for its task (local_plan.stand_in_for:
    the encoder for embedding models, the cross-encoder stand-in for rerank models, SmolLM2 for generation); the
    fixtures build the first two."""
    from cpu_inference.cli.local_plan import STAND_IN_FILES, stand_in_for

    return lambda model: STAND_IN_FILES[stand_in_for(task_of(model))]()


@pytest.fixture(scope="session")
def reference() -> Reference:
    """transformers' embeddings and rerank scores for the matrix's texts (the same weights as the GGUFs)."""
    from tests.support.encoder_reference import reference_embeddings, reference_rerank_scores

    return Reference(
        reference_embeddings(list(EMBED_TEXTS)), reference_rerank_scores(RERANK_QUERY, list(RERANK_DOCUMENTS))
    )
