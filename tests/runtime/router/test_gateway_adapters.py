"""LoRA adapters through the gateway (issue 26): an adapter's name routes to its base's backend with the base's name
and `lora` = [{id, scale}], the id being the adapter's position in the BACKEND's own list (never the config's order:
the gateway and the engines roll out separately), so a backend that does not list the adapter answers 503 +
Retry-After naming it, never another adapter's answer.

End to end: the real gateway (`python -m slm_router`) in front of a real pool replica (`entrypoint.py pool`: the
supervisor and the pinned router, whose child loads the base with its adapters) and a real dedicated llama-server
started with --lora; the SmolLM2 stand-in with the real adapter trained offline (`make lora`, tests/support/lora.py):
through the OpenAI SDK, concurrently, the adapter's name answers the tuned way and the base's does not. The exact body
the gateway sends (the id, the base's zero `lora`) is read from a recording backend on loopback."""

from __future__ import annotations

import json
import shutil
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from cpu_inference.engines.pool_preset import PoolModel, pool_preset
from inference_runtime.lora import base_lora
from slm_router.config import ConfigError, GatewayAdapter, GatewayModel, GatewayPool, from_dict
from tests.runtime.engine.pool_support import POLL, call, land, pool_env, run_pool, until
from tests.runtime.router.harness import metric, running_router
from tests.support.engine import free_port, llama_server

BASE, ADAPTER = "smollm2", "smollm2-json"
PROMPT = "Name three colours."


# --- a recording backend: what exactly the gateway sends ------------------------------------------------------------


class _Recorder(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, adapters: list[str]) -> None:
        self.adapters = adapters  # GET /lora-adapters: these paths, in id order
        self.bodies: list[dict[str, Any]] = []
        self.lists = 0
        super().__init__(("127.0.0.1", 0), _Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    server: _Recorder

    def _send(self, doc: object) -> None:
        raw = json.dumps(doc).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def do_GET(self) -> None:  # noqa: N802
        if self.path == "/lora-adapters":
            self.server.lists += 1
            self._send([{"id": i, "path": p, "scale": 1.0} for i, p in enumerate(self.server.adapters)])
        else:
            self._send({"status": "ok"})

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.bodies.append(body)
        self._send({"object": "chat.completion", "choices": [{"message": {"role": "assistant", "content": "ok"}}]})

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        return


@pytest.fixture
def recorder() -> Iterator[_Recorder]:
    server = _Recorder(["/m/other/a.gguf", "/m/tuned/a.gguf"])
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()


def _gateway_cfg(models: list[dict], pools: list[dict] = ()) -> dict[str, Any]:  # type: ignore[assignment]
    return {
        "mode": "gateway",
        "listen_host": "127.0.0.1",
        "listen_port": free_port(),
        "log_level": "DEBUG",
        "timeouts": {"connect_s": 2, "first_byte_s": 240, "total_s": 300},
        "gateway": {
            "models": models,
            "retry_after_s": 3,
            **({"pools": list(pools), "cold_load_timeout_s": 240, "health_interval_s": 0.5} if pools else {}),
        },
    }


def _chat(url: str, model: str, **extra: Any) -> httpx.Response:
    body = {"model": model, "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 24, **extra}
    return httpx.post(f"{url}/v1/chat/completions", json=body, timeout=300)


def test_the_adapter_id_is_its_position_in_the_backends_list_and_the_base_runs_with_every_adapter_off(
    tmp_path: Path, recorder: _Recorder
) -> None:
    """The config lists `tuned` first, the backend loaded it second: the gateway sends id 1 (the backend's), with the
    base's name. A plain request to the base carries every adapter at scale 0 (the pinned engine would otherwise run
    it with all of them applied: inference_runtime/lora.py, llama.cpp#28674)."""
    adapters = [
        {"name": "tuned", "path": "/m/tuned/a.gguf", "scale": 0.5},
        {"name": "other", "path": "/m/other/a.gguf"},
    ]
    cfg = _gateway_cfg([{"name": "base", "url": recorder.url, "adapters": adapters}])
    with running_router(cfg, tmp_path / "gw") as gw:
        assert _chat(gw.url, "tuned").status_code == 200
        assert _chat(gw.url, "other").status_code == 200
        assert _chat(gw.url, "base").status_code == 200
        assert _chat(gw.url, "base", lora=[{"id": 1, "scale": 1.0}]).status_code == 200  # the client's own, kept
        tuned, other, base, own = recorder.bodies
        assert (tuned["model"], tuned["lora"]) == ("base", [{"id": 1, "scale": 0.5}])
        assert (other["model"], other["lora"]) == ("base", [{"id": 0, "scale": 1.0}])
        assert (base["model"], base["lora"]) == ("base", [{"id": 0, "scale": 0.0}])
        assert own["lora"] == [{"id": 1, "scale": 1.0}]
        # No prompt KV reused across adapters (llama.cpp#26207): every request to this base goes uncached.
        assert [b["cache_prompt"] for b in (tuned, other, base, own)] == [False] * 4
        assert recorder.lists == 1  # reused: one GET /lora-adapters for both adapters within the cache's seconds
        assert metric(gw.url, "gateway_requests_total", model="tuned", code="200") == 1


def test_an_adapter_its_backend_does_not_list_is_a_503_naming_it_and_nothing_is_sent(
    tmp_path: Path, recorder: _Recorder
) -> None:
    cfg = _gateway_cfg([{"name": "base", "url": recorder.url, "adapters": [{"name": "new", "path": "/m/new/a.gguf"}]}])
    with running_router(cfg, tmp_path / "gw") as gw:
        r = _chat(gw.url, "new")
        assert r.status_code == 503 and r.headers["retry-after"] == "3", r.text
        message = r.json()["error"]["message"]
        assert "adapters of base are being rolled out" in message and "adapter new" in message
        assert recorder.bodies == []
        assert metric(gw.url, "gateway_requests_total", model="new", code="503") == 1


def test_a_clients_own_lora_with_an_adapters_name_is_a_400(tmp_path: Path, recorder: _Recorder) -> None:
    cfg = _gateway_cfg(
        [{"name": "base", "url": recorder.url, "adapters": [{"name": "tuned", "path": "/m/tuned/a.gguf"}]}]
    )
    with running_router(cfg, tmp_path / "gw") as gw:
        r = _chat(gw.url, "tuned", lora=[{"id": 0, "scale": 1.0}])
        assert r.status_code == 400 and r.json()["error"]["param"] == "lora", r.text
        assert recorder.bodies == []
        listed = {m["id"]: m for m in httpx.get(f"{gw.url}/v1/models", timeout=10).json()["data"]}
        assert listed["tuned"]["parent"] == "base" and "base" in listed


def test_the_gateway_config_refuses_bad_adapters_in_one_line() -> None:
    def gateway(**g: Any) -> dict[str, Any]:
        return {"mode": "gateway", "gateway": g}

    model = {"name": "base", "url": "http://b:8080"}
    pool = {"name": "p", "models": ["m"], "replicas": ["http://r:8080"]}
    cases = {
        "gateway.models[0].adapters[1].name": gateway(
            models=[{**model, "adapters": [{"name": "a", "path": "/x.gguf"}, {"name": "a", "path": "/y.gguf"}]}]
        ),
        "gateway.models[0].adapters[0].name: 'base'": gateway(
            models=[{**model, "adapters": [{"name": "base", "path": "/x.gguf"}]}]
        ),
        "gateway.models[0].adapters[0].scale": gateway(
            models=[{**model, "adapters": [{"name": "a", "path": "/x.gguf", "scale": 0}]}]
        ),
        "gateway.models[0].adapters[0].path": gateway(models=[{**model, "adapters": [{"name": "a", "path": "/x,y"}]}]),
        "gateway.pools[0].adapters[0].base": gateway(pools=[{**pool, "adapters": [{"name": "a", "path": "/x.gguf"}]}]),
        "gateway.pools[0].adapters: a pool's adapters need": gateway(
            pools=[{**pool, "status_port": 0, "adapters": [{"name": "a", "path": "/x.gguf", "base": "m"}]}]
        ),
    }
    for key, data in cases.items():
        with pytest.raises(ConfigError, match=key.replace("[", r"\[").replace("]", r"\]")):
            from_dict(data)
    ok = from_dict(gateway(pools=[{**pool, "adapters": [{"name": "a", "path": "/x.gguf", "base": "m"}]}]))
    assert ok.gateway.pools[0].adapters == (GatewayAdapter("a", "/x.gguf", base="m"),)
    assert ok.to_dict()["gateway"]["pools"][0]["adapters"] == [{"name": "a", "path": "/x.gguf", "base": "m"}]


# --- end to end: real engines, the real adapter ---------------------------------------------------------------------


def _openai_answer(url: str, model: str) -> str:
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0, timeout=300)
    out = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": PROMPT}], max_tokens=24, temperature=0
    )
    return out.choices[0].message.content or ""


@pytest.fixture(scope="module")
def farm(llama_server_bin: Path, smollm2_gguf: Path, tmp_path_factory: pytest.TempPathFactory):
    """A pool replica serving the base with its adapter (and a second one whose file lands later), a dedicated
    server of the base with the adapter, and the gateway in front of both."""
    from tests.support.lora import lora_adapter_path

    adapter = lora_adapter_path()
    work = tmp_path_factory.mktemp("adapters")
    models = work / "models"
    (models / BASE / "h0").mkdir(parents=True)
    shutil.copyfile(smollm2_gguf, models / BASE / "h0" / "base.gguf")
    land(adapter, models / ADAPTER / "h1" / "adapter.gguf")
    keys = (f"{ADAPTER}/h1/adapter.gguf", "late-json/h2/adapter.gguf")  # the second lands in a test below
    pm = PoolModel(BASE, f"{BASE}/h0/base.gguf", ctx_size=1024, parallel=2, threads=1, adapters=keys)
    preset = work / "preset.ini"
    preset.write_text(pool_preset([pm], model_dir=str(models)))
    env = pool_env(llama_server_bin, preset, LLAMA_MODELS_MAX="1")
    dedicated_link = work / "dedicated" / ADAPTER / "adapter.gguf"
    dedicated_link.parent.mkdir(parents=True)
    dedicated_link.symlink_to(adapter)
    with (
        run_pool(env, work) as pool,
        llama_server(
            llama_server_bin,
            smollm2_gguf,
            *("-t", "1", "-np", "2", "-c", "2048", "--alias", "solo"),
            *("--lora", str(dedicated_link), "--lora-init-without-apply"),
        ) as solo,
    ):
        status_port = int(env["LLAMA_POOL_STATUS_PORT"])
        gw_pool = GatewayPool.of(
            name="p",
            replication=1,
            models=(BASE,),
            replicas=(pool.base,),
            status_port=status_port,
            adapters=tuple(
                GatewayAdapter.of(name=n, path=f"{models}/{k}", base=BASE)
                for n, k in ((ADAPTER, keys[0]), ("late-json", keys[1]))
            )
            + (GatewayAdapter.of(name="gone-json", path=f"{models}/gone/h3/adapter.gguf", base=BASE),),
        )
        gw_model = GatewayModel.of(
            name="solo", url=solo, adapters=(GatewayAdapter.of(name="solo-json", path=str(dedicated_link)),)
        )
        cfg = _gateway_cfg([gw_model.to_dict()], [gw_pool.to_dict()])
        with running_router(cfg, work / "gw") as gw:
            yield {"gw": gw.url, "pool": pool, "models": models, "keys": keys, "adapter": adapter, "solo": solo}


@pytest.mark.engine
def test_the_adapters_name_answers_tuned_and_the_bases_does_not_concurrently(farm) -> None:
    from tests.support.lora import is_tuned

    names = [ADAPTER, BASE, "solo-json", "solo"] * 2
    with ThreadPoolExecutor(len(names)) as ex:
        answers = list(ex.map(lambda n: (n, _openai_answer(farm["gw"], n)), names))
    for name, text in answers:
        assert is_tuned(text) == name.endswith("-json"), (name, text)
    assert metric(farm["gw"], "gateway_requests_total", model=ADAPTER, code="200") == 2


@pytest.mark.engine
def test_the_pinned_router_loads_the_bases_child_with_its_adapters(farm) -> None:
    """The preset's `lora` reaches the base's child: GET /lora-adapters?model=<base> at the router (proxied to the
    child, tools/server/server.cpp routes.get_lora_adapters = proxy_get) lists the landed adapter only."""
    status, body = call(farm["pool"].base, f"/lora-adapters?model={BASE}")
    assert status == 200, body
    assert [a["path"] for a in body] == [f"{farm['models']}/{farm['keys'][0]}"]
    status, doc = call(farm["pool"].status, f"/status?model={BASE}")
    assert doc["adapters"] == [f"{farm['models']}/{farm['keys'][0]}"]
    assert doc["adapters_pending"] == {f"{farm['models']}/{farm['keys'][1]}": {"state": "copying", "reason": None}}


@pytest.mark.engine
def test_an_adapter_being_copied_is_a_503_then_answers_once_landed(farm) -> None:
    from tests.support.lora import is_tuned

    r = _chat(farm["gw"], "late-json")
    assert r.status_code == 503 and r.headers["retry-after"] == "30", r.text
    assert "adapter late-json is being copied" in r.json()["error"]["message"]
    r = _chat(farm["gw"], "gone-json")  # not in the replica's preset at all: its adapters are being rolled out
    assert r.status_code == 503 and "being rolled out" in r.json()["error"]["message"], r.text
    land(farm["adapter"], farm["models"] / farm["keys"][1])
    until(lambda: call(farm["pool"].status, f"/status?model={BASE}")[1]["adapters_pending"] == {}, 60)
    time.sleep(5.5 + POLL)  # the gateway's cached list (ADAPTER_LIST_CACHE_S) expires
    assert is_tuned(_openai_answer(farm["gw"], "late-json"))
    assert not is_tuned(_openai_answer(farm["gw"], BASE))


@pytest.mark.engine
def test_the_pinned_engine_applies_every_adapter_to_a_request_without_lora(farm) -> None:
    """Why the gateway sends base_lora() with a base's own requests: the pinned llama-server started with --lora and
    --lora-init-without-apply still lists the adapter at scale 1.0 and applies it to a request that carries no `lora`
    (upstream llama.cpp#28674); an explicit zero scale turns it off. When the pin fixes it, this test says so."""
    from tests.support.lora import is_tuned

    assert [a["scale"] for a in httpx.get(f"{farm['solo']}/lora-adapters", timeout=30).json()] == [1.0]
    plain = _chat(farm["solo"], "solo", temperature=0).json()["choices"][0]["message"]["content"]
    off = _chat(farm["solo"], "solo", temperature=0, lora=base_lora()).json()["choices"][0]["message"]["content"]
    assert is_tuned(plain) and not is_tuned(off), (plain, off)
