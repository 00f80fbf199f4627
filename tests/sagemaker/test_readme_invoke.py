"""The README's boto3 `invoke_endpoint` and `invoke_endpoint_with_response_stream` code, run unchanged against
the real engine.

Chain: README code → boto3/botocore (SigV4, the SageMaker Runtime REST call, event-stream decoding) →
tests/evaluation/sagemaker_emulator.py (a loopback stand-in for AWS's front end only: the REST paths, SigV4
verification, the container's bytes re-framed as `PayloadPart` events split at awkward sizes) → the
container's own `entrypoint.py serve` (its /invocations adapter) → the real llama-server with SmolLM2-135M.
The container runs with the environment a synthesized GravitonEndpoint Model carries (threads set to 1 for
this shared 2-vCPU machine, MODEL_PATH moved from /opt/ml/model to a local directory, and LLAMA_ARG_REPACK=0
because this machine's hypervisor faults on the AMX tile instructions the natively built test binary picks
through weight repacking — see tests/runtime/router/conftest.py).

Not covered (needs a deployment): IAM authorization of the call, SageMaker's real chunk boundaries and
timeouts, instance start-up and the S3 download into /opt/ml/model."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
from pathlib import Path

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ecr as ecr
from aws_cdk.assertions import Template

from cpu_inference import sizing
from cpu_inference.sagemaker import EngineImage, GravitonEndpoint, GravitonEndpointProps
from tests.evaluation.sagemaker_emulator import SageMakerRuntimeEmulator
from tests.runtime.engine.serving import start_endpoint, stop_endpoint
from tests.sagemaker.readme import examples

pytestmark = pytest.mark.engine

THREAD_KEYS = ("LLAMA_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "INTRA_OP_NUM_THREADS")


CHAT = sizing.ModelSpec(parameters_billions=0.135, quantization="Q4_1", context_window=2048, task="chat")
# all-MiniLM-L6-v2 (22.7M parameters, F16 GGUF) and the BERT cross-encoder fixture: BERT's 512 positions.
EMBEDDING = sizing.ModelSpec(parameters_billions=0.023, quantization="F16", context_window=512, task="embedding")
RERANK = sizing.ModelSpec(parameters_billions=0.023, quantization="F16", context_window=512, task="rerank")


def template_environment(model_file: str, spec: sizing.ModelSpec = CHAT, name: str = "smollm2-135m") -> dict[str, str]:
    """The container environment GravitonEndpoint synthesizes for `spec` (default: SmolLM2-135M chat), ml.c7g.large."""
    app = cdk.App()
    stack = cdk.Stack(app, "Slm")
    GravitonEndpoint(
        stack,
        "Slm",
        props=GravitonEndpointProps(
            name=name,
            model=f"s3://my-models/models/{name}/main/",
            model_file=model_file,
            spec=spec,
            image=EngineImage(ecr.Repository.from_repository_name(stack, "Repo", "llama-server"), tag="v1"),
            instance_type="ml.c7g.large",
        ),
    )
    (model,) = [
        r for r in Template.from_stack(stack).to_json()["Resources"].values() if r["Type"] == "AWS::SageMaker::Model"
    ]
    return model["Properties"]["PrimaryContainer"]["Environment"]


def _local(env: dict[str, str], workdir: Path, gguf: Path) -> dict[str, str]:
    """The synthesized environment on this machine: one thread, the model in a local directory, no repacking."""
    local = {**env, **{k: "1" for k in THREAD_KEYS}, "MODEL_PATH": str(workdir / "opt-ml-model" / gguf.name)}
    local["LLAMA_ARG_REPACK"] = os.environ.get("LLAMA_ARG_REPACK", "0")
    return local


@contextlib.contextmanager
def synthesized_endpoint(binary: Path, gguf: Path, workdir: Path, env: dict[str, str]):
    """`entrypoint.py serve` with the synthesized environment `env`, on this machine (_local)."""
    ep = start_endpoint(binary, gguf, workdir, 120, **_local(env, workdir, gguf))
    try:
        yield ep
    finally:
        stop_endpoint(ep)


@pytest.fixture(scope="module")
def readme_endpoint(llama_server_bin: Path, smollm2_gguf: Path, tmp_path_factory: pytest.TempPathFactory):
    env = template_environment(smollm2_gguf.name)
    assert env["MODEL_PATH"] == f"/opt/ml/model/{smollm2_gguf.name}"
    assert (env["LLAMA_THREADS"], env["LLAMA_PARALLEL"], env["LLAMA_CTX_PER_SLOT"], env["LLAMA_QUEUE_DEPTH"]) == (
        "2",
        "4",
        "2048",
        "4",
    )
    with synthesized_endpoint(llama_server_bin, smollm2_gguf, tmp_path_factory.mktemp("readme-invoke"), env) as ep:
        yield ep


@pytest.fixture(scope="module")
def embedding_endpoint(llama_server_bin: Path, minilm_gguf: Path, tmp_path_factory: pytest.TempPathFactory):
    env = template_environment(minilm_gguf.name, EMBEDDING, "bge-small-en")
    assert env["LLAMA_ARG_EMBEDDINGS"] == "true"  # what makes llama-server serve /v1/embeddings
    with synthesized_endpoint(llama_server_bin, minilm_gguf, tmp_path_factory.mktemp("readme-embed"), env) as ep:
        yield ep


@pytest.fixture(scope="module")
def rerank_endpoint(llama_server_bin: Path, reranker_gguf: Path, tmp_path_factory: pytest.TempPathFactory):
    env = template_environment(reranker_gguf.name, RERANK, "bge-reranker")
    assert env["LLAMA_ARG_RERANKING"] == "true"  # what makes llama-server serve /v1/rerank
    with synthesized_endpoint(llama_server_bin, reranker_gguf, tmp_path_factory.mktemp("readme-rerank"), env) as ep:
        yield ep


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """boto3 as the README uses it (`boto3.client("sagemaker-runtime")`), pointed at the loopback front end."""
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    return monkeypatch


def _readme_endpoint_name(code: str, variable: str = "endpoint_name") -> str:
    m = re.search(rf'^{variable} = "([^"]+)"', code, re.MULTILINE)
    assert m, "the invoke example must set endpoint_name"
    return m.group(1)


def test_readme_invoke_and_stream(readme_endpoint, aws_env) -> None:
    blocks = examples()
    name = _readme_endpoint_name(blocks["invoke"])
    with SageMakerRuntimeEmulator(readme_endpoint.url, name, region="us-east-1") as emu:
        aws_env.setenv("AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME", emu.url)
        ns: dict = {}
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(blocks["invoke"], "README.md#invoke", "exec"), ns)
        answer = ns["answer"]
        printed = out.getvalue().strip()
        assert answer["model"] == "smollm2-135m"  # LLAMA_MODEL_ALIAS from the synthesized environment
        assert answer["object"] == "chat.completion"
        content = answer["choices"][0]["message"]["content"]
        assert content.strip() and printed == content.strip()
        assert 0 < answer["usage"]["completion_tokens"] <= 48

        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(blocks["stream"], "README.md#stream", "exec"), ns)
        streamed = out.getvalue()
        assert streamed.strip(), "the streaming example printed nothing"

        # The generator itself, for what it yields: many pieces, as they are generated.
        pieces = list(ns["stream_text"](ns["runtime"], name, ns["body"]))
        assert len(pieces) > 3 and all(isinstance(p, str) and p for p in pieces)
        print(f"\ninvoke_endpoint: {content!r}\nstreamed: {streamed.strip()!r}\nstream pieces: {len(pieces)}")

        paths = [r["path"] for r in emu.seen.requests]
        assert paths == [f"/endpoints/{name}/invocations"] + [f"/endpoints/{name}/invocations-response-stream"] * 2
        assert emu.seen.rejected == []  # every request was signed correctly by botocore
        sent = [json.loads(r["body"]) for r in emu.seen.requests]
        assert "stream" not in sent[0] and sent[1]["stream"] is True and sent[1]["messages"] == sent[0]["messages"]
        assert all(r["content_type"] == "application/json" for r in emu.seen.requests)
    assert readme_endpoint.proc.poll() is None, readme_endpoint.log_tail()


def _run(block: str, ns: dict) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(examples()[block], f"README.md#{block}", "exec"), ns)
    return out.getvalue()


def test_readme_extraction_answers_in_its_schema(readme_endpoint, aws_env) -> None:
    import jsonschema

    name = _readme_endpoint_name(examples()["invoke"])
    with SageMakerRuntimeEmulator(readme_endpoint.url, name, region="us-east-1") as emu:
        aws_env.setenv("AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME", emu.url)
        ns: dict = {}
        exec(
            "import json\nimport boto3\nruntime = boto3.client('sagemaker-runtime')", ns
        )  # what the invoke block set up
        ns["endpoint_name"] = name
        printed = _run("extract", ns).strip()
        jsonschema.validate(ns["place"], ns["schema"])  # the answer parses as the schema, whatever the model wrote
        assert printed == f"{ns['place']['city']} {ns['place']['country']}"
        assert json.loads(emu.seen.requests[0]["body"])["response_format"]["type"] == "json_schema"


def test_readme_embeddings_single_and_batch(embedding_endpoint, aws_env) -> None:
    blocks = examples()
    name = _readme_endpoint_name(blocks["embed"])
    with SageMakerRuntimeEmulator(embedding_endpoint.url, name, region="us-east-1") as emu:
        aws_env.setenv("AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME", emu.url)
        ns: dict = {}
        assert _run("embed", ns).strip() == "384"  # all-MiniLM-L6-v2's dimensions
        assert all(isinstance(x, float) for x in ns["vector"])
        assert _run("embed_batch", ns).strip() == "3 384"
        sent = [json.loads(r["body"]) for r in emu.seen.requests]
        assert [type(b["input"]) for b in sent] == [str, list] and emu.seen.rejected == []
        assert [r["path"] for r in emu.seen.requests] == [f"/endpoints/{name}/invocations"] * 2
    # The paraphrase is nearer than the unrelated sentence: a sentence encoder answered, in the batch's order.
    a, b, c = ns["vectors"]

    def cos(x: list[float], y: list[float]) -> float:
        return sum(p * q for p, q in zip(x, y, strict=True)) / (sum(p * p for p in x) * sum(q * q for q in y)) ** 0.5

    assert cos(a, b) > cos(a, c) + 0.2, (cos(a, b), cos(a, c))


def test_readme_rerank(rerank_endpoint, aws_env) -> None:
    name = _readme_endpoint_name(examples()["rerank"], "rerank_endpoint")
    with SageMakerRuntimeEmulator(rerank_endpoint.url, name, region="us-east-1") as emu:
        aws_env.setenv("AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME", emu.url)
        ns: dict = {}
        exec(
            "import json\nimport boto3\nruntime = boto3.client('sagemaker-runtime')", ns
        )  # what the embed block set up
        printed = _run("rerank", ns).strip().splitlines()
        ranked = ns["ranked"]
        assert len(ranked) == len(printed) == 2  # top_n
        scores = [r["relevance_score"] for r in ranked]
        assert scores == sorted(scores, reverse=True) and {r["index"] for r in ranked} <= {0, 1, 2}
        assert printed[0].endswith(ns["documents"][ranked[0]["index"]])
        assert emu.seen.rejected == [] and [r["path"] for r in emu.seen.requests] == [f"/endpoints/{name}/invocations"]
