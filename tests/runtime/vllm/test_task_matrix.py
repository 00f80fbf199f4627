"""The task matrix's vLLM cells (tests/support/task_matrix.py; the llama.cpp cells and the table's own checks are in
tests/matrix/test_task_matrix.py): every generation task vLLM serves, sent the way users send it, on every path that
serves vLLM — the EKS gateway in front of the vLLM Deployment's container, a SageMaker endpoint's container
(`entrypoint.py serve`: the adapter and vLLM) behind boto3, and `cpu-inference local` — each started from what the app
synthesized for the generated config (tests/support/matrix_paths.py).

One vLLM start per path (~100 s each on 2 shared cores): the generated config gives every vLLM model the same context
(512), so every task renders the same engine; the test checks the rendered environments are equal but for the
model's name, and sends each task's requests to the one started model under its served name."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

from tests.support.matrix_requests import Reference, via_openai, via_sagemaker
from tests.support.task_matrix import Cell, config_yaml, model_name, served
from tests.support.vllm import ENTRYPOINT, entrypoint_env, start_entrypoint, stop_group, vllm_model_dir, vllm_python

pytestmark = [pytest.mark.vllm, pytest.mark.engine]

ENGINE = "vllm"
PER_MODEL = ("SERVE_MODEL_NAME", "MODEL_PATH")  # what differs between two models' containers by design
NO_REFERENCE = Reference((), ())  # vLLM serves no embedding or rerank model here (refused at validate)


def _cases(path: str) -> list:
    return [pytest.param(c, kind, id=f"{c.task}:{kind}") for c in served(ENGINE, path) for kind in c.requests()]


class OneVllm:
    """The vLLM starter the paths call per vLLM container: the first call starts it (EKS mode, or SageMaker's `serve`),
    later calls must render the same environment but for PER_MODEL and get the same container."""

    def __init__(self, work: Path, mode: str, preload: Path) -> None:
        self.work, self.mode, self.preload = work, mode, preload
        self.rendered: dict[str, str] | None = None
        self.served_name = ""
        self.url = ""

    def __call__(self, name: str, rendered: Mapping[str, str], log: Path) -> tuple[str, Callable[[], None]]:
        same = {k: v for k, v in rendered.items() if k not in PER_MODEL}
        if self.rendered is not None:
            assert same == self.rendered, f"{name} renders another vLLM engine than {self.served_name}"
            return self.url, lambda: None
        from tests.support.matrix_paths import _port

        self.rendered, self.served_name = same, rendered["SERVE_MODEL_NAME"]
        port = _port()
        # Swapped: the checkpoint (a local directory), loopback and free ports, this user's HOME (the pod's is /tmp; its
        # torch.compile cache is then reused), the image's preload directory (tcmalloc / libiomp5 from this machine).
        env = {
            **rendered,
            "HOME": os.environ.get("HOME", str(self.work)),
            "MODEL_PATH": str(vllm_model_dir()),
            "SERVE_PRELOAD_DIR": str(self.preload),
        }
        if self.mode == "eks":
            env.update(SERVE_HOST="127.0.0.1", SERVE_PORT=str(port))
            proc = start_entrypoint(vllm_python(), entrypoint_env(env), log=log)
        else:
            env.update(
                SAGEMAKER_BIND_TO_PORT=str(port),
                SERVE_ENGINE_PORT=str(_port()),
                ADAPTER_HOST="127.0.0.1",
                SM_MODEL_DIR=str(vllm_model_dir()),
                LLAMA_RUN_AS=f"{os.getuid()}:{os.getgid()}",
            )
            proc = start_entrypoint(vllm_python(), entrypoint_env(env), "serve", log=log)
        assert ENTRYPOINT.is_file()
        self.url = f"http://127.0.0.1:{port}"
        return self.url, lambda: stop_group(proc)


@pytest.fixture(scope="module")
def preload(tmp_path_factory) -> Path:
    from tests.runtime.vllm.conftest import preload_dir

    return preload_dir(tmp_path_factory.mktemp("preload"), vllm_python())


def _deployed(target: str, tmp_path_factory, smollm2_gguf: Path, llama_server_bin: Path, preload: Path):
    from tests.support.matrix_paths import deployed

    work = tmp_path_factory.mktemp(f"vllm-{target}")
    starter = OneVllm(work, target, preload)
    with deployed(
        target, config_yaml(target, ENGINE), lambda _: smollm2_gguf, llama_server_bin, work, vllm=starter
    ) as running:
        yield running, starter


@pytest.fixture(scope="module")
def eks(tmp_path_factory, llama_server_bin, smollm2_gguf, preload):
    yield from _deployed("eks", tmp_path_factory, smollm2_gguf, llama_server_bin, preload)


@pytest.fixture(scope="module")
def sagemaker(tmp_path_factory, llama_server_bin, smollm2_gguf, preload):
    yield from _deployed("sagemaker", tmp_path_factory, smollm2_gguf, llama_server_bin, preload)


@pytest.fixture(scope="module")
def local(tmp_path_factory, llama_server_bin):
    """`cpu-inference local` on the EKS config, the checkpoint mapped to the first vLLM model and only that one
    started (`--models`): the deployed sizing of every vLLM model is the same (checked below)."""
    from cpu_inference.config import load, size_model
    from tests.cli.test_local import LocalRun

    work = tmp_path_factory.mktemp("vllm-local")
    config = work / "config.yaml"
    config.write_text(config_yaml("eks", ENGINE))
    loaded = load(config)
    envs = {
        m.name: {k: v for k, v in size_model(loaded, m).engine_env().items() if k not in PER_MODEL}
        for m in loaded.models
    }
    first = loaded.models[0].name
    assert all(env == envs[first] for env in envs.values()), envs
    run = LocalRun(
        config,
        "--llama-server",
        str(llama_server_bin),
        "--vllm-python",
        str(vllm_python()),
        "--models",
        first,
        "--model-map",
        f"{first}={vllm_model_dir()}",
        "--threads",
        "2",
        "--log-dir",
        str(work / "logs"),
    )
    try:
        run.wait_for("Ctrl-C stops everything", timeout=480)
        yield f"{run.url}/v1", first
    finally:
        run.kill()


@pytest.mark.parametrize(("cell", "kind"), _cases("eks-dedicated"))
def test_eks_dedicated(cell: Cell, kind: str, eks) -> None:
    started, one = eks
    name = model_name(cell.task, ENGINE, "dedicated")
    via_openai(started.urls[name], one.served_name, kind, NO_REFERENCE)


@pytest.mark.parametrize(("cell", "kind"), _cases("sagemaker-single"))
def test_sagemaker_single_model_endpoint(cell: Cell, kind: str, sagemaker) -> None:
    paths, _ = sagemaker
    runtime, endpoint, target = paths.clients[model_name(cell.task, ENGINE, "dedicated")]
    assert target is None
    via_sagemaker(runtime, endpoint, kind, NO_REFERENCE)


@pytest.mark.parametrize(("cell", "kind"), _cases("local"))
def test_cpu_inference_local(cell: Cell, kind: str, local) -> None:
    url, started = local
    via_openai(url, started, kind, NO_REFERENCE)
