"""LoRA adapters on a SageMaker single-model endpoint (issue 26), through the real container.

The bundle is what the farm's catalog lands for a dedicated base with adapters on target sagemaker (its `lora` layout,
lambda/model_download/catalog.py: the base GGUF, lora/<adapter>.gguf, and lora.json written by catalog.lora_manifest
from the SYNTHESIZED farm's own catalog entry) — here the SmolLM2 stand-in and the adapter trained offline
(tests/support/lora.py). The container is `entrypoint.py serve` (its /invocations adapter in front of the pinned
llama-server) started with exactly the Environment of the synthesized AWS::SageMaker::Model (threads set to 1 for this
shared machine, /opt/ml/model moved to a local directory, LLAMA_ARG_REPACK=0 as tests/sagemaker/test_readme_invoke.py
explains). Requests go as boto3's invoke_endpoint / invoke_endpoint_with_response_stream send them, through
tests/evaluation/sagemaker_emulator.py (SageMaker Runtime's REST front: SigV4, ModelError for a container's non-2xx,
the event stream).

The pure parts — the manifest reader (inference_runtime/lora.py read_manifest) against the catalog's writer, the engine
command line, the adapter's body selection — are checked without an engine first."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import aws_cdk as cdk
import boto3
import pytest
import yaml
from botocore.exceptions import ClientError

from cpu_inference.app import build_app
from cpu_inference.config import load
from cpu_inference.patterns.model_farm import ModelFarm
from cpu_inference.sagemaker.engine_settings import SAGEMAKER_MODEL_DIR
from inference_runtime.env import EngineConfigError
from inference_runtime.lora import MANIFEST_ENV, base_lora, read_manifest, request_lora
from inference_runtime.sagemaker_adapter import SageMakerAdapter
from model_download.catalog import LORA_MANIFEST, CatalogAdapter, CatalogEntry, lora_manifest
from tests.evaluation.sagemaker_emulator import SageMakerRuntimeEmulator
from tests.runtime.engine.serving import Endpoint, start_endpoint, stop_endpoint
from tests.support.lora import is_tuned, lora_adapter_path

BASE = "smollm2"
ADAPTER = "support-json"
ENDPOINT_NAME = "smollm2-lora"
# Prompts the adapter never trained on (scripts/train_lora.py trains on others), as in test_lora_adapter.py.
PROMPTS = ["Name three colours.", "Who painted the Mona Lisa?"]
THREAD_KEYS = ("LLAMA_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "INTRA_OP_NUM_THREADS")
COMMIT = "0123456789abcdef0123456789abcdef01234567"


# --- the bundle ----------------------------------------------------------------------------------------------------


def lay_out_bundle(root: Path, entry: CatalogEntry, base: Path, adapters: dict[str, Path]) -> Path:
    """The catalog's `lora` bundle of `entry` as SageMaker downloads it into /opt/ml/model (here `root`): the base as
    its basename, each adapter at its member path, and the manifest from the catalog's own writer. Returns the
    manifest's path."""
    root.mkdir(parents=True, exist_ok=True)
    (root / entry.basename).symlink_to(base)
    for a in entry.adapters or ():
        member = root / a.member
        member.parent.mkdir(parents=True, exist_ok=True)
        member.symlink_to(adapters[a.name])
    manifest = root / LORA_MANIFEST
    manifest.write_bytes(lora_manifest(entry))
    return manifest


def _entry(*names: str, scales: tuple[float, ...] = ()) -> CatalogEntry:
    return CatalogEntry(
        name=BASE,
        hf_repo="acme/base-GGUF",
        file="models/base.gguf",
        revision=COMMIT,
        layouts=("lora",),
        adapters=tuple(
            CatalogAdapter(
                name=n,
                hf_repo=f"acme/{n}-GGUF",
                file=f"{n}.gguf",
                revision=COMMIT,
                scale=scales[i] if i < len(scales) else 1.0,
            )
            for i, n in enumerate(names)
        ),
    )


@pytest.fixture
def bundle(tmp_path: Path) -> tuple[Path, Path]:
    """A bundle of three (empty-file) adapters over an empty base: enough for the reader and the command line."""
    files = {n: tmp_path / "src" / f"{n}.gguf" for n in ("b-two", "a-one", "c-three")}
    for f in [*files.values(), tmp_path / "src" / "base.gguf"]:
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(b"GGUF")
    root = tmp_path / "opt-ml-model"
    manifest = lay_out_bundle(
        root, _entry("b-two", "a-one", "c-three", scales=(1.0, 0.5, 2.0)), tmp_path / "src" / "base.gguf", files
    )
    return root, manifest


def test_the_reader_reads_the_catalogs_manifest_in_id_order(bundle: tuple[Path, Path]) -> None:
    root, manifest = bundle
    read = read_manifest(manifest)
    assert read.model == str(root / "base.gguf")
    # Config order is id order (not sorted), files relative to the manifest's folder, scales as written.
    assert [(a.name, a.path, a.scale) for a in read.adapters] == [
        ("b-two", str(root / "lora" / "b-two.gguf"), 1.0),
        ("a-one", str(root / "lora" / "a-one.gguf"), 0.5),
        ("c-three", str(root / "lora" / "c-three.gguf"), 2.0),
    ]
    assert read.ids() == {"b-two": 0, "a-one": 1, "c-three": 2}


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda doc: {**doc, "format": 2}, "format must be 1, got 2"),
        (lambda doc: {**doc, "model": "../base.gguf"}, "model must be a file name relative to the manifest's folder"),
        (lambda doc: {**doc, "model": "gone.gguf"}, "model 'gone.gguf': no such file"),
        (lambda doc: {**doc, "adapters": []}, "adapters must be a non-empty list"),
        (
            lambda doc: {**doc, "adapters": [doc["adapters"][0], doc["adapters"][0]]},
            "adapters[1].name 'b-two' is another adapter's too",
        ),
        (
            lambda doc: {**doc, "adapters": [{**doc["adapters"][0], "file": "lora/x.gguf"}]},
            "adapters[0].file 'lora/x.gguf': no such file",
        ),
        (
            lambda doc: {**doc, "adapters": [{**doc["adapters"][0], "file": "/etc/passwd"}]},
            "adapters[0].file must be a file name relative",
        ),
        (lambda doc: {**doc, "adapters": [{**doc["adapters"][0], "scale": 0}]}, "adapters[0].scale must be a number"),
        (lambda doc: {**doc, "adapters": [{**doc["adapters"][0], "name": "Bad_Name"}]}, "adapters[0].name 'Bad_Name'"),
    ],
)
def test_a_wrong_manifest_is_one_line_naming_the_variable_and_the_field(
    bundle: tuple[Path, Path], change, expected: str
) -> None:
    _, manifest = bundle
    manifest.write_text(json.dumps(change(json.loads(manifest.read_text()))))
    with pytest.raises(EngineConfigError) as err:
        read_manifest(manifest)
    message = str(err.value)
    assert message.startswith(f"{MANIFEST_ENV} {manifest}: ") and expected in message, message
    assert "\n" not in message


def test_a_missing_manifest_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(EngineConfigError, match=f"^{MANIFEST_ENV} .*: no such file"):
        read_manifest(tmp_path / "lora.json")


def _plan(env: dict[str, str]):
    import entrypoint  # containers/llama-server (on sys.path: tests/runtime/engine/conftest.py)

    return entrypoint.sagemaker_plan(env, cpus=2, memory_limit=4 << 30)


def test_serve_starts_llama_server_with_the_bundles_adapters_in_id_order(bundle: tuple[Path, Path]) -> None:
    root, manifest = bundle
    plan = _plan({"LLAMA_SERVER_BIN": "/bin/true", MANIFEST_ENV: str(manifest), "LLAMA_MODEL_ALIAS": BASE})
    cmd = plan.command
    assert cmd[cmd.index("--model") + 1] == str(root / "base.gguf")  # the manifest's model, not a search of the dir
    paths = [str(root / "lora" / f"{n}.gguf") for n in ("b-two", "a-one", "c-three")]
    assert cmd[cmd.index("--lora") + 1] == ",".join(paths)
    assert "--lora-init-without-apply" in cmd
    assert [a.name for a in plan.adapters] == ["b-two", "a-one", "c-three"] and plan.model_name == BASE


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ({"LLAMA_LORA": "/x.gguf"}, f"set {MANIFEST_ENV} or LLAMA_LORA, not both"),
        ({"MODEL_PATH": "/opt/ml/model/other.gguf"}, "MODEL_PATH /opt/ml/model/other.gguf is not the model base.gguf"),
    ],
)
def test_serve_refuses_a_manifest_with_conflicting_variables_in_one_line(
    bundle: tuple[Path, Path], extra: dict[str, str], expected: str
) -> None:
    _, manifest = bundle
    with pytest.raises(EngineConfigError, match=expected):
        _plan({"LLAMA_SERVER_BIN": "/bin/true", MANIFEST_ENV: str(manifest), **extra})


def test_print_command_with_a_broken_manifest_exits_2_with_one_line(
    bundle: tuple[Path, Path], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import entrypoint

    _, manifest = bundle
    manifest.write_text("{")
    monkeypatch.setenv(MANIFEST_ENV, str(manifest))
    monkeypatch.setenv("LLAMA_SERVER_BIN", "/bin/true")
    assert entrypoint.main(["print-command", "serve"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"entrypoint: error: {MANIFEST_ENV} {manifest}: not a JSON manifest")


# --- the adapter's body selection (no engine) -----------------------------------------------------------------------


def _adapter(bundle: tuple[Path, Path]) -> SageMakerAdapter:
    read = read_manifest(bundle[1])
    return SageMakerAdapter("127.0.0.1", 1, max_in_flight=1, adapters=read.adapters, base=BASE)


def test_the_body_selects_the_adapter_by_name(bundle: tuple[Path, Path]) -> None:
    adapter = _adapter(bundle)
    chat = {"messages": [{"role": "user", "content": "hi"}]}
    assert adapter.select_adapter({**chat, "model": "a-one"}) == {
        **chat,
        "model": BASE,
        "lora": request_lora(1, 0.5),
        "cache_prompt": False,
    }
    for body in (chat, {**chat, "model": BASE}, {**chat, "cache_prompt": True}):
        assert adapter.select_adapter(body) == {**body, "lora": base_lora(), "cache_prompt": False}


def test_a_client_lora_or_an_unknown_model_is_refused_naming_what_is_served(bundle: tuple[Path, Path]) -> None:
    adapter = _adapter(bundle)
    chat = {"messages": [{"role": "user", "content": "hi"}]}
    refused = adapter.select_adapter({**chat, "model": "a-one", "lora": [{"id": 2, "scale": 1}]})
    assert isinstance(refused, str) and refused.startswith("`lora` is set by this endpoint")
    refused = adapter.select_adapter({**chat, "model": "gpt-4"})
    assert refused == (
        "model 'gpt-4' is not served by this endpoint: send model 'smollm2' (the base, also when model is left out) "
        "or an adapter: 'b-two', 'a-one', 'c-three'"
    )


def test_without_adapters_the_body_reaches_the_engine_as_sent() -> None:
    """An endpoint without adapters does not look at `model` or `lora` (as before this feature)."""
    sent: list[bytes] = []

    async def run() -> None:
        async def engine(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(next(h for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")).split(b":")[1])
            sent.append(await reader.readexactly(length))
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(engine, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        adapter = SageMakerAdapter("127.0.0.1", port, max_in_flight=2)
        front = await adapter.start("127.0.0.1", 0)
        body = b'{"input": "x", "model": "anything", "lora": [{"id": 0, "scale": 1}]}'
        reader, writer = await asyncio.open_connection("127.0.0.1", front)
        writer.write(
            b"POST /invocations HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nConnection: close\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        await writer.drain()
        answer = await reader.read()
        writer.close()
        await adapter.close(grace=0)
        server.close()
        assert answer.startswith(b"HTTP/1.1 200"), answer
        assert sent == [body]

    asyncio.run(run())


# --- the real container with the synthesized environment ---------------------------------------------------------


def _farm_config(path: Path, base_file: str) -> Path:
    doc = {
        "project": {"name": "lora-sm"},
        "target": "sagemaker",
        "pattern": "model-farm",
        "models": [
            {
                "name": BASE,
                "serving": "dedicated",
                "instance_type": "ml.c7g.large",
                "source": {"hf_repo": "acme/smollm2-GGUF", "file": base_file, "revision": COMMIT},
                "parameters_billions": 0.135,
                "quantization": "Q4_1",
                "context_window": 2048,
                "task": "chat",
                "adapters": [
                    {
                        "name": ADAPTER,
                        "source": {
                            "hf_repo": "acme/smollm2-json-lora-GGUF",
                            "file": "adapter.gguf",
                            "revision": COMMIT,
                        },
                        "size_mb": 5,
                    }
                ],
            }
        ],
    }
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def synthesized(tmp: Path, base_file: str) -> tuple[dict[str, str], CatalogEntry]:
    """The dedicated base's Model Environment and its catalog entry, from a synthesized farm."""
    config = load(_farm_config(tmp / "config.yaml", base_file))
    app, stack = build_app(config, app=cdk.App(outdir=str(tmp / "out")))
    app.synth()
    farm = stack.node.find_child("ModelFarm")
    assert isinstance(farm, ModelFarm) and farm.catalog is not None
    template = json.loads((tmp / "out" / f"{stack.artifact_id}.template.json").read_text())
    (model,) = [r for r in template["Resources"].values() if r["Type"] == "AWS::SageMaker::Model"]
    return model["Properties"]["PrimaryContainer"]["Environment"], farm.catalog.catalog.entry(BASE)


@pytest.fixture(scope="module")
def lora_endpoint(
    llama_server_bin: Path, smollm2_gguf: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Endpoint]:
    tmp = tmp_path_factory.mktemp("sm-lora")
    env, entry = synthesized(tmp, smollm2_gguf.name)
    assert env[MANIFEST_ENV] == f"{SAGEMAKER_MODEL_DIR}/{LORA_MANIFEST}"
    assert env["LLAMA_MODEL_ALIAS"] == BASE
    root = tmp / "opt-ml-model"
    lay_out_bundle(root, entry, smollm2_gguf, {ADAPTER: lora_adapter_path()})
    # The synthesized environment on this machine: one thread, /opt/ml/model → root, no weight repacking.
    local = {k: v.replace(SAGEMAKER_MODEL_DIR, str(root)) for k, v in env.items()}
    local.update({k: "1" for k in THREAD_KEYS}, LLAMA_ARG_REPACK=os.environ.get("LLAMA_ARG_REPACK", "0"))
    ep = start_endpoint(llama_server_bin, smollm2_gguf, tmp, 120, **local)
    try:
        yield ep
    finally:
        stop_endpoint(ep)


@pytest.fixture
def runtime(lora_endpoint: Endpoint, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator:
    """boto3's sagemaker-runtime client pointed at the loopback front end (tests/evaluation/sagemaker_emulator.py)."""
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with SageMakerRuntimeEmulator(lora_endpoint.url, ENDPOINT_NAME, region="us-east-1") as emu:
        monkeypatch.setenv("AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME", emu.url)
        yield emu


def _body(prompt: str, model: str | None, **extra) -> bytes:
    body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": 16, "temperature": 0, **extra}
    if model is not None:
        body["model"] = model
    return json.dumps(body).encode()


def _invoke(prompt: str, model: str | None) -> str:
    client = boto3.client("sagemaker-runtime")  # one per thread
    out = client.invoke_endpoint(EndpointName=ENDPOINT_NAME, ContentType="application/json", Body=_body(prompt, model))
    return json.loads(out["Body"].read())["choices"][0]["message"]["content"] or ""


@pytest.mark.engine
def test_the_adapters_name_is_tuned_and_the_bases_is_not_concurrently(runtime, lora_endpoint: Endpoint) -> None:
    jobs = [(prompt, model) for prompt in PROMPTS for model in (ADAPTER, BASE, None)]
    with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        answers = list(pool.map(lambda job: _invoke(*job), jobs))
    by = {job: answer for job, answer in zip(jobs, answers, strict=True)}
    print(json.dumps({f"{m}: {p}": a for (p, m), a in by.items()}, indent=1))
    assert all(is_tuned(by[(p, ADAPTER)]) for p in PROMPTS), by
    assert not any(is_tuned(by[(p, m)]) for p in PROMPTS for m in (BASE, None)), by
    assert runtime.seen.rejected == [] and lora_endpoint.proc.poll() is None, lora_endpoint.log_tail()


def _model_error(body: bytes) -> dict:
    client = boto3.client("sagemaker-runtime")
    with pytest.raises(ClientError) as err:
        client.invoke_endpoint(EndpointName=ENDPOINT_NAME, ContentType="application/json", Body=body)
    assert err.value.response["Error"]["Code"] == "ModelError"
    return err.value.response


@pytest.mark.engine
def test_a_client_lora_and_an_unknown_model_are_400(runtime) -> None:
    sent_lora = _model_error(_body(PROMPTS[0], BASE, lora=[{"id": 0, "scale": 1.0}]))
    assert sent_lora["OriginalStatusCode"] == 400
    assert "`lora` is set by this endpoint" in sent_lora["OriginalMessage"]
    unknown = _model_error(_body(PROMPTS[0], "not-served"))
    assert unknown["OriginalStatusCode"] == 400
    assert f"model 'not-served' is not served by this endpoint: send model '{BASE}'" in unknown["OriginalMessage"]
    assert repr(ADAPTER) in unknown["OriginalMessage"]


@pytest.mark.engine
def test_a_streamed_adapter_request_is_tuned(runtime) -> None:
    client = boto3.client("sagemaker-runtime")
    out = client.invoke_endpoint_with_response_stream(
        EndpointName=ENDPOINT_NAME, ContentType="application/json", Body=_body(PROMPTS[1], ADAPTER, stream=True)
    )
    raw = b"".join(event["PayloadPart"]["Bytes"] for event in out["Body"] if "PayloadPart" in event)
    text = ""
    for line in raw.decode().splitlines():
        if line.startswith("data: ") and line != "data: [DONE]":
            with contextlib.suppress(KeyError, IndexError):
                text += json.loads(line[len("data: ") :])["choices"][0]["delta"].get("content") or ""
    assert is_tuned(text), text
    sent = json.loads(runtime.seen.requests[-1]["body"])
    assert sent["model"] == ADAPTER and sent["stream"] is True  # the client's body, as boto3 sent it
