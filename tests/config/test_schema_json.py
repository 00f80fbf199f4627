"""config.schema.json is generated from the pydantic model and referenced from config.yaml for editors."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import yaml

from cpu_inference.config.json_schema import render

ROOT = Path(__file__).resolve().parents[2]


def test_committed_schema_matches_the_model() -> None:
    committed = (ROOT / "config.schema.json").read_text()
    assert committed == render(), (
        "config.schema.json is stale: python -m cpu_inference.config.json_schema > config.schema.json"
    )


def test_config_yaml_points_editors_at_the_schema() -> None:
    first = (ROOT / "config.yaml").read_text().splitlines()[0]
    assert first == "# yaml-language-server: $schema=./config.schema.json"


def test_every_example_config_passes_the_json_schema() -> None:
    schema = json.loads((ROOT / "config.schema.json").read_text())
    files = [ROOT / "config.yaml", *sorted((ROOT / "examples").glob("*.yaml"))]
    for f in files:
        jsonschema.validate(yaml.safe_load(f.read_text()), schema)


def test_json_schema_rejects_an_unknown_key() -> None:
    schema = json.loads((ROOT / "config.schema.json").read_text())
    doc = yaml.safe_load((ROOT / "config.yaml").read_text())
    doc["models"][0]["source"]["revison"] = "main"
    errors = list(jsonschema.Draft202012Validator(schema).iter_errors(doc))
    assert any("revison" in e.message for e in errors)
