"""The vLLM chart's init container, run for real: a Hugging Face checkpoint directory is fetched from a snapshot
prefix sealed by the copy job's manifest (model_download/snapshot.py: `cpu-inference.manifest`, sorted
`<path> <sha256> <size>` lines, written last, its digest in the object's `sha256` metadata and in the copy's
receipt). The command and environment are taken from the rendered Deployment and executed with the AWS CLI
against moto's S3 on loopback (only the writable paths are moved into a temp dir and the endpoint/credentials
added). It must place exactly the manifest's files, byte for byte, and refuse anything else without leaving a
directory the engine could load."""

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
from model_download.snapshot import MANIFEST_NAME, manifest_text
from model_download.snapshot_files import Landed

BUCKET = "fetch-prefix-test"
COMMIT = "c" * 40
PREFIX = f"models/smol/{COMMIT}/"


def put_snapshot(
    client: Any, prefix: str, files: dict[str, bytes], *, manifest: bool = True, seal_metadata: bool = True
) -> str:
    """Objects as the snapshot copy writes them (each with its `sha256` metadata), then the manifest; its digest."""
    landed = []
    for path, body in files.items():
        digest = hashlib.sha256(body).hexdigest()
        client.put_object(Bucket=BUCKET, Key=prefix + path, Body=body, Metadata={"sha256": digest})
        landed.append(Landed(path, digest, len(body), True))
    text = manifest_text(landed).encode()
    digest = hashlib.sha256(text).hexdigest()
    if manifest:
        client.put_object(
            Bucket=BUCKET, Key=prefix + MANIFEST_NAME, Body=text, Metadata={"sha256": digest} if seal_metadata else {}
        )
    return digest


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
        shard = f.read(
            20 * 1024 * 1024
        )  # real model bytes, over the CLI's multipart threshold: ranged GETs of 16 MB parts
    files = {
        "config.json": b'{"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 30}\n',
        "tokenizer.json": b'{"version": "1.0"}\n' * 1000,
        "model-00001-of-00002.safetensors": shard,
        "model-00002-of-00002.safetensors": shard[:4096],
        "model.safetensors.index.json": b'{"weight_map": {}}\n',
        "original/params.json": b"{}\n",  # a nested path lands in a subdirectory
    }
    digest = put_snapshot(client, PREFIX, files)
    # Variants: a prefix whose manifest is missing (an interrupted copy), one whose object was altered after sealing,
    # one with a path escaping the directory, one with no digest to check the manifest against.
    put_snapshot(client, "models/smol/unsealed/", files, manifest=False)
    put_snapshot(client, "models/smol/tampered/", files)
    same_size = b'{"architectures": ["EvilForCausalLMx"], "num_hidden_layers": 30}\n'  # only the sha256 tells
    assert len(same_size) == len(files["config.json"])
    client.put_object(Bucket=BUCKET, Key="models/smol/tampered/config.json", Body=same_size)
    client.put_object(
        Bucket=BUCKET,
        Key="models/smol/escape/" + MANIFEST_NAME,
        Body=f"../../etc/x {'0' * 64} 3\n".encode(),
        Metadata={"sha256": hashlib.sha256(f"../../etc/x {'0' * 64} 3\n".encode()).hexdigest()},
    )
    put_snapshot(client, "models/smol/unverified/", files, seal_metadata=False)
    yield {"url": url, "creds": creds, "files": files, "digest": digest, "client": client}
    server.stop()


def rendered_fetch(model_uri: str = f"s3://{BUCKET}/{PREFIX}", **kw: Any) -> dict[str, Any]:
    spec = sizing.ModelSpec(0.135, engine="vllm", task="chat", context_window=2048, layers=30, kv_heads=3, head_dim=64)
    w = ModelWorkload(
        name="smol", image="vllm@sha256:" + "d" * 64, model_uri=model_uri, spec=spec, node_type="m7g.xlarge", **kw
    )
    chart = LlamaServerChart(
        cdk8s.App(), "smol", props=LlamaServerChartProps(model=w, policy=ServingPolicy(aws_region="us-east-1"))
    )
    dep = next(o for o in chart.to_json() if o["kind"] == "Deployment")
    (fetch,) = dep["spec"]["template"]["spec"]["initContainers"]
    engine_env = {e["name"]: e["value"] for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert {e["name"]: e["value"] for e in fetch["env"]}["MODEL_PATH"] == engine_env["MODEL_PATH"], (
        "the engine reads what the fetch wrote"
    )
    return fetch


def run(fetch: dict[str, Any], s3: dict[str, Any], root: Path) -> subprocess.CompletedProcess[str]:
    """Run the container's command with its env; the pod's writable mounts (/models, /tmp) map into `root`."""
    env = {e["name"]: e["value"] for e in fetch["env"]}
    for key in ("MODEL_PATH", "AWS_CONFIG_FILE", "HOME"):
        env[key] = str(root / env[key].lstrip("/"))
    env.update(s3["creds"], AWS_ENDPOINT_URL_S3=s3["url"], PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    return subprocess.run(fetch["command"], env=env, capture_output=True, text=True, timeout=180)


def model_dir(fetch: dict[str, Any], root: Path) -> Path:
    return root / next(e["value"] for e in fetch["env"] if e["name"] == "MODEL_PATH").lstrip("/")


def tree(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def test_fetches_exactly_the_manifests_files_and_verifies_them(s3, tmp_path: Path) -> None:
    fetch = rendered_fetch()
    env = {e["name"]: e["value"] for e in fetch["env"]}
    assert env["MODEL_URI"] == f"s3://{BUCKET}/{PREFIX}" and env["MODEL_PATH"] == "/models/smol"
    out = run(fetch, s3, tmp_path)
    assert out.returncode == 0, out.stderr
    dest = model_dir(fetch, tmp_path)
    assert tree(dest) == s3["files"], "the directory holds the manifest's files byte for byte, nothing else"
    assert f"manifest sha256 {s3['digest']}" in out.stdout and f"{len(s3['files'])} files" in out.stdout
    assert not dest.with_name("smol.part").exists()
    assert dest.with_name("smol.manifest").read_bytes().decode().startswith("config.json ")

    again = run(fetch, s3, tmp_path)  # the emptyDir survives a sandbox restart: verify, do not download again
    assert again.returncode == 0 and "already present and verified" in again.stdout, again.stderr


def test_pinned_manifest_digest_and_total_size_are_enforced(s3, tmp_path: Path) -> None:
    total = sum(len(b) for b in s3["files"].values())
    ok = rendered_fetch(sha256=s3["digest"], size_bytes=total)
    env = {e["name"]: e["value"] for e in ok["env"]}
    assert env["MODEL_SHA256"] == s3["digest"] and env["MODEL_SIZE_BYTES"] == str(total)
    assert run(ok, s3, tmp_path / "ok").returncode == 0

    wrong = rendered_fetch(sha256="0" * 64)
    out = run(wrong, s3, tmp_path / "wrong")
    assert out.returncode == 1 and f"sha256 mismatch for s3://{BUCKET}/{PREFIX}{MANIFEST_NAME}" in out.stderr
    assert not model_dir(wrong, tmp_path / "wrong").exists()

    short = rendered_fetch(size_bytes=total - 1)
    out = run(short, s3, tmp_path / "short")
    assert out.returncode == 1 and "size mismatch" in out.stderr and not model_dir(short, tmp_path / "short").exists()


def test_an_object_altered_after_sealing_is_refused_and_nothing_is_left(s3, tmp_path: Path) -> None:
    fetch = rendered_fetch(f"s3://{BUCKET}/models/smol/tampered/")
    out = run(fetch, s3, tmp_path)
    assert out.returncode == 1
    assert f"sha256 mismatch for s3://{BUCKET}/models/smol/tampered/config.json" in out.stderr, out.stderr
    dest = model_dir(fetch, tmp_path)
    assert not dest.exists() and not dest.with_name("smol.part").exists(), (
        "nothing half-verified is left for the engine"
    )


def test_a_damaged_local_copy_is_replaced(s3, tmp_path: Path) -> None:
    fetch = rendered_fetch()
    assert run(fetch, s3, tmp_path).returncode == 0
    dest = model_dir(fetch, tmp_path)
    (dest / "model-00002-of-00002.safetensors").write_bytes(b"truncated")
    out = run(fetch, s3, tmp_path)
    assert out.returncode == 0 and "already present" not in out.stdout, out.stderr
    assert tree(dest) == s3["files"]


@pytest.mark.parametrize(
    "prefix, message",
    [
        ("models/smol/unsealed/", "the snapshot is not sealed"),
        ("models/smol/escape/", "must be relative without '.' or '..' segments"),
        ("models/smol/unverified/", "no sha256 to verify the manifest against"),
    ],
)
def test_refuses_prefixes_it_cannot_trust(s3, tmp_path: Path, prefix: str, message: str) -> None:
    fetch = rendered_fetch(f"s3://{BUCKET}/{prefix}")
    out = run(fetch, s3, tmp_path)
    assert out.returncode == 1 and message in out.stderr, out.stderr
    assert not model_dir(fetch, tmp_path).exists()
    assert not (tmp_path / "etc").exists()


VLLM_ENTRYPOINT = Path(__file__).resolve().parents[2] / "containers" / "vllm-cpu" / "entrypoint.py"


def test_the_vllm_images_entrypoint_accepts_the_fetched_directory_with_the_rendered_env(s3, tmp_path: Path) -> None:
    """What the init container lays out, with the engine env the chart renders, is what the vLLM image's own
    entrypoint turns into vLLM's command line (its `print-command` mode: stdlib only, no vLLM needed)."""
    import shlex

    from cpu_inference.k8s.charts.llama_server_chart import rendered_engine_env

    fetch = rendered_fetch()
    assert run(fetch, s3, tmp_path).returncode == 0
    spec = sizing.ModelSpec(0.135, engine="vllm", task="chat", context_window=2048, layers=30, kv_heads=3, head_dim=64)
    w = ModelWorkload(
        name="smol",
        image="vllm@sha256:" + "d" * 64,
        model_uri=f"s3://{BUCKET}/{PREFIX}",
        spec=spec,
        node_type="m7g.xlarge",
    )
    chart = LlamaServerChart(
        cdk8s.App(), "smol", props=LlamaServerChartProps(model=w, policy=ServingPolicy(aws_region="us-east-1"))
    )
    env = {
        **rendered_engine_env(chart),
        "MODEL_PATH": str(model_dir(fetch, tmp_path)),
        "SERVE_PYTHON": "python3",
        "PATH": os.environ["PATH"],
    }
    out = subprocess.run(
        [sys.executable, str(VLLM_ENTRYPOINT), "print-command"], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    argv = shlex.split(out.stdout)
    flag = lambda name: argv[argv.index(name) + 1]  # noqa: E731
    s = chart.sizing
    assert flag("--model") == env["MODEL_PATH"] and flag("--served-model-name") == "smol"
    assert (flag("--host"), flag("--port")) == ("0.0.0.0", "8080")
    assert (flag("--max-num-seqs"), flag("--max-model-len"), flag("--dtype")) == (
        str(s.slots),
        str(s.ctx_per_slot),
        "bfloat16",
    )
