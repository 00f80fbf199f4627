"""`cpu-inference download` and `python -m model_download` as users and CodeBuild run them: subprocesses whose
only configuration is HF_ENDPOINT and botocore's per-service endpoint variables."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import uuid
from pathlib import Path

import boto3

from tests.runtime.model_download.constants import FILE, GATED_REPO, PUBLIC_REPO

BIN = Path(sys.executable).parent


def _run(args: list[str], env: dict[str, str], hub_url: str) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, **env, "HF_ENDPOINT": hub_url, "PATH": f"{BIN}:{os.environ.get('PATH', '')}"}
    return subprocess.run(args, env=full_env, capture_output=True, text=True, timeout=300)


def _errors(stderr: str) -> list[str]:
    # A Node end-of-life banner from jsii would not come from this CLI (no aws_cdk import on this path).
    return [line for line in stderr.splitlines() if line.strip()]


def test_cli_copies_end_to_end_then_finds_it_in_place(hub, served, aws_env, bucket) -> None:  # noqa: ANN001
    args = [
        str(BIN / "cpu-inference"),
        "download",
        "--repo",
        PUBLIC_REPO,
        "--file",
        FILE,
        "--revision",
        "main",
        "--bucket",
        bucket,
        "--key-prefix",
        "models/smollm2/main",
        "--concurrency",
        "4",
    ]

    done = _run(args, aws_env, hub.url)
    assert done.returncode == 0, done.stderr
    assert f"copied s3://{bucket}/models/smollm2/main/{FILE}" in done.stdout and served.sha256 in done.stdout
    body = boto3.client("s3").get_object(Bucket=bucket, Key=f"models/smollm2/main/{FILE}")["Body"].read()
    assert hashlib.sha256(body).hexdigest() == served.sha256

    hub.reset()
    # The CodeBuild entry point, same inputs: finds the object and copies nothing.
    again = _run([sys.executable, "-m", "model_download", *args[2:]], aws_env, hub.url)
    assert again.returncode == 0, again.stderr
    assert "already present" in again.stdout and hub.stats.bytes_served == 0


def test_cli_404_is_exit_2_and_one_line(hub, aws_env, bucket) -> None:  # noqa: ANN001
    missing = _run(
        [
            str(BIN / "cpu-inference"),
            "download",
            "--repo",
            PUBLIC_REPO,
            "--file",
            "nope-Q4_K_M.gguf",
            "--bucket",
            bucket,
            "--key-prefix",
            "models/x/main",
        ],
        aws_env,
        hub.url,
    )

    assert missing.returncode == 2
    lines = _errors(missing.stderr)
    assert len(lines) == 1, missing.stderr
    assert lines[0].startswith("cpu-inference download: ")
    assert f"{PUBLIC_REPO}/nope-Q4_K_M.gguf@main not found" in lines[0]


def test_job_with_a_bad_token_secret_fails_with_one_line_naming_it(hub, aws_env, bucket) -> None:  # noqa: ANN001
    name = f"hf/rotated-{uuid.uuid4().hex[:6]}"
    boto3.client("secretsmanager").create_secret(Name=name, SecretString='{"token": "hf_revoked"}')

    job = _run(
        [
            sys.executable,
            "-m",
            "model_download",
            "--repo",
            GATED_REPO,
            "--file",
            FILE,
            "--bucket",
            bucket,
            "--key-prefix",
            "models/gated/main",
            "--token-secret",
            name,
        ],
        aws_env,
        hub.url,
    )

    assert job.returncode == 2
    errors = [line for line in job.stderr.splitlines() if line.strip()]
    assert errors == [
        f"model_download: error: the Hugging Face token from secret '{name}' was rejected for "
        f"{GATED_REPO}/{FILE}@main (HTTP 401): check that secret's value"
    ]
    assert "hf_revoked" not in job.stdout + job.stderr


def test_cli_pre_seeds_the_commit_pinned_key_the_artifact_reads(hub, served, aws_env, bucket) -> None:  # noqa: ANN001
    done = _run(
        [
            str(BIN / "cpu-inference"),
            "download",
            "--repo",
            PUBLIC_REPO,
            "--file",
            FILE,
            "--revision",
            "main",
            "--bucket",
            bucket,
            "--key-prefix",
            "models/smollm2",
            "--pin-commit",
            "--concurrency",
            "4",
        ],
        aws_env,
        hub.url,
    )

    assert done.returncode == 0, done.stderr
    key = f"models/smollm2/{hub.commit_of(PUBLIC_REPO)}/{FILE}"
    assert f"copied s3://{bucket}/{key}" in done.stdout
    assert boto3.client("s3").head_object(Bucket=bucket, Key=key)["Metadata"]["sha256"] == served.sha256
