"""Custom::ModelCatalog handlers (the stack's ModelCopyProvider routes a catalog event here): onEvent starts the
catalog job, isComplete polls it — the same waiter and the same failure path as one model's copy.

Resource properties are O(1) in the number of models: ProjectName, Bucket (the model bucket), CatalogBucket +
CatalogKey (the catalog JSON, an S3 asset), Fingerprint (Catalog.fingerprint(): a changed catalog re-runs the
job), Layouts. On success the attributes are the job's exported receipt — ReceiptKey
(`farm/_receipts/<fingerprint>.json`), Fingerprint, Models, Copied — checked against the request. On failure
the deployment fails with the job's own error line, which names every failed model first; CloudFormation keeps
at most 4096 bytes of a custom resource's response (docs: "Custom resource response objects"), so the reason
is cut at build_job.REASON_BUDGET_BYTES (UTF-8, as JSON) and the build log holds the rest. Delete keeps every
object. An Update to the catalog already deployed (or the one before it: a rollback) starts nothing
(build_job.Receipts)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .build_job import (
    Receipts,
    only,
    plaintext_environment,
    receipt,
    start_build,
)
from .buildspec import CATALOG_RECEIPT
from .catalog import receipt_key
from .hub import DEFAULT_ENDPOINT

# What is copied (the overrides each build gets); how — endpoint, parallelism — is only the project's environment.
IDENTITY = ("MODEL_BUCKET", "CATALOG_BUCKET", "CATALOG_KEY", "CATALOG_FINGERPRINT")
IDENTITY_PROPERTIES = ("Bucket", "CatalogBucket", "CatalogKey", "Fingerprint", "Layouts")


def build_environment(props: dict[str, Any]) -> list[dict[str, str]]:
    """The catalog job's environment: names and locations only, never a secret's value."""
    values = {
        "MODEL_BUCKET": props["Bucket"],
        "CATALOG_BUCKET": props["CatalogBucket"],
        "CATALOG_KEY": props["CatalogKey"],
        "CATALOG_FINGERPRINT": props["Fingerprint"],
        "HF_ENDPOINT": props.get("HfEndpoint") or DEFAULT_ENDPOINT,
        "CATALOG_PARALLEL_MODELS": str(props.get("ParallelModels") or 4),
        "MODEL_CONCURRENCY": str(props.get("Concurrency") or 4),
    }
    return plaintext_environment(values)


def identity_environment(props: dict[str, Any]) -> list[dict[str, str]]:
    return only(build_environment(props), IDENTITY)


def _location(props: Mapping[str, Any]) -> str:
    return f"s3://{props['Bucket']}/{receipt_key(props['Fingerprint'])}"


def attributes(props: Mapping[str, Any], stored: Mapping[str, str]) -> dict[str, str]:
    """Every attribute from the receipt's counts and build (the receipt's key follows from the fingerprint)."""
    return {
        "ReceiptKey": receipt_key(props["Fingerprint"]),
        "Fingerprint": props["Fingerprint"],
        "Models": stored["Models"],
        "Copied": stored["Copied"],
        "BuildId": stored["BuildId"],
    }


RECEIPTS = Receipts(
    identity=IDENTITY_PROPERTIES,
    stored=("Models", "Copied", "BuildId"),
    attributes=attributes,
    location=lambda props, data: _location(props),
)


def on_event(event: dict[str, Any], codebuild=None) -> dict[str, Any]:  # noqa: ANN001
    props = event["ResourceProperties"]
    if event["RequestType"] == "Delete":
        return {"PhysicalResourceId": event["PhysicalResourceId"]}
    unchanged = RECEIPTS.redeploy(event)
    if unchanged is not None:
        return unchanged
    build = start_build(props, identity_environment(props), codebuild, event.get("RequestId"))
    print(f"started {build['id']} for catalog {props['Fingerprint']} -> s3://{props['Bucket']}/farm/")
    # An Update keeps the deployed id until the build succeeds (a failure reports it; the rollback finds it).
    return {"PhysicalResourceId": event.get("PhysicalResourceId") or _location(props), "Data": {"BuildId": build["id"]}}


def resolved(build: dict[str, Any], props: dict[str, Any]) -> dict[str, str]:
    data = receipt(build, CATALOG_RECEIPT, "model catalog", "CATALOG_BUILD_SPEC")
    if (
        data["Fingerprint"] != props["Fingerprint"]
        or data["ReceiptKey"] != receipt_key(props["Fingerprint"])
        or not data["Models"].isdigit()
        or not data["Copied"].isdigit()
    ):
        raise RuntimeError(
            f"model catalog build {build.get('id')} reported an unexpected receipt {data}; expected catalog {props['Fingerprint']}"
        )
    return attributes(props, {**data, "BuildId": str(build.get("id"))})


def completion(
    build: dict[str, Any], props: dict[str, Any], logs, event: dict[str, Any] | None = None
) -> dict[str, Any]:  # noqa: ANN001
    return RECEIPTS.completion(build, props, logs, event, resolved, lambda props: "model catalog copy")


def is_complete(event: dict[str, Any], codebuild=None, logs=None) -> dict[str, Any]:  # noqa: ANN001
    return RECEIPTS.is_complete(event, "model catalog", completion, codebuild, logs)
