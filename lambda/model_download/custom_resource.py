"""Custom-resource handlers (CDK Provider framework): onEvent starts the copy job, isComplete polls it.

Create/Update start one CodeBuild build with the model's identity as environment overrides; isComplete returns
False while it runs, True when it succeeded, and raises — failing the deployment — when it did not, quoting
the job's own error line. Delete keeps the object (the bucket is versioned and retained).

The job pins the object to a commit (`<KeyPrefix>/<commit>/<File>`, never overwritten) and exports where it
landed (buildspec.RECEIPT); isComplete returns that as the resource's attributes — Commit, Sha256, Key, Prefix
(`<KeyPrefix>/<commit>/`), Size, BuildId — which the CDK provider framework merges into the response's Data
(custom-resources/lib/provider-framework/runtime/framework.js: `Data: {...event.Data, ...isCompleteResult.Data}`).
Consumers read those attributes, so they keep the resolved commit until the properties change.

The same provider serves Custom::ModelCatalog (every pooled model of a stack in one job): an event whose
properties carry CatalogKey goes to catalog_resource.

Resource properties (the copy's identity): ProjectName, Bucket, KeyPrefix (`models/<name>`), HfRepo, File,
Revision, Sha256 ("" = the Hub's). The token secret, Hub endpoint and concurrency are the project's environment.
"""

from __future__ import annotations

import re
from typing import Any

from .buildspec import RECEIPT
from .copy import COMMIT

_FAILED = frozenset({"FAILED", "FAULT", "STOPPED", "TIMED_OUT"})
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
ERROR_PREFIX = "model_download: error: "


# What the copy is (the resource's properties; a change re-runs the job and may resolve a newer commit). How it
# copies — token secret, Hub endpoint, concurrency — lives only in the project's environment: changing it must
# not re-run the job, or an unrelated setting would move a `main` revision to whatever `main` is that day.
IDENTITY = ("MODEL_REPO", "MODEL_FILE", "MODEL_REVISION", "MODEL_SHA256", "MODEL_BUCKET", "MODEL_KEY_PREFIX")
IDENTITY_PROPERTIES = ("HfRepo", "File", "Revision", "Sha256", "Bucket", "KeyPrefix")  # the same, as resource properties


def build_environment(props: dict[str, Any]) -> list[dict[str, str]]:
    """The copy job's environment (the project's; the custom resource overrides only IDENTITY); names only,
    never a secret's value."""
    values = {
        "MODEL_REPO": props["HfRepo"],
        "MODEL_FILE": props["File"],
        "MODEL_REVISION": props.get("Revision") or "main",
        "MODEL_SHA256": props.get("Sha256") or "",
        "MODEL_BUCKET": props["Bucket"],
        "MODEL_KEY_PREFIX": props["KeyPrefix"],
        "HF_TOKEN_SECRET_NAME": props.get("TokenSecretName") or "",
        "HF_ENDPOINT": props.get("HfEndpoint") or "https://huggingface.co",
        "MODEL_CONCURRENCY": str(props.get("Concurrency") or 8),
    }
    return [{"name": k, "value": str(v), "type": "PLAINTEXT"} for k, v in values.items()]


def identity_environment(props: dict[str, Any]) -> list[dict[str, str]]:
    """StartBuild's overrides: the copy's identity from the resource's properties (the rest is the project's)."""
    return [e for e in build_environment(props) if e["name"] in IDENTITY]


def _request_id(props: dict[str, Any]) -> str:
    """Until the job reports its key: what was asked for (the commit is not known yet)."""
    return f"s3://{props['Bucket']}/{props['KeyPrefix'].strip('/')}/@{props.get('Revision') or 'main'}/{props['File']}"


def _is_catalog(event: dict[str, Any]) -> bool:
    """A Custom::ModelCatalog event (catalog_resource) rather than one model's Custom::ModelArtifact."""
    return "CatalogKey" in (event.get("ResourceProperties") or {})


def _client(name: str):  # noqa: ANN202
    import boto3

    return boto3.client(name)


def on_event(event: dict[str, Any], _context: Any = None, *, codebuild=None) -> dict[str, Any]:  # noqa: ANN001
    if _is_catalog(event):
        from . import catalog_resource

        return catalog_resource.on_event(event, codebuild)
    props = event["ResourceProperties"]
    if event["RequestType"] == "Delete":
        return {"PhysicalResourceId": event["PhysicalResourceId"]}
    codebuild = codebuild or _client("codebuild")
    build = codebuild.start_build(projectName=props["ProjectName"], environmentVariablesOverride=identity_environment(props))["build"]
    print(f"started {build['id']} for hf://{props['HfRepo']}/{props['File']}@{props.get('Revision')} -> s3://{props['Bucket']}/{props['KeyPrefix']}/")
    return {
        "PhysicalResourceId": event.get("PhysicalResourceId") or _request_id(props),
        "Data": {"BuildId": build["id"]},
    }


def resolved(build: dict[str, Any], props: dict[str, Any]) -> dict[str, str]:
    """The attributes from a succeeded build's exported variables, checked against what was asked for."""
    exported = {v.get("name"): v.get("value") or "" for v in build.get("exportedEnvironmentVariables") or []}
    missing = [name for name in RECEIPT if not exported.get(name)]
    if missing:
        raise RuntimeError(
            f"model copy build {build.get('id')} succeeded but exported no {', '.join(missing)}: the project's buildspec "
            "must be model_download.buildspec.BUILD_SPEC (redeploy the stack)"
        )
    data = {attr: exported[name] for name, attr in RECEIPT.items()}
    prefix = f"{props['KeyPrefix'].strip('/')}/{data['Commit']}/"
    if not COMMIT.match(data["Commit"]) or not _SHA256.match(data["Sha256"]) or data["Key"] != prefix + props["File"] \
            or not data["Size"].isdigit() or (props.get("Sha256") and props["Sha256"] != data["Sha256"]):
        raise RuntimeError(f"model copy build {build.get('id')} reported an unexpected receipt {data}; expected key {prefix}{props['File']}")
    return {**data, "Prefix": prefix, "BuildId": str(build.get("id"))}


def _job_error_line(build: dict[str, Any], logs) -> str | None:  # noqa: ANN001
    """The copy job's own `model_download: error:` line from its CloudWatch log stream, if readable."""
    info = build.get("logs") or {}
    group, stream = info.get("groupName"), info.get("streamName")
    if not group or not stream:
        return None
    try:
        events = logs.get_log_events(logGroupName=group, logStreamName=stream, limit=200, startFromHead=False)["events"]
    except Exception:  # noqa: BLE001 - the build status alone still fails the deployment
        return None
    for ev in reversed(events):
        message = ev.get("message", "")
        if ERROR_PREFIX in message:
            return message[message.index(ERROR_PREFIX) + len(ERROR_PREFIX):].strip()
    return None


def completion(build: dict[str, Any], props: dict[str, Any], logs) -> dict[str, Any]:  # noqa: ANN001
    """isComplete's answer for one BatchGetBuilds record; raises (failing the deployment) for a failed build."""
    status = build.get("buildStatus", "IN_PROGRESS")
    if status == "SUCCEEDED":
        data = resolved(build, props)
        return {"IsComplete": True, "PhysicalResourceId": f"s3://{props['Bucket']}/{data['Key']}", "Data": data}
    if status not in _FAILED:
        return {"IsComplete": False}
    detail = _job_error_line(build, logs)
    if detail is None:
        phases = [p for p in build.get("phases", []) if p.get("phaseStatus") not in (None, "SUCCEEDED")]
        contexts = [c.get("message", "") for p in phases for c in p.get("contexts", []) if c.get("message")]
        detail = "; ".join(contexts) or "see the build log"
    # Kept short: CloudFormation shows this as the resource's status reason.
    raise RuntimeError(
        f"model copy of {props['HfRepo']}/{props['File']}@{props.get('Revision')} {status}: {detail[:600]} "
        f"(build {build.get('id')})"
    )


def is_complete(event: dict[str, Any], _context: Any = None, *, codebuild=None, logs=None) -> dict[str, Any]:  # noqa: ANN001
    if _is_catalog(event):
        from . import catalog_resource

        return catalog_resource.is_complete(event, codebuild, logs)
    if event["RequestType"] == "Delete":
        return {"IsComplete": True}
    build_id = event["Data"]["BuildId"]
    codebuild = codebuild or _client("codebuild")
    builds = codebuild.batch_get_builds(ids=[build_id]).get("builds") or []
    if not builds:
        raise RuntimeError(f"model copy build {build_id} not found")
    return completion(builds[0], event["ResourceProperties"], logs or _client("logs"))
