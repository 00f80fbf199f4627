"""Overload is not an error: when the endpoint's container is full, the image's own adapter answers 429 +
Retry-After, SageMaker Runtime hands that to callers as ModelError (HTTP 424) with OriginalStatusCode 429, and
the benchmark counts such requests as rejected, apart from errors. The full adapter is the real one
(containers/inference_runtime/sagemaker_adapter.py) with its admission slots taken; it answers before any engine
is involved, so no engine runs here."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import botocore.session
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from cpu_inference.evaluation.bench import BenchPlan, run_bench
from cpu_inference.evaluation.client import OpenAIClient, chat_body, make_client
from cpu_inference.evaluation.loadgen import LoadSettings, load_prompts
from cpu_inference.evaluation.pricing import Price
from cpu_inference.evaluation.report import bench_markdown
from cpu_inference.evaluation.stats import meets_target, summarize
from tests.evaluation.sagemaker_emulator import SageMakerRuntimeEmulator, sagemaker_container

NO_ENGINE = "http://127.0.0.1:9"  # a full adapter never reaches its engine
HI = [{"role": "user", "content": "Hi"}]
MODEL_ERROR = botocore.session.get_session().get_service_model("sagemaker-runtime").shape_for("ModelError")


@pytest.fixture
def aws_test_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for k, v in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_CONFIG_FILE": str(tmp_path / "none"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
    }.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    monkeypatch.delenv("AWS_PROFILE", raising=False)


@pytest.fixture
def full_endpoint(aws_test_credentials: None) -> Iterator[SageMakerRuntimeEmulator]:
    with (
        sagemaker_container(NO_ENGINE, max_in_flight=2, busy=True) as container,
        SageMakerRuntimeEmulator(container, "slm-endpoint", region="eu-west-1") as emu,
    ):
        yield emu


def test_a_full_container_reaches_botocore_as_model_error_424_with_the_429_inside(
    full_endpoint: SageMakerRuntimeEmulator,
) -> None:
    runtime = botocore.session.get_session().create_client(
        "sagemaker-runtime",
        region_name="eu-west-1",
        endpoint_url=full_endpoint.url,
        config=Config(retries={"total_max_attempts": 1}),
    )
    with pytest.raises(ClientError) as err:
        runtime.invoke_endpoint(
            EndpointName="slm-endpoint", Body=json.dumps({"messages": HI}).encode(), ContentType="application/json"
        )
    resp = err.value.response
    assert (
        resp["Error"]["Code"] == "ModelError"
        and resp["ResponseMetadata"]["HTTPStatusCode"] == MODEL_ERROR.metadata["error"]["httpStatusCode"] == 424
    )
    assert (
        resp["OriginalStatusCode"] == 429 and "busy: 2 requests in flight" in resp["OriginalMessage"]
    )  # the adapter's own answer
    assert "retry-after" not in resp["ResponseMetadata"]["HTTPHeaders"]  # ModelError carries no Retry-After
    assert full_endpoint.seen.rejected == []


@pytest.mark.parametrize("stream", [True, False], ids=["InvokeEndpointWithResponseStream", "InvokeEndpoint"])
def test_sagemaker_overload_is_a_rejection_not_an_error(full_endpoint: SageMakerRuntimeEmulator, stream: bool) -> None:
    client = make_client("sagemaker:slm-endpoint", region="eu-west-1", sagemaker_endpoint_url=full_endpoint.url)
    try:
        r = client.chat(chat_body(HI, max_tokens=4, stream=stream), stream=stream)
    finally:
        client.close()
    assert not r.ok and r.rejected and "ModelError" in r.error


def test_bench_reports_rejections_apart_from_errors(full_endpoint: SageMakerRuntimeEmulator) -> None:
    client = make_client("sagemaker:slm-endpoint", region="eu-west-1", sagemaker_endpoint_url=full_endpoint.url)
    plan = BenchPlan(
        endpoint="sagemaker:slm-endpoint",
        concurrency=(1, 2),
        requests=3,
        p95_ms=60_000,
        instance_type="ml.c7g.large",
        warmup=0,
        load=LoadSettings(max_tokens=4, stream=True),
    )
    try:
        report = run_bench(client, load_prompts(None), plan, Price(0.1, "--price-per-hour", "test input"))
    finally:
        client.close()
    assert [(lv["rejected"], lv["errors"], lv["ok"]) for lv in report["levels"]] == [(3, 0, 0), (3, 0, 0)]
    assert [lv["first_errors"] for lv in report["levels"]] == [[], []]
    assert report["totals"]["rejected"] == 6 and report["totals"]["errors"] == 0
    assert report["selected"] is None  # a level that refuses requests does not meet the target
    assert "| rejected (429/503) |" in bench_markdown(report)


def test_a_level_with_rejections_misses_the_target() -> None:
    from cpu_inference.evaluation.client import ChatResult

    ok = [ChatResult(True, float(i), 0.1, output_tokens=4) for i in range(9)]
    level = summarize(4, [*ok, ChatResult(False, 9.0, 0.01, error="ModelError 429", rejected=True)])
    assert (level.ok, level.errors, level.rejected, level.first_errors) == (9, 0, 1, ())
    assert not meets_target(level, 60_000) and meets_target(level, 60_000, max_error_rate=0.1)


class _Full(BaseHTTPRequestHandler):
    """An OpenAI-compatible front that is full (as the router or gateway past max_in_flight): 429 + Retry-After."""

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        body = b'{"error": {"code": 429, "message": "overloaded", "type": "rate_limit_error"}}'
        self.send_response(429)
        self.send_header("Retry-After", "1")
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def test_openai_429_is_a_rejection() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Full)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    client = OpenAIClient(f"http://127.0.0.1:{server.server_address[1]}")
    try:
        r = client.chat(chat_body(HI, max_tokens=4, stream=True), stream=True)
    finally:
        client.close()
        server.shutdown()
        server.server_close()
    assert not r.ok and r.rejected and r.error.startswith("HTTP 429")
