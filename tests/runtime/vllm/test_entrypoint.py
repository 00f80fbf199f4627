"""containers/vllm-cpu/entrypoint.py without a vLLM start: the command line it builds from the env contract, its
one-line errors, and the SageMaker side's privilege drop. Run with this test environment's python, which has no
vLLM at all: the entrypoint is stdlib-only and never imports vLLM or the library."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.runtime.vllm.conftest import load_entrypoint, rendered_engine_env
from tests.support.vllm import ENTRYPOINT, entrypoint_env

pytestmark = pytest.mark.vllm


def run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ENTRYPOINT), *args], env=entrypoint_env(env), capture_output=True, text=True, timeout=30
    )


@pytest.fixture
def checkpoint(tmp_path: Path) -> Path:
    d = tmp_path / "ckpt"
    d.mkdir()
    (d / "config.json").write_text("{}")
    (d / "model.safetensors").write_bytes(b"\0" * 8)
    return d


def test_this_python_has_no_vllm():
    """The premise of the tests below: what they show runs without vLLM installed."""
    assert subprocess.run([sys.executable, "-c", "import vllm"], capture_output=True).returncode != 0


def test_eks_command_is_the_rendered_env(checkpoint: Path):
    env = {
        **rendered_engine_env(),
        "MODEL_PATH": str(checkpoint),
        "SERVE_MODEL_NAME": "m",
        "SERVE_EXTRA_ARGS": "--seed 7 --enforce-eager",
    }
    out = run(env, "print-command")
    assert out.returncode == 0, out.stderr
    argv = shlex.split(out.stdout)
    assert argv[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    flags = dict(zip(argv[3::2], argv[4::2], strict=False))
    assert flags["--model"] == str(checkpoint) and flags["--served-model-name"] == "m"
    assert (flags["--host"], flags["--port"]) == ("0.0.0.0", "8080")
    rendered = rendered_engine_env()
    assert flags["--max-num-seqs"] == rendered["SERVE_MAX_NUM_SEQS"] == "4"
    assert flags["--max-model-len"] == rendered["SERVE_MAX_MODEL_LEN"] == "2048"
    assert flags["--dtype"] == rendered["SERVE_DTYPE"] == "bfloat16"
    assert argv[-3:] == ["--seed", "7", "--enforce-eager"]  # SERVE_EXTRA_ARGS last, shlex-split


def test_serve_command_binds_vllm_to_loopback(checkpoint: Path):
    env = {**rendered_engine_env(), "MODEL_PATH": str(checkpoint), "SERVE_PORT": "9999"}
    argv = shlex.split(run(env, "print-command", "serve").stdout)
    flags = dict(zip(argv[3::2], argv[4::2], strict=False))
    assert (flags["--host"], flags["--port"]) == ("127.0.0.1", "8081")  # SageMaker's 8080 is the adapter's
    assert flags["--served-model-name"] == checkpoint.name  # SERVE_MODEL_NAME unset: the directory's name


def test_serve_adapter_takes_every_adapter_setting_as_llama_servers_does(checkpoint: Path, entrypoint_module):
    """One adapter_settings for both images: ADAPTER_POOL_IDLE_SECONDS was dropped here (the adapter kept 3 s whatever
    was set) although vLLM's server, like llama-server, closes an idle keep-alive connection after 5 s
    (vllm/envs.py VLLM_HTTP_TIMEOUT_KEEP_ALIVE)."""
    env = {
        **rendered_engine_env(),
        "MODEL_PATH": str(checkpoint),
        "ADAPTER_POOL_IDLE_SECONDS": "1.5",
        "ADAPTER_RETRY_AFTER_SECONDS": "4",
        "ADAPTER_GENERATION_BUDGET_SECONDS": "30",
    }
    plan = entrypoint_module.sagemaker_plan(env)
    adapter = entrypoint_module.make_adapter(plan)
    try:
        assert isinstance(adapter, entrypoint_module.VllmSageMakerAdapter)
        assert (adapter.pool.idle_seconds, adapter.retry_after, adapter.generation_budget) == (1.5, 4, 30.0)
        assert adapter.engine == ("127.0.0.1", plan.engine_port) and plan.engine.port == plan.engine_port == 8081
    finally:
        adapter.release()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"MODEL_PATH": "/nonexistent/model"}, "MODEL_PATH=/nonexistent/model is missing"),
        ({"SERVE_DTYPE": "int8"}, "SERVE_DTYPE must be one of bfloat16, float16, float32, auto"),
        ({"SERVE_MAX_NUM_SEQS": "four"}, "SERVE_MAX_NUM_SEQS must be an integer >= 1, got 'four'"),
        ({"SERVE_MAX_MODEL_LEN": "0"}, "SERVE_MAX_MODEL_LEN must be an integer >= 1, got 0"),
        ({"SERVE_PORT": "http"}, "SERVE_PORT must be an integer"),
        ({"SERVE_EXTRA_ARGS": "--chat-template 'x"}, "SERVE_EXTRA_ARGS is not valid shell words"),
        ({"SERVE_PRELOAD_DIR": "/nonexistent"}, "SERVE_PRELOAD_DIR=/nonexistent is not a directory"),
    ],
)
def test_bad_variable_is_one_line_naming_it(checkpoint: Path, change: dict[str, str], message: str):
    out = run({**rendered_engine_env(), "MODEL_PATH": str(checkpoint), **change})
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and message in out.stderr, out.stderr


def test_model_path_must_be_a_checkpoint_directory(tmp_path: Path, checkpoint: Path):
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF")
    out = run({"MODEL_PATH": str(gguf)})
    assert (
        out.returncode == 2
        and "is a file: vLLM needs the model's directory" in out.stderr
        and "not a GGUF file" in out.stderr
    )
    (checkpoint / "config.json").unlink()
    out = run({"MODEL_PATH": str(checkpoint)})
    assert out.returncode == 2 and "has no config.json" in out.stderr
    (checkpoint / "config.json").write_text("{}")
    (checkpoint / "model.safetensors").unlink()
    out = run({"MODEL_PATH": str(checkpoint)})
    assert out.returncode == 2 and "has no *.safetensors weights" in out.stderr


def test_serve_needs_max_num_seqs_for_admission(checkpoint: Path):
    out = run({"MODEL_PATH": str(checkpoint)}, "serve")
    assert out.returncode == 2 and "SERVE_MAX_NUM_SEQS is required in serve mode" in out.stderr
    assert "entrypoint: unknown mode 'pool'" in run({"MODEL_PATH": str(checkpoint)}, "pool").stderr


def test_preload_dir_goes_in_front_of_ld_preload(tmp_path: Path, entrypoint_module):
    d = tmp_path / "preload"
    d.mkdir()
    for name in ("2-libiomp5.so", "1-libtcmalloc_minimal.so.4"):
        (d / name).write_bytes(b"")
    env = entrypoint_module.engine_env({"SERVE_PRELOAD_DIR": str(d), "LD_PRELOAD": "/usr/lib/x.so"})
    assert env["LD_PRELOAD"] == f"{d}/1-libtcmalloc_minimal.so.4:{d}/2-libiomp5.so:/usr/lib/x.so"
    (d / "3-dangling.so").symlink_to(tmp_path / "gone.so")
    with pytest.raises(Exception, match="dangling link"):
        entrypoint_module.engine_env({"SERVE_PRELOAD_DIR": str(d)})


def test_dtypes_are_the_librarys():
    """The entrypoint's copy of vLLM's CPU dtypes (it cannot import the library) equals cpu_inference.engines'."""
    from cpu_inference import engines

    assert (*engines.VLLM_DTYPES, "auto") == load_entrypoint().DTYPES


@pytest.mark.skipif(os.geteuid() != 0, reason="the drop happens only when started as root (SageMaker's way)")
def test_serve_as_root_refuses_a_model_the_unprivileged_user_cannot_read(checkpoint: Path):
    """SageMaker starts the container as root; `serve` drops to 65532:65532 first and reads every checkpoint file
    as that user: a weights file only root can read stops the start with one line naming it and the fix."""
    checkpoint.parent.chmod(0o755)
    checkpoint.chmod(0o755)
    (checkpoint / "config.json").chmod(0o644)
    (checkpoint / "model.safetensors").chmod(0o600)
    for parent in checkpoint.parents:  # pytest's tmp dirs are 0700: open the path to the checkpoint
        if parent == Path("/"):
            break
        parent.chmod(parent.stat().st_mode | 0o005)
    out = subprocess.run(
        [sys.executable, str(ENTRYPOINT), "serve"],
        capture_output=True,
        text=True,
        timeout=30,
        env={
            "PATH": "/usr/bin:/bin",
            "MODEL_PATH": str(checkpoint),
            "SERVE_MAX_NUM_SEQS": "2",
            "SERVE_PYTHON": "/bin/true",
        },
    )
    assert out.returncode == 2, out.stderr
    line = out.stderr.strip().splitlines()[-1]
    assert f"model file {checkpoint / 'model.safetensors'} is not readable by uid 65532 gid 65532" in line
    assert "mode 0600" in line and "0644" in line and "LLAMA_RUN_AS=0:0" in line
