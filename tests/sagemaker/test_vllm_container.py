"""What deploys is what runs: the vLLM image's entrypoint in SageMaker `serve` mode, started with exactly the
environment a synthesized vLLM GravitonEndpoint gives its container (SmolLM2-135M on ml.c7i.xlarge), answers /ping
within the endpoint's ContainerStartupHealthCheckTimeoutInSeconds and /invocations through the adapter, with vLLM
binding its OpenMP threads itself ("auto", one CPU reserved) as the env asks.

Only what the machine decides differs from the template: MODEL_PATH (the local BF16 checkpoint instead of
/opt/ml/model), the two loopback ports, serving as root (the checkpoint sits in root's cache) and the image's
LD_PRELOAD directory. vLLM's "auto" binding sizes the threads from the CPUs it is allowed (vllm/utils/
ompmultiprocessing.py: it overrides OMP_NUM_THREADS with the bound CPU count), so on this 2-CPU machine it binds 1."""

from __future__ import annotations

import ctypes.util
import json
import os
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.sagemaker.vllm_stack import small_vllm_endpoint
from tests.support.engine import free_port
from tests.support.vllm import entrypoint_env, start_entrypoint, stop_group, vllm_model_dir, vllm_python, wait_ready

pytestmark = pytest.mark.vllm


def rendered(template: dict[str, Any], kind: str) -> dict[str, Any]:
    (resource,) = [r for r in template["Resources"].values() if r["Type"] == kind]
    return resource["Properties"]


def preload_dir(tmp: Path, python: Path) -> Path:
    """The image's SERVE_PRELOAD_DIR: tcmalloc, then on x86 Intel OpenMP from the vLLM environment."""
    d = tmp / "preload"
    d.mkdir()
    name = ctypes.util.find_library("tcmalloc_minimal")
    found = sorted(Path("/usr/lib").rglob(name)) if name else []
    if found:
        (d / "1-libtcmalloc_minimal.so.4").symlink_to(found[0])
    iomp = python.parent.parent / "lib" / "libiomp5.so"
    if iomp.is_file():
        (d / "2-libiomp5.so").symlink_to(iomp)
    return d


def post(url: str, body: dict[str, Any], timeout: float = 120) -> tuple[int, dict[str, Any]]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return r.status, json.loads(r.read())


@dataclass
class Served:
    url: str
    env: dict[str, str]  # what the template gives the container
    budget: int  # ContainerStartupHealthCheckTimeoutInSeconds
    seconds: float  # measured: start to /ping 200
    log: Path


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """One start of the entrypoint in serve mode from the synthesized endpoint's container env."""
    _, template = small_vllm_endpoint("ml.c7i.xlarge")
    container = rendered(template, "AWS::SageMaker::Model")["PrimaryContainer"]
    (variant,) = rendered(template, "AWS::SageMaker::EndpointConfig")["ProductionVariants"]
    env_rendered: dict[str, str] = container["Environment"]
    budget = variant["ContainerStartupHealthCheckTimeoutInSeconds"]

    tmp = tmp_path_factory.mktemp("vllm-serve")
    python = vllm_python()
    adapter, engine = free_port(), free_port()
    env = entrypoint_env(
        {
            **env_rendered,
            "MODEL_PATH": str(vllm_model_dir()),
            "SAGEMAKER_BIND_TO_PORT": str(adapter),
            "SERVE_ENGINE_PORT": str(engine),
            **({"LLAMA_RUN_AS": "0:0"} if os.geteuid() == 0 else {}),
            "SERVE_PRELOAD_DIR": str(preload_dir(tmp, python)),
        }
    )
    log = tmp / "serve.log"
    proc = start_entrypoint(python, env, "serve", log=log)
    try:
        seconds = wait_ready(f"http://127.0.0.1:{adapter}/ping", proc, log, timeout=max(budget, 600))
        # Measured here (2 shared vCPUs): compare with the budget SageMaker will hold the container to.
        print(
            f"vLLM serve mode: /ping 200 after {seconds:.0f} s (ContainerStartupHealthCheckTimeoutInSeconds {budget})"
        )
        yield Served(f"http://127.0.0.1:{adapter}", env_rendered, budget, seconds, log)
    finally:
        stop_group(proc)
    assert proc.returncode == 0, log.read_text(errors="replace")[-3000:]  # SIGTERM: drained and stopped cleanly


def test_serve_mode_from_the_synthesized_environment(served: Served) -> None:
    env = served.env
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == "auto" and env["MODEL_PATH"] == "/opt/ml/model"
    assert served.seconds < served.budget, f"/ping took {served.seconds:.0f} s, over the synthesized {served.budget} s"
    text = served.log.read_text(errors="replace")
    assert "VLLM_CPU_OMP_THREADS_BIND='auto', auto_setup=True" in text and "reserve_cpu_num=1" in text, text[-3000:]
    status, answer = post(
        f"{served.url}/invocations",
        {
            "messages": [{"role": "user", "content": "Say hello."}],
            "max_tokens": 8,
            "temperature": 0,
        },
    )
    assert status == 200 and answer["model"] == env["SERVE_MODEL_NAME"] == "smollm2-vllm"
    assert answer["choices"][0]["message"]["content"].strip()
    assert answer["usage"]["completion_tokens"] <= 8


def test_engine_core_runs_torch_single_threaded_between_steps(served: Served) -> None:
    """Under VLLM_CPU_OMP_THREADS_BIND=auto vLLM sets each worker's OMP threads itself (ompmultiprocessing.py
    configure_omp_envs); an OMP_NUM_THREADS from outside > 1 would keep the EngineCore's torch threads up between
    steps (torch_utils.py set_torch_threads_for_runtime logs "is set; leaving Torch threads at"), so the SageMaker
    env renders none (failed while Sizing.engine_env still set it)."""
    text = served.log.read_text(errors="replace")
    assert "is set; leaving Torch threads at" not in text
