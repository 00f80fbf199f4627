"""SageMaker mode process lifecycle: SIGTERM drains and exits 0; a dead engine takes the container down."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.runtime.engine.serving import chat_body, metric, sagemaker_endpoint, start_endpoint, stop_endpoint

pytestmark = pytest.mark.engine


def test_sigterm_finishes_the_request_in_flight_then_exits_0(llama_server_bin: Path, smollm2_gguf: Path, tmp_path: Path) -> None:
    ep = start_endpoint(llama_server_bin, smollm2_gguf, tmp_path, ADAPTER_DRAIN_SECONDS="120")
    engine = ep.engine_pid()
    result: dict[str, int] = {}

    def long_request() -> None:
        r = httpx.post(f"{ep.url}/invocations", json=chat_body("Write a long story.", max_tokens=32, ignore_eos=True), timeout=120)
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
    assert not Path(f"/proc/{engine}").exists() or "zombie" in Path(f"/proc/{engine}/status").read_text()


def test_engine_death_exits_the_container_nonzero(llama_server_bin: Path, smollm2_gguf: Path, tmp_path: Path) -> None:
    with sagemaker_endpoint(llama_server_bin, smollm2_gguf, tmp_path) as ep:
        os.kill(ep.engine_pid(), signal.SIGKILL)
        assert ep.proc.wait(timeout=30) != 0
        assert "llama-server exited with -9" in ep.log.read_text(errors="replace")
