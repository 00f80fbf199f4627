"""The adapter's connections to the engine: keep-alive reuse, the stale-connection retry, engine down.

The adapter runs in-process (its own event loop thread) so the test can read its counters; the engine
is the real llama-server on loopback.
"""

from __future__ import annotations

import asyncio
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from inference_runtime.engine_flags import EngineConfig, llama_server_args
from inference_runtime.sagemaker_adapter import ENGINE_KEEPALIVE_SECONDS, SageMakerAdapter
from tests.runtime.engine.serving import chat_body
from tests.support.engine import free_port, wait_healthy

pytestmark = pytest.mark.engine


class AdapterThread:
    """A SageMakerAdapter serving on 127.0.0.1 from a background event loop."""

    def __init__(self, adapter: SageMakerAdapter):
        self.adapter = adapter
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        port = asyncio.run_coroutine_threadsafe(adapter.start("127.0.0.1", 0), self.loop).result(10)
        self.url = f"http://127.0.0.1:{port}"

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.adapter.close(grace=0), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@pytest.fixture(scope="module")
def engine_port(llama_server_bin: Path, smollm2_gguf: Path) -> Iterator[int]:
    port = free_port()
    cfg = EngineConfig(
        model=str(smollm2_gguf), threads=1, parallel=2, ctx_per_slot=512, host="127.0.0.1", port=port, cache_ram_mib=64
    )
    proc = subprocess.Popen(
        [str(llama_server_bin), *llama_server_args(cfg)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        wait_healthy(f"http://127.0.0.1:{port}", proc)
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def test_stale_keepalive_connection_is_retried_once(engine_port: int) -> None:
    """An idle pooled connection outlives the engine's keep-alive (5 s): the engine closes it, and the next
    request does not fail on it: the pool sees the EOF and drops it unused (http1.KeepAlivePool), or, when the
    FIN races the request, finds EOF on it and re-sends once on a fresh connection; the client sees a plain 200."""
    keeps_too_long = AdapterThread(SageMakerAdapter("127.0.0.1", engine_port, max_in_flight=4, pool_idle_seconds=60))
    default = AdapterThread(SageMakerAdapter("127.0.0.1", engine_port, max_in_flight=4))
    try:
        with httpx.Client(timeout=60) as client:
            for a in (keeps_too_long, default):
                assert client.post(f"{a.url}/invocations", json=chat_body(max_tokens=2)).status_code == 200
            time.sleep(ENGINE_KEEPALIVE_SECONDS + 1)
            for a in (keeps_too_long, default):
                r = client.post(f"{a.url}/invocations", json=chat_body(max_tokens=2))
                assert r.status_code == 200, r.text
        assert keeps_too_long.adapter.stats.stale_retries + keeps_too_long.adapter.pool.closed_by_peer == 1
        # The default pool drops idle connections before the engine does: no retry needed.
        assert default.adapter.stats.stale_retries == 0
        # Both kept one engine connection across back-to-back requests (keep-alive reuse).
        assert len(keeps_too_long.adapter.pool._idle) == len(default.adapter.pool._idle) == 1
    finally:
        keeps_too_long.close()
        default.close()


def test_back_to_back_requests_reuse_one_engine_connection(engine_port: int) -> None:
    a = AdapterThread(SageMakerAdapter("127.0.0.1", engine_port, max_in_flight=4))
    try:
        with httpx.Client(timeout=60) as client:
            for _ in range(3):
                assert client.post(f"{a.url}/invocations", json=chat_body(max_tokens=2)).status_code == 200
        assert len(a.adapter.pool._idle) == 1
        assert a.adapter.stats.stale_retries == 0 and a.adapter.stats.accepted == 3
    finally:
        a.close()


def test_engine_down_is_503_with_retry_after() -> None:
    a = AdapterThread(SageMakerAdapter("127.0.0.1", free_port(), max_in_flight=2, retry_after=3))
    try:
        with httpx.Client(timeout=30) as client:
            r = client.post(f"{a.url}/invocations", json=chat_body())
            assert r.status_code == 503 and r.headers["retry-after"] == "3"
            ping = client.get(f"{a.url}/ping")
            assert ping.status_code == 503 and ping.headers["retry-after"] == "3"
        assert a.adapter.in_flight == 0  # a failed request releases its admission
    finally:
        a.close()
