"""Custom::ModelCatalog handlers (the stack's ModelCopyProvider routes a catalog event here): onEvent starts the
catalog job, isComplete polls it — the same waiter and the same failure path as one model's copy.

Resource properties are O(1) in the number of models: ProjectName, Bucket (the model bucket), CatalogBucket +
CatalogKey (the catalog JSON, an S3 asset), Fingerprint (Catalog.fingerprint(): a changed catalog re-runs the
job), Layouts. On success the attributes are the job's exported receipt — ReceiptKey
(`farm/_receipts/<fingerprint>.json`), Fingerprint, Models, Copied — checked against the request. On failure
the deployment fails with the job's own error line, which names every failed model first; CloudFormation keeps
at most 4096 bytes of a custom resource's response (docs: "Custom resource response objects"), so the reason
is cut at REASON_BUDGET characters and the build log holds the rest. Delete keeps every object."""

from __future__ import annotations

from typing import Any

from .build_job import FAILED, failure_detail, only, plaintext_environment, poll, receipt, start_build
from .buildspec import CATALOG_RECEIPT
from .catalog import receipt_key

REASON_BUDGET = 2000  # of CloudFormation's 4096-byte response; the framework adds ids and the handler's trace
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
        "HF_ENDPOINT": props.get("HfEndpoint") or "https://huggingface.co",
        "CATALOG_PARALLEL_MODELS": str(props.get("ParallelModels") or 4),
        "MODEL_CONCURRENCY": str(props.get("Concurrency") or 4),
    }
    return plaintext_environment(values)


def identity_environment(props: dict[str, Any]) -> list[dict[str, str]]:
    return only(build_environment(props), IDENTITY)


def _physical_id(props: dict[str, Any]) -> str:
    return f"s3://{props['Bucket']}/{receipt_key(props['Fingerprint'])}"


def on_event(event: dict[str, Any], codebuild=None) -> dict[str, Any]:  # noqa: ANN001
    props = event["ResourceProperties"]
    if event["RequestType"] == "Delete":
        return {"PhysicalResourceId": event["PhysicalResourceId"]}
    build = start_build(props, identity_environment(props), codebuild)
    print(f"started {build['id']} for catalog {props['Fingerprint']} -> s3://{props['Bucket']}/farm/")
    return {"PhysicalResourceId": _physical_id(props), "Data": {"BuildId": build["id"]}}


def resolved(build: dict[str, Any], props: dict[str, Any]) -> dict[str, str]:
    data = receipt(build, CATALOG_RECEIPT, "model catalog", "CATALOG_BUILD_SPEC")
    if data["Fingerprint"] != props["Fingerprint"] or data["ReceiptKey"] != receipt_key(props["Fingerprint"]) \
            or not data["Models"].isdigit() or not data["Copied"].isdigit():
        raise RuntimeError(f"model catalog build {build.get('id')} reported an unexpected receipt {data}; expected catalog {props['Fingerprint']}")
    return {**data, "BuildId": str(build.get("id"))}


def completion(build: dict[str, Any], props: dict[str, Any], logs) -> dict[str, Any]:  # noqa: ANN001
    status = build.get("buildStatus", "IN_PROGRESS")
    if status == "SUCCEEDED":
        return {"IsComplete": True, "PhysicalResourceId": _physical_id(props), "Data": resolved(build, props)}
    if status not in FAILED:
        return {"IsComplete": False}
    detail = failure_detail(build, logs)
    if len(detail) > REASON_BUDGET:
        detail = detail[: REASON_BUDGET - 30].rstrip() + " … (the rest in the build log)"
    raise RuntimeError(f"model catalog copy {status}: {detail} (build {build.get('id')})")


def is_complete(event: dict[str, Any], codebuild=None, logs=None) -> dict[str, Any]:  # noqa: ANN001
    return poll(event, "model catalog", completion, codebuild, logs)
