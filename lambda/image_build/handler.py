"""Custom-resource handlers (CDK Provider framework) for the multi-arch image build.

`on_event` starts the build state machine (native arm64 + amd64 builds in parallel, then the
manifest-list build); `is_complete` polls the execution and returns the pushed image digest, or
raises so CloudFormation fails the deployment with the failing build named. Plain Python + boto3.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

import boto3

DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_NAME_CHARS = re.compile(r"[^A-Za-z0-9_-]")
# A CloudFormation failure reason is shown in the console and truncated near 4 KB.
_REASON_LIMIT = 1500


class BuildFailed(RuntimeError):
    """The workflow ended in another state than SUCCEEDED, or succeeded without a valid digest."""


@dataclass(frozen=True)
class BuildResult:
    digest: str
    platform_digests: dict[str, str] = field(default_factory=dict)


def execution_name(tag: str, request_id: str) -> str:
    """Unique per CloudFormation request (names stay reserved for 90 days), readable, <= 80 chars."""
    suffix = re.sub(r"[^A-Za-z0-9]", "", request_id)[:12]
    return f"{_NAME_CHARS.sub('-', tag)[: 80 - len(suffix) - 1]}-{suffix}"


def _variables(build: dict[str, Any]) -> dict[str, str]:
    return {v["Name"]: v.get("Value", "") for v in build.get("ExportedEnvironmentVariables") or []}


def build_result(output: str | None) -> BuildResult:
    """The digests in the state machine's output (the `.sync` tasks' exported CodeBuild variables)."""
    if not output:
        raise BuildFailed("the build workflow succeeded but returned no output")
    doc = json.loads(output)
    manifest = doc.get("manifestBuild") or {}
    variables = _variables(manifest)
    digest = variables.get("IMAGE_DIGEST", "")
    if not DIGEST.match(digest):
        raise BuildFailed(
            f"the manifest build {manifest.get('BuildId', '?')} exported IMAGE_DIGEST={digest!r}, not a sha256 digest"
        )
    # Each architecture's own image digest: SageMaker endpoints are given it (Digest-<arch>), so a platform build
    # without one fails here with its name, not later in CloudFormation as a missing attribute.
    platforms: dict[str, str] = {}
    for build in doc.get("platformBuilds") or []:
        pv = _variables(build)
        arch, platform_digest = pv.get("ARCH", ""), pv.get("IMAGE_DIGEST", "")
        if not arch or not DIGEST.match(platform_digest):
            raise BuildFailed(
                f"the platform build {build.get('BuildId', '?')} exported ARCH={arch!r} IMAGE_DIGEST={platform_digest!r}, "
                "not an architecture and a sha256 digest"
            )
        platforms[arch] = platform_digest
    return BuildResult(digest=digest, platform_digests=platforms)


def _get(doc: dict[str, Any], name: str) -> Any:
    # Step Functions reports CodeBuild fields in PascalCase; the CodeBuild API itself uses camelCase.
    return doc.get(name, doc.get(name[:1].lower() + name[1:]))


def failure_reason(status: str, error: str | None, cause: str | None, execution_arn: str) -> str:
    """One readable line: which build failed, in which phase, why, and where its log is."""
    detail = cause or ""
    try:
        parsed = json.loads(cause) if cause else None
    except ValueError:
        parsed = None
    build = (_get(parsed, "Build") or parsed) if isinstance(parsed, dict) else None
    if isinstance(build, dict) and _get(build, "BuildStatus"):
        parts = [f"CodeBuild {_get(build, 'Id') or '?'} {_get(build, 'BuildStatus')}"]
        failed = [p for p in _get(build, "Phases") or [] if _get(p, "PhaseStatus") not in (None, "SUCCEEDED")]
        if failed:
            phase = failed[0]
            messages = "; ".join(m for c in _get(phase, "Contexts") or [] if (m := _get(c, "Message")))
            parts.append(f"in phase {_get(phase, 'PhaseType') or '?'}" + (f": {messages}" if messages else ""))
        link = _get(_get(build, "Logs") or {}, "DeepLink")
        if link:
            parts.append(f"log: {link}")
        detail = ", ".join(parts)
    reason = f"image build {status}: {error or 'no error name'}: {detail} (execution {execution_arn})"
    return reason if len(reason) <= _REASON_LIMIT else reason[: _REASON_LIMIT - 3] + "..."


def on_event(event: dict[str, Any], context: Any = None, *, sfn: Any = None) -> dict[str, Any]:
    if event["RequestType"] == "Delete":
        # Nothing to undo: images outlive their build record; the repository's removal policy decides.
        return {"PhysicalResourceId": event["PhysicalResourceId"]}
    props = event["ResourceProperties"]
    sfn = sfn or boto3.client("stepfunctions")
    started = sfn.start_execution(
        stateMachineArn=props["StateMachineArn"],
        name=execution_name(props["Tag"], event["RequestId"]),
        input=json.dumps({"tag": props["Tag"], "contentHash": props["ContentHash"]}),
    )
    # A new tag is a new image: the physical id changes with it, so CloudFormation replaces the resource.
    return {
        "PhysicalResourceId": f"{props['RepositoryName']}:{props['Tag']}",
        "Data": {"ExecutionArn": started["executionArn"]},
    }


def is_complete(event: dict[str, Any], context: Any = None, *, sfn: Any = None) -> dict[str, Any]:
    if event["RequestType"] == "Delete":
        return {"IsComplete": True}
    arn = event["Data"]["ExecutionArn"]
    sfn = sfn or boto3.client("stepfunctions")
    execution = sfn.describe_execution(executionArn=arn)
    status = execution["status"]
    if status in ("RUNNING", "PENDING_REDRIVE"):
        return {"IsComplete": False}
    if status != "SUCCEEDED":
        raise BuildFailed(failure_reason(status, execution.get("error"), execution.get("cause"), arn))
    result = build_result(execution.get("output"))
    props = event["ResourceProperties"]
    data = {
        "ImageDigest": result.digest,
        "ImageUri": f"{props['RepositoryUri']}@{result.digest}",
        "Tag": props["Tag"],
    }
    data.update({f"Digest-{arch}": digest for arch, digest in sorted(result.platform_digests.items())})
    return {"IsComplete": True, "Data": data}
