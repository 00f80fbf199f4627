"""Custom-resource handlers (CDK Provider framework): onEvent starts the copy job, isComplete polls it.

Create/Update start one CodeBuild build with the model's identity as environment overrides; isComplete returns
False while it runs, True when it succeeded, and raises — failing the deployment — when it did not, quoting
the job's own error line. Delete keeps the object (the bucket is versioned and retained).

Resource properties: ProjectName, Bucket, KeyPrefix, Key, HfRepo, File, Revision, Sha256 ("" = the Hub's),
TokenSecretName ("" = none), HfEndpoint, Concurrency, LogGroupName.
"""

from __future__ import annotations

from typing import Any

_FAILED = frozenset({"FAILED", "FAULT", "STOPPED", "TIMED_OUT"})
ERROR_PREFIX = "model_download: error: "


def build_environment(props: dict[str, Any]) -> list[dict[str, str]]:
    """CodeBuild environment overrides for one copy; names only, never a secret's value."""
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


def _physical_id(props: dict[str, Any]) -> str:
    return f"s3://{props['Bucket']}/{props['Key']}"


def _client(name: str):  # noqa: ANN202
    import boto3

    return boto3.client(name)


def on_event(event: dict[str, Any], _context: Any = None, *, codebuild=None) -> dict[str, Any]:  # noqa: ANN001
    props = event["ResourceProperties"]
    if event["RequestType"] == "Delete":
        return {"PhysicalResourceId": event["PhysicalResourceId"]}
    codebuild = codebuild or _client("codebuild")
    build = codebuild.start_build(projectName=props["ProjectName"], environmentVariablesOverride=build_environment(props))["build"]
    print(f"started {build['id']} for hf://{props['HfRepo']}/{props['File']}@{props.get('Revision')} -> {_physical_id(props)}")
    return {
        "PhysicalResourceId": _physical_id(props),
        "Data": {"BuildId": build["id"], "S3Uri": _physical_id(props), "Key": props["Key"]},
    }


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
        return {"IsComplete": True}
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
    if event["RequestType"] == "Delete":
        return {"IsComplete": True}
    build_id = event["Data"]["BuildId"]
    codebuild = codebuild or _client("codebuild")
    builds = codebuild.batch_get_builds(ids=[build_id]).get("builds") or []
    if not builds:
        raise RuntimeError(f"model copy build {build_id} not found")
    return completion(builds[0], event["ResourceProperties"], logs or _client("logs"))
