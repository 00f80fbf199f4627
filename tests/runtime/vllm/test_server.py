"""The real vLLM CPU server, started by the container's entrypoint in EKS mode from the env the library renders
(conftest.py, one start for the group): chat, streaming, the two queue gauges KEDA scales on, and what vLLM does
with the llama-only request fields our router and adapter may send."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.runtime.router.harness import metric

pytestmark = pytest.mark.vllm


def chat(url: str, text: str = "Say hello.", *, max_tokens: int = 8, timeout: float = 120, **extra) -> httpx.Response:
    body = {"messages": [{"role": "user", "content": text}], "max_tokens": max_tokens, "temperature": 0, **extra}
    return httpx.post(f"{url}/v1/chat/completions", json=body, timeout=timeout)


def test_started_from_the_rendered_env(vllm_eks):
    """The process really runs with the sized values (vLLM echoes its config in the log) and serves the name."""
    log = vllm_eks.log.read_text(errors="replace")
    assert "--max-num-seqs 4" in log and "--max-model-len 2048" in log and "--dtype bfloat16" in log
    assert "VLLM_CPU_OMP_THREADS_BIND='nobind'" in log  # the rendered binding reached vLLM's OMP setup
    # The image's preload directory (tcmalloc; Intel OpenMP on x86) reached vLLM's LD_PRELOAD: its worker checks
    # both and warns "<lib> is not found in LD_PRELOAD" otherwise (vllm/v1/worker/cpu_worker.py).
    preloaded = [p.name for p in Path(vllm_eks.env["SERVE_PRELOAD_DIR"]).iterdir()]
    assert preloaded, "nothing to preload: install libtcmalloc-minimal4 (apt), as the image does"
    for lib in ("libtcmalloc", "libiomp"):
        if any(lib in name for name in preloaded):
            assert f"{lib} is not found in LD_PRELOAD" not in log
    models = httpx.get(f"{vllm_eks.url}/v1/models", timeout=10).json()
    assert [m["id"] for m in models["data"]] == [vllm_eks.model]
    assert models["data"][0]["max_model_len"] == 2048


def test_chat_answers(vllm_eks):
    resp = chat(vllm_eks.url, "What is the capital of France?", max_tokens=12)
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["model"] == vllm_eks.model
    assert body["choices"][0]["message"]["content"].strip()
    assert 0 < body["usage"]["completion_tokens"] <= 12


def test_stream_arrives_in_chunks(vllm_eks):
    """SSE events arrive one by one as tokens are generated, not as one body at the end."""
    body = {
        "messages": [{"role": "user", "content": "Count from one to ten."}],
        "max_tokens": 16,
        "temperature": 0,
        "stream": True,
    }
    arrivals: list[float] = []
    events: list[str] = []
    with httpx.stream("POST", f"{vllm_eks.url}/v1/chat/completions", json=body, timeout=120) as resp:
        assert resp.status_code == 200
        assert resp.headers["content-type"].startswith("text/event-stream")
        for line in resp.iter_lines():
            if line.startswith("data: "):
                events.append(line[6:])
                arrivals.append(time.monotonic())
    assert events[-1] == "[DONE]"
    assert len(events) >= 8  # role, tokens, finish, [DONE]
    assert arrivals[-1] - arrivals[0] > 0.05  # spread over the generation


def test_queue_gauges_for_keda(vllm_eks):
    """/metrics has the two gauges the ScaledObject queries (engines.queue_metrics("vllm")), and `running` is >= 1
    while a generation is in flight (0 before and after)."""
    from cpu_inference import engines

    running, waiting = engines.queue_metrics("vllm")
    text = httpx.get(f"{vllm_eks.url}/metrics", timeout=10).text
    assert f"{running}{{" in text and f"{waiting}{{" in text
    labels = {"model_name": vllm_eks.model}
    assert metric(vllm_eks.url, running, **labels) == 0
    seen: list[float] = []
    # Long enough (ignore_eos: the whole budget) that a generation outlasts one /metrics scrape on a loaded machine: a
    # warm run with helpers' engines beside it saw the only sample taken after the generation ended.
    worker = threading.Thread(
        target=chat,
        args=(vllm_eks.url, "Write a long story about a dragon."),
        kwargs={"max_tokens": 400, "ignore_eos": True},
    )
    worker.start()
    try:
        deadline = time.monotonic() + 60
        while worker.is_alive() and time.monotonic() < deadline and not any(v >= 1 for v in seen):
            seen.append(metric(vllm_eks.url, running, **labels))
            time.sleep(0.1)
    finally:
        worker.join()
    assert max(seen) >= 1, seen
    assert metric(vllm_eks.url, waiting, **labels) == 0
    assert metric(vllm_eks.url, running, **labels) == 0


def test_llama_only_fields_are_ignored_not_refused(vllm_eks):
    """The router sends llama.cpp's cache_prompt, the llama adapter t_max_predict_ms: vLLM answers 200 and ignores
    them (vllm/entrypoints/serve/engine/protocol.py drops unknown fields). So t_max_predict_ms is no time limit here:
    a 1 ms limit still generates every asked token — which is why the vLLM adapter leaves it out and relies on its
    hard budget (entrypoint.VllmSageMakerAdapter)."""
    resp = chat(
        vllm_eks.url,
        "Write a poem about the sea.",
        max_tokens=24,
        ignore_eos=True,
        cache_prompt=True,
        t_max_predict_ms=1,
        n_probs=3,
    )
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["usage"]["completion_tokens"] == 24
    assert body["choices"][0]["finish_reason"] == "length"
