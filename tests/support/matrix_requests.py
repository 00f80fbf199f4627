"""Each task's requests as a user sends them, and the checks on what comes back (tests/support/task_matrix.py's
REQUESTS): through an OpenAI-compatible URL with the official `openai` SDK (EKS gateway, `cpu-inference local`),
or through SageMaker Runtime with boto3 `invoke_endpoint` (single-model and multi-model endpoints, behind
tests/evaluation/sagemaker_emulator.py) with the bodies the SageMaker README shows.

Through a LoRA adapter (the task matrix's adapter cells) the same requests name the adapter as `model` and pass the
same checks; a chat's reply must also be the adapter's lesson (tests/support/lora.py is_tuned) while the same
request to its base's name is not — the base serves with the adapter loaded at scale 0 (inference_runtime/lora.py).

Embeddings and rerank scores are checked against the same weights run by `transformers` (tests/support/
encoder_reference.py: computed once per session for the fixed texts below)."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import jsonschema

ROUTER_DIR = Path(__file__).resolve().parents[2] / "containers" / "router"
if str(ROUTER_DIR) not in sys.path:
    sys.path.insert(0, str(ROUTER_DIR))

from slm_router.classifier import Classifier  # noqa: E402  (the router's own request)
from slm_router.config import Config as RouterConfig  # noqa: E402
from tests.support.encoder_reference import MIN_COSINE, RERANK_TOLERANCE  # noqa: E402  (measured there)

CHAT_TEXT = "Name one primary colour."
COMPLETION_PROMPT = "The three primary colours are"
CLASSIFY_TEXT = "Hello!"
EXTRACT_TEXT = "Extract the city and the country: I flew from Lyon, France to Osaka last spring."
EXTRACT_SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "country": {"type": "string"}},
    "required": ["city", "country"],
    "additionalProperties": False,
}
EMBED_TEXTS = (
    "Graviton instances run quantized models cheaply.",
    "The cat sat on the mat.",
    "Embeddings map sentences to vectors.",
)
RERANK_QUERY = "Which instance family uses Graviton processors?"
RERANK_DOCUMENTS = (
    "The c7g family runs on AWS Graviton3.",
    "Bananas are rich in potassium.",
    "Spot capacity can be reclaimed with two minutes' notice.",
)
MAX_TOKENS = 12
CLASSIFIER = Classifier(RouterConfig(), client=None)  # type: ignore[arg-type]  # the shipped labels and few-shot


def chat_body(**extra: Any) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": CHAT_TEXT}], "max_tokens": MAX_TOKENS, "temperature": 0, **extra}


def completion_body() -> dict[str, Any]:
    return {"prompt": COMPLETION_PROMPT, "max_tokens": MAX_TOKENS, "temperature": 0}


def classify_body() -> dict[str, Any]:
    return CLASSIFIER.request_body(CLASSIFY_TEXT)


def extract_body() -> dict[str, Any]:
    return {
        "messages": [{"role": "user", "content": EXTRACT_TEXT}],
        "max_tokens": 48,
        "temperature": 0,
        "response_format": {"type": "json_schema", "json_schema": {"name": "place", "schema": EXTRACT_SCHEMA}},
    }


def embed_body(batch: bool) -> dict[str, Any]:
    return {"input": list(EMBED_TEXTS) if batch else EMBED_TEXTS[0]}


def rerank_body() -> dict[str, Any]:
    return {"query": RERANK_QUERY, "documents": list(RERANK_DOCUMENTS)}


@dataclass(frozen=True)
class Reference:
    """transformers' answers for the fixed texts (tests/support/encoder_reference.py)."""

    embeddings: Sequence[Sequence[float]]  # one per EMBED_TEXTS
    rerank_scores: Sequence[float]  # one per RERANK_DOCUMENTS


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


# --- checks (shared by both transports: each gets the decoded JSON answer) ------------------------------------------


def check_chat(answer: Mapping[str, Any]) -> str:
    text = answer["choices"][0]["message"]["content"]
    assert isinstance(text, str) and text.strip(), answer
    return text


def check_tuned(adapter_text: str, base_text: str) -> None:
    """An adapter's chat reply is its lesson, its base's reply to the same request is not."""
    from tests.support.lora import is_tuned

    assert is_tuned(adapter_text), f"the adapter's reply is not tuned: {adapter_text!r}"
    assert not is_tuned(base_text), f"the base's reply is tuned (the adapter applied to it): {base_text!r}"


def check_completion(answer: Mapping[str, Any]) -> None:
    text = answer["choices"][0]["text"]
    assert isinstance(text, str) and text.strip(), answer


def check_classify(answer: Mapping[str, Any]) -> None:
    choice = answer["choices"][0]
    assert choice["message"]["content"].strip() in CLASSIFIER.cfg.labels, answer
    assert choice["logprobs"]["content"][0]["top_logprobs"], "the router reads its confidence from top_logprobs"


def check_extract(answer: Mapping[str, Any]) -> None:
    jsonschema.validate(json.loads(answer["choices"][0]["message"]["content"]), EXTRACT_SCHEMA)


def check_embeddings(answer: Mapping[str, Any], ref: Reference, batch: bool) -> None:
    data = sorted(answer["data"], key=lambda d: d["index"])
    expected = ref.embeddings if batch else ref.embeddings[:1]
    assert [d["index"] for d in data] == list(range(len(expected))), answer
    for got, want in zip(data, expected, strict=True):
        assert len(got["embedding"]) == len(want)
        assert cosine(got["embedding"], want) >= MIN_COSINE


def check_rerank(answer: Mapping[str, Any], ref: Reference) -> None:
    results = {r["index"]: r["relevance_score"] for r in answer["results"]}
    assert sorted(results) == list(range(len(RERANK_DOCUMENTS))), answer
    for i, want in enumerate(ref.rerank_scores):
        assert abs(results[i] - want) <= RERANK_TOLERANCE, (i, results[i], want)


# --- transport 1: an OpenAI-compatible base URL, the official SDK ---------------------------------------------------


def via_openai(base_url: str, model: str, kind: str, ref: Reference, *, base: str | None = None) -> None:
    """Send `kind` to `model` at `base_url` (…/v1) with the openai SDK (httpx for /v1/rerank, which the SDK lacks).
    `base`: `model` is a LoRA adapter over it (a chat is checked tuned, the base's answer not)."""
    from openai import OpenAI

    client = OpenAI(base_url=base_url, api_key="unused", timeout=180, max_retries=0)

    def chat(name: str) -> str:
        return check_chat(client.chat.completions.create(model=name, **chat_body()).model_dump())

    if kind == "chat":
        text = chat(model)
        if base is not None:
            check_tuned(text, chat(base))
    elif kind == "chat-stream":
        plain = chat(model)
        chunks = list(client.chat.completions.create(model=model, stream=True, **chat_body()))
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert len(chunks) >= 2 and text == plain, (text, plain)
        if base is not None:
            check_tuned(text, chat(base))
    elif kind == "completion":
        check_completion(client.completions.create(model=model, **completion_body()).model_dump())
    elif kind == "classify":
        body = classify_body()
        extra = {k: body.pop(k) for k in ("grammar", "structured_outputs", "cache_prompt")}
        check_classify(client.chat.completions.create(model=model, extra_body=extra, **body).model_dump())
    elif kind == "extract":
        check_extract(client.chat.completions.create(model=model, **extract_body()).model_dump())
    elif kind in ("embed", "embed-batch"):
        batch = kind == "embed-batch"
        check_embeddings(client.embeddings.create(model=model, **embed_body(batch)).model_dump(), ref, batch)
    elif kind == "rerank":
        r = httpx.post(f"{base_url}/rerank", json={"model": model, **rerank_body()}, timeout=180)
        assert r.status_code == 200, r.text
        check_rerank(r.json(), ref)
    else:
        raise AssertionError(f"no request for {kind!r}")


# --- transport 2: SageMaker Runtime with boto3 ----------------------------------------------------------------------


def sagemaker_body(kind: str) -> dict[str, Any]:
    """The body a boto3 user sends for `kind` (the SageMaker README's examples)."""
    bodies: dict[str, Callable[[], dict[str, Any]]] = {
        "chat": chat_body,
        "chat-stream": chat_body,
        "completion": completion_body,
        "classify": classify_body,
        "extract": extract_body,
        "embed": lambda: embed_body(False),
        "embed-batch": lambda: embed_body(True),
        "rerank": rerank_body,
    }
    return bodies[kind]()


def stream_text(runtime: Any, endpoint: str, body: Mapping[str, Any]) -> str:
    """InvokeEndpointWithResponseStream's text, buffered across PayloadPart boundaries (as the README does)."""
    response = runtime.invoke_endpoint_with_response_stream(
        EndpointName=endpoint, ContentType="application/json", Body=json.dumps({**body, "stream": True})
    )
    buffer, out = b"", []
    for event in response["Body"]:
        buffer += event.get("PayloadPart", {}).get("Bytes", b"")
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            line = line.strip()
            if line.startswith(b"data: ") and line != b"data: [DONE]":
                delta = json.loads(line[len(b"data: ") :])["choices"][0]["delta"]
                out.append(delta.get("content") or "")
    return "".join(out)


def via_sagemaker(
    runtime: Any,
    endpoint: str,
    kind: str,
    ref: Reference,
    *,
    target_model: str | None = None,
    model: str | None = None,
    base: str | None = None,
) -> None:
    """Send `kind` with boto3 InvokeEndpoint (TargetModel for a multi-model endpoint). `model`: the body's `model`
    (a LoRA adapter's name on a single-model endpoint; the SageMaker README); `base`: the model it is over (a chat is
    checked tuned, the same body to the base's name not)."""
    body = {**sagemaker_body(kind), **({"model": model} if model else {})}
    extra = {"TargetModel": target_model} if target_model else {}

    def invoke(b: Mapping[str, Any]) -> dict[str, Any]:
        response = runtime.invoke_endpoint(
            EndpointName=endpoint, ContentType="application/json", Body=json.dumps(b), **extra
        )
        return json.loads(response["Body"].read())

    def base_chat() -> str:
        return check_chat(invoke({**body, "model": base}))

    if kind == "chat-stream":
        assert target_model is None, "InvokeEndpointWithResponseStream has no TargetModel"
        plain = check_chat(invoke(body))
        text = stream_text(runtime, endpoint, body)
        assert text == plain, (text, plain)
        if base is not None:
            check_tuned(text, base_chat())
        return
    answer = invoke(body)
    if kind == "chat":
        text = check_chat(answer)
        if base is not None:
            check_tuned(text, base_chat())
    elif kind == "completion":
        check_completion(answer)
    elif kind == "classify":
        check_classify(answer)
    elif kind == "extract":
        check_extract(answer)
    elif kind in ("embed", "embed-batch"):
        check_embeddings(answer, ref, kind == "embed-batch")
    elif kind == "rerank":
        check_rerank(answer, ref)
    else:
        raise AssertionError(f"no request for {kind!r}")
