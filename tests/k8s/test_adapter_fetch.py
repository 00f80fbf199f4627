"""The dedicated base's adapter-fetch init container, run for real: its command and environment are taken from the
rendered Deployment (LlamaServerChart with adapters) and executed with the AWS CLI against moto's S3 on loopback (only
the writable paths move into a temp dir and the S3 endpoint/credentials are added), as
tests/k8s/test_model_fetch_chart.py runs model-fetch.

It must place exactly each adapter object's bytes at /models/lora/<name>.gguf after verifying size and sha256 (the
object's `sha256` metadata or the pinned digest), never leave a partial or unverified file where the engine reads,
wait (bounded, across restarts) for an adapter whose catalog copy has not landed, not wait for one whose copy failed,
start without the ones that do not verify — and fail only when it cannot read at all."""

from __future__ import annotations

import hashlib
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import cdk8s
import pytest

from cpu_inference import sizing
from cpu_inference.k8s.charts.llama_server_chart import (
    ADAPTER_FETCH_CONTAINER,
    LlamaServerChart,
    LlamaServerChartProps,
    rendered_engine_env,
)
from cpu_inference.k8s.workloads.model_workload import ModelWorkload, WorkloadAdapter
from cpu_inference.k8s.workloads.serving_policy import ServingPolicy
from inference_runtime.lora import split_paths
from model_download.catalog import COPY_FAILED_NAME

BUCKET = "adapter-fetch-test"
MODEL_KEY = "farm/base/h0/base.gguf"


def _key(name: str) -> str:
    return f"farm/{name}/h{len(name)}/{name}-lora-f16.gguf"


@pytest.fixture(scope="module")
def s3() -> Iterator[dict[str, Any]]:
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    url = f"http://{host}:{port}"
    client = boto3.client(
        "s3",
        region_name="us-east-1",
        endpoint_url=url,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        aws_session_token="testing",
    )
    client.create_bucket(Bucket=BUCKET)
    creds = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_SESSION_TOKEN": "testing"}
    yield {"url": url, "creds": creds, "client": client}
    server.stop()


def put(s3: dict[str, Any], name: str, body: bytes, *, sha256: str | None = None) -> str:
    """The catalog's landing: the object with its `sha256` metadata (the digest it verified)."""
    digest = hashlib.sha256(body).hexdigest()
    s3["client"].put_object(Bucket=BUCKET, Key=_key(name), Body=body, Metadata={"sha256": sha256 or digest})
    return digest


def rendered(adapters: list[WorkloadAdapter]) -> tuple[dict[str, Any], dict[str, str]]:
    """The adapter-fetch init container and the engine's env, as the chart renders them."""
    w = ModelWorkload(
        name="base",
        image="llama@sha256:" + "d" * 64,
        model_uri=f"s3://{BUCKET}/{MODEL_KEY}",
        spec=sizing.ModelSpec(0.135, quantization="Q4_1", task="chat"),
        node_type="m7g.large",
        cpu=1,
        adapters=tuple(adapters),
    )
    chart = LlamaServerChart(
        cdk8s.App(), "base", props=LlamaServerChartProps(model=w, policy=ServingPolicy(aws_region="us-east-1"))
    )
    dep = next(o for o in chart.to_json() if o["kind"] == "Deployment")
    (fetch,) = [c for c in dep["spec"]["template"]["spec"]["initContainers"] if c["name"] == ADAPTER_FETCH_CONTAINER]
    return fetch, rendered_engine_env(chart)


def adapter(name: str, **kw: Any) -> WorkloadAdapter:
    return WorkloadAdapter(name=name, uri=f"s3://{BUCKET}/{_key(name)}", **kw)


def run(
    fetch: dict[str, Any], s3: dict[str, Any], root: Path, **more: str
) -> tuple[subprocess.CompletedProcess[str], float]:
    """Run the container's command with its env; the pod's writable mounts (/models, /tmp) map into `root`."""
    env = {e["name"]: e["value"] for e in fetch["env"]}
    for key in ("LORA_DIR", "AWS_CONFIG_FILE", "HOME"):
        env[key] = str(root / env[key].lstrip("/"))
    env.update(s3["creds"], AWS_ENDPOINT_URL_S3=s3["url"], PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    env.update(more)
    began = time.monotonic()
    out = subprocess.run(fetch["command"], env=env, capture_output=True, text=True, timeout=300)
    return out, time.monotonic() - began


def landed(root: Path, engine_env: dict[str, str]) -> dict[str, bytes]:
    """The engine's LLAMA_LORA paths that are files in `root` (as the entrypoint sees them), by file name."""
    out = {}
    for path in split_paths(engine_env["LLAMA_LORA"]):
        local = root / path.lstrip("/")
        if local.is_file():
            out[local.name] = local.read_bytes()
    return out


def test_every_adapter_lands_verified_where_llama_lora_points_and_a_restart_does_not_download_again(
    s3, tmp_path: Path
) -> None:
    bodies = {n: os.urandom(70_000 + i) for i, n in enumerate(("ok-a", "ok-b", "ok-c"))}
    digests = {n: put(s3, n, b) for n, b in bodies.items()}
    fetch, engine = rendered([adapter("ok-a"), adapter("ok-b", sha256=digests["ok-b"]), adapter("ok-c", scale=0.5)])
    assert fetch["command"][:2] == ["/bin/sh", "-c"]
    out, _ = run(fetch, s3, tmp_path)
    assert out.returncode == 0, out.stderr
    assert landed(tmp_path, engine) == {f"{n}.gguf": b for n, b in bodies.items()}
    assert "3 of 3 adapter(s)" in out.stdout and f"sha256 {digests['ok-a']}" in out.stdout
    assert not list((tmp_path / "models/lora").glob("*.part"))

    again, _ = run(fetch, s3, tmp_path)  # the emptyDir survives a sandbox restart: verify, do not download again
    assert again.returncode == 0, again.stderr
    assert again.stdout.count("already present and verified") == 3

    (tmp_path / "models/lora/ok-b.gguf").write_bytes(b"tampered")  # a file that fails verification is replaced
    third, _ = run(fetch, s3, tmp_path)
    assert third.returncode == 0 and landed(tmp_path, engine)["ok-b.gguf"] == bodies["ok-b"]


def test_a_sha256_mismatch_is_never_placed_and_the_pod_starts_without_it(s3, tmp_path: Path) -> None:
    good = put(s3, "mm-good", b"good adapter bytes" * 1000)
    put(s3, "mm-bad", b"altered bytes" * 1000, sha256="0" * 64)  # the object's metadata says other bytes
    put(s3, "mm-pinned", b"pinned bytes" * 1000)
    fetch, engine = rendered([adapter("mm-good"), adapter("mm-bad"), adapter("mm-pinned", sha256="1" * 64)])
    out, seconds = run(fetch, s3, tmp_path)
    assert out.returncode == 0, out.stderr  # no crash loop: the base serves
    assert list(landed(tmp_path, engine)) == ["mm-good.gguf"]
    assert hashlib.sha256(landed(tmp_path, engine)["mm-good.gguf"]).hexdigest() == good
    assert "mm-bad is not served: sha256 mismatch" in out.stderr
    assert "mm-pinned is not served: sha256 mismatch" in out.stderr and f"expected {'1' * 64}" in out.stderr
    assert "serves the first 1 adapter(s) of 3, up to mm-bad" in out.stderr
    assert not list((tmp_path / "models/lora").glob("*.part"))
    assert seconds < 60  # a mismatch is not waited for


def test_an_adapter_not_copied_yet_is_waited_for_and_fetched_when_it_lands(s3, tmp_path: Path) -> None:
    put(s3, "late-a", b"first" * 1000)
    fetch, engine = rendered([adapter("late-a"), adapter("late-b")])
    body = b"landed late" * 1000
    timer = threading.Timer(3.0, put, args=(s3, "late-b", body))
    timer.start()
    try:
        out, _ = run(fetch, s3, tmp_path, LORA_WAIT_SECONDS="120", LORA_POLL_SECONDS="1")
    finally:
        timer.cancel()
    assert out.returncode == 0, out.stderr
    assert "waiting for adapters still being copied" in out.stdout and "late-b" in out.stdout
    assert landed(tmp_path, engine) == {"late-a.gguf": b"first" * 1000, "late-b.gguf": body}


def test_the_wait_is_bounded_across_restarts_then_the_pod_starts_without_the_missing_one(s3, tmp_path: Path) -> None:
    put(s3, "gap-a", b"a" * 5000)
    put(s3, "gap-c", b"c" * 5000)
    fetch, engine = rendered([adapter("gap-a"), adapter("gap-b"), adapter("gap-c")])
    out, seconds = run(fetch, s3, tmp_path, LORA_WAIT_SECONDS="4", LORA_POLL_SECONDS="1")
    assert out.returncode == 0, out.stderr
    # The wait is counted in whole seconds from `.since` (`date +%s`, written as the script starts), so it ends
    # between 3 and 4 s of wall time: a cold CI run measured 3.6 s.
    assert 3 <= seconds < 60
    assert "gap-b is not served: not copied yet" in out.stderr
    # gap-c is on disk, but the engine serves the landed front only (ids are positions): the entrypoint's rule.
    assert "serves the first 1 adapter(s) of 3, up to gap-b" in out.stderr
    assert set(landed(tmp_path, engine)) == {"gap-a.gguf", "gap-c.gguf"}
    # A restart of the container (the emptyDir and its clock kept) does not wait again: the pod's wait is spent.
    again, seconds = run(fetch, s3, tmp_path, LORA_WAIT_SECONDS="4", LORA_POLL_SECONDS="1")
    assert again.returncode == 0 and "waiting" not in again.stdout and seconds < 4, again.stdout


def test_an_adapter_whose_copy_failed_is_not_waited_for(s3, tmp_path: Path) -> None:
    put(s3, "fail-a", b"a" * 5000)
    failed = _key("fail-b").rsplit("/", 1)[0] + "/" + COPY_FAILED_NAME
    s3["client"].put_object(Bucket=BUCKET, Key=failed, Body=b'{"reason": "adapter.type is not lora"}')
    fetch, engine = rendered([adapter("fail-a"), adapter("fail-b")])
    out, seconds = run(fetch, s3, tmp_path, LORA_WAIT_SECONDS="300", LORA_POLL_SECONDS="1")
    assert out.returncode == 0, out.stderr
    assert seconds < 60 and "waiting" not in out.stdout
    assert f"fail-b is not served: its catalog copy failed (s3://{BUCKET}/{failed})" in out.stderr
    assert list(landed(tmp_path, engine)) == ["fail-a.gguf"]


def test_an_unreadable_bucket_fails_the_container_naming_the_permission(s3, tmp_path: Path) -> None:
    fetch, _ = rendered([WorkloadAdapter(name="nope", uri="s3://no-such-bucket-here/farm/nope/h/nope.gguf")])
    out, _ = run(fetch, s3, tmp_path, LORA_WAIT_SECONDS="300")
    assert out.returncode == 1
    assert (
        "adapter-fetch: error: adapter nope: cannot read s3://no-such-bucket-here/farm/nope/h/nope.gguf" in out.stderr
    )
    assert "Pod Identity role allow s3:GetObject" in out.stderr
