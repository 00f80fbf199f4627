"""PEFT adapter sources in a SageMaker base's `lora` bundle (issue 26, INTERFACE-s2 §B + §C): a bundle adapter whose
file is PEFT_WEIGHTS is converted by the same code as a PEFT adapter entry (model_download.peft_convert.convert_peft:
the weights and adapter_config.json at the pinned commit, sha256-checked, the base's config.json, the engine pin's
convert_lora_to_gguf.py), header-checked against the bundle's base before anything of the bundle is written, and lands
as lora/<name>.gguf before the manifest seals the bundle.

Real components: the fake Hub over HTTP serving the SmolLM2 stand-in GGUF, the REAL PEFT adapter `make lora` trains
(tests/support/lora.py), its base's HF config.json and the real GGUF adapter; moto's S3 server; the pin's converter
extracted from the pinned sdist and run by the cached vLLM environment's python (torch CPU); then the bundle as
SageMaker downloads it into /opt/ml/model, served by the container's own `entrypoint.py serve` (its /invocations
adapter in front of the pinned llama-server) with LLAMA_LORA_MANIFEST: the converted adapter's name answers tuned,
the base's does not."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from inference_runtime.lora import MANIFEST_ENV
from model_download.buildspec import CATALOG_BUILD_SPEC, PEFT_CONVERT_DIR, catalog_build_spec
from model_download.catalog import (
    LORA_MANIFEST,
    PEFT_WEIGHTS,
    Catalog,
    CatalogAdapter,
    CatalogEntry,
    CatalogError,
    failure_key,
    lora_manifest_key,
    lora_member_keys,
    lora_prefix,
)
from model_download.catalog_copy import CatalogCopy, Hubs
from model_download.copy import hf_source
from model_download.hub import RetryPolicy
from model_download.peft_convert import CONVERTER, ENV_DIR_ENV, PYTHON_ENV, SOURCE_SHA256_META, extract_converter
from tests.runtime.engine.serving import chat_body, start_endpoint, stop_endpoint
from tests.runtime.model_download.fake_hub import FakeHub
from tests.runtime.model_download.test_catalog import _keys
from tests.runtime.model_download.test_catalog_lora_bundle import Recording
from tests.runtime.model_download.test_peft_convert import BASE_REPO, _peft_repo
from tests.support.engine import pinned_sdist
from tests.support.lora import is_tuned, lora_adapter_path
from tests.support.vllm import vllm_model_dir, vllm_python

FAST_RETRY = RetryPolicy(attempts=3, backoff_seconds=0.01, max_backoff_seconds=0.02)
BASE_GGUF_REPO, BASE_FILE = "acme/smollm2-gguf", "smollm2.gguf"
PEFT_REPO, QWEN_PEFT_REPO, GGUF_REPO = "acme/smol-json-lora", "acme/qwen-json-lora", "acme/smol-json-lora-GGUF"
GGUF_FILE = "smollm2-json-lora.gguf"
# Prompts the adapter never trained on (scripts/train_lora.py trains on others), as in test_sagemaker_lora.py.
PROMPTS = ["Name three colours.", "Who painted the Mona Lisa?"]


@pytest.fixture(scope="module")
def bundle_hub(smollm2_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeHub]:
    root = tmp_path_factory.mktemp("peft-bundle-hub")
    hub = FakeHub()
    hub.add_file(BASE_GGUF_REPO, BASE_FILE, smollm2_gguf)  # the bundle's base
    hub.add_file(BASE_REPO, "config.json", vllm_model_dir() / "config.json", lfs=False)  # the base's HF config
    # Another architecture's config (Qwen2, SmolLM2's shapes): the converter makes a qwen2 adapter of the same weights.
    qwen = json.loads((vllm_model_dir() / "config.json").read_text())
    qwen.update(architectures=["Qwen2ForCausalLM"], model_type="qwen2")
    (root / "qwen-config.json").write_text(json.dumps(qwen))
    hub.add_file("acme/qwen-like", "config.json", root / "qwen-config.json", lfs=False)
    _peft_repo(hub, root, PEFT_REPO, BASE_REPO)  # the REAL trained PEFT adapter
    _peft_repo(hub, root, QWEN_PEFT_REPO, "acme/qwen-like")
    hub.add_file(GGUF_REPO, GGUF_FILE, lora_adapter_path())  # the real adapter, converted by `make lora`
    with hub:
        yield hub


@pytest.fixture
def converter_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The copy job's converter environment (as test_peft_convert.py): the pin's converter out of the pinned sdist and
    a python that has torch instead of the hash-locked site/ the buildspec installs in CodeBuild."""
    extract_converter(pinned_sdist(), tmp_path / "peft-env" / "llama.cpp")
    monkeypatch.setenv(ENV_DIR_ENV, str(tmp_path / "peft-env"))
    monkeypatch.setenv(PYTHON_ENV, str(vllm_python()))
    return tmp_path / "peft-env"


def _gguf() -> CatalogAdapter:
    return CatalogAdapter("json-gguf", GGUF_REPO, GGUF_FILE)


def _peft(name: str = "support-json", repo: str = PEFT_REPO) -> CatalogAdapter:
    return CatalogAdapter(name, repo, PEFT_WEIGHTS)


def _entry(*adapters: CatalogAdapter) -> CatalogEntry:
    return CatalogEntry("smol", BASE_GGUF_REPO, BASE_FILE, layouts=("lora",), adapters=adapters)


def _copy(catalog: Catalog, s3: Any, bucket: str, hub: FakeHub) -> tuple[Any, Recording]:
    recording = Recording(s3)
    run = CatalogCopy(
        catalog, bucket=bucket, s3=recording, hubs=Hubs(hub.url, retry=FAST_RETRY), log=lambda _line: None
    ).run()
    return run, recording


# -- the definition ------------------------------------------------------------------------------------------


def test_a_bundle_adapter_is_a_gguf_file_or_a_peft_adapters_weights() -> None:
    for file in (PEFT_WEIGHTS, f"checkpoint-40/{PEFT_WEIGHTS}"):
        adapter = CatalogAdapter("support-json", PEFT_REPO, file)
        Catalog((_entry(adapter),)).validate()
        assert adapter.peft and adapter.member == "lora/support-json.gguf"  # lands as a GGUF
    assert not _gguf().peft
    with pytest.raises(CatalogError, match=r"adapter 'x': an adapter is a \.gguf file or a PEFT adapter's "):
        Catalog((_entry(CatalogAdapter("x", PEFT_REPO, "adapter_model.bin")),)).validate()
    # The bundle's identity covers each adapter's (repo, file, revision, sha256): PEFT weights are another source.
    assert lora_prefix(_entry(_peft())) != lora_prefix(_entry(CatalogAdapter("support-json", PEFT_REPO, "a.gguf")))
    assert lora_prefix(_entry(_peft())) != lora_prefix(
        _entry(CatalogAdapter("support-json", PEFT_REPO, PEFT_WEIGHTS, sha256="a" * 64))
    )


def test_the_copy_job_sets_up_the_converter_when_a_bundle_adapter_is_peft() -> None:
    pooled = CatalogEntry("pooled", "acme/pooled-GGUF", "pooled.gguf")
    assert catalog_build_spec((pooled, _entry(_gguf()))) is CATALOG_BUILD_SPEC  # the same object: no template change
    spec = catalog_build_spec((pooled, _entry(_gguf(), _peft())))
    assert spec is not CATALOG_BUILD_SPEC and spec["env"]["variables"] == {ENV_DIR_ENV: PEFT_CONVERT_DIR}
    assert spec["phases"]["install"]["commands"][-1] == f'python3 -m model_download.peft_convert setup "${ENV_DIR_ENV}"'


# -- the worker ----------------------------------------------------------------------------------------------


def test_a_bundle_without_the_converter_fails_in_one_line_and_nothing_lands(
    bundle_hub: FakeHub, s3: Any, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(ENV_DIR_ENV, raising=False)
    entry = _entry(_gguf(), _peft())
    run, recording = _copy(Catalog((entry,)), s3, bucket, bundle_hub)
    (failure,) = run.failures
    assert failure.reason.startswith("adapter support-json of the lora bundle: ")
    assert f"this copy job has no PEFT converter ({ENV_DIR_ENV} unset)" in failure.reason
    assert recording.writes == [failure_key(entry)] and _keys(s3, bucket) == [failure_key(entry)]


def test_a_wrong_architecture_peft_member_fails_the_bundle_and_nothing_lands(
    bundle_hub: FakeHub, converter_env: Path, s3: Any, bucket: str
) -> None:
    entry = _entry(_gguf(), _peft("qwen-json", QWEN_PEFT_REPO))
    run, recording = _copy(Catalog((entry,)), s3, bucket, bundle_hub)
    (failure,) = run.failures
    assert failure.marker == failure_key(entry)
    assert recording.writes == [failure_key(entry)]  # neither the base, nor the good adapter, nor a seal
    assert _keys(s3, bucket) == [failure_key(entry)]
    assert s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []
    reason = json.loads(s3.get_object(Bucket=bucket, Key=failure_key(entry))["Body"].read())["reason"]
    assert reason.startswith(
        f"adapter qwen-json of the lora bundle: adapter qwen-json ({QWEN_PEFT_REPO}/{PEFT_WEIGHTS})"
    )
    assert "is for architecture 'qwen2' but its base smol" in reason and "model arch and LoRA arch mismatch" in reason


@pytest.mark.engine
def test_a_peft_member_is_converted_into_the_bundle_and_its_name_serves_tuned(
    bundle_hub: FakeHub,
    converter_env: Path,
    s3: Any,
    bucket: str,
    llama_server_bin: Path,
    tmp_path: Path,
) -> None:
    # The GGUF adapter first (id 0), the PEFT one second (id 1): the converted member keeps its manifest position.
    entry = _entry(_gguf(), _peft())
    run, recording = _copy(Catalog((entry,)), s3, bucket, bundle_hub)
    assert run.failures == [], run.error_line()
    assert run.receipts[0].copied == ("lora",)
    members, manifest_key = lora_member_keys(entry), lora_manifest_key(entry)
    assert _keys(s3, bucket) == sorted([*members.values(), manifest_key])
    assert recording.writes == [members[""], members["json-gguf"], members["support-json"], manifest_key]

    converted = s3.get_object(Bucket=bucket, Key=members["support-json"])
    assert converted["Body"].read(4) == b"GGUF"
    meta = converted["Metadata"]
    assert meta[SOURCE_SHA256_META] == bundle_hub.files[(PEFT_REPO, PEFT_WEIGHTS)].sha256  # the weights it came from
    assert meta["converter"] == CONVERTER and meta["hf-source"] == hf_source(PEFT_REPO, PEFT_WEIGHTS, bundle_hub.commit)
    assert meta["base-config"] == hf_source(BASE_REPO, "config.json", bundle_hub.commit)

    # A re-run keeps the sealed bundle: no Hub request, no conversion, nothing written.
    bundle_hub.stats.heads = 0
    again, rewrites = _copy(Catalog((entry,)), s3, bucket, bundle_hub)
    assert again.failures == [] and again.receipts[0].copied == () and rewrites.writes == []
    assert bundle_hub.stats.heads == 0

    # SageMaker downloads every object under the S3Prefix into /opt/ml/model (keys relative to the prefix).
    model_dir = tmp_path / "opt-ml-model"
    prefix = lora_prefix(entry)
    for key in [*members.values(), manifest_key]:
        target = model_dir / key.removeprefix(prefix)
        target.parent.mkdir(parents=True, exist_ok=True)
        s3.download_file(bucket, key, str(target))
    env = {
        MANIFEST_ENV: str(model_dir / LORA_MANIFEST),
        "LLAMA_MODEL_ALIAS": "smol",
        "LLAMA_ARG_REPACK": "0",  # as test_sagemaker_lora.py: no weight repacking on this shared machine
    }
    ep = start_endpoint(llama_server_bin, model_dir / BASE_FILE, tmp_path, 120, **env)
    try:

        def ask(prompt: str, model: str) -> str:
            out = httpx.post(f"{ep.url}/invocations", json=chat_body(prompt, model=model), timeout=120)
            assert out.status_code == 200, out.text
            return out.json()["choices"][0]["message"]["content"] or ""

        answers = {(p, m): ask(p, m) for p in PROMPTS for m in ("support-json", "json-gguf", "smol")}
    finally:
        stop_endpoint(ep)
    assert all(is_tuned(answers[(p, "support-json")]) for p in PROMPTS), answers  # the converted PEFT member
    assert all(is_tuned(answers[(p, "json-gguf")]) for p in PROMPTS), answers
    assert not any(is_tuned(answers[(p, "smol")]) for p in PROMPTS), answers
