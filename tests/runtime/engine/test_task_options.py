"""An embedding model serves /v1/embeddings wherever it is deployed: the task's llama-server options
(cpu_inference.engines.tasks) reach a dedicated engine's environment, a pool's preset INI and a multi-model
endpoint's engine.json, and the real engine answers with exactly what each renders. Without them the pinned
llama-server answers 501 ("This server does not support embeddings. Start it with `--embeddings`"), which is what
every deployed embedding model did before."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from cpu_inference import sizing
from cpu_inference.engines.pool_preset import PoolModel, pool_preset
from cpu_inference.engines.tasks import task_args, task_env, task_options
from cpu_inference.sizing.pools import pool_plan
from tests.support.engine import free_port, stop_process, wait_healthy

ENGINE_DIR = Path(__file__).resolve().parents[3] / "containers" / "llama-server"
EMBEDDING = sizing.ModelSpec(parameters_billions=0.135, quantization="Q4_1", context_window=512, task="embedding")
# The stand-in is a chat GGUF with no pooling of its own: mean-pool it (a real embedding GGUF carries its pooling).
STAND_IN_POOLING = {"pooling": "mean"}


def _embed(base: str, model: str) -> httpx.Response:
    return httpx.post(f"{base}/v1/embeddings", json={"model": model, "input": "hello farm"}, timeout=120)


def _serve(argv: list[str], env: dict[str, str], log: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [*argv, "--host", "127.0.0.1", "--port", str(port)],
            env={**os.environ, **env},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}"
    wait_healthy(base, proc)
    return proc, base


@pytest.mark.engine
def test_a_dedicated_embedding_engine_gets_embeddings_from_its_sized_environment(
    llama_server_bin: Path, smollm2_gguf: Path, tmp_path: Path
) -> None:
    env = sizing.size(EMBEDDING, sizing.instance("m7g.large"), target="eks", cpu=1).engine_env()
    assert env["LLAMA_ARG_EMBEDDINGS"] == "true"
    task = {k: v for k, v in env.items() if k.startswith("LLAMA_ARG_")}  # the engine reads these itself
    base_argv = [str(llama_server_bin), "-m", str(smollm2_gguf), "-t", "1", "-c", "256", "--pooling", "mean"]
    for rendered, expected in ((task, 200), ({}, 501)):
        proc, base = _serve(base_argv, rendered, tmp_path / f"dedicated-{expected}.log")
        try:
            r = _embed(base, "m")
            assert r.status_code == expected, r.text
            if expected == 200:
                assert len(r.json()["data"][0]["embedding"]) > 0
        finally:
            stop_process(proc)


@pytest.mark.engine
def test_a_pools_preset_serves_its_embedding_model_and_its_chat_model(
    llama_server_bin: Path, smollm2_gguf: Path, tmp_path: Path
) -> None:
    plan = pool_plan(
        {
            "emb": EMBEDDING,
            "chat": sizing.ModelSpec(parameters_billions=0.135, quantization="Q4_1", context_window=512),
        },
        cpu=1,
        memory_bytes=2 * sizing.GIB,
    )
    assert plan.engine_args("emb")["embeddings"] == "true" and "embeddings" not in plan.engine_args("chat")
    models_dir = tmp_path / "models"
    models_dir.mkdir()
    for name in ("emb", "chat"):
        (models_dir / f"{name}.gguf").symlink_to(smollm2_gguf)
    models = [
        PoolModel(
            n,
            f"{n}.gguf",
            ctx_size=256,
            parallel=1,
            threads=1,
            options={**task_options(plan.per_model[n].task), **(STAND_IN_POOLING if n == "emb" else {})},
        )
        for n in ("emb", "chat")
    ]
    preset = tmp_path / "preset.ini"
    preset.write_text(pool_preset(models, model_dir=str(models_dir)))
    assert "embeddings = true" in preset.read_text()
    proc, base = _serve(
        [str(llama_server_bin), "--models-preset", str(preset), "--models-max", "2"], {}, tmp_path / "pool.log"
    )
    try:
        r = _embed(base, "emb")
        assert r.status_code == 200, r.text
        chat = httpx.post(
            f"{base}/v1/chat/completions",
            timeout=120,
            json={"model": "chat", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
        )
        assert chat.status_code == 200, chat.text
    finally:
        stop_process(proc)


def test_a_multi_model_endpoints_engine_json_turns_the_task_option_into_the_flag(tmp_path: Path) -> None:
    if str(ENGINE_DIR) not in sys.path:
        sys.path.insert(0, str(ENGINE_DIR))
    from inference_runtime.engine_flags import llama_server_args
    from mme_adapter import ChildDefaults, child_config

    plan = pool_plan({"emb": EMBEDDING}, cpu=2, memory_bytes=2 * sizing.GIB)
    (tmp_path / "emb.gguf").write_bytes(b"GGUF")
    (tmp_path / "engine.json").write_text(json.dumps(plan.engine_args("emb")))  # what the catalog's tarball carries
    argv = llama_server_args(child_config("emb", tmp_path, ChildDefaults(binary="-", threads=1)))
    assert task_args("embedding") == ["--embeddings"] and "--embeddings" in argv and "true" not in argv
    assert task_env("chat") == {} and task_options("rerank") == {"reranking": "true"}
