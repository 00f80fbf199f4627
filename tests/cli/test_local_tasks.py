"""`cpu-inference local --stand-ins` serves a model farm's embedding and rerank models as a user calls them: through
the gateway, with the OpenAI SDK for embeddings and POST /v1/rerank, pooled (the pool's router-mode llama-server over
the chart's preset) and dedicated (a llama-server of its own). The stand-ins are real encoders
(cpu_inference.cli.local_models: all-MiniLM-L6-v2 for embeddings, the MiniLM reranker stand-in for rerank), so the
answers are checked against the same checkpoints run by transformers (tests/support/encoder_reference.py)."""

from __future__ import annotations

import signal
from pathlib import Path

import httpx
import openai
import pytest
import yaml

from cpu_inference.cli.local_models import ENCODER, RERANKER
from tests.cli.test_local import LocalRun
from tests.support.encoder_reference import (
    MIN_COSINE,
    RERANK_TOLERANCE,
    cosine,
    reference_embeddings,
    reference_rerank_scores,
)

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "model-farm-eks.yaml"
POOLED_EMBEDDING = ["bge-small-en", "all-minilm"]  # the example's encoders in pool `small`
POOLED_RERANK = "jina-reranker"
DEDICATED = {"e5-small": "embedding", "bge-reranker": "rerank"}  # moved out of the pool below
SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "Kubernetes schedules pods onto nodes.",
    "Café au lait costs €3.50 in Zürich!",
]
QUERY = "How do I deploy a model on Kubernetes?"
DOCUMENTS = [
    "Kubernetes schedules pods onto nodes.",
    "Bananas are yellow.",
    "Use a Deployment with a container image that serves the model.",
    "The weather is nice.",
]


def farm_config(tmp_path: Path) -> Path:
    """examples/model-farm-eks.yaml with one embedding and one rerank model served dedicated instead of pooled (the
    example pools all its encoders), so both serving paths of both tasks run."""
    cfg = yaml.safe_load(EXAMPLE.read_text())
    (group,) = [g for g in cfg["model_groups"] if g["defaults"].get("task") == "embedding"]
    for name in DEDICATED:
        (m,) = [m for m in group["models"] if m["name"] == name]
        group["models"].remove(m)
        cfg["models"].append(
            {**{k: v for k, v in group["defaults"].items() if k != "pool"}, **m, "serving": "dedicated"}
        )
    path = tmp_path / "farm.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


@pytest.mark.engine
def test_stand_ins_serve_embeddings_and_rerank_pooled_and_dedicated_through_the_gateway(
    tmp_path, llama_server_bin, minilm_gguf, reranker_gguf
):
    embedding = [*POOLED_EMBEDDING, "e5-small"]
    rerank = [POOLED_RERANK, "bge-reranker"]
    run = LocalRun(
        farm_config(tmp_path),
        "--llama-server",
        str(llama_server_bin),
        "--stand-ins",
        "--threads",
        "1",
        "--models",
        ",".join(embedding + rerank),
        "--log-dir",
        str(tmp_path / "logs"),
    )
    try:
        run.wait_for("Ctrl-C stops everything")
        out = "".join(run.seen)
        assert "starting 2 engine(s) and 1 pool(s) of 3 model(s)" in out, out
        for name in embedding:
            assert f"{name}: {ENCODER} stands in for " in out
        for name in rerank:
            assert f"{name}: {RERANKER} stands in for " in out
        assert "rerank needs" not in out and "--embeddings/--reranking" not in out  # the old notes: nothing is refused
        # The printed hints: an embeddings and a rerank curl, and no chat request to a model that cannot chat.
        assert f"curl -s {run.url}/v1/embeddings" in out and f"curl -s {run.url}/v1/rerank" in out
        assert "/v1/chat/completions" not in out

        client = openai.OpenAI(base_url=f"{run.url}/v1", api_key="unused", max_retries=0, timeout=120)
        reference = reference_embeddings(SENTENCES)
        for name in embedding:
            single = client.embeddings.create(model=name, input=SENTENCES[0])
            batch = client.embeddings.create(model=name, input=SENTENCES)
            assert len(single.data) == 1 and len(batch.data) == len(SENTENCES), name
            got = [single.data[0].embedding] + [d.embedding for d in sorted(batch.data, key=lambda d: d.index)]
            cosines = [cosine(g, r) for g, r in zip(got, [reference[0], *reference], strict=True)]
            assert min(cosines) >= MIN_COSINE, (name, cosines)

        expected = reference_rerank_scores(QUERY, DOCUMENTS)
        for name in rerank:
            r = httpx.post(
                f"{run.url}/v1/rerank", json={"model": name, "query": QUERY, "documents": DOCUMENTS}, timeout=120
            )
            assert r.status_code == 200, (name, r.text)
            scores = {d["index"]: d["relevance_score"] for d in r.json()["results"]}
            assert sorted(scores) == list(range(len(DOCUMENTS))), (name, r.text)  # one score per document
            assert max(abs(scores[i] - e) for i, e in enumerate(expected)) <= RERANK_TOLERANCE, (name, scores, expected)

        code, out = run.stop(signal.SIGTERM)
        assert code == 0, out
    finally:
        run.kill()
