"""The encoder and the reranker stand-in (scripts/build_encoders.sh) served by the pinned llama-server give what the
same checkpoints give in transformers (tests/support/encoder_reference.py: the reference and its sources).

The tolerances and what they were measured at: tests/support/encoder_reference.py (MIN_COSINE, RERANK_TOLERANCE).
"""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.support.encoder_reference import MIN_COSINE, RERANK_TOLERANCE, cosine, reference_embeddings, reference_rerank
from tests.support.engine import llama_server

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "A man is eating food.",
    "Kubernetes schedules pods onto nodes with enough free CPU and memory.",
    "Café au lait costs €3.50 in Zürich!",  # accents (the tokenizer strips them), a currency sign
    "def square(x): return x ** 2  # code",
    "日本語のテキストも少し。",  # CJK: one token per character
    "OK",
    "   spaces   and\ttabs\n and a newline  ",
    "an extremely long sentence that repeats itself " * 12,  # ~100 tokens
    "Quantum entanglement puzzles physicists.",
]
QUERY = "How do I deploy a model on Kubernetes?"
DOCUMENTS = [
    "Kubernetes schedules pods onto nodes.",
    "Bananas are yellow.",
    "Use a Deployment with a container image that serves the model.",
    "The weather is nice.",
    "Pods",
]


def test_embeddings_match_transformers(llama_server_bin: Path, minilm_gguf: Path, record_property) -> None:
    """/v1/embeddings (the GGUF's mean pooling, normalised) vs transformers' mean pooling + L2 norm: cosine ≥ 0.999
    for every sentence, in one batch request."""
    reference = reference_embeddings(SENTENCES)
    with llama_server(llama_server_bin, minilm_gguf, "--embeddings", "--ctx-size", "1024", "--parallel", "2") as base:
        r = httpx.post(f"{base}/v1/embeddings", json={"input": SENTENCES}, timeout=120)
    r.raise_for_status()
    got = sorted(r.json()["data"], key=lambda d: d["index"])
    assert [d["index"] for d in got] == list(range(len(SENTENCES)))
    assert all(len(d["embedding"]) == 384 for d in got)  # all-MiniLM-L6-v2's hidden size
    cosines = [cosine(d["embedding"], ref) for d, ref in zip(got, reference, strict=True)]
    record_property("min_cosine", min(cosines))
    print(f"embeddings: min cosine {min(cosines):.6f} over {len(SENTENCES)} sentences")
    assert min(cosines) >= MIN_COSINE, list(zip(SENTENCES, cosines, strict=True))


def test_rerank_scores_match_transformers(llama_server_bin: Path, reranker_gguf: Path, record_property) -> None:
    """/v1/rerank: one score per document, each within RERANK_TOLERANCE of the reference, and the engine read as
    many tokens as [CLS] query [SEP] doc [SEP] has (format_prompt_rerank with the GGUF's tokenizer flags)."""
    reference, tokens = reference_rerank(QUERY, DOCUMENTS)
    with llama_server(llama_server_bin, reranker_gguf, "--reranking", "--ctx-size", "1024", "--parallel", "2") as base:
        r = httpx.post(f"{base}/v1/rerank", json={"query": QUERY, "documents": DOCUMENTS}, timeout=120)
    r.raise_for_status()
    body = r.json()
    scores = {d["index"]: d["relevance_score"] for d in body["results"]}
    assert sorted(scores) == list(range(len(DOCUMENTS)))
    diffs = [abs(scores[i] - ref) for i, ref in enumerate(reference)]
    record_property("rerank_max_abs_diff", max(diffs))
    print(
        f"rerank: max |score - reference| {max(diffs):.2e}; scores {[round(scores[i], 4) for i in range(len(DOCUMENTS))]}"
    )
    assert max(diffs) <= RERANK_TOLERANCE, (scores, reference)
    assert body["usage"]["prompt_tokens"] == tokens
    # Not all equal: the head and the encoder both act (a constant would also be "within tolerance" of a constant).
    assert max(reference) - min(reference) > 100 * RERANK_TOLERANCE
