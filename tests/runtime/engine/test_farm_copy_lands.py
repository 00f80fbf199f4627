"""A model's copy lands while the farm serves (issue 25): through the gateway, 503 + Retry-After "being copied (n of N
landed)" before, 200 after, no restart; a failed copy is a 500 naming the failure, never a 400/404.

Everything the deployment renders is used as rendered: the pool chart's (ModelPoolChart) container env and preset
ConfigMap, only the addresses and the /models mount moved to this machine; the gateway's pool entry as the chart builds
it (chart.gateway_pool), only the replica URL and the status port moved; the failure marker's name as the catalog copy
writes it (model_download.catalog.failure_key). The real `entrypoint.py pool` (supervisor + the pinned router) and the
real gateway (`python -m slm_router`) run in between."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from cpu_inference.engines.pool_preset import MODEL_DIR, PoolModel
from cpu_inference.k8s.charts.model_pool_chart import PRESET_FILE, ModelPoolChart, ModelPoolChartProps
from model_download.catalog import COPY_FAILED_NAME, FARM_PREFIX, CatalogEntry, failure_key, gguf_key
from tests.runtime.engine.pool_support import POLL, child_pids, land, run_pool, until
from tests.runtime.router.harness import running_router
from tests.support.engine import free_port

NAMES = ("alpha", "beta", "gamma")


def _key(name: str, file: str) -> str:
    entry = CatalogEntry(name=name, hf_repo=f"acme/{name}-GGUF", file=file, revision="main")
    return gguf_key(entry).removeprefix(FARM_PREFIX)


def _chart(keys: dict[str, str]) -> ModelPoolChart:
    import cdk8s

    from cpu_inference.k8s.workloads.serving_policy import ServingPolicy

    props = ModelPoolChartProps(
        name="small",
        image="example.com/llama-server:1",
        models=tuple(PoolModel(n, keys[n], ctx_size=256, parallel=1, threads=1) for n in NAMES),
        models_max=2,
        cpu=2,
        memory_bytes=4 << 30,
        replicas_max=1,
        bucket_name="cpu-inference-models-123456789012",
        region="us-east-1",
        policy=ServingPolicy(namespace="model-farm", pattern="model-farm"),
        replication=1,
    )
    return ModelPoolChart(cdk8s.App(), "Pool", props=props)


def _ask(gw: str, model: str) -> httpx.Response:
    body = {"model": model, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
    return httpx.post(f"{gw}/v1/chat/completions", json=body, timeout=120)


@pytest.mark.engine
def test_a_copy_landing_while_the_farm_serves_goes_from_503_to_200_without_a_restart(
    llama_server_bin: Path, smollm2_gguf: Path, tmp_path: Path
) -> None:
    keys = {n: _key(n, smollm2_gguf.name) for n in NAMES}
    chart = _chart(keys)
    mount = tmp_path / "models"  # the Mountpoint volume's /models (the farm/ prefix)
    preset = tmp_path / PRESET_FILE
    preset.write_text(chart.preset.replace(f"{MODEL_DIR}/", f"{mount}/"))
    assert chart.preset.count(f"{MODEL_DIR}/") == len(NAMES)  # every section names its file under the mount
    land(smollm2_gguf, mount / keys["alpha"])  # one copy has landed when the pool starts
    # The failed copy's marker exactly where the catalog writes it (failure_key, beside the model's key).
    marker = mount / failure_key(
        CatalogEntry(name="gamma", hf_repo="acme/gamma-GGUF", file=smollm2_gguf.name, revision="main")
    ).removeprefix(FARM_PREFIX)
    assert marker.name == COPY_FAILED_NAME
    marker.parent.mkdir(parents=True)
    marker.write_text(json.dumps({"model": "gamma", "reason": "Hub answered 404 for the file", "attempt": 3}))

    env = dict(chart.engine_env)
    port, status_port = free_port(), free_port()
    assert env["LLAMA_POOL_COPY_FAILED_FILE"] == COPY_FAILED_NAME  # the chart passes the catalog's marker name on
    env |= {
        "LLAMA_HOST": "127.0.0.1",
        "LLAMA_PORT": str(port),
        "LLAMA_POOL_STATUS_PORT": str(status_port),
        "LLAMA_MODELS_PRESET": str(preset),
        "LLAMA_SERVER_BIN": str(llama_server_bin),
        "LLAMA_PRESET_POLL_SECONDS": str(POLL),
        "LLAMA_POOL_STATE_DIR": str(tmp_path / "state"),
        "PATH": "/usr/bin:/bin",
    }
    # The gateway asks the port the supervisor listens on (the chart renders both from pool_status).
    assert chart.gateway_pool.status_port == int(chart.engine_env["LLAMA_POOL_STATUS_PORT"])
    entry = chart.gateway_pool.to_dict() | {"replicas": [f"http://127.0.0.1:{port}"], "status_port": status_port}
    gateway = {
        "mode": "gateway",
        "listen_host": "127.0.0.1",
        "listen_port": free_port(),
        "log_level": "INFO",
        "timeouts": {"connect_s": 2, "first_byte_s": 120, "idle_s": 120, "total_s": 180},
        "gateway": {"pools": [entry], "retry_after_s": 5, "cold_load_timeout_s": 90, "health_interval_s": 1},
    }
    with run_pool(env, tmp_path) as pool, running_router(gateway, tmp_path / "gateway") as gw:
        router_pid = pool.router
        assert _ask(gw.url, "alpha").status_code == 200
        (alpha_child,) = child_pids(router_pid)

        before = _ask(gw.url, "beta")
        assert before.status_code == 503 and int(before.headers["retry-after"]) > 0, before.text
        assert "model beta is being copied (1 of 3 landed)" in before.text, before.text

        failed = _ask(gw.url, "gamma")
        assert failed.status_code == 500 and "retry-after" not in failed.headers, failed.text
        assert failed.json()["error"]["type"] == "model_copy_failed"
        assert "model gamma failed to copy: Hub answered 404 for the file" in failed.text

        land(smollm2_gguf, mount / keys["beta"])  # the catalog's copy of beta lands
        after = until(lambda: (r := _ask(gw.url, "beta")).status_code == 200 and r, timeout=60)
        assert after.json()["choices"], after.text
        # Nothing restarted: the same router, and alpha's child is still the one that served it.
        assert pool.proc.poll() is None and pool.router == router_pid
        assert alpha_child in child_pids(router_pid)
        assert httpx.get(f"{pool.status}/status?model=beta", timeout=5).json()["landed"] == 2
