"""The real adapter on the real engine (issue 26): the pinned llama-server with the SmolLM2 stand-in as the base and the
LoRA trained offline (`make lora`, tests/support/lora.py) loaded with --lora but not applied
(--lora-init-without-apply). Through the OpenAI SDK, concurrently, requests that name the adapter in `lora` answer the
tuned way and requests for the base answer as the base, on one server: llama.cpp applies a request's adapters to that
request only (tools/server/server-common.cpp parse_lora_request of the pin; server-context.cpp
server_slot::can_batch_with never batches slots of different adapter sets together).

A base request carries the base's own `lora` (inference_runtime.lora.base_lora: every adapter at scale 0), as the
gateway sends it: with this pin a request WITHOUT `lora` runs with every adapter applied, --lora-init-without-apply
notwithstanding (the last test pins that; the sources are in inference_runtime/lora.py's docstring)."""

from __future__ import annotations

import json
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import openai
import pytest

from inference_runtime.lora import base_lora, request_lora
from tests.support.engine import llama_server
from tests.support.lora import TUNED_REPLY, is_tuned, lora_adapter_path

# Prompts the adapter never trained on (scripts/train_lora.py trains on others).
PROMPTS = [
    "Name three colours.",
    "What is the boiling point of water?",
    "Write one sentence about dogs.",
    "Who painted the Mona Lisa?",
]


def _ask(client: openai.OpenAI, prompt: str, adapter: bool | None) -> str:
    """adapter: True applies adapter 0, False sends the base's zero `lora`, None sends no `lora` at all."""
    # The pin's request field: "lora": [{"id": i, "scale": s}] (server-common.cpp parse_lora_request); the SDK passes
    # extra_body through into the JSON body.
    extra = None if adapter is None else {"lora": request_lora(0, 1.0) if adapter else base_lora()}
    out = client.chat.completions.create(
        model="smollm2",
        messages=[{"role": "user", "content": prompt}],
        max_tokens=16,
        temperature=0,
        extra_body=extra,
    )
    return out.choices[0].message.content or ""


@pytest.fixture(scope="module")
def server(llama_server_bin: Path, smollm2_gguf: Path, tmp_path_factory: pytest.TempPathFactory):
    adapter = lora_adapter_path()
    log = tmp_path_factory.mktemp("lora") / "llama-server.log"
    args = ("--lora", str(adapter), "--lora-init-without-apply", "-c", "2048", "-np", "4", "-t", "2")
    with llama_server(llama_server_bin, smollm2_gguf, *args, log=log) as url:
        yield url, adapter


@pytest.mark.engine
def test_adapter_requests_are_tuned_and_base_requests_are_not_concurrently(server) -> None:
    url, _ = server
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0, timeout=120)
    jobs = [(prompt, adapter) for prompt in PROMPTS for adapter in (True, False)]
    with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        answers = list(pool.map(lambda job: _ask(client, *job), jobs))
    tuned = [answer for (_, adapter), answer in zip(jobs, answers, strict=True) if adapter]
    base = [answer for (_, adapter), answer in zip(jobs, answers, strict=True) if not adapter]
    assert all(is_tuned(answer) for answer in tuned), tuned
    assert not any(is_tuned(answer) for answer in base), base
    assert all(TUNED_REPLY not in answer for answer in base), base


@pytest.mark.engine
def test_lora_adapters_lists_the_loaded_adapter_with_its_path(server) -> None:
    url, adapter = server
    # GET /lora-adapters: [{id, path, scale, ...}] (tools/server/README.md of the pin, server-task.cpp:1660).
    with urllib.request.urlopen(f"{url}/lora-adapters", timeout=10) as r:
        listed = json.load(r)
    assert [(entry["id"], entry["path"]) for entry in listed] == [(0, str(adapter))]


@pytest.mark.engine
def test_a_request_without_lora_runs_with_the_adapter_applied(server) -> None:
    """The pin's behaviour the gateway's base_lora exists for: --lora sets scale 1.0 (common/arg.cpp:2959), which
    --lora-init-without-apply leaves as is (it only skips the first apply, common/common.cpp:1412) and which a request
    without `lora` runs with (server-context.cpp:1703). If a new pin changes this, base_lora may go."""
    url, _ = server
    with urllib.request.urlopen(f"{url}/lora-adapters", timeout=10) as r:
        assert [entry["scale"] for entry in json.load(r)] == [1.0]
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0, timeout=120)
    assert is_tuned(_ask(client, PROMPTS[0], None))
