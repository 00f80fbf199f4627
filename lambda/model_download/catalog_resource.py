"""Custom::ModelCatalog — retired. The deploy no longer waits for the catalog copy: ModelCatalog starts a Step
Functions execution that fans the copy out over CodeBuild builds (constructs/cpu_inference/artifacts/
catalog_fanout.py) and no template holds this resource type any more.

Kept for one event only: a stack deployed before the change still holds a Custom::ModelCatalog, and the update
that upgrades it deletes that resource in its cleanup phase — the stack's ModelCopyProvider (the same provider
serves ModelArtifact) routes the Delete here (custom_resource._is_catalog). Delete keeps every object, as it
always did. A Create or Update can only come from a template this library no longer writes: it fails in one line."""

from __future__ import annotations

from typing import Any

RETIRED = (
    "Custom::ModelCatalog is retired: ModelCatalog now starts the copy as a Step Functions execution and the "
    "deploy does not wait for it; synthesize the stack with this version of cpu-inference"
)


def on_event(event: dict[str, Any], codebuild=None) -> dict[str, Any]:  # noqa: ANN001, ARG001
    if event["RequestType"] == "Delete":
        return {"PhysicalResourceId": event["PhysicalResourceId"]}
    raise RuntimeError(RETIRED)


def is_complete(event: dict[str, Any], codebuild=None, logs=None) -> dict[str, Any]:  # noqa: ANN001, ARG001
    if event["RequestType"] == "Delete":
        return {"IsComplete": True}
    raise RuntimeError(RETIRED)
