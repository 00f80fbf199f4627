"""The custom-resource handlers against moto's CodeBuild and CloudWatch Logs: start, poll, fail the deployment."""

from __future__ import annotations

import time
import uuid

import boto3
import pytest

from model_download.custom_resource import _job_error_line, build_environment, completion, is_complete, on_event

PROPS = {
    "ServiceToken": "arn:aws:lambda:us-east-1:123456789012:function:provider",
    "Bucket": "model-bucket",
    "KeyPrefix": "models/llama-70b/0123abc",
    "Key": "models/llama-70b/0123abc/Llama-3.3-70B-Instruct-Q4_K_M.gguf",
    "HfRepo": "bartowski/Llama-3.3-70B-Instruct-GGUF",
    "File": "Llama-3.3-70B-Instruct-Q4_K_M.gguf",
    "Revision": "0123abc",
    "Sha256": "",
    "TokenSecretName": "hf/token",
    "HfEndpoint": "https://huggingface.co",
    "Concurrency": "8",
}


@pytest.fixture
def project(aws_env) -> str:  # noqa: ANN001
    name = f"model-copy-{uuid.uuid4().hex[:8]}"
    boto3.client("codebuild").create_project(
        name=name,
        source={"type": "S3", "location": "cdk-assets-bucket/model_download.zip", "buildspec": "version: 0.2"},
        artifacts={"type": "NO_ARTIFACTS"},
        environment={"type": "LINUX_CONTAINER", "image": "aws/codebuild/amazonlinux-x86_64-standard:5.0", "computeType": "BUILD_GENERAL1_LARGE"},
        serviceRole="arn:aws:iam::123456789012:role/model-copy",
    )
    return name


def _event(request_type: str, project: str, **extra) -> dict:  # noqa: ANN003
    return {"RequestType": request_type, "ResourceProperties": {**PROPS, "ProjectName": project}, **extra}


def test_environment_carries_identity_and_only_the_secret_name() -> None:
    env = {e["name"]: e["value"] for e in build_environment(PROPS)}
    assert env["MODEL_REPO"] == PROPS["HfRepo"] and env["MODEL_FILE"] == PROPS["File"]
    assert env["MODEL_REVISION"] == "0123abc" and env["MODEL_SHA256"] == ""
    assert env["MODEL_KEY_PREFIX"] == PROPS["KeyPrefix"] and env["HF_TOKEN_SECRET_NAME"] == "hf/token"
    assert {e["type"] for e in build_environment(PROPS)} == {"PLAINTEXT"}


def test_create_starts_a_build_and_completes_when_it_succeeds(project) -> None:  # noqa: ANN001
    started = on_event(_event("Create", project))
    assert started["PhysicalResourceId"] == f"s3://model-bucket/{PROPS['Key']}"
    build_id = started["Data"]["BuildId"]
    assert boto3.client("codebuild").list_builds_for_project(projectName=project)["ids"] == [build_id]

    # moto reports a started build as SUCCEEDED on the first poll.
    assert is_complete({**_event("Create", project), **started}) == {"IsComplete": True}


def _log_stream(lines: list[str]) -> tuple[str, str]:
    logs = boto3.client("logs")
    group, stream = f"/aws/codebuild/model-copy-{uuid.uuid4().hex[:6]}", "build-1"
    logs.create_log_group(logGroupName=group)
    logs.create_log_stream(logGroupName=group, logStreamName=stream)
    now = int(time.time() * 1000)
    logs.put_log_events(logGroupName=group, logStreamName=stream,
                        logEvents=[{"timestamp": now + i, "message": m} for i, m in enumerate(lines)])
    return group, stream


# A BatchGetBuilds record of a failed copy, in CodeBuild's documented shape (moto's builds always succeed).
def _failed_build(status: str, group: str | None, stream: str | None) -> dict:
    return {
        "id": "model-copy:1f2e", "buildStatus": status, "currentPhase": "COMPLETED",
        "phases": [{"phaseType": "INSTALL", "phaseStatus": "SUCCEEDED"},
                   {"phaseType": "BUILD", "phaseStatus": "FAILED", "contexts": [
                       {"statusCode": "COMMAND_EXECUTION_ERROR",
                        "message": "Error while executing command: python3 -m model_download. Reason: exit status 2"}]}],
        "logs": {"groupName": group, "streamName": stream} if group else {},
    }


def test_a_failed_build_fails_the_deployment_quoting_the_jobs_error(aws_env) -> None:  # noqa: ANN001
    group, stream = _log_stream([
        "copying 42.52 GB, expected sha256 ab…", "progress: 10% (4.25 of 42.52 GB, 310 MB/s)",
        "model_download: error: sha256 mismatch for r/f@main: expected aa, the downloaded bytes hash to bb; nothing was written",
        "[Container] Phase complete: BUILD State: FAILED",
    ])
    with pytest.raises(RuntimeError) as err:
        completion(_failed_build("FAILED", group, stream), PROPS, boto3.client("logs"))
    assert str(err.value) == (
        "model copy of bartowski/Llama-3.3-70B-Instruct-GGUF/Llama-3.3-70B-Instruct-Q4_K_M.gguf@0123abc FAILED: "
        "sha256 mismatch for r/f@main: expected aa, the downloaded bytes hash to bb; nothing was written (build model-copy:1f2e)"
    )


def test_without_a_readable_log_the_phase_context_is_quoted(aws_env) -> None:  # noqa: ANN001
    with pytest.raises(RuntimeError, match=r"@0123abc TIMED_OUT: Error while executing command: python3 -m model_download"):
        completion(_failed_build("TIMED_OUT", None, None), PROPS, boto3.client("logs"))
    assert completion({"buildStatus": "IN_PROGRESS"}, PROPS, None) == {"IsComplete": False}


def test_delete_keeps_the_object_and_starts_nothing(project) -> None:  # noqa: ANN001
    gone = on_event(_event("Delete", project, PhysicalResourceId="s3://model-bucket/k"))
    assert gone == {"PhysicalResourceId": "s3://model-bucket/k"}
    assert is_complete(_event("Delete", project, PhysicalResourceId="s3://model-bucket/k")) == {"IsComplete": True}
    assert boto3.client("codebuild").list_builds_for_project(projectName=project)["ids"] == []


def test_only_the_error_line_is_picked(aws_env) -> None:  # noqa: ANN001
    group, stream = _log_stream(["progress: 90% (1 of 1 GB)", "model_download: done: s3://b/k"])
    assert _job_error_line({"logs": {"groupName": group, "streamName": stream}}, boto3.client("logs")) is None
