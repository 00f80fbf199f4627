"""SageMaker mode process lifecycle: SIGTERM drains and exits 0 inside SageMaker's 30 s SIGTERM → SIGKILL window,
every request in flight gets an answer or a clean error; a dead engine takes the container down."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import httpx
import pytest

from entrypoint import MAX_DRAIN_SECONDS, SIGKILL_AFTER_SECONDS, sagemaker_plan
from inference_runtime.engine_flags import EngineConfigError
from tests.runtime.engine.serving import chat_body, metric, sagemaker_endpoint, start_endpoint, stop_endpoint
from tests.support.engine import process_gone

pytestmark = pytest.mark.engine


def test_sigterm_finishes_the_request_in_flight_then_exits_0(
    llama_server_bin: Path, smollm2_gguf: Path, tmp_path: Path
) -> None:
    ep = start_endpoint(llama_server_bin, smollm2_gguf, tmp_path, ADAPTER_DRAIN_SECONDS="15")
    engine = ep.engine_pid()
    result: dict[str, int] = {}

    def long_request() -> None:
        r = httpx.post(
            f"{ep.url}/invocations", json=chat_body("Write a long story.", max_tokens=32, ignore_eos=True), timeout=120
        )
        result["status"] = r.status_code
        result["tokens"] = r.json()["usage"]["completion_tokens"]

    t = threading.Thread(target=long_request)
    t.start()
    try:
        deadline = time.monotonic() + 60
        while metric(httpx.get(f"{ep.engine_url}/metrics", timeout=10).text, "llamacpp:requests_processing") < 1:
            assert time.monotonic() < deadline, "the request never reached the engine"
            time.sleep(0.05)
        ep.proc.send_signal(signal.SIGTERM)
        assert ep.proc.wait(timeout=60) == 0, ep.log_tail()
    finally:
        stop_endpoint(ep)
    t.join(timeout=60)
    assert result == {"status": 200, "tokens": 32}
    assert process_gone(engine)


def test_engine_death_exits_the_container_nonzero(llama_server_bin: Path, smollm2_gguf: Path, tmp_path: Path) -> None:
    with sagemaker_endpoint(llama_server_bin, smollm2_gguf, tmp_path) as ep:
        os.kill(ep.engine_pid(), signal.SIGKILL)
        assert ep.proc.wait(timeout=30) != 0
        assert "llama-server exited with -9" in ep.log.read_text(errors="replace")


def test_the_default_shutdown_fits_sagemakers_sigkill_window(tmp_path: Path) -> None:
    """SIGTERM, then SIGKILL 30 s later (SageMaker hosting docs): drain + clean 503s + engine stop stay inside it
    with margin, and a drain that would not is refused at start with the variable named (the old 20 s drain +
    15 s engine stop was 35 s)."""
    (tmp_path / "m.gguf").write_bytes(b"GGUF")
    env = {"SM_MODEL_DIR": str(tmp_path), "LLAMA_SERVER_BIN": "/bin/true"}
    plan = sagemaker_plan(env, cpus=2, memory_limit=None)
    assert plan.adapter.drain_seconds == MAX_DRAIN_SECONDS and plan.shutdown_seconds <= SIGKILL_AFTER_SECONDS - 5
    with pytest.raises(
        EngineConfigError,
        match=r"ADAPTER_DRAIN_SECONDS must be in 0\.\.19, got 20: SageMaker kills the container 30 s after SIGTERM",
    ):
        sagemaker_plan({**env, "ADAPTER_DRAIN_SECONDS": "20"}, cpus=2, memory_limit=None)


def test_sigterm_past_the_drain_answers_every_request_cleanly_and_exits_on_time(
    llama_server_bin: Path, smollm2_gguf: Path, tmp_path: Path
) -> None:
    """Two long generations in flight (one streamed, one not) when SIGTERM comes, with the drain scaled down to 2 s:
    the non-streamed one gets 503 + Retry-After, the stream ends with an error event and a proper last chunk, the
    engine is stopped, and the process exits 0 within the plan's shutdown time (measured)."""
    drain = 2.0
    ep = start_endpoint(
        llama_server_bin, smollm2_gguf, tmp_path, ADAPTER_DRAIN_SECONDS=str(drain), LLAMA_CTX_PER_SLOT="4096"
    )
    engine = ep.engine_pid()
    env = {
        "SM_MODEL_DIR": str(tmp_path / "opt-ml-model"),
        "LLAMA_SERVER_BIN": str(llama_server_bin),
        "ADAPTER_DRAIN_SECONDS": str(drain),
    }
    budget = sagemaker_plan(env, cpus=1, memory_limit=None).shutdown_seconds
    long = dict(max_tokens=3000, ignore_eos=True)
    results: dict[str, object] = {}

    def plain() -> None:
        r = httpx.post(
            f"{ep.url}/invocations", json=chat_body("Count to 3000, one number per line.", **long), timeout=60
        )
        results["plain"] = (r.status_code, r.headers.get("retry-after"), r.json())

    def streamed() -> None:
        with httpx.stream(
            "POST", f"{ep.url}/invocations", json=chat_body("Tell a very long story.", stream=True, **long), timeout=60
        ) as r:
            results["stream"] = [line for line in r.iter_lines() if line]

    threads = [threading.Thread(target=plain), threading.Thread(target=streamed)]
    for t in threads:
        t.start()
    try:
        deadline = time.monotonic() + 60
        while metric(httpx.get(f"{ep.engine_url}/metrics", timeout=10).text, "llamacpp:requests_processing") < 2:
            assert time.monotonic() < deadline, "the requests never reached the engine"
            time.sleep(0.05)
        t0 = time.monotonic()
        ep.proc.send_signal(signal.SIGTERM)
        assert ep.proc.wait(timeout=60) == 0, ep.log_tail()
        took = time.monotonic() - t0
    finally:
        stop_endpoint(ep)
    for t in threads:
        t.join(timeout=30)
    print(f"SIGTERM -> exit {took:.2f} s (plan budget {budget:.1f} s)")
    assert drain <= took <= budget, f"exit {took:.1f}s after SIGTERM; budget {budget:.1f}s"
    status, retry_after, body = results["plain"]  # type: ignore[misc]
    assert (status, retry_after) == (503, "1") and body["error"]["message"] == "endpoint shutting down: retry"
    events = results["stream"]
    assert events[0].startswith("data: {") and "endpoint shutting down" in events[-1]  # type: ignore[index]
    assert process_gone(engine)
