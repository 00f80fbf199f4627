"""The custom-resource handlers against moto's CodeBuild and CloudWatch Logs: start, poll, fail the deployment;
and the job's receipt — the buildspec's own commands run in bash against the fake Hub and moto's S3 — turned
into the resource's attributes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import boto3
import botocore.session
import pytest

from model_download.build_job import deployed
from model_download.build_job import job_error_line as _job_error_line
from model_download.buildspec import BUILD_SPEC, RECEIPT
from model_download.custom_resource import (
    IDENTITY,
    IDENTITY_PROPERTIES,
    build_environment,
    completion,
    identity_environment,
    is_complete,
    on_event,
)
from tests.runtime.model_download.constants import FILE, PUBLIC_REPO

PROPS = {
    "ServiceToken": "arn:aws:lambda:us-east-1:123456789012:function:provider",
    "Bucket": "model-bucket",
    "KeyPrefix": "models/llama-70b",
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
        environment={
            "type": "LINUX_CONTAINER",
            "image": "aws/codebuild/amazonlinux-x86_64-standard:5.0",
            "computeType": "BUILD_GENERAL1_LARGE",
        },
        serviceRole="arn:aws:iam::123456789012:role/model-copy",
    )
    return name


def _event(request_type: str, project: str, **extra) -> dict:  # noqa: ANN003
    return {"RequestType": request_type, "ResourceProperties": {**PROPS, "ProjectName": project}, **extra}


def test_environment_carries_identity_and_only_the_secret_name() -> None:
    env = {e["name"]: e["value"] for e in build_environment(PROPS)}
    assert env["MODEL_REPO"] == PROPS["HfRepo"] and env["MODEL_FILE"] == PROPS["File"]
    assert env["MODEL_REVISION"] == "0123abc" and "MODEL_SHA256" not in env  # empty: left out (buildspec `${VAR:+…}`)
    assert env["MODEL_KEY_PREFIX"] == PROPS["KeyPrefix"] and env["HF_TOKEN_SECRET_NAME"] == "hf/token"
    assert {e["type"] for e in build_environment(PROPS)} == {"PLAINTEXT"}


def test_start_build_overrides_only_the_identity(project) -> None:  # noqa: ANN001
    # The resource carries only what is copied; the build keeps the project's token secret, endpoint, concurrency.
    identity = {k: PROPS[k] for k in IDENTITY_PROPERTIES}
    started = on_event({"RequestType": "Create", "ResourceProperties": {**identity, "ProjectName": project}})
    build = boto3.client("codebuild").batch_get_builds(ids=[started["Data"]["BuildId"]])["builds"][0]
    assert build["buildStatus"]  # moto recorded the build
    assert [e["name"] for e in identity_environment({**identity, "Sha256": "ab" * 32})] == list(IDENTITY)
    assert [e["name"] for e in identity_environment(identity)] == [n for n in IDENTITY if n != "MODEL_SHA256"]


def test_create_starts_a_build_and_a_success_without_a_receipt_fails(project) -> None:  # noqa: ANN001
    started = on_event(_event("Create", project))
    assert started["PhysicalResourceId"] == f"s3://model-bucket/models/llama-70b/@0123abc/{PROPS['File']}"
    build_id = started["Data"]["BuildId"]
    assert boto3.client("codebuild").list_builds_for_project(projectName=project)["ids"] == [build_id]

    # moto reports a started build as SUCCEEDED but never buildComplete: isComplete waits for CodeBuild to finish.
    assert is_complete({**_event("Create", project), **started}) == {"IsComplete": False}
    # Complete, it ran no buildspec: nothing was exported, and a copy that cannot say which commit it pinned must
    # not let consumers guess.
    build = {**boto3.client("codebuild").batch_get_builds(ids=[build_id])["builds"][0], "buildComplete": True}
    with pytest.raises(RuntimeError, match=f"build {build_id} succeeded but exported no MODEL_RESOLVED_COMMIT"):
        completion(build, _event("Create", project)["ResourceProperties"], None)


def _run_buildspec(env: dict[str, str], workdir: Path) -> dict[str, str]:
    """The buildspec's commands in one bash, as CodeBuild runs them, then the values of its exported variables."""
    spec = BUILD_SPEC
    assert spec["env"]["shell"] == "bash"
    commands = [*spec["phases"]["install"]["commands"], *spec["phases"]["build"]["commands"]]
    exported = spec["env"]["exported-variables"]
    script = (
        "set -e\n" + "\n".join(commands) + "\n" + "".join(f'printf "%s=%s\\n" {v} "${{{v}:-}}"\n' for v in exported)
    )
    bin_dir = str(Path(sys.executable).parent)  # python3 with boto3 + urllib3, as the CodeBuild image has
    done = subprocess.run(
        ["bash", "-c", script],
        cwd=workdir,
        env={**env, "PATH": f"{bin_dir}:{os.environ['PATH']}"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return dict(line.split("=", 1) for line in done.stdout.splitlines() if line.split("=", 1)[0] in exported)


def test_the_jobs_receipt_becomes_the_resources_attributes(hub, served, aws_env, bucket, project, tmp_path) -> None:  # noqa: ANN001
    props = {
        **PROPS,
        "ProjectName": project,
        "Bucket": bucket,
        "KeyPrefix": "models/smollm2",
        "HfRepo": PUBLIC_REPO,
        "File": FILE,
        "Revision": "main",
        "Sha256": "",
        "TokenSecretName": "",
        "HfEndpoint": hub.url,
        "Concurrency": "4",
    }
    started = on_event({"RequestType": "Create", "ResourceProperties": props})
    env = {**os.environ, **aws_env, **{e["name"]: e["value"] for e in build_environment(props)}}

    exported = _run_buildspec(env, tmp_path)

    commit = hub.commit_of(PUBLIC_REPO)
    key = f"models/smollm2/{commit}/{FILE}"
    assert set(exported) == set(RECEIPT) and exported["MODEL_RESOLVED_KEY"] == key
    # The record BatchGetBuilds returns for that build: moto's, plus the exported variables in the service's shape.
    build = boto3.client("codebuild").batch_get_builds(ids=[started["Data"]["BuildId"]])["builds"][0]
    shape = botocore.session.get_session().get_service_model("codebuild").shape_for("Build")
    assert set(shape.members["exportedEnvironmentVariables"].member.members) == {"name", "value"}
    build["exportedEnvironmentVariables"] = [{"name": k, "value": v} for k, v in exported.items()]

    answer = completion(build, props, None)

    # The id: where it landed, then what was deployed (identity digest + receipt) for a later no-op Update.
    assert answer["IsComplete"] and answer["PhysicalResourceId"].startswith(f"s3://{bucket}/{key}#v=1&")
    assert deployed(answer["PhysicalResourceId"])[0].stored == {
        "Commit": commit,
        "Sha256": served.sha256,
        "Size": str(served.size),
        "BuildId": build["id"],
    }
    assert answer["Data"] == {
        "Commit": commit,
        "Sha256": served.sha256,
        "Key": key,
        "Prefix": f"models/smollm2/{commit}/",
        "Size": str(served.size),
        "BuildId": build["id"],
    }
    head = boto3.client("s3").head_object(Bucket=bucket, Key=key)
    assert head["Metadata"]["sha256"] == served.sha256 and head["ContentLength"] == served.size

    # Run by hand again (`aws codebuild start-build`): same commit, same key, nothing copied, same receipt.
    hub.reset()
    assert _run_buildspec(env, tmp_path) == exported and hub.stats.bytes_served == 0


def test_a_receipt_that_does_not_match_the_request_fails(aws_env) -> None:  # noqa: ANN001
    commit = "ab" * 20
    good = {
        "MODEL_RESOLVED_COMMIT": commit,
        "MODEL_RESOLVED_SHA256": "cd" * 32,
        "MODEL_RESOLVED_KEY": f"models/llama-70b/{commit}/{PROPS['File']}",
        "MODEL_RESOLVED_SIZE": "42",
    }
    build = {"id": "model-copy:9", "buildStatus": "SUCCEEDED"}
    ok = completion(
        {**build, "exportedEnvironmentVariables": [{"name": k, "value": v} for k, v in good.items()]}, PROPS, None
    )
    assert ok["Data"]["Prefix"] == f"models/llama-70b/{commit}/"
    for name, wrong in (
        ("MODEL_RESOLVED_KEY", f"models/llama-70b/main/{PROPS['File']}"),
        ("MODEL_RESOLVED_COMMIT", "main"),
    ):
        bad = {**good, name: wrong}
        with pytest.raises(RuntimeError, match="unexpected receipt"):
            completion(
                {**build, "exportedEnvironmentVariables": [{"name": k, "value": v} for k, v in bad.items()]},
                PROPS,
                None,
            )


def _log_stream(lines: list[str]) -> tuple[str, str]:
    logs = boto3.client("logs")
    group, stream = f"/aws/codebuild/model-copy-{uuid.uuid4().hex[:6]}", "build-1"
    logs.create_log_group(logGroupName=group)
    logs.create_log_stream(logGroupName=group, logStreamName=stream)
    now = int(time.time() * 1000)
    logs.put_log_events(
        logGroupName=group,
        logStreamName=stream,
        logEvents=[{"timestamp": now + i, "message": m} for i, m in enumerate(lines)],
    )
    return group, stream


# A BatchGetBuilds record of a failed copy, in CodeBuild's documented shape (moto's builds always succeed).
def _failed_build(status: str, group: str | None, stream: str | None) -> dict:
    return {
        "id": "model-copy:1f2e",
        "buildStatus": status,
        "currentPhase": "COMPLETED",
        "phases": [
            {"phaseType": "INSTALL", "phaseStatus": "SUCCEEDED"},
            {
                "phaseType": "BUILD",
                "phaseStatus": "FAILED",
                "contexts": [
                    {
                        "statusCode": "COMMAND_EXECUTION_ERROR",
                        "message": "Error while executing command: python3 -m model_download. Reason: exit status 2",
                    }
                ],
            },
        ],
        "logs": {"groupName": group, "streamName": stream} if group else {},
    }


def test_a_failed_build_fails_the_deployment_quoting_the_jobs_error(aws_env) -> None:  # noqa: ANN001
    group, stream = _log_stream(
        [
            "copying 42.52 GB, expected sha256 ab…",
            "progress: 10% (4.25 of 42.52 GB, 310 MB/s)",
            "model_download: error: sha256 mismatch for r/f@main: expected aa, the downloaded bytes hash to bb; nothing was written",
            "[Container] Phase complete: BUILD State: FAILED",
        ]
    )
    with pytest.raises(RuntimeError) as err:
        completion(_failed_build("FAILED", group, stream), PROPS, boto3.client("logs"))
    assert str(err.value) == (
        "model copy of bartowski/Llama-3.3-70B-Instruct-GGUF/Llama-3.3-70B-Instruct-Q4_K_M.gguf@0123abc FAILED: "
        "sha256 mismatch for r/f@main: expected aa, the downloaded bytes hash to bb; nothing was written (build model-copy:1f2e)"
    )


def test_without_a_readable_log_the_phase_context_is_quoted(aws_env) -> None:  # noqa: ANN001
    with pytest.raises(
        RuntimeError, match=r"@0123abc TIMED_OUT: Error while executing command: python3 -m model_download"
    ):
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
