"""A model added to a pool reaches the gateway before the pool's replicas: the gateway's ConfigMap change rolls it
at once, while each replica applies the new preset only after the kubelet refreshes its ConfigMap volume (about a
minute) and its supervisor's next poll (containers/llama-server/pool_supervisor.py). Meanwhile the replica's router
refuses the model: tools/server/server-models.cpp router_validate_model answers
`format_error_response("model '%s' not found", ERROR_TYPE_INVALID_REQUEST)` = HTTP 400, body
{"error": {"code": 400, "message": "model '<name>' not found", "type": "invalid_request_error"}}.
For a model the gateway lists, that is "not there yet": 503 + Retry-After (counted unavailable), not the client's
error. Real llama-server in router mode (the engine pin) behind the real gateway process; other 400s still pass.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import httpx
import pytest

from cpu_inference.engines.pool_preset import PoolModel, render_preset
from cpu_inference.k8s.charts.router_chart import gateway_pool
from tests.runtime.router.harness import metric, running_router
from tests.support.engine import free_port, stop_process, wait_healthy

pytestmark = pytest.mark.engine

POOL = "small"
RETRY_AFTER = 7
KNOWN, ADDED = "farm-known", "farm-added"


@pytest.fixture(scope="module")
def pool(llama_server_bin: Path, smollm2_gguf: Path, tmp_path_factory: pytest.TempPathFactory):
    """One replica whose preset still lacks ADDED, behind a gateway whose config already lists it."""
    work = tmp_path_factory.mktemp("pool-errors")
    shutil.copyfile(smollm2_gguf, work / f"{KNOWN}.gguf")
    preset = work / "preset.ini"
    preset.write_text(
        render_preset([PoolModel(KNOWN, f"{KNOWN}.gguf", ctx_size=256, parallel=1, threads=1)], model_dir=str(work))
    )
    port = free_port()
    replica = f"http://127.0.0.1:{port}"
    with open(work / "replica.log", "wb") as log:
        proc = subprocess.Popen(
            [
                str(llama_server_bin),
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--models-preset",
                str(preset),
                "--models-max",
                "1",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_healthy(replica, proc, timeout=60)
        cfg = {
            "mode": "gateway",
            "listen_host": "127.0.0.1",
            "listen_port": free_port(),
            "log_level": "DEBUG",
            "timeouts": {"connect_s": 2, "first_byte_s": 120, "total_s": 180},
            "gateway": {
                "pools": [gateway_pool(POOL, 1, [KNOWN, ADDED], [replica]).to_dict()],
                "retry_after_s": RETRY_AFTER,
                "cold_load_timeout_s": 120,
                "health_interval_s": 0.5,
            },
        }
        with running_router(cfg, work / "gateway") as gw:
            yield {"gw": gw.url, "replica": replica}
    finally:
        stop_process(proc, timeout=30)


def _chat(url: str, model: str, **extra) -> httpx.Response:
    body = {"model": model, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2, **extra}
    return httpx.post(f"{url}/v1/chat/completions", json=body, timeout=240)


def test_the_pinned_router_refuses_a_model_missing_from_its_preset_with_this_400(pool):
    resp = _chat(pool["replica"], ADDED)
    assert resp.status_code == 400
    assert resp.json() == {
        "error": {"code": 400, "message": f"model '{ADDED}' not found", "type": "invalid_request_error"}
    }


def test_a_listed_model_the_replica_does_not_know_yet_is_503_with_retry_after(pool):
    gw = pool["gw"]
    resp = _chat(gw, ADDED)
    assert resp.status_code == 503, resp.text
    assert resp.headers["retry-after"] == str(RETRY_AFTER)
    assert ADDED in resp.json()["error"]["message"] and "not loaded its preset" in resp.json()["error"]["message"]
    assert metric(gw, "gateway_backend_unavailable_total", model=ADDED) == 1
    assert metric(gw, "gateway_requests_total", model=ADDED, code="503") == 1
    assert metric(gw, "gateway_pool_requests_total", pool=POOL, replica="0", code="503") == 1
    assert metric(gw, "gateway_requests_total", model=ADDED, code="400") == 0


def test_any_other_400_of_the_replica_is_still_the_clients(pool):
    gw = pool["gw"]
    # The child answers 400 "Expected 'messages' to be an array" (server-common.cpp oaicompat_chat_params_parse).
    resp = _chat(gw, KNOWN, messages="Hi")
    assert resp.status_code == 400, resp.text
    assert "retry-after" not in resp.headers
    assert metric(gw, "gateway_requests_total", model=KNOWN, code="400") == 1
    assert metric(gw, "gateway_backend_unavailable_total", model=KNOWN) == 0
