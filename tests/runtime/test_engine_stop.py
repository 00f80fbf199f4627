"""SageMaker mode's kill path, for both engine images (llama-server and vLLM share `sagemaker_adapter.serve_engine`):
an engine that ignores SIGTERM is SIGKILLed with its process group after the image's ENGINE_STOP_SECONDS, reaped,
and the container exits 0 inside SageMaker's 30 s SIGTERM -> SIGKILL window, with no traceback.

Deterministic: the engine is tests/support/stubborn_engine.py behind each image's own engine setting
(LLAMA_SERVER_BIN, SERVE_PYTHON), so the slow stop happens on every run, not only on a busy machine. The old loop
(`asyncio.wait_for` on the engine's wait task, then awaiting that cancelled task) exited 1 with CancelledError here."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import httpx
import pytest

from tests.support.engine import free_port, process_gone

ROOT = Path(__file__).resolve().parents[2]
STUBBORN = ROOT / "tests" / "support" / "stubborn_engine.py"
IMAGES = {"llama-server": ROOT / "containers" / "llama-server", "vllm-cpu": ROOT / "containers" / "vllm-cpu"}


def image_module(image: str, name: str) -> ModuleType:
    """`name`.py of one image's directory, loaded under a name of its own (both images have an entrypoint.py)."""
    directory = IMAGES[image]
    if str(directory) not in sys.path:
        sys.path.append(str(directory))  # its sibling modules (mme_adapter, pool_mode, ...)
    qualified = f"{image.replace('-', '_')}_{name}"
    if qualified in sys.modules:
        return sys.modules[qualified]
    spec = importlib.util.spec_from_file_location(qualified, directory / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[qualified] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


def _stubborn_engine(tmp_path: Path) -> Path:
    """An executable that runs the stand-in, whatever engine command line it is given."""
    engine = tmp_path / "engine"
    engine.write_text(f'#!/bin/sh\nexec {sys.executable} {STUBBORN} "$@"\n')
    engine.chmod(0o755)
    return engine


def _engine_env(image: str, tmp_path: Path, engine: Path) -> dict[str, str]:
    """The image's serve-mode env with the stand-in as its engine and no drain (the stop budget is what is tested)."""
    if image == "llama-server":
        (tmp_path / "model").mkdir()
        (tmp_path / "model" / "m.gguf").write_bytes(b"GGUF")  # never opened: the stand-in ignores its arguments
        return {
            "LLAMA_SERVER_BIN": str(engine),
            "SM_MODEL_DIR": str(tmp_path / "model"),
            "LLAMA_ENGINE_PORT": str(free_port()),
            "LLAMA_THREADS": "1",
            "LLAMA_PARALLEL": "1",
        }
    checkpoint = tmp_path / "checkpoint"
    checkpoint.mkdir()
    (checkpoint / "config.json").write_text("{}")
    (checkpoint / "model.safetensors").write_bytes(b"\0" * 8)
    return {
        "SERVE_PYTHON": str(engine),
        "MODEL_PATH": str(checkpoint),
        "SERVE_MAX_NUM_SEQS": "2",
        "SERVE_ENGINE_PORT": str(free_port()),
    }


@pytest.mark.parametrize("image", sorted(IMAGES))
def test_an_engine_that_ignores_sigterm_is_killed_with_its_children_and_the_container_exits_0_in_time(
    image: str, tmp_path: Path
) -> None:
    stop_seconds = image_module(image, "entrypoint").ENGINE_STOP_SECONDS
    from inference_runtime import sagemaker_adapter as adapter  # both images ship this one package

    engine = _stubborn_engine(tmp_path)
    pids_file, port = tmp_path / "pids", free_port()
    keep = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("LLAMA_", "SERVE_", "SAGEMAKER_", "ADAPTER_", "MODEL_", "SM_"))
    }
    env = {
        **keep,
        **_engine_env(image, tmp_path, engine),
        "STUBBORN_PIDS": str(pids_file),
        "SAGEMAKER_BIND_TO_PORT": str(port),
        "ADAPTER_HOST": "127.0.0.1",
        "ADAPTER_DRAIN_SECONDS": "0",
        "LLAMA_RUN_AS": f"{os.getuid()}:{os.getgid()}",
    }
    log = tmp_path / "serve.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, str(IMAGES[image] / "entrypoint.py"), "serve"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 60
        while not pids_file.exists():
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        leader, child = map(int, pids_file.read_text().split())
        # The adapter is up and says the engine is not ready (the stand-in never listens).
        assert httpx.get(f"http://127.0.0.1:{port}/ping", timeout=10).status_code == 503
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=adapter.SIGKILL_AFTER_SECONDS)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = log.read_text(errors="replace")
    print(f"{image}: SIGTERM -> exit {took:.2f} s (engine stop budget {stop_seconds:g} s)")
    assert code == 0 and "Traceback" not in text, text
    assert "did not exit" in text and "SIGKILL" in text, text
    # Waited the whole stop budget for a clean exit, then killed at once, far inside SageMaker's window.
    assert stop_seconds <= took <= adapter.SIGKILL_AFTER_SECONDS - adapter.SHUTDOWN_MARGIN_SECONDS, took
    assert process_gone(leader) and process_gone(child), "the engine or its child outlived the container"


def test_a_multi_model_child_that_ignores_sigterm_is_killed_and_the_load_answers(
    tmp_path: Path, smollm2_gguf: Path
) -> None:
    """The multi-model adapter's child stop (mme_adapter._stop_child, the same wait-then-kill) on a child that never
    becomes healthy and ignores SIGTERM: the load gives up at MME_LOAD_TIMEOUT_SECONDS with a 500, the child is
    SIGKILLed ENGINE_STOP_SECONDS later and reaped, and the container still stops with exit 0."""
    from tests.runtime.engine.test_mme_contract import mme_container

    stop_seconds = image_module("llama-server", "entrypoint").ENGINE_STOP_SECONDS
    engine = _stubborn_engine(tmp_path)
    pids_file = tmp_path / "pids"
    with mme_container(engine, tmp_path, MME_LOAD_TIMEOUT_SECONDS="1", STUBBORN_PIDS=str(pids_file)) as mme:
        t0 = time.monotonic()
        r = mme.load("m-0001", mme.arrive("m-0001", smollm2_gguf), timeout=60)
        took = time.monotonic() - t0
        assert r.status_code == 500 and "did not load within 1 s" in r.text, r.text
        assert stop_seconds <= took <= 1 + stop_seconds + 5, (
            took
        )  # the load timeout, then the stop budget, then SIGKILL
        leader, child = map(int, pids_file.read_text().split())
        assert process_gone(leader)
        assert mme.children() == [], "the killed child is reaped"
        log = mme.log_text()
    assert mme.proc.returncode == 0 and "Traceback" not in log, log
    # Not in the engine's group: llama-server starts no children, so the MME stops the process it started.
    with contextlib.suppress(ProcessLookupError):
        os.kill(child, signal.SIGKILL)
