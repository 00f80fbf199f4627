"""Custom::ModelArtifact for a snapshot (a vLLM model's safetensors repo; the stack's ModelCopyProvider routes an
event whose properties carry `Snapshot` here): onEvent starts the snapshot job, isComplete polls it — the same
waiter and failure path as one file's copy.

Resource properties (the copy's identity): ProjectName, Bucket, KeyPrefix (`models/<name>`), HfRepo, Revision,
Snapshot (`safetensors`: what is selected — snapshot_select). The token secret, Hub endpoint and concurrency are
the project's environment only. Attributes on success, from the job's exported receipt (buildspec.SNAPSHOT_RECEIPT),
checked against the request: Commit, Sha256 (the manifest's digest), Key and Prefix (both `models/<name>/<commit>/`),
Manifest (`<Prefix>cpu-inference.manifest`), Size (bytes of every file), Files, BuildId."""

from __future__ import annotations

import re
from typing import Any

from .build_job import FAILED, failure_detail, only, plaintext_environment, poll, receipt, start_build
from .buildspec import SNAPSHOT_RECEIPT
from .copy import COMMIT
from .snapshot import MANIFEST_NAME

SNAPSHOT_LAYOUT = "safetensors"
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
IDENTITY = ("MODEL_REPO", "MODEL_REVISION", "MODEL_BUCKET", "MODEL_KEY_PREFIX")
IDENTITY_PROPERTIES = ("HfRepo", "Revision", "Snapshot", "Bucket", "KeyPrefix")


def build_environment(props: dict[str, Any]) -> list[dict[str, str]]:
    """The snapshot job's environment: names and locations only, never a secret's value."""
    values = {
        "MODEL_REPO": props["HfRepo"],
        "MODEL_REVISION": props.get("Revision") or "main",
        "MODEL_BUCKET": props["Bucket"],
        "MODEL_KEY_PREFIX": props["KeyPrefix"],
        "HF_TOKEN_SECRET_NAME": props.get("TokenSecretName") or "",
        "HF_ENDPOINT": props.get("HfEndpoint") or "https://huggingface.co",
        "MODEL_CONCURRENCY": str(props.get("Concurrency") or 8),
    }
    return plaintext_environment(values)


def identity_environment(props: dict[str, Any]) -> list[dict[str, str]]:
    return only(build_environment(props), IDENTITY)


def on_event(event: dict[str, Any], codebuild=None) -> dict[str, Any]:  # noqa: ANN001
    props = event["ResourceProperties"]
    if props.get("Snapshot") != SNAPSHOT_LAYOUT:
        raise RuntimeError(f"unknown snapshot layout {props.get('Snapshot')!r}; expected {SNAPSHOT_LAYOUT!r}")
    if event["RequestType"] == "Delete":
        return {"PhysicalResourceId": event["PhysicalResourceId"]}
    build = start_build(props, identity_environment(props), codebuild)
    print(f"started {build['id']} for the snapshot of hf://{props['HfRepo']}@{props.get('Revision')} -> s3://{props['Bucket']}/{props['KeyPrefix']}/")
    requested = f"s3://{props['Bucket']}/{props['KeyPrefix'].strip('/')}/@{props.get('Revision') or 'main'}/"
    return {"PhysicalResourceId": event.get("PhysicalResourceId") or requested, "Data": {"BuildId": build["id"]}}


def resolved(build: dict[str, Any], props: dict[str, Any]) -> dict[str, str]:
    data = receipt(build, SNAPSHOT_RECEIPT, "model snapshot copy", "SNAPSHOT_BUILD_SPEC")
    prefix = f"{props['KeyPrefix'].strip('/')}/{data['Commit']}/"
    if not COMMIT.match(data["Commit"]) or not _SHA256.match(data["Sha256"]) or data["Key"] != prefix \
            or not data["Size"].isdigit() or not data["Files"].isdigit() or int(data["Files"]) < 2:
        raise RuntimeError(f"model snapshot build {build.get('id')} reported an unexpected receipt {data}; expected prefix {prefix}")
    return {**data, "Prefix": prefix, "Manifest": prefix + MANIFEST_NAME, "BuildId": str(build.get("id"))}


def completion(build: dict[str, Any], props: dict[str, Any], logs) -> dict[str, Any]:  # noqa: ANN001
    status = build.get("buildStatus", "IN_PROGRESS")
    if status == "SUCCEEDED":
        data = resolved(build, props)
        return {"IsComplete": True, "PhysicalResourceId": f"s3://{props['Bucket']}/{data['Key']}", "Data": data}
    if status not in FAILED:
        return {"IsComplete": False}
    detail = failure_detail(build, logs)
    raise RuntimeError(
        f"model snapshot copy of {props['HfRepo']}@{props.get('Revision')} {status}: {detail[:600]} (build {build.get('id')})"
    )


def is_complete(event: dict[str, Any], codebuild=None, logs=None) -> dict[str, Any]:  # noqa: ANN001
    return poll(event, "model snapshot copy", completion, codebuild, logs)
