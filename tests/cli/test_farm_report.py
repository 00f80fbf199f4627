"""`cpu-inference farm report`: models ranked by traffic and cost share, cold loads, errors, idle models.

Inputs are real: the gateway's exposition comes from its own prometheus_client registry
(containers/router/slm_router/metrics.py GatewayMetrics, driven with the calls gateway.py makes), the pool
supervisor's is a text exposition written from the names in containers/inference_runtime/pool_status.py, and the
Prometheus API answers follow the documented response format
(https://prometheus.io/docs/prometheus/latest/querying/api/#instant-queries: {"status": "success", "data":
{"resultType": "vector", "result": [{"metric": {...}, "value": [<unix time>, "<value as string>"]}]}}; errors:
{"status": "error", "errorType": ..., "error": ...} with a 4xx/5xx code).
"""

from __future__ import annotations

import json
import sys
import threading
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from cpu_inference.cli import farm_cmd
from cpu_inference.cli.main import main
from cpu_inference.config import load
from inference_runtime import pool_status

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "examples" / "model-farm-eks.yaml"
ROUTER_DIR = ROOT / "containers" / "router"
if str(ROUTER_DIR) not in sys.path:
    sys.path.insert(0, str(ROUTER_DIR))

from slm_router.metrics import GatewayMetrics  # noqa: E402 - the runtime package, from its own directory

# model -> (pool, [(status, seconds to head)]) — what the gateway saw.
TRAFFIC: dict[str, list[tuple[str, float]]] = {
    "bge-small-en": [("200", 0.05)] * 30,
    "smollm2-135m": [("200", 0.4)] * 9 + [("503", 0.0)],
    "gemma3-1b": [("200", 1.0)] * 4 + [("500", 0.2)],
    "qwen3-0-6b": [("200", 0.1)] * 20,  # dedicated
}


def gateway_exposition() -> str:
    config = load(CONFIG)
    dedicated = [m.name for m in config.models if config.pool_of(m) is None]
    m = GatewayMetrics(dedicated, {p.name: p.replicas.min for p in config.farm.pools})
    for model, answers in TRAFFIC.items():
        for code, seconds in answers:
            m.in_flight.labels(model).inc()
            if code == "503":  # gateway.py: backend unavailable
                m.unavailable.labels(model).inc()
            else:
                m.request_seconds.labels(model).observe(seconds)
            m.requests.labels(model, code).inc()
            m.in_flight.labels(model).dec()
    return m.render().decode()


def supervisor_exposition(cold: dict[str, tuple[int, float]], copy_failed: tuple[str, ...] = ()) -> str:
    """One pool replica's /metrics, from pool_status's names (text exposition format 0.0.4)."""
    lines = [f"# TYPE {pool_status.COLD_LOADS} counter"]
    lines += [f'{pool_status.COLD_LOADS}{{model="{m}"}} {n}' for m, (n, _) in cold.items()]
    lines += [f"# TYPE {pool_status.COLD_LOAD_SECONDS} counter"]
    lines += [f'{pool_status.COLD_LOAD_SECONDS}{{model="{m}"}} {s}' for m, (_, s) in cold.items()]
    lines += [f"# TYPE {pool_status.LOAD_FAILURES} counter"]
    lines += [f'{pool_status.LOAD_FAILURES}{{model="{m}"}} 1' for m in cold if m == "gemma3-1b"]
    lines += [f"# TYPE {pool_status.COPY_FAILED_MODEL} gauge"]
    lines += [f'{pool_status.COPY_FAILED_MODEL}{{model="{m}"}} 1' for m in copy_failed]
    lines += [f"# TYPE {pool_status.MODELS_BY_STATE} gauge"]
    lines += [f'{pool_status.MODELS_BY_STATE}{{state="{s}"}} 1' for s in pool_status.STATES]
    return "\n".join(lines) + "\n"


@pytest.fixture
def served() -> Iterator[dict[str, Any]]:
    """A loopback HTTP server: GET /<name> answers state["pages"][name]; /api/v1/query answers state["api"]."""
    state: dict[str, Any] = {"pages": {}, "api": None, "queries": []}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            url = urllib.parse.urlsplit(self.path)
            if url.path == "/api/v1/query":
                query = urllib.parse.parse_qs(url.query)["query"][0]
                state["queries"].append(query)
                code, body = state["api"](query)
                data, ctype = json.dumps(body).encode(), "application/json"
            elif url.path.lstrip("/") in state["pages"]:
                code, data, ctype = 200, state["pages"][url.path.lstrip("/")].encode(), "text/plain; version=0.0.4"
            else:
                code, data, ctype = 404, b"not found", "text/plain"
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state["url"] = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()


def run_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    assert main(["farm", "report", str(CONFIG), *args, "--json"]) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def test_report_over_the_gateways_registry_and_two_pool_replicas(
    tmp_path: Path, served: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "gateway.prom").write_text(gateway_exposition())
    # Two replicas of pool small (one read from a file, one over HTTP) and one of medium: counters add up.
    (tmp_path / "small-0.prom").write_text(supervisor_exposition({"smollm2-135m": (2, 1.5), "bge-small-en": (1, 0.3)}))
    served["pages"]["small-1"] = supervisor_exposition({"smollm2-135m": (1, 0.9)}, copy_failed=("e5-small",))
    served["pages"]["medium-0"] = supervisor_exposition({"gemma3-1b": (3, 6.0)})
    out = run_json(
        capsys,
        *("--metrics", str(tmp_path / "gateway.prom"), "--metrics", str(tmp_path / "small-0.prom")),
        *("--metrics", f"{served['url']}/small-1", "--metrics", f"{served['url']}/medium-0"),
        *("--hourly-cost", "small=0.6", "--hourly-cost", "medium=1.2", "--hourly-cost", "qwen3-0-6b=0.4"),
        *("--window", "2h"),
    )
    rows = {r["model"]: r for r in out["models"]}
    assert [r["model"] for r in out["models"]] == ["bge-small-en", "qwen3-0-6b", "smollm2-135m", "gemma3-1b"]
    assert out["requests"] == 65 and out["window_seconds"] == 7200
    assert rows["bge-small-en"]["traffic_share"] == pytest.approx(30 / 65)
    # Busy time: the histogram's _sum (503s were never timed by the gateway: no backend answered).
    small_busy = 30 * 0.05 + 9 * 0.4
    assert rows["smollm2-135m"]["busy_seconds"] == pytest.approx(9 * 0.4)
    assert rows["smollm2-135m"]["busy_share_of_pool"] == pytest.approx(9 * 0.4 / small_busy)
    assert rows["smollm2-135m"]["cost_usd"] == pytest.approx(0.6 * 2 * 9 * 0.4 / small_busy)
    assert rows["gemma3-1b"]["busy_share_of_pool"] == pytest.approx(1.0)  # alone in medium: the whole pool's cost
    assert rows["gemma3-1b"]["cost_usd"] == pytest.approx(1.2 * 2)
    assert rows["qwen3-0-6b"]["cost_usd"] == pytest.approx(0.4 * 2)
    assert sum(r["cost_share"] for r in out["models"]) == pytest.approx(1.0)
    assert rows["gemma3-1b"]["cost_share"] == pytest.approx(1.2 / (0.6 + 1.2 + 0.4))
    # Cold loads summed over the pool's replicas; mean load time = seconds / loads.
    assert rows["smollm2-135m"]["cold_loads"] == 3
    assert rows["smollm2-135m"]["mean_cold_load_seconds"] == pytest.approx(2.4 / 3)
    assert (rows["gemma3-1b"]["errors_5xx"], rows["smollm2-135m"]["unavailable_503"]) == (1, 1)
    assert rows["gemma3-1b"]["load_failures"] == 1
    config = load(CONFIG)
    assert out["idle"] == sorted({m.name for m in config.models} - set(TRAFFIC))
    assert out["copy_failed"] == ["e5-small"]
    # The gateway's replica gauges (2 small, 1 medium at start) are the pools' replicas.
    assert {g["name"]: g["replicas"] for g in out["groups"] if g["kind"] == "pool"} == {"small": 2, "medium": 1}


def test_the_table_names_every_column_and_the_idle_models(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "gateway.prom").write_text(gateway_exposition())
    assert main(["farm", "report", str(CONFIG), "--metrics", str(tmp_path / "gateway.prom")]) == 0
    text = capsys.readouterr().out
    lines = text.splitlines()
    assert lines[0] == "window: since the processes started; 65 requests to 4 models"
    assert lines[1].split() == [
        "model",
        "pool",
        "requests",
        "traffic",
        "busy",
        "s",
        "of",
        "pool",
        "cost",
        "$",
        "cost",
    ] + [
        "cold",
        "cold",
        "s",
        "5xx",
        "503",
    ]
    assert lines[2].split()[:4] == ["bge-small-en", "small", "30", "46.2%"]
    assert "costs: pass --hourly-cost POOL=USD" in text  # no price given: said, not guessed
    assert any(line.startswith("idle (") and "llama3-2-3b" in line for line in lines)


def test_two_scrapes_report_the_interval_only(tmp_path: Path) -> None:
    before = farm_cmd.parse_expositions([("g", gateway_exposition())])
    m = GatewayMetrics([], {"small": 1})
    for _ in range(3):
        m.requests.labels("bge-small-en", "200").inc()
    after = farm_cmd.parse_expositions([("g", gateway_exposition()), ("g2", m.render().decode())])
    d = farm_cmd.delta(before, after)
    assert d.requests[("bge-small-en", "200")] == 3 and d.requests[("qwen3-0-6b", "200")] == 0
    restarted = farm_cmd.delta(after, before)  # counters went down: a restart; the new values are the increase
    assert restarted.requests[("bge-small-en", "200")] == 30


def test_scrape_with_an_interval_reads_every_source_twice(served: dict[str, Any]) -> None:
    served["pages"]["g"] = gateway_exposition()
    slept: list[float] = []

    def sleep(s: float) -> None:
        slept.append(s)
        m = GatewayMetrics([], {})
        m.requests.labels("gemma3-1b", "200").inc(7)
        served["pages"]["g2"] = m.render().decode()

    served["pages"]["g2"] = GatewayMetrics([], {}).render().decode()
    counts = farm_cmd.scrape([f"{served['url']}/g", f"{served['url']}/g2"], 30.0, sleep=sleep)
    assert slept == [30.0]
    assert counts.requests[("gemma3-1b", "200")] == 7 and counts.requests[("bge-small-en", "200")] == 0


def api_answers(query: str) -> tuple[int, dict[str, Any]]:
    """What a Prometheus server answers for the report's queries over a 30d window (documented format)."""

    def vector(rows: list[tuple[dict[str, str], float]]) -> tuple[int, dict[str, Any]]:
        result = [{"metric": m, "value": [1767225600.0, f"{v:g}"]} for m, v in rows]
        return 200, {"status": "success", "data": {"resultType": "vector", "result": result}}

    assert "[30d" in query or "pool_model_copy_failed" in query, query
    if query.startswith("sum by (model, code) (increase(gateway_requests_total"):
        return vector(
            [
                ({"model": "bge-base-en", "code": "200"}, 1_200_000),
                ({"model": "llama3-2-3b", "code": "200"}, 40_000),
                ({"model": "llama3-2-3b", "code": "500"}, 1_000),
            ]
        )
    if "gateway_request_seconds_sum" in query:
        return vector([({"model": "bge-base-en"}, 60_000.0), ({"model": "llama3-2-3b"}, 120_000.0)])
    if pool_status.COLD_LOADS in query:
        return vector([({"model": "llama3-2-3b"}, 400)])
    if pool_status.COLD_LOAD_SECONDS in query:
        return vector([({"model": "llama3-2-3b"}, 1_000.0)])
    if "gateway_pool_replica_up" in query:
        assert "[30d:5m]" in query  # a subquery: the mean number of live replicas over the window
        return vector([({"pool": "small"}, 2.5), ({"pool": "medium"}, 1.5)])
    return vector([])  # load failures, copy failed: none


def test_report_over_the_prometheus_http_api(served: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    served["api"] = api_answers
    out = run_json(capsys, "--prometheus", served["url"], "--match", 'namespace="model-farm"')
    assert all('namespace="model-farm"' in q for q in served["queries"])
    assert out["window_seconds"] == 30 * 86400
    assert [r["model"] for r in out["models"]] == ["bge-base-en", "llama3-2-3b"]
    llama = out["models"][1]
    assert llama["requests"] == 41_000 and llama["errors_5xx"] == 1_000
    assert llama["mean_cold_load_seconds"] == pytest.approx(2.5)
    assert {g["name"]: g["replicas"] for g in out["groups"] if g["kind"] == "pool"} == {"small": 2.5, "medium": 1.5}
    assert len(out["idle"]) == len(load(CONFIG).models) - 2


def test_an_api_error_is_one_line(served: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    served["api"] = lambda q: (400, {"status": "error", "errorType": "bad_data", "error": "invalid parameter"})
    assert main(["farm", "report", str(CONFIG), "--prometheus", served["url"]]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "bad_data: invalid parameter" in err and "Traceback" not in err


def test_an_amp_workspace_url_is_sigv4_signed_for_aps(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY")
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    url = "https://aps-workspaces.eu-west-1.amazonaws.com/workspaces/ws-1/api/v1/query?query=up"
    headers = farm_cmd._sigv4_headers(url)
    assert headers["Authorization"].startswith("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/")
    assert "/eu-west-1/aps/aws4_request" in headers["Authorization"] and "X-Amz-Date" in headers


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--metrics", "/nonexistent/metrics.prom"], "--metrics /nonexistent/metrics.prom: no such file"),
        (["--metrics", "http://127.0.0.1:9/metrics"], "--metrics http://127.0.0.1:9/metrics: cannot read it"),
        (["--metrics", str(CONFIG), "--hourly-cost", "tiny=1"], "--hourly-cost tiny: not a pool or dedicated model"),
        (["--metrics", str(CONFIG), "--hourly-cost", "small"], "--hourly-cost 'small': give NAME=USD"),
        (["--metrics", str(CONFIG), "--window", "a month"], "--window 'a month': give a Prometheus duration"),
        (["--prometheus", "http://127.0.0.1:9", "--interval", "5"], "--interval goes with --metrics"),
    ],
)
def test_user_errors_are_one_line(args: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["farm", "report", str(CONFIG), *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"cpu-inference farm: {message}") and err.count("\n") == 1, err


def test_a_config_that_is_not_a_farm_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["farm", "report", str(ROOT / "examples" / "slm-prefilter-eks.yaml"), "--metrics", str(CONFIG)]) == 2
    assert "farm report reads a model-farm config" in capsys.readouterr().err
