"""Custom::ModelArtifact for a snapshot (a vLLM model's safetensors repo; the stack's ModelCopyProvider routes an
event whose properties carry `Snapshot` here): onEvent starts the snapshot job, isComplete polls it — the same
waiter and failure path as one file's copy.

Resource properties (the copy's identity): ProjectName, Bucket, KeyPrefix (`models/<name>`), HfRepo, Revision,
Snapshot (`safetensors`: what is selected — snapshot_select). The token secret, Hub endpoint and concurrency are
the project's environment only. Attributes on success, from the job's exported receipt (buildspec.SNAPSHOT_RECEIPT),
checked against the request: Commit, Sha256 (the manifest's digest), Key and Prefix (both `models/<name>/<commit>/`),
Manifest (`<Prefix>cpu-inference.manifest`), Size (bytes of every file), Files, BuildId. An Update to the identity
already deployed (or the one before it: a rollback) starts nothing (build_job.Receipts)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from .build_job import (
    Receipts,
    only,
    plaintext_environment,
    receipt,
    start_build,
)
from .buildspec import SNAPSHOT_RECEIPT
from .copy import COMMIT
from .hub import DEFAULT_ENDPOINT, DEFAULT_REVISION
from .snapshot import MANIFEST_NAME

SNAPSHOT_LAYOUT = "safetensors"
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
IDENTITY = ("MODEL_REPO", "MODEL_REVISION", "MODEL_BUCKET", "MODEL_KEY_PREFIX")
IDENTITY_PROPERTIES = ("HfRepo", "Revision", "Snapshot", "Bucket", "KeyPrefix")


def build_environment(props: dict[str, Any]) -> list[dict[str, str]]:
    """The snapshot job's environment: names and locations only, never a secret's value."""
    values = {
        "MODEL_REPO": props["HfRepo"],
        "MODEL_REVISION": props.get("Revision") or DEFAULT_REVISION,
        "MODEL_BUCKET": props["Bucket"],
        "MODEL_KEY_PREFIX": props["KeyPrefix"],
        "HF_TOKEN_SECRET_NAME": props.get("TokenSecretName") or "",
        "HF_ENDPOINT": props.get("HfEndpoint") or DEFAULT_ENDPOINT,
        "MODEL_CONCURRENCY": str(props.get("Concurrency") or 8),
    }
    return plaintext_environment(values)


def identity_environment(props: dict[str, Any]) -> list[dict[str, str]]:
    return only(build_environment(props), IDENTITY)


def attributes(props: Mapping[str, Any], stored: Mapping[str, str]) -> dict[str, str]:
    """Every attribute from the receipt's commit, manifest sha256, size, file count and build."""
    prefix = f"{props['KeyPrefix'].strip('/')}/{stored['Commit']}/"
    return {
        "Commit": stored["Commit"],
        "Sha256": stored["Sha256"],
        "Key": prefix,
        "Size": stored["Size"],
        "Files": stored["Files"],
        "Prefix": prefix,
        "Manifest": prefix + MANIFEST_NAME,
        "BuildId": stored["BuildId"],
    }


RECEIPTS = Receipts(
    identity=IDENTITY_PROPERTIES,
    stored=("Commit", "Sha256", "Size", "Files", "BuildId"),
    attributes=attributes,
    location=lambda props, data: f"s3://{props['Bucket']}/{data['Key']}",
)


def on_event(event: dict[str, Any], codebuild=None) -> dict[str, Any]:  # noqa: ANN001
    props = event["ResourceProperties"]
    if props.get("Snapshot") != SNAPSHOT_LAYOUT:
        raise RuntimeError(f"unknown snapshot layout {props.get('Snapshot')!r}; expected {SNAPSHOT_LAYOUT!r}")
    if event["RequestType"] == "Delete":
        return {"PhysicalResourceId": event["PhysicalResourceId"]}
    unchanged = RECEIPTS.redeploy(event)
    if unchanged is not None:
        return unchanged
    build = start_build(props, identity_environment(props), codebuild, event.get("RequestId"))
    print(
        f"started {build['id']} for the snapshot of hf://{props['HfRepo']}@{props.get('Revision')} -> s3://{props['Bucket']}/{props['KeyPrefix']}/"
    )
    requested = f"s3://{props['Bucket']}/{props['KeyPrefix'].strip('/')}/@{props.get('Revision') or DEFAULT_REVISION}/"
    return {"PhysicalResourceId": event.get("PhysicalResourceId") or requested, "Data": {"BuildId": build["id"]}}


def resolved(build: dict[str, Any], props: dict[str, Any]) -> dict[str, str]:
    data = receipt(build, SNAPSHOT_RECEIPT, "model snapshot copy", "SNAPSHOT_BUILD_SPEC")
    prefix = f"{props['KeyPrefix'].strip('/')}/{data['Commit']}/"
    if (
        not COMMIT.match(data["Commit"])
        or not _SHA256.match(data["Sha256"])
        or data["Key"] != prefix
        or not data["Size"].isdigit()
        or not data["Files"].isdigit()
        or int(data["Files"]) < 2
    ):
        raise RuntimeError(
            f"model snapshot build {build.get('id')} reported an unexpected receipt {data}; expected prefix {prefix}"
        )
    return attributes(props, {**data, "BuildId": str(build.get("id"))})


def completion(
    build: dict[str, Any], props: dict[str, Any], logs, event: dict[str, Any] | None = None
) -> dict[str, Any]:  # noqa: ANN001
    return RECEIPTS.completion(
        build,
        props,
        logs,
        event,
        resolved,
        lambda props: f"model snapshot copy of {props['HfRepo']}@{props.get('Revision')}",
    )


def is_complete(event: dict[str, Any], codebuild=None, logs=None) -> dict[str, Any]:  # noqa: ANN001
    return RECEIPTS.is_complete(event, "model snapshot copy", completion, codebuild, logs)
