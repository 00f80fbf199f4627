"""Every task's request through SageMaker's two data paths, exactly as deployed: `/invocations` of a single-model
endpoint (`entrypoint.py serve`, the environment GravitonEndpoint renders for the task) and `/models/<name>/invoke`
of a multi-model endpoint (`serve` with SAGEMAKER_MULTI_MODEL=true, each model's engine.json the one the catalog's
tarball carries: cpu_inference.sizing.pools.PoolPlan.engine_args). Real engines, real models: all-MiniLM-L6-v2 (a
sentence encoder) for embeddings and a BERT cross-encoder for rerank (tests/conftest.py: minilm_gguf,
reranker_gguf).

Bodies are OpenAI's and llama-server's own (tools/server/server-context.cpp in the pinned sdist):
embeddings `{"input": str | [str]}` (handle_embeddings_impl), rerank `{"query": str, "documents": [str]}`
(post_rerank). Before the fix the adapter answered 400 to both (review F1)."""

from __future__ import annotations

import json
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from cpu_inference import sizing
from cpu_inference.engines.tasks import task_env
from cpu_inference.sagemaker.engine_settings import engine_settings
from cpu_inference.sizing.pools import pool_plan
from tests.runtime.engine.serving import ENGINE_DIR, Endpoint, chat_body, start_endpoint, stop_endpoint
from tests.runtime.engine.test_mme_contract import Mme, mme_container

pytestmark = pytest.mark.engine

MIB = 1024 * 1024
MINILM_DIMS = 384  # all-MiniLM-L6-v2's hidden size (its config.json)
SEMANTIC_MARGIN = 0.2  # cosine(paraphrase) - cosine(unrelated) at least
EMBEDDING = sizing.ModelSpec(parameters_billions=0.023, quantization="F16", context_window=512, task="embedding")
RERANK = sizing.ModelSpec(parameters_billions=0.023, quantization="F16", context_window=512, task="rerank")
BUDGET_SECONDS = 4  # ADAPTER_GENERATION_BUDGET_SECONDS of the embedding endpoint: the 504 test waits this long
QUERY = "Where do llamas live?"
DOCUMENTS = [
    "The stock market closed higher on Friday.",
    "Llamas live in the Andes mountains of South America.",
    "Preheat the oven before baking the bread.",
]
ACCEPTED = ("messages", "prompt", "input", "query", "documents")  # the 400 names every accepted shape


def rendered_task_env(spec: sizing.ModelSpec) -> dict[str, str]:
    """The task's engine variables in the environment GravitonEndpoint renders for `spec` (engine_settings), which
    must be exactly the library's task_env: LLAMA_ARG_EMBEDDINGS / LLAMA_ARG_RERANKING, read by llama-server itself."""
    env = engine_settings(spec, "ml.c7g.large", alias=spec.task).environment()
    rendered = {k: v for k, v in env.items() if k.startswith("LLAMA_ARG_")}
    assert rendered == task_env(spec.task) and rendered, rendered
    return rendered


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True)) / (math.hypot(*a) * math.hypot(*b))


def check_embeddings(r: httpx.Response, n: int) -> list[list[float]]:
    assert r.status_code == 200, r.text
    data = r.json()["data"]
    assert [d["index"] for d in data] == list(range(n)) and all(d["object"] == "embedding" for d in data)
    vectors = [d["embedding"] for d in data]
    assert all(len(v) == MINILM_DIMS for v in vectors), [len(v) for v in vectors]
    return vectors


def check_rerank(r: httpx.Response, top_n: int = len(DOCUMENTS)) -> list[dict]:
    """llama-server's rerank answer (format_response_rerank): the best `top_n` documents by relevance_score, best
    first. The reranker fixture is a stand-in whose scores are not relevance, so the order itself is not checked."""
    assert r.status_code == 200, r.text
    results = r.json()["results"]
    assert len(results) == top_n and len({x["index"] for x in results}) == top_n
    assert all(0 <= x["index"] < len(DOCUMENTS) and math.isfinite(x["relevance_score"]) for x in results)
    scores = [x["relevance_score"] for x in results]
    assert scores == sorted(scores, reverse=True), results
    return results


def check_semantics(vectors: list[list[float]]) -> None:
    """A sentence encoder: a paraphrase is closer than an unrelated sentence."""
    same, paraphrase, other = vectors
    assert cosine(same, paraphrase) > cosine(same, other) + SEMANTIC_MARGIN, (
        cosine(same, paraphrase),
        cosine(same, other),
    )


SENTENCES = [
    "A llama is grazing in the field.",
    "In the meadow, a llama eats grass.",
    "Interest rates rose by half a point.",
]


@pytest.fixture(scope="module")
def embedding_endpoint(
    llama_server_bin: Path, minilm_gguf: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Endpoint]:
    # One slot and one queued request: the third request in flight is 429 (the admission test below).
    ep = start_endpoint(
        llama_server_bin,
        minilm_gguf,
        tmp_path_factory.mktemp("sm-embed"),
        120,
        LLAMA_PARALLEL="1",
        LLAMA_QUEUE_DEPTH="1",
        ADAPTER_GENERATION_BUDGET_SECONDS=str(BUDGET_SECONDS),
        **rendered_task_env(EMBEDDING),
    )
    yield ep
    stop_endpoint(ep)


@pytest.fixture(scope="module")
def rerank_endpoint(
    llama_server_bin: Path, reranker_gguf: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Endpoint]:
    ep = start_endpoint(
        llama_server_bin, reranker_gguf, tmp_path_factory.mktemp("sm-rerank"), 120, **rendered_task_env(RERANK)
    )
    yield ep
    stop_endpoint(ep)


def test_invocations_answers_openai_embeddings_single_and_batch(embedding_endpoint: Endpoint) -> None:
    url = f"{embedding_endpoint.url}/invocations"
    (one,) = check_embeddings(httpx.post(url, json={"input": SENTENCES[0]}, timeout=60), 1)
    batch = check_embeddings(httpx.post(url, json={"input": SENTENCES}, timeout=60), 3)
    assert cosine(one, batch[0]) > 0.999  # the same sentence alone or in a batch
    check_semantics(batch)


def test_invocations_answers_rerank(rerank_endpoint: Endpoint) -> None:
    body = {"query": QUERY, "documents": DOCUMENTS}
    results = check_rerank(httpx.post(f"{rerank_endpoint.url}/invocations", json=body, timeout=60))
    # Exactly the engine's own answer to the same body (the adapter adds nothing to a rerank request).
    assert results == httpx.post(f"{rerank_endpoint.engine_url}/v1/rerank", json=body, timeout=60).json()["results"]
    check_rerank(httpx.post(f"{rerank_endpoint.url}/invocations", json={**body, "top_n": 2}, timeout=60), top_n=2)


@pytest.mark.parametrize(
    "body",
    [
        {"input": "x", "query": "q", "documents": ["d"]},  # embeddings and rerank at once
        {"messages": [{"role": "user", "content": "hi"}], "input": "x"},
        {"query": "q"},  # half a rerank body
        {"text": "x"},
    ],
)
def test_a_body_of_no_shape_or_of_two_is_one_400_naming_the_accepted_shapes(
    embedding_endpoint: Endpoint, body: dict
) -> None:
    r = httpx.post(f"{embedding_endpoint.url}/invocations", json=body, timeout=30)
    assert r.status_code == 400, r.text
    message = r.json()["error"]["message"]
    assert "\n" not in message and all(f"({key}" in message or f"+ {key})" in message for key in ACCEPTED), message


def test_embeddings_go_through_admission_and_the_budget(embedding_endpoint: Endpoint) -> None:
    """The engine frozen (SIGSTOP): the slot and the queue place (LLAMA_PARALLEL=1, LLAMA_QUEUE_DEPTH=1) hold two
    embeddings requests, the third is 429 + Retry-After at once; the two held are 504 at the budget, and the engine
    serves again once thawed."""
    ep = embedding_endpoint
    engine = ep.engine_pid()
    held: list[httpx.Response | BaseException] = []

    def call() -> None:
        try:
            held.append(httpx.post(f"{ep.url}/invocations", json={"input": SENTENCES}, timeout=60))
        except BaseException as e:  # noqa: BLE001 - asserted below
            held.append(e)

    os.kill(engine, signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        threads = [threading.Thread(target=call) for _ in range(2)]
        for t in threads:
            t.start()
        time.sleep(1.0)  # both admitted (the adapter parses and counts them at once) and waiting for the engine
        busy = httpx.post(f"{ep.url}/invocations", json={"input": "one more"}, timeout=30)
        assert busy.status_code == 429 and int(busy.headers["retry-after"]) >= 1, busy.text
        for t in threads:
            t.join(timeout=60)
        elapsed = time.monotonic() - t0
    finally:
        os.kill(engine, signal.SIGCONT)
    assert [getattr(r, "status_code", r) for r in held] == [504, 504], held
    assert "budget" in held[0].json()["error"]["message"]  # type: ignore[union-attr]
    assert BUDGET_SECONDS <= elapsed < BUDGET_SECONDS + 10, elapsed
    check_embeddings(httpx.post(f"{ep.url}/invocations", json={"input": SENTENCES[0]}, timeout=60), 1)


class _Recorder(BaseHTTPRequestHandler):
    """A loopback engine that records each body it is sent and answers 200 {}."""

    bodies: list[tuple[str, dict]] = []

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        self.bodies.append((self.path, json.loads(self.rfile.read(int(self.headers["Content-Length"])))))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args: object) -> None:
        pass


def test_each_shape_reaches_its_engine_route_and_only_generation_gets_the_engines_time_limit() -> None:
    """The route table on the wire: what the adapter sends the engine for each body. Embeddings and rerank do not
    generate, so their bodies go through untouched (no t_max_predict_ms); chat and completion get the soft limit."""
    import asyncio

    if str(ENGINE_DIR) not in sys.path:
        sys.path.insert(0, str(ENGINE_DIR))
    from inference_runtime.sagemaker_adapter import SageMakerAdapter

    _Recorder.bodies = []
    engine = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    threading.Thread(target=engine.serve_forever, daemon=True).start()
    bodies = {
        "chat": chat_body("hi"),
        "completion": {"prompt": "hi", "max_tokens": 2},
        "embeddings": {"input": ["a", "b"]},
        "rerank": {"query": "q", "documents": ["a", "b"], "top_n": 1},
    }

    async def run() -> list[int]:
        adapter = SageMakerAdapter("127.0.0.1", engine.server_address[1], max_in_flight=4)
        port = await adapter.start("127.0.0.1", 0)
        try:
            async with httpx.AsyncClient(timeout=30) as client:
                return [
                    (await client.post(f"http://127.0.0.1:{port}/invocations", json=b)).status_code
                    for b in bodies.values()
                ]
        finally:
            await adapter.close(grace=0)
            adapter.release()

    try:
        assert asyncio.run(run()) == [200] * 4
    finally:
        engine.shutdown()
        engine.server_close()
    sent = dict(zip(bodies, _Recorder.bodies, strict=True))
    assert {k: path for k, (path, _) in sent.items()} == {
        "chat": "/v1/chat/completions",
        "completion": "/v1/completions",
        "embeddings": "/v1/embeddings",
        "rerank": "/v1/rerank",
    }
    assert sent["embeddings"][1] == bodies["embeddings"] and sent["rerank"][1] == bodies["rerank"]
    assert sent["chat"][1]["t_max_predict_ms"] > 0 and sent["completion"][1]["t_max_predict_ms"] > 0


# --- multi-model endpoint -----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def farm(
    llama_server_bin: Path, minilm_gguf: Path, reranker_gguf: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Mme]:
    """A multi-model endpoint with an embedding child and a rerank child, each loaded from the tarball the catalog
    builds (the GGUF + engine.json = PoolPlan.engine_args), after the container answers /ping."""
    plan = pool_plan({"emb": EMBEDDING, "rr": RERANK}, cpu=1, memory_bytes=2 * sizing.GIB)
    assert plan.engine_args("emb")["embeddings"] == "true" and plan.engine_args("rr")["reranking"] == "true"
    with mme_container(
        llama_server_bin,
        tmp_path_factory.mktemp("sm-mme-tasks"),
        mode="serve-mme",
        MME_MEMORY_BUDGET_BYTES=str(4096 * MIB),
    ) as mme:
        for name, gguf in (("emb", minilm_gguf), ("rr", reranker_gguf)):
            r = mme.load(name, mme.arrive(name, gguf, plan.engine_args(name)))
            assert r.status_code == 200, r.text + mme.log_text()
        yield mme


def test_a_multi_model_endpoint_invokes_its_embedding_and_rerank_children(farm: Mme) -> None:
    target = {"X-Amzn-SageMaker-Target-Model": "bge-small-en/0123456789abcdef.tar.gz"}
    url = f"{farm.url}/models/emb/invoke"
    (one,) = check_embeddings(httpx.post(url, json={"input": SENTENCES[0]}, headers=target, timeout=60), 1)
    batch = check_embeddings(httpx.post(url, json={"input": SENTENCES}, headers=target, timeout=60), 3)
    assert cosine(one, batch[0]) > 0.999
    check_semantics(batch)
    check_rerank(
        httpx.post(
            f"{farm.url}/models/rr/invoke", json={"query": QUERY, "documents": DOCUMENTS}, headers=target, timeout=60
        )
    )
    ambiguous = httpx.post(url, json={"input": "x", "query": "q", "documents": ["d"]}, timeout=30)
    assert ambiguous.status_code == 400 and "input" in ambiguous.json()["error"]["message"], ambiguous.text
