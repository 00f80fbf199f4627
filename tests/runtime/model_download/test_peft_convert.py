"""PEFT adapter sources converted in the catalog copy (issue 26, INTERFACE-s2 §C): the REAL PEFT adapter `make lora`
trains (tests/support/lora.py) served by the fake Hub with its base's config.json, converted by the engine pin's
convert_lora_to_gguf.py (extracted from the pinned sdist by model_download.peft_convert itself) under the cached vLLM
environment's python (torch CPU, as scripts/build_lora.sh converts), landed in moto's S3 at the entry's gguf key —
then the pinned llama-server loads the base SmolLM2 stand-in with THAT landed file and a request with lora id 0 gives
the tuned reply: the converted bytes work. A PEFT repo over another architecture fails its entry with the reason."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import openai
import pytest

from inference_runtime.lora import base_lora, request_lora
from model_download.buildspec import CATALOG_BUILD_SPEC, PEFT_CONVERT_DIR, catalog_build_spec
from model_download.catalog import PEFT_CONFIG, PEFT_WEIGHTS, Catalog, CatalogEntry, failure_key, gguf_key
from model_download.catalog_copy import CatalogCopy, Hubs
from model_download.hub import RetryPolicy
from model_download.peft_convert import (
    CONVERT_ARGS,
    CONVERTER,
    CONVERTER_REQUIREMENTS,
    ENV_DIR_ENV,
    LLAMA_CPP_PYTHON_SDIST,
    LLAMA_CPP_PYTHON_SHA256,
    LLAMA_CPP_PYTHON_VERSION,
    PYTHON_ENV,
    PYTHON_VERSION,
    SOURCE_SHA256_META,
    extract_converter,
)
from tests.runtime.model_download.fake_hub import FakeHub
from tests.runtime.model_download.test_catalog import _keys
from tests.support.engine import llama_server, pinned_sdist
from tests.support.lora import is_tuned, peft_adapter_dir
from tests.support.vllm import vllm_model_dir, vllm_python

ROOT = Path(__file__).resolve().parents[3]
FAST_RETRY = RetryPolicy(attempts=3, backoff_seconds=0.01, max_backoff_seconds=0.02)
BASE_REPO = "acme/smollm2-135m-instruct"  # the PEFT adapter's base as its adapter_config.json names it
PROMPTS = ["Name three colours.", "Who painted the Mona Lisa?"]


def _peft_repo(hub: FakeHub, root: Path, repo: str, base: str | None) -> None:
    """The trained adapter as a Hub PEFT repo; its adapter_config.json names `base` (None: as training saved it, a
    local path)."""
    src = peft_adapter_dir()
    config = json.loads((src / PEFT_CONFIG).read_text())
    if base is not None:
        config["base_model_name_or_path"] = base
    path = root / repo.replace("/", "_") / PEFT_CONFIG
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(config))
    hub.add_file(repo, PEFT_CONFIG, path, lfs=False)
    hub.add_file(repo, PEFT_WEIGHTS, src / PEFT_WEIGHTS)


@pytest.fixture(scope="module")
def peft_hub(smollm2_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeHub]:
    root = tmp_path_factory.mktemp("peft-hub")
    hub = FakeHub()
    hub.add_file("acme/smollm2-gguf", "smollm2.gguf", smollm2_gguf)  # the base model the adapters are served over
    hub.add_file(BASE_REPO, "config.json", vllm_model_dir() / "config.json", lfs=False)  # the base's HF config
    # Another architecture's config (Qwen2, SmolLM2's shapes): the converter maps the same tensors to a qwen2 adapter.
    qwen = json.loads((vllm_model_dir() / "config.json").read_text())
    qwen.update(architectures=["Qwen2ForCausalLM"], model_type="qwen2")
    (root / "qwen-config.json").write_text(json.dumps(qwen))
    hub.add_file("acme/qwen-like", "config.json", root / "qwen-config.json", lfs=False)
    _peft_repo(hub, root, "acme/smol-json-lora", BASE_REPO)
    _peft_repo(hub, root, "acme/qwen-json-lora", "acme/qwen-like")
    _peft_repo(hub, root, "acme/local-base-lora", None)
    with hub:
        yield hub


@pytest.fixture
def converter_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The copy job's converter environment: the pin's converter out of the pinned sdist (peft_convert's own
    extraction) and, instead of the hash-locked site/ that setup() installs in CodeBuild, a python that has torch."""
    extract_converter(pinned_sdist(), tmp_path / "peft-env" / "llama.cpp")
    monkeypatch.setenv(ENV_DIR_ENV, str(tmp_path / "peft-env"))
    monkeypatch.setenv(PYTHON_ENV, str(vllm_python()))
    return tmp_path / "peft-env"


def _catalog(*adapters: tuple[str, str]) -> Catalog:
    base = CatalogEntry(name="smol", hf_repo="acme/smollm2-gguf", file="smollm2.gguf")
    return Catalog((base, *(CatalogEntry(name=n, hf_repo=r, file=PEFT_WEIGHTS, base="smol") for n, r in adapters)))


def _run(catalog: Catalog, hub: FakeHub, s3, bucket: str):  # noqa: ANN001, ANN202
    return CatalogCopy(catalog, bucket=bucket, s3=s3, hubs=Hubs(hub.url, retry=FAST_RETRY), log=lambda _l: None).run()


def test_a_peft_entry_is_identified_by_its_source_and_lands_as_a_gguf() -> None:
    entry = CatalogEntry(name="support-json", hf_repo="acme/lora", file=PEFT_WEIGHTS, base="smol")
    assert entry.peft and entry.basename == "adapter_model.gguf"
    assert re.fullmatch(r"farm/support-json/[0-9a-f]{16}/adapter_model\.gguf", gguf_key(entry))
    pinned = CatalogEntry(name="support-json", hf_repo="acme/lora", file=PEFT_WEIGHTS, base="smol", sha256="a" * 64)
    assert gguf_key(pinned) != gguf_key(entry)  # the weights' sha256 is part of the identity
    model = CatalogEntry(name="smol", hf_repo="acme/m", file="m.gguf")
    assert not model.peft and model.basename == "m.gguf" and "peft" not in json.dumps(model.to_dict())


@pytest.mark.engine
def test_the_real_peft_adapter_is_converted_landed_and_tuned_on_the_real_engine(
    peft_hub: FakeHub,
    converter_env: Path,
    s3,  # noqa: ANN001
    bucket: str,
    llama_server_bin: Path,
    smollm2_gguf: Path,
    tmp_path: Path,
) -> None:
    catalog = _catalog(("support-json", "acme/smol-json-lora"))
    run = _run(catalog, peft_hub, s3, bucket)
    assert not run.failures, run.error_line()
    adapter = catalog.entry("support-json")
    key = gguf_key(adapter)
    assert key in _keys(s3, bucket) and failure_key(adapter) not in _keys(s3, bucket)
    head = s3.head_object(Bucket=bucket, Key=key)
    served = peft_hub.files[("acme/smol-json-lora", PEFT_WEIGHTS)]
    assert head["Metadata"][SOURCE_SHA256_META] == served.sha256
    assert head["Metadata"]["converter"] == CONVERTER
    landed = tmp_path / "adapter_model.gguf"
    landed.write_bytes(s3.get_object(Bucket=bucket, Key=key)["Body"].read())

    again = _run(catalog, peft_hub, s3, bucket)  # kept: no second conversion, never overwritten
    assert not again.failures and all(r.copied == () for r in again.receipts)
    assert s3.head_object(Bucket=bucket, Key=key)["ETag"] == head["ETag"]

    args = ("--lora", str(landed), "--lora-init-without-apply", "-c", "1024", "-np", "2", "-t", "2")
    with llama_server(llama_server_bin, smollm2_gguf, *args, log=tmp_path / "llama-server.log") as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0, timeout=120)

        def ask(prompt: str, lora: list[dict[str, float]]) -> str:
            out = client.chat.completions.create(
                model="smollm2",
                messages=[{"role": "user", "content": prompt}],
                max_tokens=16,
                temperature=0,
                extra_body={"lora": lora},
            )
            return out.choices[0].message.content or ""

        tuned = [ask(p, request_lora(0, 1.0)) for p in PROMPTS]
        base = [ask(p, base_lora()) for p in PROMPTS]
    assert all(is_tuned(a) for a in tuned), tuned
    assert not any(is_tuned(a) for a in base), base


def test_a_peft_adapter_over_another_architecture_fails_its_entry_and_never_lands(
    peft_hub: FakeHub,
    converter_env: Path,
    s3,  # noqa: ANN001
    bucket: str,
) -> None:
    catalog = _catalog(("qwen-json", "acme/qwen-json-lora"), ("local-base", "acme/local-base-lora"))
    run = _run(catalog, peft_hub, s3, bucket)
    assert sorted(f.name for f in run.failures) == ["local-base", "qwen-json"]
    keys = _keys(s3, bucket)
    for name in ("qwen-json", "local-base"):
        assert gguf_key(catalog.entry(name)) not in keys
    wrong = json.loads(s3.get_object(Bucket=bucket, Key=failure_key(catalog.entry("qwen-json")))["Body"].read())
    assert "is for architecture 'qwen2' but its base smol" in wrong["reason"], wrong
    local = json.loads(s3.get_object(Bucket=bucket, Key=failure_key(catalog.entry("local-base")))["Body"].read())
    assert "base_model_name_or_path '/" in local["reason"] and "is not a Hub repo (owner/name)" in local["reason"]


def test_a_copy_job_without_the_converter_fails_the_peft_entry_in_one_line(
    peft_hub: FakeHub,
    s3,  # noqa: ANN001
    bucket: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(ENV_DIR_ENV, raising=False)
    run = _run(_catalog(("support-json", "acme/smol-json-lora")), peft_hub, s3, bucket)
    (failure,) = run.failures
    assert f"this copy job has no PEFT converter ({ENV_DIR_ENV} unset)" in failure.reason


def test_a_catalog_without_peft_adapters_keeps_its_buildspec_and_one_with_them_sets_up_the_converter() -> None:
    gguf_adapter = CatalogEntry(name="a", hf_repo="acme/a", file="a-lora.gguf", base="smol")
    model = CatalogEntry(name="smol", hf_repo="acme/smollm2-gguf", file="smollm2.gguf")
    assert catalog_build_spec((model, gguf_adapter)) is CATALOG_BUILD_SPEC  # the template does not change
    peft = catalog_build_spec(_catalog(("support-json", "acme/smol-json-lora")).entries)
    assert peft["env"]["variables"] == {ENV_DIR_ENV: PEFT_CONVERT_DIR}
    assert peft["phases"]["install"]["runtime-versions"] == {"python": PYTHON_VERSION}
    install = peft["phases"]["install"]["commands"]
    assert install[:-1] == cast(Any, CATALOG_BUILD_SPEC)["phases"]["install"]["commands"]
    assert install[-1] == f'python3 -m model_download.peft_convert setup "${ENV_DIR_ENV}"'
    assert peft["phases"]["build"] == cast(Any, CATALOG_BUILD_SPEC)["phases"]["build"]


def test_the_converter_pin_is_the_engine_pin_and_its_requirements_are_hash_locked() -> None:
    pin = dict(
        line.split("=", 1)
        for line in (ROOT / "containers" / "llama-server" / "engine-pin.env").read_text().splitlines()
        if line and not line.startswith("#")
    )
    assert (
        pin["LLAMA_CPP_PYTHON_VERSION"],
        pin["LLAMA_CPP_PYTHON_SDIST"],
        pin["LLAMA_CPP_PYTHON_SHA256"],
    ) == (LLAMA_CPP_PYTHON_VERSION, LLAMA_CPP_PYTHON_SDIST, LLAMA_CPP_PYTHON_SHA256)
    lines = CONVERTER_REQUIREMENTS.splitlines()
    assert all(re.fullmatch(r"[a-z0-9._-]+==\S+ --hash=sha256:[0-9a-f]{64}", line) for line in lines), lines
    names = {line.split("==")[0] for line in lines}
    assert {"torch", "transformers", "safetensors", "numpy", "pyyaml", "tqdm", "requests"} <= names
    assert any(line.startswith("torch==") and "+cpu " in line for line in lines)  # PyPI's x86_64 torch is CUDA's
    # scripts/build_lora.sh converts the test adapter with the same flags (one owner: peft_convert.CONVERT_ARGS).
    assert "peft_convert import CONVERT_ARGS" in (ROOT / "scripts" / "build_lora.sh").read_text()
    assert CONVERT_ARGS == ("--outtype", "f16")
