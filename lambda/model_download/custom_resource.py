"""Custom-resource handlers (CDK Provider framework): onEvent starts the copy job, isComplete polls it.

Create/Update start one CodeBuild build with the model's identity as environment overrides; isComplete returns
False while it runs, True when it succeeded, and raises — failing the deployment — when it did not, quoting
the job's own error line. Delete keeps the object (the bucket is versioned and retained). An Update to the identity
already deployed, or to the one before it (CloudFormation's rollback of an update), starts nothing and answers with
the attributes it had (build_job.Receipts: the PhysicalResourceId carries them).

The job pins the object to a commit (`<KeyPrefix>/<commit>/<File>`, never overwritten) and exports where it
landed (buildspec.RECEIPT); isComplete returns that as the resource's attributes — Commit, Sha256, Key, Prefix
(`<KeyPrefix>/<commit>/`), Size, BuildId — which the CDK provider framework merges into the response's Data
(custom-resources/lib/provider-framework/runtime/framework.js: `Data: {...event.Data, ...isCompleteResult.Data}`).
Consumers read those attributes, so they keep the resolved commit until the properties change.

The same provider answers the retired Custom::ModelCatalog's last event (its Delete, when a stack deployed before
the catalog's Step Functions fan-out upgrades): an event whose properties carry CatalogKey goes to catalog_resource;
and a vLLM model's safetensors snapshot: an event whose
properties carry Snapshot goes to snapshot_resource; and a farm's one wait for its dedicated models' catalog keys
(Custom::DedicatedModelsReady): an event whose properties carry Dedicated goes to catalog_wait.

Resource properties (the copy's identity): ProjectName, Bucket, KeyPrefix (`models/<name>`), HfRepo, File,
Revision, Sha256 ("" = the Hub's). The token secret, Hub endpoint and concurrency are the project's environment.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from . import catalog_wait
from .build_job import ERROR_PREFIX as ERROR_PREFIX  # re-exported: the job's error line starts with it
from .build_job import (
    Receipts,
    only,
    plaintext_environment,
    receipt,
    start_build,
)
from .buildspec import RECEIPT
from .copy import COMMIT
from .hub import DEFAULT_ENDPOINT, DEFAULT_REVISION

_SHA256 = re.compile(r"^[0-9a-f]{64}$")


# What the copy is (the resource's properties; a change re-runs the job and may resolve a newer commit). How it
# copies — token secret, Hub endpoint, concurrency — lives only in the project's environment: changing it must
# not re-run the job, or an unrelated setting would move a `main` revision to whatever `main` is that day.
IDENTITY = ("MODEL_REPO", "MODEL_FILE", "MODEL_REVISION", "MODEL_SHA256", "MODEL_BUCKET", "MODEL_KEY_PREFIX")
IDENTITY_PROPERTIES = (
    "HfRepo",
    "File",
    "Revision",
    "Sha256",
    "Bucket",
    "KeyPrefix",
)  # the same, as resource properties


def build_environment(props: dict[str, Any]) -> list[dict[str, str]]:
    """The copy job's environment (the project's; the custom resource overrides only IDENTITY); names only,
    never a secret's value."""
    values = {
        "MODEL_REPO": props["HfRepo"],
        "MODEL_FILE": props["File"],
        "MODEL_REVISION": props.get("Revision") or DEFAULT_REVISION,
        "MODEL_SHA256": props.get("Sha256") or "",
        "MODEL_BUCKET": props["Bucket"],
        "MODEL_KEY_PREFIX": props["KeyPrefix"],
        "HF_TOKEN_SECRET_NAME": props.get("TokenSecretName") or "",
        "HF_ENDPOINT": props.get("HfEndpoint") or DEFAULT_ENDPOINT,
        "MODEL_CONCURRENCY": str(props.get("Concurrency") or 8),
    }
    return plaintext_environment(values)


def identity_environment(props: dict[str, Any]) -> list[dict[str, str]]:
    """StartBuild's overrides: the copy's identity from the resource's properties (the rest is the project's)."""
    return only(build_environment(props), IDENTITY)


def _request_id(props: dict[str, Any]) -> str:
    """Until the job reports its key: what was asked for (the commit is not known yet)."""
    return f"s3://{props['Bucket']}/{props['KeyPrefix'].strip('/')}/@{props.get('Revision') or DEFAULT_REVISION}/{props['File']}"


def _is_catalog(event: dict[str, Any]) -> bool:
    """A Custom::ModelCatalog event (catalog_resource) rather than one model's Custom::ModelArtifact."""
    return "CatalogKey" in (event.get("ResourceProperties") or {})


def _is_snapshot(event: dict[str, Any]) -> bool:
    """A vLLM model's safetensors snapshot (snapshot_resource) rather than one file."""
    return "Snapshot" in (event.get("ResourceProperties") or {})


def attributes(props: Mapping[str, Any], stored: Mapping[str, str]) -> dict[str, str]:
    """Every attribute from the receipt's commit, sha256, size and build (Key and Prefix follow from the properties)."""
    prefix = f"{props['KeyPrefix'].strip('/')}/{stored['Commit']}/"
    return {
        "Commit": stored["Commit"],
        "Sha256": stored["Sha256"],
        "Key": prefix + props["File"],
        "Size": stored["Size"],
        "Prefix": prefix,
        "BuildId": stored["BuildId"],
    }


RECEIPTS = Receipts(
    identity=IDENTITY_PROPERTIES,
    stored=("Commit", "Sha256", "Size", "BuildId"),
    attributes=attributes,
    location=lambda props, data: f"s3://{props['Bucket']}/{data['Key']}",
)


def on_event(event: dict[str, Any], _context: Any = None, *, codebuild=None) -> dict[str, Any]:  # noqa: ANN001
    if catalog_wait.is_wait(event):
        return catalog_wait.on_event(event)
    if _is_catalog(event):
        from . import catalog_resource

        return catalog_resource.on_event(event, codebuild)
    if _is_snapshot(event):
        from . import snapshot_resource

        return snapshot_resource.on_event(event, codebuild)
    props = event["ResourceProperties"]
    if event["RequestType"] == "Delete":
        return {"PhysicalResourceId": event["PhysicalResourceId"]}
    unchanged = RECEIPTS.redeploy(event)
    if unchanged is not None:
        return unchanged
    build = start_build(props, identity_environment(props), codebuild, event.get("RequestId"))
    print(
        f"started {build['id']} for hf://{props['HfRepo']}/{props['File']}@{props.get('Revision')} -> s3://{props['Bucket']}/{props['KeyPrefix']}/"
    )
    # An Update keeps the deployed id until the build succeeds: a failure then reports it, and the rollback's
    # Update finds the deployed receipt in it.
    return {
        "PhysicalResourceId": event.get("PhysicalResourceId") or _request_id(props),
        "Data": {"BuildId": build["id"]},
    }


def resolved(build: dict[str, Any], props: dict[str, Any]) -> dict[str, str]:
    """The attributes from a succeeded build's exported variables, checked against what was asked for."""
    data = receipt(build, RECEIPT, "model copy", "BUILD_SPEC")
    prefix = f"{props['KeyPrefix'].strip('/')}/{data['Commit']}/"
    if (
        not COMMIT.match(data["Commit"])
        or not _SHA256.match(data["Sha256"])
        or data["Key"] != prefix + props["File"]
        or not data["Size"].isdigit()
        or (props.get("Sha256") and props["Sha256"] != data["Sha256"])
    ):
        raise RuntimeError(
            f"model copy build {build.get('id')} reported an unexpected receipt {data}; expected key {prefix}{props['File']}"
        )
    return attributes(props, {**data, "BuildId": str(build.get("id"))})


def completion(
    build: dict[str, Any], props: dict[str, Any], logs, event: dict[str, Any] | None = None
) -> dict[str, Any]:  # noqa: ANN001
    """isComplete's answer for one BatchGetBuilds record (Receipts.completion); raises for a failed build."""
    return RECEIPTS.completion(
        build,
        props,
        logs,
        event,
        resolved,
        lambda props: f"model copy of {props['HfRepo']}/{props['File']}@{props.get('Revision')}",
    )


def is_complete(event: dict[str, Any], _context: Any = None, *, codebuild=None, logs=None) -> dict[str, Any]:  # noqa: ANN001
    if catalog_wait.is_wait(event):
        return catalog_wait.is_complete(event)
    if _is_catalog(event):
        from . import catalog_resource

        return catalog_resource.is_complete(event, codebuild, logs)
    if _is_snapshot(event):
        from . import snapshot_resource

        return snapshot_resource.is_complete(event, codebuild, logs)
    return RECEIPTS.is_complete(event, "model copy", completion, codebuild, logs)
