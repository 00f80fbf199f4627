"""The README reference tables are rendered from the definitions (scripts/reference_tables.py): a default changed
in the schema or a props dataclass without `make docs` fails here, and the renderer refuses a props row that would
hide a literal default behind prose or leave a field out."""

from __future__ import annotations

import dataclasses

import pytest
from scripts import reference_tables as tables

from cpu_inference.config import schema


def test_every_generated_block_is_current() -> None:
    stale = tables.stale()
    assert stale == [], f"README reference tables are stale: {stale} — run `make docs`"


def test_the_config_table_has_every_key_with_its_schema_default() -> None:
    rows = {
        key: (default, what)
        for key, default, what in tables.config_rows(
            schema.Config, None, "", frozenset({schema.ModelDefaults, schema.ModelEntry, schema.PartialModelSource})
        )
    }
    slo = schema.Slo.model_fields["p95_latency_ms"]
    assert rows["slo.p95_latency_ms"] == (f"`{slo.default}`", slo.description)
    assert (
        rows["router.replicas.min"][0] == f"`{schema.Router().replicas.min}`"
    )  # the block's default as its parent sets it
    assert rows["models[].replicas.min"][0] == f"`{schema.Replicas().min}`"
    assert rows["models[].name"][0] == "required"
    for block in (schema.Project, schema.Eks, schema.SageMaker):
        prefix = {schema.Project: "project", schema.Eks: "eks", schema.SageMaker: "sagemaker"}[block]
        assert {f"{prefix}.{name}" for name in block.model_fields} <= set(rows)


def test_a_changed_default_shows_in_the_rendered_table(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the lead's one-definition rule needs: the table follows the dataclass, not a copy of its value."""
    from cpu_inference.sagemaker.props import GravitonEndpointProps

    fields = {f.name: f for f in dataclasses.fields(GravitonEndpointProps)}
    monkeypatch.setattr(fields["error_rate_5xx_percent"], "default", 3.5)
    row = next(line for line in tables.graviton_table().splitlines() if line.startswith("| `latency_slo`"))
    assert ", 3.5, " in row, row


def test_a_props_row_cannot_describe_a_literal_default() -> None:
    from cpu_inference.sagemaker.props import GravitonEndpointProps

    rows = tuple(
        dataclasses.replace(r, computed={"instance_type": "whatever"}) if r.fields == ("instance_type",) else r
        for r in tables.GRAVITON_ROWS
    )
    with pytest.raises(SystemExit, match="instance_type"):
        tables.props_table(GravitonEndpointProps, rows)


def test_a_props_field_left_out_of_the_rows_is_refused() -> None:
    from cpu_inference.sagemaker.props import GravitonEndpointProps

    with pytest.raises(SystemExit, match="missing \\['queue_depth'\\]"):
        tables.props_table(
            GravitonEndpointProps, tuple(r for r in tables.GRAVITON_ROWS if r.fields != ("queue_depth",))
        )
