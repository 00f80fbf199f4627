"""The snapshot's selection against the real consumer: the BF16 SmolLM2 checkpoint (scripts/build_vllm_env.sh) is
served by the fake Hub as a repo — beside files a snapshot must skip — copied to moto's S3, fetched back through its
manifest (every file's sha256 checked), and loaded by vLLM's own code in the vLLM environment: its config and
tokenizer loaders and its safetensors weight iterator over exactly the files its default loader would pick."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess

import pytest

from model_download import Hub, SnapshotRequest, copy_snapshot
from model_download.snapshot import MANIFEST_NAME
from tests.runtime.model_download.fake_hub import FakeHub
from tests.support.vllm import entrypoint_env, vllm_model_dir, vllm_python

pytestmark = pytest.mark.vllm
REPO = "HuggingFaceTB/SmolLM2-135M-Instruct"
LFS = {"model.safetensors", "tokenizer.json"}  # as the real repo stores them

LOAD = r"""
import glob, json, os, sys
d = sys.argv[1]
from vllm.transformers_utils.config import get_config
from vllm.tokenizers.registry import get_tokenizer
from vllm.model_executor.model_loader.weight_utils import filter_duplicate_safetensors_files, safetensors_weights_iterator
config = get_config(d, trust_remote_code=False)
tokenizer = get_tokenizer(d)
prompt = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
files = filter_duplicate_safetensors_files(glob.glob(os.path.join(d, "*.safetensors")), d, "model.safetensors.index.json")
tensors = sum(1 for _ in safetensors_weights_iterator(sorted(files), use_tqdm_on_load=False))
print(json.dumps({"arch": config.architectures, "layers": config.num_hidden_layers, "prompt": prompt, "tensors": tensors}))
"""


def test_vllm_loads_the_snapshot_as_copied(aws_env, s3, bucket, tmp_path) -> None:  # noqa: ANN001
    python = vllm_python()  # builds the environment and the checkpoint once (idempotent)
    model = vllm_model_dir()
    shipped = sorted(p.name for p in model.iterdir())
    (tmp_path / "pytorch_model.bin").write_bytes(os.urandom(4096))
    (tmp_path / "README.md").write_text("# SmolLM2\n")
    hub = FakeHub(commit="5" * 40)
    for name in shipped:
        hub.add_file(REPO, name, model / name, lfs=name in LFS)
    hub.add_file(REPO, "pytorch_model.bin", tmp_path / "pytorch_model.bin")
    hub.add_file(REPO, "README.md", tmp_path / "README.md", lfs=False)
    with hub:
        result = copy_snapshot(
            SnapshotRequest(repo=REPO, bucket=bucket, key_prefix="models/smollm2", concurrency=4),
            hub=Hub(hub.url),
            s3=s3,
        )

    # What a pod's fetch does: the manifest (checked against the receipt's digest), then exactly its files.
    manifest = s3.get_object(Bucket=bucket, Key=result.prefix + MANIFEST_NAME)["Body"].read()
    assert hashlib.sha256(manifest).hexdigest() == result.sha256
    local = tmp_path / "model"
    local.mkdir()
    for line in manifest.decode().splitlines():
        path, sha256, size = line.split(" ")
        s3.download_file(bucket, result.prefix + path, str(local / path))
        assert hashlib.sha256((local / path).read_bytes()).hexdigest() == sha256 and (
            local / path
        ).stat().st_size == int(size)
    assert sorted(p.name for p in local.iterdir()) == shipped  # everything vLLM reads, nothing it does not

    done = subprocess.run(
        [str(python), "-c", LOAD, str(local)], env=entrypoint_env({}), capture_output=True, text=True, timeout=600
    )

    assert done.returncode == 0, done.stderr[-3000:]
    loaded = json.loads(done.stdout.strip().splitlines()[-1])
    config = json.loads((model / "config.json").read_text())
    assert loaded["arch"] == config["architectures"] and loaded["layers"] == config["num_hidden_layers"]
    with open(model / "model.safetensors", "rb") as f:
        header = json.loads(f.read(int.from_bytes(f.read(8), "little")))
    assert "hi" in loaded["prompt"] and loaded["tensors"] == len(header) - ("__metadata__" in header)
