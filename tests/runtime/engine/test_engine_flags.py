"""The pure flag computation: env contract -> llama-server argv, cgroup probing, model discovery."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from cpu_inference.sizing import ModelSpec, instance, size
from entrypoint import eks_command, sagemaker_plan
from inference_runtime import engine_flags as ef
from tests.runtime.engine.serving import ENGINE_DIR


def _flag(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


@pytest.fixture
def model(tmp_path: Path) -> Path:
    path = tmp_path / "models" / "tiny-Q4_K_M.gguf"
    path.parent.mkdir()
    path.write_bytes(b"GGUF")
    return path


def test_ctx_size_is_slots_times_context_per_slot(model: Path) -> None:
    args = ef.llama_server_args(ef.EngineConfig(model=str(model), threads=8, parallel=6, ctx_per_slot=1024))
    # llama-server gives each of --parallel slots --ctx-size / --parallel tokens (kv_unified off).
    assert _flag(args, "--ctx-size") == "6144"
    assert _flag(args, "--parallel") == "6"
    assert _flag(args, "--threads") == _flag(args, "--threads-batch") == "8"


def test_serving_features_are_on(model: Path) -> None:
    args = ef.llama_server_args(ef.EngineConfig(model=str(model), threads=2))
    for flag in ("--cont-batching", "--metrics", "--jinja", "--no-webui", "--no-slots", "--cache-prompt", "--offline"):
        assert flag in args
    assert _flag(args, "--flash-attn") == "auto"
    assert int(_flag(args, "--cache-reuse")) > 0
    assert "-march=native" not in " ".join(args)


def test_env_contract_from_sizing(model: Path) -> None:
    """What the sizing module emits is what the engine runs with."""
    s = size(
        ModelSpec(parameters_billions=0.135, quantization="Q4_1", task="classification"),
        instance("c7g.2xlarge"),
        target="sagemaker",
    )
    env = {**s.engine_env(), "MODEL_PATH": str(model), "LLAMA_SERVER_BIN": "/bin/true"}
    cmd = eks_command(env, cpus=2, memory_limit=4 << 30)
    assert _flag(cmd, "--threads") == str(s.threads) == "8"
    assert _flag(cmd, "--parallel") == str(s.slots)
    assert _flag(cmd, "--ctx-size") == str(s.slots * s.ctx_per_slot)
    assert _flag(cmd, "--host") == "0.0.0.0" and _flag(cmd, "--port") == "8080"


def test_threads_default_to_the_cpus_given(model: Path) -> None:
    cmd = eks_command({"MODEL_PATH": str(model), "LLAMA_SERVER_BIN": "/bin/true"}, cpus=3, memory_limit=None)
    assert _flag(cmd, "--threads") == "3"
    assert ef.default_cache_ram_mib(None) is None  # no known memory limit: the engine's own default


def test_cache_ram_is_bounded_by_the_memory_limit(model: Path) -> None:
    cmd = eks_command({"MODEL_PATH": str(model), "LLAMA_SERVER_BIN": "/bin/true"}, cpus=2, memory_limit=2 << 30)
    assert _flag(cmd, "--cache-ram") == str(int((2 << 30) * ef.CACHE_RAM_FRACTION) // (1 << 20))
    big = eks_command({"MODEL_PATH": str(model), "LLAMA_SERVER_BIN": "/bin/true"}, cpus=2, memory_limit=1 << 40)
    assert _flag(big, "--cache-ram") == str(ef.ENGINE_DEFAULT_CACHE_RAM_MIB)


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        ({"cpu_quota/cpu.max": "250000 100000\n"}, 2.5),
        ({"cpu_quota/cpu.max": "max 100000\n"}, None),
        ({"cpu_quota/cpu/cpu.cfs_quota_us": "150000\n", "cpu_quota/cpu/cpu.cfs_period_us": "100000\n"}, 1.5),
        ({"cpu_quota/cpu/cpu.cfs_quota_us": "-1\n", "cpu_quota/cpu/cpu.cfs_period_us": "100000\n"}, None),
        ({}, None),
    ],
)
def test_cgroup_cpu_limit(tmp_path: Path, files: dict[str, str], expected: float | None) -> None:
    root = tmp_path / "cpu_quota"
    root.mkdir()
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert ef.cgroup_cpu_limit(root) == expected


@pytest.mark.parametrize(
    ("quota", "affinity", "threads"),
    [("250000 100000", 8, 2), ("50000 100000", 8, 1), ("1600000 100000", 4, 4), ("max 100000", 6, 6)],
)
def test_available_cpus_rounds_the_quota_down(tmp_path: Path, quota: str, affinity: int, threads: int) -> None:
    (tmp_path / "cpu.max").write_text(quota)
    assert ef.available_cpus(tmp_path, affinity=affinity) == threads


def test_memory_limit(tmp_path: Path) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       16384000 kB\nMemFree: 1 kB\n")
    assert ef.memory_limit_bytes(tmp_path, meminfo) == 16384000 * 1024
    (tmp_path / "memory.max").write_text("max\n")
    assert ef.memory_limit_bytes(tmp_path, meminfo) == 16384000 * 1024
    (tmp_path / "memory.max").write_text("1073741824\n")
    assert ef.memory_limit_bytes(tmp_path, meminfo) == 1 << 30


def test_find_model_single_shards_and_projector(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "model.gguf").write_bytes(b"x")
    (tmp_path / "a" / "mmproj-model-f16.gguf").write_bytes(b"x")
    assert ef.find_model(None, str(tmp_path / "a")).name == "model.gguf"
    (tmp_path / "b" / "nested").mkdir(parents=True)
    for i in (1, 2, 3):
        (tmp_path / "b" / "nested" / f"big-0000{i}-of-00003.gguf").write_bytes(b"x")
    assert ef.find_model(None, str(tmp_path / "b")).name == "big-00001-of-00003.gguf"


def test_find_model_errors_name_the_variable(tmp_path: Path) -> None:
    (tmp_path / "one.gguf").write_bytes(b"x")
    (tmp_path / "two.gguf").write_bytes(b"x")
    with pytest.raises(ef.EngineConfigError, match="exactly one .gguf.*one.gguf, two.gguf.*MODEL_PATH"):
        ef.find_model(None, str(tmp_path))
    with pytest.raises(ef.EngineConfigError, match="MODEL_PATH .*missing.gguf is not a file"):
        ef.find_model(str(tmp_path / "missing.gguf"), None)
    with pytest.raises(ef.EngineConfigError, match="MODEL_DIR .* is not a directory"):
        ef.find_model(None, str(tmp_path / "nope"))


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"LLAMA_THREADS": "two"}, "LLAMA_THREADS must be an integer"),
        ({"LLAMA_PARALLEL": "0"}, "LLAMA_PARALLEL must be >= 1"),
        ({"LLAMA_CTX_PER_SLOT": "8"}, "LLAMA_CTX_PER_SLOT must be >= 64"),
        ({"LLAMA_FLASH_ATTN": "maybe"}, "LLAMA_FLASH_ATTN must be one of on, off, auto"),
    ],
)
def test_config_errors_name_the_variable(model: Path, env: dict[str, str], message: str) -> None:
    with pytest.raises(ef.EngineConfigError, match=message):
        ef.config_from_env({"MODEL_PATH": str(model), **env}, cpus=2, memory_limit=None)


def test_extra_args_and_alias(model: Path) -> None:
    cfg = ef.config_from_env(
        {"MODEL_PATH": str(model), "LLAMA_EXTRA_ARGS": "--temp 0.2 --chat-template 'chatml'"}, cpus=1, memory_limit=None
    )
    args = ef.llama_server_args(cfg)
    assert args[-4:] == ["--temp", "0.2", "--chat-template", "chatml"]
    assert _flag(args, "--alias") == "tiny-Q4_K_M"


def test_sagemaker_plan_binds_the_engine_to_loopback(model: Path) -> None:
    env = {
        "SM_MODEL_DIR": str(model.parent),
        "LLAMA_SERVER_BIN": "/bin/true",
        "LLAMA_PARALLEL": "3",
        "LLAMA_QUEUE_DEPTH": "5",
    }
    plan = sagemaker_plan(env, cpus=4, memory_limit=None)
    assert _flag(plan.command, "--host") == "127.0.0.1"
    assert _flag(plan.command, "--port") == "8081"
    assert _flag(plan.command, "--model") == str(model)
    assert plan.adapter.port == 8080 and plan.max_in_flight == 8
    piped = sagemaker_plan({**env, "SAGEMAKER_BIND_TO_PORT": "8081"}, cpus=4, memory_limit=None)
    assert piped.adapter.port == 8081 and _flag(piped.command, "--port") == "8082"


def _run_entrypoint(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    base = {
        k: v for k, v in os.environ.items() if not k.startswith(("LLAMA_", "SAGEMAKER_", "ADAPTER_", "MODEL_", "SM_"))
    }
    return subprocess.run(
        [sys.executable, str(ENGINE_DIR / "entrypoint.py"), *args],
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=30,
    )


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        ([], {"LLAMA_PARALLEL": "0"}, "entrypoint: error: LLAMA_PARALLEL must be >= 1, got 0"),
        (
            ["serve"],
            {"MODEL_PATH": "", "SM_MODEL_DIR": "/nonexistent/model"},
            "entrypoint: error: MODEL_DIR /nonexistent/model is not a directory",
        ),
        (
            [],
            {"LLAMA_SERVER_BIN": "", "PATH": "/nonexistent"},
            "entrypoint: error: llama-server not found: set LLAMA_SERVER_BIN",
        ),
        (["swap-model"], {}, "entrypoint: unknown mode 'swap-model'"),
    ],
)
def test_entrypoint_user_errors_are_one_line_not_a_traceback(
    model: Path, args: list[str], env: dict[str, str], message: str
) -> None:
    env = {"MODEL_PATH": str(model), "LLAMA_SERVER_BIN": "/bin/true", **env}
    result = _run_entrypoint(args, env)
    assert result.returncode == 2
    assert message in result.stderr and "Traceback" not in result.stderr, result.stderr


def test_print_command_shows_what_each_mode_runs(model: Path) -> None:
    env = {
        "MODEL_PATH": str(model),
        "SM_MODEL_DIR": str(model.parent),
        "LLAMA_SERVER_BIN": "/opt/llama/bin/llama-server",
        "LLAMA_THREADS": "4",
        "LLAMA_PARALLEL": "2",
    }
    eks = shlex.split(_run_entrypoint(["print-command"], env).stdout)
    serve = shlex.split(_run_entrypoint(["print-command", "serve"], env).stdout)
    assert eks[0] == serve[0] == "/opt/llama/bin/llama-server"
    assert (_flag(eks, "--host"), _flag(eks, "--port")) == ("0.0.0.0", "8080")
    assert (_flag(serve, "--host"), _flag(serve, "--port")) == (
        "127.0.0.1",
        "8081",
    )  # only the adapter faces the network
    assert _flag(eks, "--threads") == _flag(serve, "--threads") == "4"
