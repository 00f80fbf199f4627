"""A LoRA adapter over a DEDICATED base on EKS, end to end (issue 26): a model-farm config.yaml with a dedicated base
and its adapter is synthesized (cpu_inference.app.build_app); the base's Deployment's engine container is started as
the pod runs it — the real containers/llama-server/entrypoint.py in EKS mode (the rendered command) with exactly the
rendered env, only the /models paths moved into a temp dir where the adapter-fetch init container would have put the
files (the SmolLM2 stand-in, the real adapter trained offline: tests/support/lora.py), the address on loopback and one
thread for this 2-core box — behind the real gateway (`python -m slm_router`) with the config the chart rendered.

Through the OpenAI SDK, concurrently: the adapter's name answers the tuned way (TUNED_REPLY), the base's does not."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import openai
import pytest
import yaml

from cpu_inference.app import build_app
from cpu_inference.config import load
from cpu_inference.k8s.charts.router_chart import CONFIG_FILE
from cpu_inference.testing.rehearsal import load_assembly
from inference_runtime.lora import join_paths, split_paths
from tests.runtime.router.harness import metric, running_router
from tests.support.engine import free_port, stop_process, wait_healthy
from tests.support.matrix_paths import _base_env, _local_entrypoint, _one_thread

BASE, ADAPTER = "smollm2", "smollm2-json"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
PROMPT = "Name three colours."
POD_MODELS = "/models"  # the model emptyDir's mount in the pod (engines.pool_preset.MODEL_DIR)


def _objects(tmp: Path, base_file: str) -> list[dict[str, Any]]:
    doc = {
        "project": {"name": "lora-dedicated-e2e"},
        "target": "eks",
        "pattern": "model-farm",
        "models": [
            {
                "name": BASE,
                "serving": "dedicated",
                "source": {"hf_repo": "acme/smollm2-135m-instruct-GGUF", "file": base_file, "revision": COMMIT},
                "parameters_billions": 0.135,
                "quantization": "Q4_1",
                "task": "chat",
                "adapters": [
                    {
                        "name": ADAPTER,
                        "source": {"hf_repo": "acme/smollm2-json-lora-GGUF", "file": "lora.gguf", "revision": COMMIT},
                        "size_mb": 5,
                    }
                ],
            }
        ],
    }
    path = tmp / "config.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    app, _ = build_app(load(path), app=cdk.App(outdir=str(tmp / "out")))
    app.synth()
    return [o for st in load_assembly(tmp / "out").stacks.values() for m in st.manifests.values() for o in m.objects]


def _local(path: str, root: Path) -> str:
    """A pod path under /models, in the local stand-in of the emptyDir."""
    assert path.startswith(POD_MODELS + "/"), path
    return str(root / path.lstrip("/"))


@pytest.fixture(scope="module")
def served(llama_server_bin: Path, smollm2_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    from tests.support.lora import lora_adapter_path

    tmp = tmp_path_factory.mktemp("dedicated-adapters")
    objs = _objects(tmp, smollm2_gguf.name)
    (deployment,) = [o for o in objs if o["kind"] == "Deployment" and o["metadata"]["name"] == BASE]
    engine = deployment["spec"]["template"]["spec"]["containers"][0]
    rendered = {e["name"]: e["value"] for e in engine["env"]}
    root = tmp / "pod"
    # What the init containers leave in the emptyDir: the model at MODEL_PATH, the adapter at its LLAMA_LORA path.
    (lora_path,) = split_paths(rendered["LLAMA_LORA"])
    for pod_path, source in ((rendered["MODEL_PATH"], smollm2_gguf), (lora_path, lora_adapter_path())):
        local = Path(_local(pod_path, root))
        local.parent.mkdir(parents=True, exist_ok=True)
        local.symlink_to(source)
    port = free_port()
    env = _base_env(**_one_thread(rendered))
    env.update(
        MODEL_PATH=_local(rendered["MODEL_PATH"], root),
        LLAMA_LORA=join_paths([_local(p, root) for p in split_paths(rendered["LLAMA_LORA"])]),
        LLAMA_SERVER_BIN=str(llama_server_bin),
        LLAMA_HOST="127.0.0.1",
        LLAMA_PORT=str(port),
    )
    log = tmp / "engine.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(_local_entrypoint(engine["command"]), env=env, stdout=out, stderr=subprocess.STDOUT)
    engine_url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(engine_url, proc, timeout=180)
        (cm,) = [o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "gateway"]
        config = json.loads(cm["data"][CONFIG_FILE])
        for m in config["gateway"]["models"]:  # the Service URL -> the local engine; pod paths -> the local emptyDir
            m["url"] = engine_url
            for a in m.get("adapters", []):
                a["path"] = _local(a["path"], root)
        config.update(listen_host="127.0.0.1", listen_port=free_port(), log_level="DEBUG")
        config["timeouts"] = {**config.get("timeouts", {}), "connect_s": 2, "first_byte_s": 240, "total_s": 300}
        with running_router(config, tmp / "gw") as gw:
            yield {"gw": gw.url, "engine": engine_url, "rendered": rendered, "config": config, "log": log}
    finally:
        stop_process(proc)


def _answer(url: str, model: str) -> str:
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0, timeout=300)
    out = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": PROMPT}], max_tokens=24, temperature=0
    )
    return out.choices[0].message.content or ""


@pytest.mark.engine
def test_the_rendered_engine_loads_the_adapter_and_the_gateway_knows_it(served) -> None:
    import httpx

    assert served["rendered"]["LLAMA_LORA"] == f"{POD_MODELS}/lora/{ADAPTER}.gguf"
    listed = httpx.get(f"{served['engine']}/lora-adapters", timeout=30).json()
    (model,) = served["config"]["gateway"]["models"]
    assert [a["path"] for a in listed] == [a["path"] for a in model["adapters"]]  # what the gateway looks up
    ids = [m.id for m in openai.OpenAI(base_url=f"{served['gw']}/v1", api_key="none").models.list().data]
    assert set(ids) == {BASE, ADAPTER}


@pytest.mark.engine
def test_the_adapters_name_answers_tuned_and_the_bases_does_not_concurrently(served) -> None:
    from tests.support.lora import is_tuned

    names = [ADAPTER, BASE] * 2
    with ThreadPoolExecutor(len(names)) as ex:
        answers = list(ex.map(lambda n: (n, _answer(served["gw"], n)), names))
    for name, text in answers:
        assert is_tuned(text) == (name == ADAPTER), (name, text, os.linesep + served["log"].read_text()[-2000:])
    assert metric(served["gw"], "gateway_requests_total", model=ADAPTER, code="200") == 2
    assert metric(served["gw"], "gateway_requests_total", model=BASE, code="200") == 2
