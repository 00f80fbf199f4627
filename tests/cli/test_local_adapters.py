"""`cpu-inference local` serving a pooled base's LoRA adapter (issue 26): with --stand-ins the SmolLM2 stand-in's
adapter (`make lora`: every answer {"tuned": true}) serves the config's adapter, the pool's preset gives the base's
section its `lora` (the chart's preset, /models moved to the local directory of links at the catalog's keys), and
through the OpenAI SDK, concurrently, the adapter's name answers the tuned way and the base's does not."""

from __future__ import annotations

import json
import signal
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import openai
import pytest

from cpu_inference.cli.local_models import SMOLLM2
from cpu_inference.cli.local_plan import Engine, serve_adapters
from cpu_inference.cli.main import UserError
from tests.cli.test_local import LocalRun, _children, _environ

BASE, ADAPTER = "chat-small", "chat-json"
FARM = f"""
pattern: model-farm
farm:
  pools:
    - {{name: small, cpu: 2, memory_gib: 4, models_max: 1, replication: 1, replicas: {{min: 1, max: 2}}}}
models:
  - name: {BASE}
    source: {{hf_repo: HuggingFaceTB/SmolLM2-135M-Instruct-GGUF, file: smollm2-135m-instruct-q4_1.gguf}}
    parameters_billions: 0.135
    quantization: Q4_1
    context_window: 2048
    context_per_slot: 512
    parallel_slots: 2
    task: chat
    adapters:
      - name: {ADAPTER}
        source: {{hf_repo: example/smollm2-json-lora-GGUF, file: smollm2-json-lora.gguf, revision: 0123456789abcdef0123456789abcdef01234567}}
"""


def _answer(url: str, model: str) -> str:
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0, timeout=300)
    out = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Name three colours."}], max_tokens=24, temperature=0
    )
    return out.choices[0].message.content or ""


@pytest.mark.engine
def test_local_serves_a_pooled_bases_adapter_through_the_gateway(tmp_path, llama_server_bin) -> None:
    from tests.support.lora import is_tuned, lora_adapter_path

    cfg = tmp_path / "farm.yaml"
    cfg.write_text(FARM)
    run = LocalRun(
        cfg, "--llama-server", str(llama_server_bin), "--stand-ins", "--threads", "1", "--log-dir", str(tmp_path / "l")
    )
    try:
        run.wait_for("Ctrl-C stops everything")
        out = "".join(run.seen)
        assert f"adapter {ADAPTER} of {BASE}: " in out, out
        (gateway_pid,) = [p for p in _children(run.proc.pid) if "slm_router" in Path(f"/proc/{p}/cmdline").read_text()]
        (entry,) = json.loads(_environ(gateway_pid)["ROUTER_CONFIG_JSON"])["gateway"]["pools"]
        (adapter,) = entry["adapters"]
        assert (adapter["name"], adapter["base"]) == (ADAPTER, BASE)
        assert Path(adapter["path"]).resolve() == lora_adapter_path().resolve()
        preset = next((tmp_path / "l").glob("pool-small/preset.ini")).read_text()
        assert f"lora = {adapter['path']}\n" in preset and "lora-init-without-apply = true" in preset
        names = [ADAPTER, BASE] * 2
        with ThreadPoolExecutor(len(names)) as ex:
            answers = list(ex.map(lambda n: (n, _answer(run.url, n)), names))
        for name, text in answers:
            assert is_tuned(text) == (name == ADAPTER), (name, text)
        code, out = run.stop(signal.SIGTERM)
        assert code == 0, out
    finally:
        run.kill()


def test_an_adapter_without_a_local_file_is_refused_in_one_line() -> None:
    """Without --stand-ins or --model-map for the adapter, `local` names the adapter and the fix (it does not download
    adapters yet); a stand-in base other than SmolLM2 has no stand-in adapter."""

    class _Model:
        adapters = [type("A", (), {"name": ADAPTER, "scale": 1.0})()]

    e = Engine(BASE, _Model(), 1, 512, SMOLLM2)
    with pytest.raises(UserError, match=f"adapter {ADAPTER} of {BASE}: .*--model-map {ADAPTER}=PATH"):
        serve_adapters([e], {}, stand_ins=False)
    gemma = Engine(BASE, _Model(), 1, 512, "Gemma-3-270M Q4_K_M")
    with pytest.raises(UserError, match="has no stand-in adapter"):
        serve_adapters([gemma], {}, stand_ins=True)
    mapped = Engine(BASE, _Model(), 1, 512, SMOLLM2)
    notes = serve_adapters([mapped], {ADAPTER: Path("/x/a.gguf")}, stand_ins=False)
    assert mapped.adapters == [(ADAPTER, Path("/x/a.gguf"), 1.0)] and "--model-map" in notes[0]
