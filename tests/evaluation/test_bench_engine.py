"""The bench load generator against the real llama-server (SmolLM2-135M) on loopback, over both
endpoint kinds: the OpenAI URL, and SageMaker Runtime (botocore, SigV4, event streams) through a
loopback emulator in front of the same engine. Token counts are checked against the engine's own
Prometheus counter."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cpu_inference.evaluation.bench import BenchPlan, run_bench
from cpu_inference.evaluation.client import OpenAIClient, chat_body, make_client
from cpu_inference.evaluation.loadgen import LoadSettings, load_prompts
from cpu_inference.evaluation.pricing import Price
from cpu_inference.evaluation.report import write_bench_report
from tests.evaluation.helpers import tokens_predicted
from tests.evaluation.sagemaker_emulator import SageMakerRuntimeEmulator

pytestmark = pytest.mark.engine

PRICE = Price(1.1592, "--price-per-hour", "test input")


def assert_tokens_agree(report: dict, engine_delta: int) -> None:
    measured = report["totals"]["output_tokens"] + report["totals"]["warmup_output_tokens"]
    assert engine_delta > 0
    assert abs(measured - engine_delta) <= 0.02 * engine_delta, (measured, engine_delta)


def test_streamed_bench_agrees_with_engine_metrics(smol_url: str, tmp_path: Path) -> None:
    prompts = load_prompts(None)
    plan = BenchPlan(
        endpoint=smol_url,
        concurrency=(1, 2, 4),
        requests=4,
        p95_ms=60_000,
        instance_type="c7g.large",
        warmup=1,
        load=LoadSettings(max_tokens=16),
    )
    client = OpenAIClient(smol_url)
    before = tokens_predicted(smol_url)
    try:
        report = run_bench(client, prompts, plan, PRICE)
    finally:
        client.close()
    assert_tokens_agree(report, tokens_predicted(smol_url) - before)

    assert [lv["concurrency"] for lv in report["levels"]] == [1, 2, 4]
    for lv in report["levels"]:
        assert lv["ok"] == lv["requests"] == 4, lv["first_errors"]
        # Streaming gives TTFT, and it precedes completion.
        assert 0 < lv["ttft_p50_ms"] <= lv["e2e_p50_ms"] <= lv["e2e_p95_ms"] <= lv["e2e_p99_ms"]
        assert lv["tpot_p50_ms"] > 0 and lv["output_tok_s"] > 0 and lv["qps"] > 0
        assert lv["output_tokens"] <= 4 * 16
    # A generous target: every level meets it, so the search must pick the highest.
    assert report["selected"]["concurrency"] == 4
    sel = report["selected"]
    assert sel["cost_per_1k_queries_usd"] == pytest.approx(1.1592 / (sel["qps"] * 3600) * 1000, rel=1e-6)

    paths = write_bench_report(report, tmp_path / "out")
    assert json.loads(paths["json"].read_text())["selected"]["concurrency"] == 4
    assert paths["plot"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    md = paths["markdown"].read_text()
    assert "**yes (selected)**" in md and "$ per 1k queries" in md


def test_ignore_eos_fixes_output_length(smol_url: str) -> None:
    client = OpenAIClient(smol_url)
    try:
        r = client.chat(
            LoadSettings(max_tokens=20, ignore_eos=True).body([{"role": "user", "content": "Hi"}]), stream=True
        )
    finally:
        client.close()
    assert r.ok and r.output_tokens == 20 and r.finish_reason == "length"


def test_http_errors_are_counted_not_raised(smol_url: str) -> None:
    client = OpenAIClient(smol_url)
    try:
        # A prompt longer than a slot's context: the engine answers 400, the client records the failure.
        r = client.chat(
            chat_body([{"role": "user", "content": "word " * 10000}], max_tokens=4, stream=True), stream=True
        )
    finally:
        client.close()
    assert not r.ok and r.error.startswith("HTTP 400")


@pytest.fixture
def aws_test_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Static test credentials for signing requests to the loopback emulator; no profile or IMDS lookups."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


@pytest.mark.parametrize("stream", [True, False], ids=["InvokeEndpointWithResponseStream", "InvokeEndpoint"])
def test_sagemaker_endpoint_through_botocore(
    smol_url: str, sagemaker_container_url: str, aws_test_credentials: None, stream: bool
) -> None:
    """botocore (SigV4) -> SageMaker Runtime front end (emulated, signature verified) -> the image's
    /invocations adapter -> llama-server."""
    with SageMakerRuntimeEmulator(sagemaker_container_url, "slm-endpoint", region="eu-west-1") as emu:
        client = make_client("sagemaker:slm-endpoint", region="eu-west-1", sagemaker_endpoint_url=emu.url)
        plan = BenchPlan(
            endpoint="sagemaker:slm-endpoint",
            concurrency=(1, 2),
            requests=3,
            p95_ms=60_000,
            instance_type="ml.c7g.large",
            warmup=1,
            load=LoadSettings(max_tokens=12, stream=stream),
        )
        before = tokens_predicted(smol_url)
        try:
            report = run_bench(client, load_prompts(None), plan, PRICE)
        finally:
            client.close()
        delta = tokens_predicted(smol_url) - before
        seen = list(emu.seen.requests)
        rejected = list(emu.seen.rejected)
    assert rejected == []  # every request carried a valid SigV4 signature
    assert_tokens_agree(report, delta)
    assert all(lv["ok"] == 3 for lv in report["levels"]), [lv["first_errors"] for lv in report["levels"]]
    assert report["endpoint_kind"] == "sagemaker"
    op = "invocations-response-stream" if stream else "invocations"
    assert len(seen) == 1 + 2 * 3 and all(r["path"] == f"/endpoints/slm-endpoint/{op}" for r in seen)
    for r in seen:
        assert (
            r["auth"]["service"] == "sagemaker" and r["auth"]["region"] == "eu-west-1" and r["auth"]["key"] == "testing"
        )
        assert r["content_type"] == "application/json"
        body = json.loads(r["body"])  # the container receives a plain OpenAI chat body
        assert body["stream"] is stream and body["max_tokens"] == 12 and body["messages"][0]["role"] == "user"
    ttft = report["levels"][0]["ttft_p50_ms"]
    assert (ttft is not None and ttft > 0) if stream else ttft is None


def test_sagemaker_errors_are_reported(
    sagemaker_container_url: str, aws_test_credentials: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    hi = chat_body([{"role": "user", "content": "Hi"}], max_tokens=4, stream=True)
    with SageMakerRuntimeEmulator(sagemaker_container_url, "slm-endpoint") as emu:
        client = make_client("sagemaker:other-endpoint", region="us-east-1", sagemaker_endpoint_url=emu.url)
        try:
            missing = client.chat(hi, stream=True)
        finally:
            client.close()
        # Signed for another region: AWS rejects the credential scope.
        client = make_client("sagemaker:slm-endpoint", region="eu-west-1", sagemaker_endpoint_url=emu.url)
        try:
            wrong_region = client.chat(hi, stream=True)
        finally:
            client.close()
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
        client = make_client("sagemaker:slm-endpoint", region="us-east-1", sagemaker_endpoint_url=emu.url)
        try:
            bad_secret = client.chat(hi, stream=True)
        finally:
            client.close()
        rejected = list(emu.seen.rejected)
    assert not missing.ok and "ValidationError" in missing.error and "other-endpoint" in missing.error
    assert not wrong_region.ok and "InvalidSignatureException" in wrong_region.error
    assert (
        not bad_secret.ok and "InvalidSignatureException" in bad_secret.error and "does not match" in bad_secret.error
    )
    assert rejected == ["InvalidSignatureException", "InvalidSignatureException"]
