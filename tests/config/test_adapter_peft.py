"""A PEFT adapter source (issue 26, INTERFACE-s2 §C): `source.file` left out — the repo's adapter_config.json +
adapter_model.safetensors, converted to GGUF by the catalog copy (model_download.peft_convert; the real conversion:
tests/runtime/model_download/test_peft_convert.py). Accepted on EKS (an adapter entry) and on SageMaker (a member of
the dedicated base's `lora` bundle), down to the catalog entry the copy converts."""

from __future__ import annotations

import pytest
import yaml

from cpu_inference.config import parse
from cpu_inference.patterns.from_config import served_models
from cpu_inference.patterns.model_farm import adapter_entries, catalog_entry
from cpu_inference.patterns.served_model import ServedAdapter
from model_download.buildspec import CATALOG_BUILD_SPEC, catalog_build_spec
from model_download.catalog import PEFT_WEIGHTS, Catalog, gguf_key

COMMIT = "0123456789abcdef0123456789abcdef01234567"
PEFT = {"name": "support-json", "source": {"hf_repo": "acme/smol-json-lora", "revision": COMMIT}}


def _doc(target: str = "eks", **base: object) -> dict:
    model = {
        "name": "base",
        "source": {"hf_repo": "acme/base-GGUF", "file": "base.gguf"},
        "parameters_billions": 0.135,
        "adapters": [PEFT],
        **base,
    }
    return {"target": target, "pattern": "model-farm", "models": [model]}


def test_a_peft_source_on_eks_becomes_a_catalog_entry_the_copy_converts() -> None:
    config = parse(yaml.safe_dump(_doc()))
    (source,) = [a.source for a in config.models[0].adapters]
    assert source.file is None and source.peft and source.catalog_file == PEFT_WEIGHTS
    (model,) = served_models(config)
    (adapter,) = model.adapters
    assert adapter.file == PEFT_WEIGHTS
    (entry,) = adapter_entries((model,))
    assert entry.peft and entry.base == "base" and entry.file == PEFT_WEIGHTS
    assert gguf_key(entry).startswith("farm/support-json/") and gguf_key(entry).endswith("/adapter_model.gguf")


def test_a_peft_source_on_a_dedicated_eks_base_is_accepted_too() -> None:
    parse(yaml.safe_dump(_doc(serving="dedicated")))


def test_a_peft_source_on_sagemaker_is_a_bundle_adapter_the_copy_converts() -> None:
    """A dedicated SageMaker base's adapters travel in its catalog `lora` bundle, which converts a PEFT member
    (model_download.catalog_copy, tests/runtime/model_download/test_catalog_lora_bundle_peft.py)."""
    config = parse(yaml.safe_dump(_doc("sagemaker", serving="dedicated", instance_type="ml.c7g.2xlarge")))
    (model,) = served_models(config)
    (adapter,) = model.adapters
    assert adapter.file == PEFT_WEIGHTS
    entry = catalog_entry(model, None, bundle=True)
    (bundled,) = entry.adapters or ()
    assert entry.layouts == ("lora",) and bundled.peft and bundled.file == PEFT_WEIGHTS
    Catalog((entry,)).validate()
    assert catalog_build_spec((entry,)) is not CATALOG_BUILD_SPEC  # the copy job sets up the converter


def test_served_adapter_takes_a_peft_weights_file_and_refuses_other_files() -> None:
    ServedAdapter(name="a", hf_repo="acme/lora", file=PEFT_WEIGHTS).validate("base")
    ServedAdapter(name="a", hf_repo="acme/lora", file=f"checkpoint/{PEFT_WEIGHTS}").validate("base")
    with pytest.raises(ValueError, match=r"file must be the adapter's \.gguf in the repo, or a PEFT adapter's"):
        ServedAdapter(name="a", hf_repo="acme/lora", file="adapter.bin").validate("base")
