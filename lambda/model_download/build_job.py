"""What both custom resources (one model's Custom::ModelArtifact, custom_resource.py; the pooled models'
Custom::ModelCatalog, catalog_resource.py) do with their CodeBuild job: start it with the identity as environment
overrides, poll it, read the receipt it exported, and say why it failed in one line (the job's own
`model_download: error:` line when its log is readable, else CodeBuild's phase messages).

Sources: botocore codebuild StartBuild (`environmentVariablesOverride`), BatchGetBuilds (`buildStatus`: SUCCEEDED,
FAILED, FAULT, TIMED_OUT, IN_PROGRESS, STOPPED; `exportedEnvironmentVariables`; `logs.groupName/streamName`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .errors import ERROR_PREFIX

FAILED = frozenset({"FAILED", "FAULT", "STOPPED", "TIMED_OUT"})


def client(name: str):  # noqa: ANN201
    import boto3

    return boto3.client(name)


def plaintext_environment(values: Mapping[str, Any]) -> list[dict[str, str]]:
    """CodeBuild environment variables (names and locations only — never a secret's value)."""
    return [{"name": k, "value": str(v), "type": "PLAINTEXT"} for k, v in values.items()]


def only(environment: Iterable[dict[str, str]], names: Iterable[str]) -> list[dict[str, str]]:
    """The variables of `environment` named in `names` (StartBuild's overrides: the job's identity)."""
    keep = set(names)
    return [e for e in environment if e["name"] in keep]


def start_build(props: Mapping[str, Any], overrides: list[dict[str, str]], codebuild=None) -> dict[str, Any]:  # noqa: ANN001
    """StartBuild of the resource's project (`ProjectName`) with `overrides`; the build record."""
    codebuild = codebuild or client("codebuild")
    return codebuild.start_build(projectName=props["ProjectName"], environmentVariablesOverride=overrides)["build"]


def poll(
    event: Mapping[str, Any], what: str, complete: Callable[[dict[str, Any], dict[str, Any], Any], dict[str, Any]],
    codebuild=None, logs=None,  # noqa: ANN001
) -> dict[str, Any]:
    """isComplete: a Delete is complete at once; otherwise `complete(build, properties, logs)` decides from the
    BatchGetBuilds record of the build onEvent started (`Data.BuildId`)."""
    if event["RequestType"] == "Delete":
        return {"IsComplete": True}
    build_id = event["Data"]["BuildId"]
    codebuild = codebuild or client("codebuild")
    builds = codebuild.batch_get_builds(ids=[build_id]).get("builds") or []
    if not builds:
        raise RuntimeError(f"{what} build {build_id} not found")
    return complete(builds[0], event["ResourceProperties"], logs or client("logs"))


def receipt(build: Mapping[str, Any], names: Mapping[str, str], what: str, build_spec: str) -> dict[str, str]:
    """The exported variables `names` (variable -> attribute) of a succeeded build, as attributes; raises when the
    job exported none of them (a project still on an older buildspec)."""
    exported = {v.get("name"): v.get("value") or "" for v in build.get("exportedEnvironmentVariables") or []}
    missing = [name for name in names if not exported.get(name)]
    if missing:
        raise RuntimeError(
            f"{what} build {build.get('id')} succeeded but exported no {', '.join(missing)}: the project's buildspec "
            f"must be model_download.buildspec.{build_spec} (redeploy the stack)"
        )
    return {attr: exported[name] for name, attr in names.items()}


def job_error_line(build: Mapping[str, Any], logs) -> str | None:  # noqa: ANN001
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


def failure_detail(build: Mapping[str, Any], logs) -> str:  # noqa: ANN001
    """Why a failed build failed: the job's error line, else the failed phases' messages."""
    detail = job_error_line(build, logs)
    if detail is None:
        phases = [p for p in build.get("phases", []) if p.get("phaseStatus") not in (None, "SUCCEEDED")]
        contexts = [c.get("message", "") for p in phases for c in p.get("contexts", []) if c.get("message")]
        detail = "; ".join(contexts) or "see the build log"
    return detail
