"""A snapshot's custom resource: the provider routes it, the SNAPSHOT_BUILD_SPEC's own commands run in bash against
the fake Hub and moto's S3 (as CodeBuild runs them), and the exported receipt becomes the resource's attributes;
a failed job quotes its one error line, which names the file."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import uuid
from pathlib import Path

import boto3
import pytest

from model_download.build_job import deployed
from model_download.buildspec import SNAPSHOT_BUILD_SPEC, SNAPSHOT_RECEIPT
from model_download.custom_resource import is_complete, on_event
from model_download.snapshot import MANIFEST_NAME
from model_download.snapshot_resource import (
    IDENTITY,
    IDENTITY_PROPERTIES,
    build_environment,
    completion,
    identity_environment,
)
from tests.runtime.model_download.snapshot_repo import CORRUPT, REPO, SELECTED, SHARD_2


@pytest.fixture
def project(aws_env) -> str:  # noqa: ANN001
    name = f"model-snapshot-{uuid.uuid4().hex[:8]}"
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


def _props(project: str, bucket: str, hub_url: str, repo: str = REPO) -> dict[str, str]:
    return {
        "ServiceToken": "arn:aws:lambda:us-east-1:123456789012:function:provider",
        "ProjectName": project,
        "Bucket": bucket,
        "KeyPrefix": "models/tiny-llama",
        "HfRepo": repo,
        "Snapshot": "safetensors",
        "Revision": "main",
        "TokenSecretName": "",
        "HfEndpoint": hub_url,
        "Concurrency": "3",
    }


def _run_buildspec(env: dict[str, str], workdir: Path) -> subprocess.CompletedProcess[str]:
    spec = SNAPSHOT_BUILD_SPEC
    commands = [*spec["phases"]["install"]["commands"], *spec["phases"]["build"]["commands"]]
    # CodeBuild fails the phase when a command entry exits non-zero (an `a && b` entry exits with a's status).
    script = (
        "set -e\n"
        + "\n".join(f"{c} || exit $?" for c in commands)
        + "\n"
        + "".join(f'printf "%s=%s\\n" {v} "${{{v}:-}}"\n' for v in spec["env"]["exported-variables"])
    )
    bin_dir = str(Path(sys.executable).parent)
    return subprocess.run(
        ["bash", "-c", script],
        cwd=workdir,
        env={**env, "PATH": f"{bin_dir}:{os.environ['PATH']}"},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_snapshot_jobs_receipt_becomes_the_resources_attributes(
    snap_hub, aws_env, bucket, project, tmp_path
) -> None:  # noqa: ANN001
    snap_hub.reset()
    props = _props(project, bucket, snap_hub.url)
    started = on_event({"RequestType": "Create", "ResourceProperties": props})  # routed by the Snapshot property
    assert started["PhysicalResourceId"] == f"s3://{bucket}/models/tiny-llama/@main/"
    env = {**os.environ, **aws_env, **{e["name"]: e["value"] for e in build_environment(props)}}

    done = _run_buildspec(env, tmp_path)

    assert done.returncode == 0, done.stderr
    exported = dict(
        line.split("=", 1) for line in done.stdout.splitlines() if line.split("=", 1)[0] in SNAPSHOT_RECEIPT
    )
    commit = snap_hub.commit_of(REPO)
    prefix = f"models/tiny-llama/{commit}/"
    manifest = boto3.client("s3").get_object(Bucket=bucket, Key=prefix + MANIFEST_NAME)["Body"].read()
    build = boto3.client("codebuild").batch_get_builds(ids=[started["Data"]["BuildId"]])["builds"][0]
    build["exportedEnvironmentVariables"] = [{"name": k, "value": v} for k, v in exported.items()]

    answer = completion(build, props, None)

    size = sum(int(line.split()[2]) for line in manifest.decode().splitlines())
    assert answer["IsComplete"] and answer["Data"] == {
        "Commit": commit,
        "Sha256": hashlib.sha256(manifest).hexdigest(),
        "Key": prefix,
        "Prefix": prefix,
        "Manifest": prefix + MANIFEST_NAME,
        "Size": str(size),
        "Files": str(len(SELECTED)),
        "BuildId": build["id"],
    }
    # The id: where it landed, then what was deployed (identity digest + receipt) for a later no-op Update.
    assert answer["PhysicalResourceId"].startswith(f"s3://{bucket}/{prefix}#v=1&")
    assert deployed(answer["PhysicalResourceId"])[0].stored["Commit"] == commit
    # The provider's isComplete routes the event the same way: moto never marks its build complete (wait), and
    # complete, that build exported nothing: refused, by name.
    assert is_complete({"RequestType": "Create", "ResourceProperties": props, **started}) == {"IsComplete": False}
    with pytest.raises(RuntimeError, match="must be model_download.buildspec.SNAPSHOT_BUILD_SPEC"):
        completion({**build, "exportedEnvironmentVariables": [], "buildComplete": True}, props, None)
    # Started again by hand (`aws codebuild start-build`): same commit, same receipt, no bytes.
    snap_hub.reset()
    again = _run_buildspec(env, tmp_path)
    assert again.returncode == 0 and snap_hub.stats.bytes_served == 0
    assert [line for line in again.stdout.splitlines() if line.split("=", 1)[0] in SNAPSHOT_RECEIPT] == [
        line for line in done.stdout.splitlines() if line.split("=", 1)[0] in SNAPSHOT_RECEIPT
    ]
    assert "snapshot done" in again.stdout and "0 copied" in again.stdout


def test_a_failed_snapshot_job_prints_one_line_naming_the_file(snap_hub, aws_env, bucket, project, tmp_path) -> None:  # noqa: ANN001
    props = _props(project, bucket, snap_hub.url, CORRUPT)
    env = {**os.environ, **aws_env, **{e["name"]: e["value"] for e in build_environment(props)}}

    done = _run_buildspec(env, tmp_path)

    assert done.returncode != 0
    errors = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and errors[0].startswith("model_download: error: snapshot ")
    assert f"{SHARD_2} failed: sha256 mismatch" in errors[0] and "no manifest was written" in errors[0]


def test_the_resource_overrides_only_the_identity_and_checks_the_receipt() -> None:
    props = _props("p", "b", "https://huggingface.co")
    assert [e["name"] for e in identity_environment(props)] == list(IDENTITY)
    assert set(IDENTITY_PROPERTIES) == {"HfRepo", "Revision", "Snapshot", "Bucket", "KeyPrefix"}
    commit = "ab" * 20
    good = {
        "MODEL_RESOLVED_COMMIT": commit,
        "MODEL_RESOLVED_SHA256": "cd" * 32,
        "MODEL_RESOLVED_KEY": f"models/tiny-llama/{commit}/",
        "MODEL_RESOLVED_SIZE": "42",
        "MODEL_RESOLVED_FILES": "5",
    }
    build = {"id": "snap:1", "buildStatus": "SUCCEEDED"}
    assert completion(
        {**build, "exportedEnvironmentVariables": [{"name": k, "value": v} for k, v in good.items()]}, props, None
    )["IsComplete"]
    for name, wrong in (
        ("MODEL_RESOLVED_KEY", f"models/tiny-llama/{commit}/config.json"),
        ("MODEL_RESOLVED_COMMIT", "main"),
        ("MODEL_RESOLVED_FILES", "x"),
    ):
        bad = {**good, name: wrong}
        with pytest.raises(RuntimeError, match="unexpected receipt"):
            completion(
                {**build, "exportedEnvironmentVariables": [{"name": k, "value": v} for k, v in bad.items()]},
                props,
                None,
            )
