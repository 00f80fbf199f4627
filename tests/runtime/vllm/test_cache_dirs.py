"""The vLLM image's `serve` on SageMaker writes its caches where the image points them (HOME, VLLM_CACHE_ROOT,
TORCHINDUCTOR_CACHE_DIR, HF_HOME: all under /tmp, Dockerfile ENV) after dropping root to 65532:65532. On an endpoint
/tmp is SageMaker's ML storage volume ("ML storage volumes are mounted as follows: ... Endpoints - /opt/ml/ and
/tmp/", docs.aws.amazon.com/sagemaker/latest/dg/encryption-at-rest-nbi.html), not the image's 1777 directory, so
the entrypoint must make those directories the serving user's while it is still root (review F3).

Here a root-owned 0755 directory stands for that mount, and an engine stand-in (SERVE_PYTHON) writes into every cache
directory the way vLLM's start does (torch.compile's .cpp/.so, the hub's files), exiting 7 if all writes succeed and
9 otherwise; `serve` exits with the engine's code. Run as root, the way SageMaker starts the container (like
test_entrypoint.py's drop test); no vLLM start is needed."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.engine import free_port
from tests.support.vllm import ENTRYPOINT

pytestmark = pytest.mark.vllm


@pytest.fixture(autouse=True)
def started_as_root() -> None:
    """SageMaker starts the container as root and `serve` drops to 65532 itself: this check needs that start, so it
    runs as root (CI and `make test` here do) and fails, rather than passing unseen, anywhere else."""
    assert os.geteuid() == 0, "run as root: serve's privilege drop is what this test checks (SageMaker starts as root)"


NONROOT = 65532
CACHE_VARS = ("HOME", "VLLM_CACHE_ROOT", "TORCHINDUCTOR_CACHE_DIR", "HF_HOME")
WROTE_ALL, WRITE_FAILED = 7, 9
ENGINE = f"""#!/bin/sh
for d in "$HOME" "$VLLM_CACHE_ROOT" "$TORCHINDUCTOR_CACHE_DIR" "$HF_HOME"; do
  mkdir -p "$d/probe" && echo compiled > "$d/probe/kernel.so" || exit {WRITE_FAILED}
done
exit {WROTE_ALL}
"""


@pytest.fixture
def image(tmp_path: Path) -> Iterator[Path]:
    """A 0755 tree outside root's 0700 tmp dirs: the checkpoint (0644 files), the engine stand-in (0755), and `tmp`,
    root:root 0755, standing for SageMaker's /tmp mount."""
    base = Path(tempfile.mkdtemp(prefix="vllm-cache-dirs-", dir="/tmp"))
    base.chmod(0o755)
    ckpt = base / "ckpt"
    ckpt.mkdir(mode=0o755)
    for name, data in (("config.json", b"{}"), ("model.safetensors", b"\0" * 8)):
        (ckpt / name).write_bytes(data)
        (ckpt / name).chmod(0o644)
    (base / "engine").write_text(ENGINE)
    (base / "engine").chmod(0o755)
    (base / "tmp").mkdir(mode=0o755)
    yield base
    shutil.rmtree(base, ignore_errors=True)


def image_env(base: Path, **change: str) -> dict[str, str]:
    """The image's cache variables (Dockerfile ENV, with /tmp moved to the stand-in mount) and serve's settings."""
    tmp = base / "tmp"
    return {
        "PATH": "/usr/bin:/bin",
        "MODEL_PATH": str(base / "ckpt"),
        "SERVE_MAX_NUM_SEQS": "1",
        "SERVE_PYTHON": str(base / "engine"),
        "ADAPTER_HOST": "127.0.0.1",
        "SAGEMAKER_BIND_TO_PORT": str(free_port()),
        "SERVE_ENGINE_PORT": str(free_port()),
        "HOME": str(tmp),
        "VLLM_CACHE_ROOT": str(tmp / "vllm-cache"),
        "TORCHINDUCTOR_CACHE_DIR": str(tmp / "torchinductor"),
        "HF_HOME": str(tmp / "huggingface"),
        **change,
    }


def serve(env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ENTRYPOINT), "serve"], env=env, capture_output=True, text=True, timeout=60
    )


def test_serve_gives_the_cache_directories_under_a_root_only_mount_to_the_serving_user(image: Path) -> None:
    env = image_env(image)
    out = serve(env)
    assert "dropped root: serving as uid 65532 gid 65532" in out.stderr
    assert out.returncode == WROTE_ALL, out.stderr  # the engine wrote into every cache directory as 65532
    for var in CACHE_VARS:
        st = Path(env[var]).stat()
        assert (st.st_uid, st.st_gid) == (NONROOT, NONROOT), (var, st.st_uid, st.st_gid)
        assert (Path(env[var]) / "probe" / "kernel.so").stat().st_uid == NONROOT


def test_an_already_writable_directory_is_left_as_it_is(image: Path) -> None:
    """A 1777 /tmp (the image's own, or an EKS emptyDir) is not taken over: only what 65532 cannot write is given."""
    tmp = image / "tmp"
    tmp.chmod(0o1777)
    out = serve(image_env(image))
    assert out.returncode == WROTE_ALL, out.stderr
    st = tmp.stat()
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (0, 0o1777)
    assert (tmp / "vllm-cache").stat().st_uid == NONROOT  # created for the serving user


def test_a_cache_directory_that_cannot_be_made_is_one_line_naming_the_variable(image: Path) -> None:
    (image / "tmp" / "a-file").write_text("")
    out = serve(image_env(image, VLLM_CACHE_ROOT=str(image / "tmp" / "a-file" / "vllm-cache")))
    assert out.returncode == 2, out.stderr
    line = out.stderr.strip().splitlines()[-1]
    assert (
        line.startswith(f"entrypoint: error: VLLM_CACHE_ROOT={image}/tmp/a-file/vllm-cache")
        and out.stderr.count("\n") == 1
    ), out.stderr
    assert "LLAMA_RUN_AS=0:0" in line


def test_a_cache_directory_the_serving_user_cannot_reach_is_found_by_a_write_as_that_user(image: Path) -> None:
    """The directory itself can be given to 65532, but a parent it cannot enter (root 0700) is not the entrypoint's to
    change: the write as 65532 after the drop fails, with one line naming the variable."""
    private = image / "tmp" / "private"
    private.mkdir(mode=0o700)
    out = serve(image_env(image, HF_HOME=str(private / "huggingface")))
    assert out.returncode == 2, out.stderr
    line = out.stderr.strip().splitlines()[-1]
    assert (
        f"HF_HOME={private}/huggingface is not writable by uid 65532 gid 65532" in line and out.stderr.count("\n") == 1
    ), out.stderr
