"""The flags computed for real instance sizes are accepted by the real llama-server, and EKS mode execs it.

Threads and slots are exactly what sizing computes for 2, 8, 32 and 64 vCPUs; only the context per slot
is scaled down so 16 slots fit this test machine's memory budget.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from cpu_inference.sizing import ModelSpec, instance, size
from entrypoint import eks_command
from tests.runtime.engine.serving import ENGINE_DIR, metric
from tests.support.engine import free_port, wait_healthy

pytestmark = pytest.mark.engine

TEST_CTX_PER_SLOT = 256


def _flag(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize(
    ("instance_type", "vcpus"), [("c7g.large", 2), ("c7g.2xlarge", 8), ("c7g.8xlarge", 32), ("c7g.16xlarge", 64)]
)
def test_sized_flags_start_the_real_engine(
    llama_server_bin: Path, smollm2_gguf: Path, tmp_path: Path, instance_type: str, vcpus: int
) -> None:
    spec = ModelSpec(
        parameters_billions=0.135, quantization="Q4_1", task="chat", file_size_bytes=smollm2_gguf.stat().st_size
    )
    sized = size(spec, instance(instance_type), target="sagemaker")
    port = free_port()
    env = {
        **sized.engine_env(),
        "LLAMA_CTX_PER_SLOT": str(TEST_CTX_PER_SLOT),
        "MODEL_PATH": str(smollm2_gguf),
        "LLAMA_SERVER_BIN": str(llama_server_bin),
        "LLAMA_HOST": "127.0.0.1",
        "LLAMA_PORT": str(port),
    }
    cmd = eks_command(env, memory_limit=1 << 30)
    assert _flag(cmd, "--threads") == _flag(cmd, "--threads-batch") == str(vcpus)
    assert _flag(cmd, "--parallel") == str(sized.slots)
    log = tmp_path / "engine.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        try:
            wait_healthy(base, proc, timeout=120)
        except (RuntimeError, TimeoutError) as e:
            raise AssertionError(
                f"llama-server rejected {cmd}: {e}\n{log.read_text(errors='replace')[-3000:]}"
            ) from None
        props = httpx.get(f"{base}/props", timeout=10).json()
        assert props["total_slots"] == sized.slots
        assert props["default_generation_settings"]["n_ctx"] == TEST_CTX_PER_SLOT  # per slot, as computed
    finally:
        _stop(proc)


def test_eks_mode_execs_llama_server_with_metrics(llama_server_bin: Path, smollm2_gguf: Path, tmp_path: Path) -> None:
    """`entrypoint.py` with no argument replaces itself with llama-server (PID 1 in the pod) on LLAMA_PORT."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LLAMA_", "MODEL_"))}
    env.update(
        MODEL_DIR=str(smollm2_gguf.parent),
        LLAMA_SERVER_BIN=str(llama_server_bin),
        LLAMA_HOST="127.0.0.1",
        LLAMA_PORT=str(port),
        LLAMA_THREADS="1",
        LLAMA_PARALLEL="2",
        LLAMA_CTX_PER_SLOT="512",
    )
    log = tmp_path / "eks.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, str(ENGINE_DIR / "entrypoint.py")], env=env, stdout=out, stderr=subprocess.STDOUT
        )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(base, proc, timeout=120)
        exe = Path(f"/proc/{proc.pid}/exe").resolve()
        assert exe == llama_server_bin.resolve()  # exec'd: no Python left between the kubelet and the engine
        with httpx.Client(base_url=base, timeout=60) as client:
            r = client.post(
                "/v1/chat/completions", json={"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}
            )
            assert r.status_code == 200, r.text
            text = client.get("/metrics").text
            assert metric(text, "llamacpp:requests_processing") >= 0
            assert metric(text, "llamacpp:requests_deferred") >= 0
            assert metric(text, "llamacpp:tokens_predicted_total") >= 1
            assert client.get("/slots").status_code != 200  # --no-slots: other users' prompts stay private
    finally:
        _stop(proc)
    assert "entrypoint: exec" in log.read_text(errors="replace")
