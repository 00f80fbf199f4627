"""The Hugging Face Hub endpoint default has one definition, model_download.hub.DEFAULT_ENDPOINT: the library's
props, the copy jobs' custom resources and the job CLIs' help all take it from there (issue 24, one owner per fact)."""

from __future__ import annotations

import argparse
import ast
import dataclasses
import re
from pathlib import Path

from cpu_inference.artifacts.model_artifact import ModelArtifactProps
from cpu_inference.artifacts.model_catalog import ModelCatalogProps
from model_download import args, catalog_job, custom_resource, snapshot_job, snapshot_resource
from model_download.buildspec import catalog_environment
from model_download.hub import DEFAULT_ENDPOINT, DEFAULT_REVISION, Hub

ROOT = Path(__file__).resolve().parents[3]
# The endpoint itself, not a page below it (https://huggingface.co/docs/... links are documentation).
_ENDPOINT_TEXT = re.compile(re.escape(DEFAULT_ENDPOINT) + r"(?![/\w.-])")


def _string_constants(path: Path) -> list[tuple[int, str]]:
    return [
        (node.lineno, node.value)
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path)))
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    ]


def test_the_endpoint_is_written_once_in_the_library_and_the_lambdas() -> None:
    owner = ROOT / "lambda" / "model_download" / "hub.py"
    hits = [
        f"{path.relative_to(ROOT)}:{line}"
        for tree in (ROOT / "constructs", ROOT / "lambda")
        for path in sorted(tree.rglob("*.py"))
        for line, text in _string_constants(path)
        if _ENDPOINT_TEXT.search(text)
    ]
    owner_line = next(
        i for i, line in enumerate(owner.read_text().splitlines(), 1) if line.startswith("DEFAULT_ENDPOINT =")
    )
    assert hits == [f"{owner.relative_to(ROOT)}:{owner_line}"], "import model_download.hub.DEFAULT_ENDPOINT instead"


def test_props_default_to_the_hub_default() -> None:
    for props in (ModelArtifactProps, ModelCatalogProps):
        default = {f.name: f.default for f in dataclasses.fields(props)}["hf_endpoint"]
        assert default == DEFAULT_ENDPOINT, props.__name__


def test_custom_resources_fall_back_to_the_hub_default() -> None:
    base = {
        "Bucket": "b",
        "KeyPrefix": "models/m",
        "HfRepo": "o/r",
        "File": "m.gguf",
        "CatalogBucket": "c",
        "CatalogKey": "k",
        "Fingerprint": "f",
    }
    for module in (snapshot_resource, custom_resource):
        env = {e["name"]: e["value"] for e in module.build_environment(dict(base))}
        assert env["HF_ENDPOINT"] == DEFAULT_ENDPOINT, module.__name__
    catalog = catalog_environment(bucket="b", catalog_bucket="c", catalog_key="k", fingerprint="f")
    assert {e["name"]: e["value"] for e in catalog}["HF_ENDPOINT"] == DEFAULT_ENDPOINT


def test_cli_help_names_the_hub_default(monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.delenv("HF_ENDPOINT", raising=False)
    copy_parser = argparse.ArgumentParser()
    args.add_arguments(copy_parser)
    for p in (copy_parser, catalog_job.parser(), snapshot_job.parser()):
        action = next(a for a in p._actions if "--endpoint" in a.option_strings)
        assert action.help is not None and DEFAULT_ENDPOINT in action.help
        assert action.default is None  # None: the Hub client falls back to HF_ENDPOINT, then DEFAULT_ENDPOINT
    assert Hub(None).endpoint == DEFAULT_ENDPOINT


def test_the_default_revision_is_written_once_in_the_library_and_the_lambdas() -> None:
    """`main` (the Hub's default branch) is model_download.hub.DEFAULT_REVISION: the config schema, ServedModel,
    ModelArtifactProps, the copy/snapshot/catalog entries, the custom resources and the job CLIs all import it."""
    owner = ROOT / "lambda" / "model_download" / "hub.py"
    hits = [
        f"{path.relative_to(ROOT)}:{line}"
        for tree in (ROOT / "constructs", ROOT / "lambda")
        for path in sorted(tree.rglob("*.py"))
        for line, text in _string_constants(path)
        if text == DEFAULT_REVISION
    ]
    owner_line = next(
        i for i, line in enumerate(owner.read_text().splitlines(), 1) if line.startswith("DEFAULT_REVISION =")
    )
    assert hits == [f"{owner.relative_to(ROOT)}:{owner_line}"], "import model_download.hub.DEFAULT_REVISION instead"


def test_every_revision_default_is_the_hubs() -> None:
    from cpu_inference.config.schema import ModelSource
    from cpu_inference.patterns.served_model import ServedModel

    assert {f.name: f.default for f in dataclasses.fields(ModelArtifactProps)}["revision"] == DEFAULT_REVISION
    assert {f.name: f.default for f in dataclasses.fields(ServedModel)}["revision"] == DEFAULT_REVISION
    assert ModelSource.model_fields["revision"].default == DEFAULT_REVISION
    env = {
        e["name"]: e["value"]
        for e in custom_resource.build_environment(
            {
                "Bucket": "b",
                "KeyPrefix": "models/m",
                "HfRepo": "o/r",
                "File": "m.gguf",
            }
        )
    }
    assert env["MODEL_REVISION"] == DEFAULT_REVISION
    copy_parser = argparse.ArgumentParser()
    args.add_arguments(copy_parser)
    for parser in (copy_parser, snapshot_job.parser()):
        assert {a.dest: a.default for a in parser._actions}["revision"] == DEFAULT_REVISION
