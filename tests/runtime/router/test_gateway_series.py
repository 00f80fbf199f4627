"""How many series the gateway exports per model (issue 25: a farm of 1,000 pooled models, scraped every 30 s).

End to end: the gateway (`python -m slm_router`) in front of one real llama-server in router mode (a pool of one
replica, one model); after one request the model's sample lines in GET /metrics are counted. Then the same
GatewayMetrics object in-process: what a request leaves behind, dedicated and pooled."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from cpu_inference.config.schema import FIRST_TOKEN_SLO_MS
from cpu_inference.engines.pool_preset import PoolModel, render_preset
from cpu_inference.k8s.charts.router_chart import gateway_pool
from slm_router.metrics import GATEWAY_LATENCY_BUCKETS, GatewayMetrics, Metrics
from tests.runtime.router.harness import metric, running_router
from tests.support.engine import free_port, stop_process, wait_healthy

MODEL, POOL = "farm-x", "small"
# A pooled model that answered: gateway_requests_total{code="200"}, gateway_request_seconds' buckets (+Inf too),
# _count and _sum. Before issue 25's trim it was 20 (14 buckets, two _created, gateway_in_flight at 0).
SERIES_PER_MODEL = 11


def _model_lines(text: str, model: str) -> list[str]:
    return [line for line in text.splitlines() if line and not line.startswith("#") and f'model="{model}"' in line]


@pytest.fixture(scope="module")
def pooled(llama_server_bin: Path, smollm2_gguf: Path, tmp_path_factory: pytest.TempPathFactory):
    work = tmp_path_factory.mktemp("series")
    shutil.copyfile(smollm2_gguf, work / f"{MODEL}.gguf")
    preset = work / "preset.ini"
    preset.write_text(
        render_preset([PoolModel(MODEL, f"{MODEL}.gguf", ctx_size=256, parallel=1, threads=1)], model_dir=str(work))
    )
    port = free_port()
    replica = f"http://127.0.0.1:{port}"
    with open(work / "replica.log", "ab") as out:
        proc = subprocess.Popen(
            [str(llama_server_bin), "--host", "127.0.0.1", "--port", str(port), "--models-preset", str(preset)],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    cfg = {
        "mode": "gateway",
        "listen_host": "127.0.0.1",
        "listen_port": free_port(),
        "timeouts": {"connect_s": 2, "first_byte_s": 120, "total_s": 180},
        "gateway": {
            "pools": [gateway_pool(POOL, 1, [MODEL], [replica]).to_dict()],
            "cold_load_timeout_s": 120,
            "health_interval_s": 0.5,
        },
    }
    try:
        wait_healthy(replica, proc, timeout=60)
        with running_router(cfg, work / "gateway") as gw:
            yield gw.url
    finally:
        stop_process(proc, timeout=30)


@pytest.mark.engine
def test_a_pooled_model_with_traffic_has_eleven_series(pooled: str) -> None:
    assert _model_lines(httpx.get(f"{pooled}/metrics", timeout=10).text, MODEL) == []  # no request, no series
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 40, "stream": True}
    with httpx.stream("POST", f"{pooled}/v1/chat/completions", json=body, timeout=240) as held:
        assert held.status_code == 200
        chunks = held.iter_lines()
        next(chunks)
        # While it is answered, its in-flight gauge counts it (KEDA scales the gateway on sum(gateway_in_flight)).
        assert metric(pooled, "gateway_in_flight", model=MODEL) == 1
        for _ in chunks:
            pass
    text = httpx.get(f"{pooled}/metrics", timeout=10).text
    lines = _model_lines(text, MODEL)
    names = sorted({re.match(r"[a-z_]+", line).group(0) for line in lines})  # type: ignore[union-attr]
    assert names == [
        "gateway_request_seconds_bucket",
        "gateway_request_seconds_count",
        "gateway_request_seconds_sum",
        "gateway_requests_total",
    ], lines
    assert len(lines) == SERIES_PER_MODEL == len(GATEWAY_LATENCY_BUCKETS) + 4, lines
    # What the farm report and the rules read is there: one request, its time to the response head.
    assert metric(pooled, "gateway_requests_total", model=MODEL, code="200") == 1
    assert metric(pooled, "gateway_request_seconds_count", model=MODEL) == 1
    assert metric(pooled, "gateway_request_seconds_sum", model=MODEL) > 0
    assert "_created" not in text


def test_no_created_series_and_the_router_keeps_its_own() -> None:
    """prometheus_client's disable_created_metrics() is process-global; the gateway drops `_created` from its own
    exposition only (nothing reads it: the rules, dashboards and farm report use _total, _sum, _count, _bucket)."""
    g = GatewayMetrics(["dedicated"], {POOL: 1})
    g.requests.labels("dedicated", "200").inc()
    g.request_seconds.labels("pooled").observe(0.3)
    text = g.render().decode()
    assert "_created" not in text
    assert 'gateway_requests_total{code="200",model="dedicated"} 1.0' in text
    assert 'gateway_request_seconds_count{model="pooled"} 1.0' in text
    assert b"router_requests_created" in Metrics(("simple", "complex")).render()


def test_in_flight_of_a_pooled_model_exists_while_it_has_requests() -> None:
    """A dedicated model's gauge exists from the start at 0; a pooled model's only while it has requests in progress
    (a scrape at 0 reads the same from an absent series: `sum(gateway_in_flight) or vector(0)`)."""
    g = GatewayMetrics(["dedicated"], {POOL: 1})

    def in_flight() -> dict[str, float]:
        fams = text_string_to_metric_families(g.render().decode())
        return {s.labels["model"]: s.value for f in fams if f.name == "gateway_in_flight" for s in f.samples}

    assert in_flight() == {"dedicated": 0}
    for model in ("pooled", "pooled", "dedicated"):
        g.started(model)
    assert in_flight() == {"dedicated": 1, "pooled": 2}
    for model in ("pooled", "dedicated"):
        g.finished(model)
    assert in_flight() == {"dedicated": 0, "pooled": 1}
    g.finished("pooled")
    assert in_flight() == {"dedicated": 0}
    g.started("pooled")
    assert in_flight() == {"dedicated": 0, "pooled": 1}


def test_the_default_and_the_slm_slo_are_bucket_bounds() -> None:
    """The p95 SLO alert (monitoring/alerts.py) reads histogram_quantile over these buckets: at a bound it is exact
    (more than 5% of requests slower than the SLO). The default SLO and the SLM one (config.yaml: 500 ms) are bounds."""
    assert FIRST_TOKEN_SLO_MS / 1000 in GATEWAY_LATENCY_BUCKETS
    assert 0.5 in GATEWAY_LATENCY_BUCKETS
    assert list(GATEWAY_LATENCY_BUCKETS) == sorted(GATEWAY_LATENCY_BUCKETS)
