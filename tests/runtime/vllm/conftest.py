"""vLLM CPU container tests (marker `vllm`): containers/vllm-cpu/entrypoint.py run with the cached vLLM environment's
python (scripts/build_vllm_env.sh), starting the real vLLM OpenAI server from the env the library renders.

ONE vLLM start for the whole group (~85-120 s on 2 shared cores): the EKS-mode server below. The SageMaker tests
put the container's own adapter (entrypoint.VllmSageMakerAdapter, built by entrypoint.sagemaker_plan) in front of
it, the router tests put the real router in front of it."""

from __future__ import annotations

import ctypes.util
import importlib.util
import os
import shutil
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.support.engine import free_port
from tests.support.vllm import CONTAINER_DIR, VllmServer, entrypoint_env, vllm_model_dir, vllm_python, vllm_server

SERVED_NAME = "smollm2-vllm"

# The container's modules are plain top-level modules next to entrypoint.py (sagemaker_adapter, http1, privileges
# and engine_flags are symlinks to the llama-server image's files: sharing them with the llama tests is one file).
if str(CONTAINER_DIR) not in sys.path:
    sys.path.append(str(CONTAINER_DIR))


def load_entrypoint() -> ModuleType:
    """containers/vllm-cpu/entrypoint.py under its own module name (the llama-server image has an entrypoint.py too)."""
    name = "vllm_cpu_entrypoint"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, CONTAINER_DIR / "entrypoint.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def rendered_engine_env() -> dict[str, str]:
    """What the library renders for this model as an EKS pod of 2 CPUs on an m7i.large (threads = 2 - 1 reserved)."""
    from cpu_inference import sizing

    spec = sizing.ModelSpec(
        parameters_billions=0.135, engine="vllm", task="chat", context_window=2048, layers=30, kv_heads=3, head_dim=64
    )
    return sizing.size(spec, sizing.instance("m7i.large"), target="eks", cpu=2).engine_env()


def preload_dir(tmp: Path, python: Path) -> Path:
    """The image's /opt/vllm/preload: tcmalloc, then (x86) the intel-openmp wheel's libiomp5 from the vLLM env."""
    d = tmp / "preload"
    d.mkdir()
    tcmalloc = ctypes.util.find_library("tcmalloc_minimal")
    if tcmalloc:
        found = [p for p in Path("/usr/lib").rglob(tcmalloc)]
        if found:
            (d / "1-libtcmalloc_minimal.so.4").symlink_to(found[0])
    iomp = python.parent.parent / "lib" / "libiomp5.so"
    if iomp.is_file():
        (d / "2-libiomp5.so").symlink_to(iomp)
    return d


@pytest.fixture(scope="session")
def vllm_env_python() -> Path:
    return vllm_python()


@pytest.fixture(scope="session")
def vllm_model() -> Path:
    vllm_python()  # builds the model too
    return vllm_model_dir()


@pytest.fixture(scope="session")
def entrypoint_module() -> ModuleType:
    return load_entrypoint()


def chart_engine_env() -> dict[str, str]:
    """The vLLM container's environment exactly as LlamaServerChart renders it for this model (a 2-CPU pod planned on an
    m7i.xlarge): the sizing env plus the chart's own keys (HOME, HF_HUB_OFFLINE, SERVE_*, usage stats off)."""
    import cdk8s

    from cpu_inference import sizing
    from cpu_inference.k8s import LlamaServerChart, LlamaServerChartProps, ModelWorkload, ServingPolicy
    from cpu_inference.k8s.charts.llama_server_chart import rendered_engine_env as chart_env

    spec = sizing.ModelSpec(
        parameters_billions=0.135, engine="vllm", task="chat", context_window=2048, layers=30, kv_heads=3, head_dim=64
    )
    w = ModelWorkload(
        name=SERVED_NAME,
        image="vllm@sha256:" + "d" * 64,
        model_uri="s3://models/smollm2/abc/",
        spec=spec,
        cpu=2,
        node_type="m7i.xlarge",
    )
    chart = LlamaServerChart(
        cdk8s.App(), "Smol", props=LlamaServerChartProps(model=w, policy=ServingPolicy(aws_region="us-east-1"))
    )
    return chart_env(chart)


@pytest.fixture(scope="session")
def vllm_eks(vllm_env_python: Path, vllm_model: Path, tmp_path_factory: pytest.TempPathFactory) -> VllmServer:
    """The entrypoint in EKS mode, from the env the chart renders into the Deployment; only where the pod's paths and
    address point changes (the local checkpoint, loopback and a free port, this user's cache, not the pod's /tmp)."""
    tmp = tmp_path_factory.mktemp("vllm-eks")
    port = free_port()
    rendered = chart_engine_env()
    assert {k: rendered[k] for k in rendered_engine_env()} == rendered_engine_env()  # the chart carries the sizing env
    env = entrypoint_env(
        {
            **rendered,
            "HOME": os.environ.get("HOME", str(tmp)),
            "MODEL_PATH": str(vllm_model),
            "SERVE_MODEL_NAME": SERVED_NAME,
            "SERVE_HOST": "127.0.0.1",
            "SERVE_PORT": str(port),
            "SERVE_PRELOAD_DIR": str(preload_dir(tmp, vllm_env_python)),
        }
    )
    with vllm_server(vllm_env_python, env, port=port, log=tmp / "vllm.log") as server:
        yield server
    # vLLM handles SIGTERM itself (EKS: it is PID 1) and, idle, is gone — EngineCore and worker included — within the
    # time `serve` gives it before SIGKILL (entrypoint.ENGINE_STOP_SECONDS, part of SageMaker's 30 s).
    assert server.stopped is not None
    limit = load_entrypoint().ENGINE_STOP_SECONDS
    print(f"vLLM start {server.start_seconds:.1f}s, stop {server.stopped}")
    assert server.stopped.seconds <= limit, f"vLLM took {server.stopped.seconds:.1f}s to exit on SIGTERM (> {limit}s)"
    assert server.stopped.children_seconds <= limit, (
        f"vLLM's EngineCore/worker ran {server.stopped.children_seconds:.1f}s after SIGTERM"
    )
    shutil.rmtree(tmp, ignore_errors=True)
