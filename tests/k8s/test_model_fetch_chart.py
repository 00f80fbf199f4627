"""The chart's init container, run for real: its command and environment are taken from the rendered
Deployment and executed with the AWS CLI against moto's S3 on loopback (only the writable paths are
moved into a temp dir and the S3 endpoint/credentials added). It must place exactly the object's bytes,
verify size and sha256 before the engine could see the file, and refuse anything else without leaving a
partial file behind.

The image uses AWS CLI v2 with the CRT client; this machine has the v1 CLI (a dev dependency), which runs
the same commands and ignores the CRT-only `preferred_transfer_client` setting."""

from __future__ import annotations

import hashlib
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import cdk8s
import pytest

from cpu_inference import sizing
from cpu_inference.k8s.charts.llama_server_chart import LlamaServerChart, LlamaServerChartProps
from cpu_inference.k8s.workloads.model_workload import ModelWorkload
from cpu_inference.k8s.workloads.serving_policy import ServingPolicy

BUCKET = "fetch-test"
KEY = "models/tiny/main/tiny-Q4_1.gguf"


@pytest.fixture(scope="module")
def s3(smollm2_gguf: Path) -> Iterator[dict[str, Any]]:
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    url = f"http://{host}:{port}"
    creds = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_SESSION_TOKEN": "testing"}
    client = boto3.client(
        "s3",
        region_name="us-east-1",
        endpoint_url=url,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        aws_session_token="testing",
    )
    client.create_bucket(Bucket=BUCKET)
    with open(smollm2_gguf, "rb") as f:
        body = f.read(
            20 * 1024 * 1024
        )  # a real GGUF head, over the CLI's multipart threshold: ranged GETs of 16 MB parts
    digest = hashlib.sha256(body).hexdigest()
    client.put_object(Bucket=BUCKET, Key=KEY, Body=body, Metadata={"sha256": digest})
    client.put_object(Bucket=BUCKET, Key="models/tiny/main/unverified.gguf", Body=body)
    yield {"url": url, "creds": creds, "body": body, "sha256": digest, "client": client}
    server.stop()


def rendered_fetch(model_uri: str = f"s3://{BUCKET}/{KEY}", **kw: Any) -> dict[str, Any]:
    w = ModelWorkload(
        name="tiny",
        image="llama@sha256:" + "d" * 64,
        model_uri=model_uri,
        spec=sizing.ModelSpec(0.135, quantization="Q4_1", task="classification"),
        node_type="m7g.large",
        cpu=1,
        **kw,
    )
    chart = LlamaServerChart(
        cdk8s.App(), "tiny", props=LlamaServerChartProps(model=w, policy=ServingPolicy(aws_region="us-east-1"))
    )
    dep = next(o for o in chart.to_json() if o["kind"] == "Deployment")
    (fetch,) = dep["spec"]["template"]["spec"]["initContainers"]
    return fetch


def run(fetch: dict[str, Any], s3: dict[str, Any], root: Path) -> subprocess.CompletedProcess[str]:
    """Run the container's command with its env; the pod's writable mounts (/models, /tmp) map into `root`."""
    env = {e["name"]: e["value"] for e in fetch["env"]}
    for key in ("MODEL_PATH", "AWS_CONFIG_FILE", "HOME"):
        env[key] = str(root / env[key].lstrip("/"))
    env.update(s3["creds"], AWS_ENDPOINT_URL_S3=s3["url"], PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    return subprocess.run(fetch["command"], env=env, capture_output=True, text=True, timeout=120)


def model_file(fetch: dict[str, Any], root: Path) -> Path:
    return root / next(e["value"] for e in fetch["env"] if e["name"] == "MODEL_PATH").lstrip("/")


def test_downloads_and_verifies_against_the_objects_sha256_metadata(s3, tmp_path: Path) -> None:
    fetch = rendered_fetch()
    assert fetch["command"][:2] == ["/bin/sh", "-c"]
    out = run(fetch, s3, tmp_path)
    assert out.returncode == 0, out.stderr
    path = model_file(fetch, tmp_path)
    assert path.read_bytes() == s3["body"]
    assert f"sha256 {s3['sha256']}" in out.stdout
    assert not path.with_name(path.name + ".part").exists()
    config = (tmp_path / "tmp/aws/config").read_text()
    assert "preferred_transfer_client = crt" in config and "target_bandwidth = 5Gb/s" in config

    again = run(fetch, s3, tmp_path)  # the emptyDir survives a sandbox restart: verify, do not download again
    assert again.returncode == 0 and "already present and verified" in again.stdout


def test_pinned_sha256_and_size_are_used_and_enforced(s3, tmp_path: Path) -> None:
    ok = rendered_fetch(sha256=s3["sha256"], size_bytes=len(s3["body"]))
    env = {e["name"]: e["value"] for e in ok["env"]}
    assert env["MODEL_SHA256"] == s3["sha256"] and env["MODEL_SIZE_BYTES"] == str(len(s3["body"]))
    assert run(ok, s3, tmp_path / "ok").returncode == 0

    wrong = rendered_fetch(sha256="0" * 64)
    out = run(wrong, s3, tmp_path / "wrong")
    assert out.returncode == 1 and "sha256 mismatch" in out.stderr
    path = model_file(wrong, tmp_path / "wrong")
    assert not path.exists() and not path.with_name(path.name + ".part").exists(), (
        "nothing half-verified is left for the engine"
    )

    short = rendered_fetch(size_bytes=len(s3["body"]) - 1)
    out = run(short, s3, tmp_path / "short")
    assert out.returncode == 1 and "size mismatch" in out.stderr and not model_file(short, tmp_path / "short").exists()


def test_a_file_that_fails_verification_is_replaced(s3, tmp_path: Path) -> None:
    fetch = rendered_fetch()
    path = model_file(fetch, tmp_path)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"GGUF truncated")
    out = run(fetch, s3, tmp_path)
    assert out.returncode == 0, out.stderr
    assert path.read_bytes() == s3["body"]


def test_refuses_an_object_with_nothing_to_verify_against(s3, tmp_path: Path) -> None:
    out = run(rendered_fetch(f"s3://{BUCKET}/models/tiny/main/unverified.gguf"), s3, tmp_path)
    assert out.returncode == 1 and "no sha256 to verify against" in out.stderr


def test_missing_object_names_the_permission_to_check(s3, tmp_path: Path) -> None:
    out = run(rendered_fetch(f"s3://{BUCKET}/models/absent/main/absent.gguf"), s3, tmp_path)
    assert out.returncode == 1 and "cannot read s3://fetch-test/models/absent/main/absent.gguf" in out.stderr


def test_the_crt_buffer_pool_is_capped_inside_the_containers_memory_limit() -> None:
    """AWS CLI v2's CRT client sizes its buffer pool from the throughput target when given no limit: awscrt
    0.36.0 (the version CLI 2.36.x pins) logs memory_limit=2147483648 for the 5 Gb/s configured here, over
    the container's limit. The CLI has no setting for it; aws-c-s3 reads AWS_CRT_S3_MEMORY_LIMIT_IN_GIB
    (minimum 1 GiB, AWS_ERROR_S3_INVALID_MEMORY_LIMIT_CONFIG below). Measured here (awscrt 0.36.0, the CLI's
    S3Client arguments, 3 GiB from a loopback server): peak RSS 532 MiB with the default pool and 644 MiB
    capped at 1 GiB — the source was the bottleneck, so the pool never filled; with a faster network than
    disk it fills to its cap, so the cap plus the process must stay under the limit."""
    from cpu_inference.k8s.workloads.model_fetch import CRT_MEMORY_LIMIT_GIB, FETCH_MEMORY_LIMIT_MIB

    fetch = rendered_fetch()
    env = {e["name"]: e["value"] for e in fetch["env"]}
    pool_mib = int(env["AWS_CRT_S3_MEMORY_LIMIT_IN_GIB"]) * 1024
    assert int(env["AWS_CRT_S3_MEMORY_LIMIT_IN_GIB"]) == CRT_MEMORY_LIMIT_GIB >= 1  # aws-c-s3 refuses less than 1 GiB
    limit_mib = int(fetch["resources"]["limits"]["memory"].removesuffix("Mi"))
    assert limit_mib == FETCH_MEMORY_LIMIT_MIB
    process_overhead_mib = (
        256  # the CLI's Python + CRT outside the pool (the measured 532-644 MiB peaks include in-flight parts)
    )
    assert pool_mib + process_overhead_mib <= limit_mib
    assert (
        "target_bandwidth = %s" in fetch["command"][2]
        and "${MODEL_FETCH_TARGET_BANDWIDTH:-5Gb/s}" in fetch["command"][2]
    )
    assert "MODEL_FETCH_TARGET_BANDWIDTH" not in env  # the 5 Gb/s default, for which the uncapped pool is 2 GiB
