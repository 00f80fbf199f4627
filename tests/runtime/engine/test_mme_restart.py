"""A multi-model endpoint's child that crashes is restarted in place (review F8): SageMaker still believes the model
is loaded (the contract has no way to say otherwise: GET /models/<name> and the list keep it), so an invoke is
503 + Retry-After while the child restarts, never 404 "not loaded"; only a model whose restarts keep failing is
dropped. The container's real entrypoint and real llama-server children, killed with SIGKILL as the OOM killer does."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.runtime.engine.serving import ENGINE_DIR, chat_body
from tests.runtime.engine.test_mme_contract import mme_container
from tests.support.engine import process_gone

pytestmark = pytest.mark.engine

MIB = 1024 * 1024
ENGINE = {"ctx-size": "256", "parallel": "1", "threads": "1"}

if str(ENGINE_DIR) not in sys.path:
    sys.path.insert(0, str(ENGINE_DIR))


def test_a_killed_child_is_restarted_under_its_name_answering_503_until_healthy(
    llama_server_bin: Path, smollm2_gguf: Path, tmp_path: Path
) -> None:
    with mme_container(llama_server_bin, tmp_path, mode="serve-mme", MME_MEMORY_BUDGET_BYTES=str(4096 * MIB)) as mme:
        url = mme.arrive("m-1", smollm2_gguf, ENGINE)
        assert mme.load("m-1", url).status_code == 200, mme.log_text()
        (child,) = mme.children()
        os.kill(child, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while not process_gone(child):
            assert time.monotonic() < deadline, f"child {child} survived SIGKILL"
            time.sleep(0.02)
        statuses = []
        deadline = time.monotonic() + 120
        while True:
            r = httpx.post(f"{mme.url}/models/m-1/invoke", json=chat_body("Say hi.", max_tokens=2), timeout=60)
            statuses.append(r.status_code)
            # SageMaker's view all along: the model is loaded (it would otherwise never be invoked again here).
            assert httpx.get(f"{mme.url}/models/m-1", timeout=5).status_code == 200
            assert [m["modelName"] for m in httpx.get(f"{mme.url}/models", timeout=5).json()["models"]] == ["m-1"]
            if r.status_code == 200:
                break
            assert r.status_code == 503 and int(r.headers["retry-after"]) >= 1, r.text
            assert time.monotonic() < deadline, f"not restarted: {statuses}\n{mme.log_text()}"
            time.sleep(0.05)
        assert statuses[0] == 503 and statuses[-1] == 200, statuses
        (restarted,) = mme.children()
        assert restarted != child and "m-1" in mme.child_args()  # the same model_name, a new llama-server
        assert "llama-server of model m-1 exited with -9: restarting it" in mme.log_text()
        assert "model m-1 restarted" in mme.log_text()


def test_a_child_whose_restarts_keep_failing_is_dropped_after_the_limit(
    llama_server_bin: Path, smollm2_gguf: Path, tmp_path: Path
) -> None:
    from mme_adapter import MAX_CHILD_RESTARTS

    with mme_container(llama_server_bin, tmp_path, mode="serve-mme", MME_MEMORY_BUDGET_BYTES=str(4096 * MIB)) as mme:
        url = mme.arrive("m-2", smollm2_gguf, ENGINE)
        assert mme.load("m-2", url).status_code == 200, mme.log_text()
        # The artifact turns bad under the running child (a new file renamed over it; the child keeps the old one):
        # every restart reads the broken GGUF and exits while loading.
        gguf = Path(url) / smollm2_gguf.name
        broken = gguf.with_suffix(".tmp")
        broken.write_bytes(b"GGUF" + b"\0" * 60)
        os.replace(broken, gguf)
        (child,) = mme.children()
        os.kill(child, signal.SIGKILL)
        first = httpx.post(f"{mme.url}/models/m-2/invoke", json=chat_body(max_tokens=2), timeout=60)
        assert first.status_code == 503 and int(first.headers["retry-after"]) >= 1, first.text
        deadline = time.monotonic() + 120
        while httpx.get(f"{mme.url}/models/m-2", timeout=5).status_code == 200:
            assert time.monotonic() < deadline, mme.log_text()
            time.sleep(0.1)
        log = mme.log_text()
        assert log.count("restart of model m-2 failed") == MAX_CHILD_RESTARTS, log
        assert f"model m-2 dropped after {MAX_CHILD_RESTARTS} failed restarts" in log
        assert httpx.post(f"{mme.url}/models/m-2/invoke", json=chat_body(), timeout=10).status_code == 404
        assert mme.children() == []
        assert httpx.get(f"{mme.url}/models", timeout=5).json() == {"models": []}
