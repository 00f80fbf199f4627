"""Real servers on loopback for the model-download job: moto's S3 (+ Secrets Manager, CodeBuild, Logs) and a fake
Hub serving the real SmolLM2 GGUF. One of each per test module; every test uses its own bucket."""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.runtime.model_download.constants import FILE, GATED_REPO, GOOD_TOKEN, PLAIN_REPO, PUBLIC_REPO
from tests.runtime.model_download.fake_hub import FakeHub, ServedFile
from tests.runtime.model_download.snapshot_repo import (
    BIN_ONLY,
    CORRUPT,
    GATED,
    MOVING,
    REPO,
    SHARD_2,
    SnapshotRepo,
    make_repo,
    serve,
)


@pytest.fixture(scope="module")
def moto_url() -> Iterator[str]:
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto logs every request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture(scope="module")
def aws_env(moto_url: str) -> Iterator[dict[str, str]]:
    """Fake credentials and per-service endpoints (botocore's own settings, as a user would set them)."""
    env = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL_S3": moto_url,
        "AWS_ENDPOINT_URL_SECRETS_MANAGER": moto_url,
        "AWS_ENDPOINT_URL_CODEBUILD": moto_url,
        "AWS_ENDPOINT_URL_CLOUDWATCH_LOGS": moto_url,
    }
    saved = {k: os.environ.get(k) for k in [*env, "AWS_PROFILE", "HF_TOKEN", "HF_ENDPOINT"]}
    for k in ("AWS_PROFILE", "HF_TOKEN", "HF_ENDPOINT"):
        os.environ.pop(k, None)
    os.environ.update(env)
    yield env
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture(scope="module")
def fake_hub(smollm2_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeHub]:
    plain = tmp_path_factory.mktemp("hub") / "tiny.gguf"
    with open(smollm2_gguf, "rb") as src:
        plain.write_bytes(src.read(6 * 1024 * 1024))  # a real GGUF header + tensors, small enough for a git file
    hub = FakeHub(tokens={GOOD_TOKEN})
    hub.add_file(PUBLIC_REPO, FILE, smollm2_gguf)
    hub.add_file(GATED_REPO, FILE, smollm2_gguf, gated=True)
    hub.add_file(PLAIN_REPO, "tiny.gguf", plain, lfs=False)
    with hub:
        yield hub


@pytest.fixture
def hub(fake_hub: FakeHub) -> FakeHub:
    fake_hub.reset()
    return fake_hub


@pytest.fixture(scope="module")
def served(fake_hub: FakeHub) -> ServedFile:
    return fake_hub.files[(PUBLIC_REPO, FILE)]


@pytest.fixture(scope="module")
def s3(aws_env: dict[str, str]):  # noqa: ANN201
    from model_download import s3_client

    return s3_client()


@pytest.fixture
def bucket(s3) -> str:  # noqa: ANN001
    """A fresh versioned bucket (versioning: a failed copy must not leave even a noncurrent version)."""
    name = f"models-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=name)
    s3.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
    return name


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> SnapshotRepo:
    """A small safetensors checkpoint (snapshot_repo) on disk."""
    return make_repo(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture(scope="module")
def snap_hub(checkpoint: SnapshotRepo, tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeHub]:
    """A second fake Hub serving vLLM-style repos: the checkpoint (four times: one stays, one moves, one lies about
    a shard's sha256, one is gated) and a repo with only .bin weights."""
    hub = FakeHub(commit="1111111111111111111111111111111111111111")
    serve(hub, REPO, checkpoint)
    serve(hub, MOVING, checkpoint)
    serve(hub, CORRUPT, checkpoint, wrong_sha256={SHARD_2: "e" * 64})  # the Hub's listing says e…e; the bytes differ
    serve(hub, GATED, checkpoint, gated=True)
    bins = tmp_path_factory.mktemp("bin-only")
    (bins / "pytorch_model.bin").write_bytes(b"\0" * 1024)
    (bins / "config.json").write_text("{}")
    hub.add_file(BIN_ONLY, "pytorch_model.bin", bins / "pytorch_model.bin")
    hub.add_file(BIN_ONLY, "config.json", bins / "config.json", lfs=False)
    with hub:
        yield hub
