"""`cpu-inference local` for a model farm with pools: one llama-server in router mode per pool (the image's
`entrypoint.py pool`) over the preset the deployment's pool chart renders, a dedicated model on its own server,
the gateway in front routing pooled models through `gateway.pools`; models_max held by the real router, and
capped (or refused) by this machine's memory."""

from __future__ import annotations

import json
import re
import signal
from pathlib import Path

import httpx
import pytest
import yaml

from cpu_inference.cli.local_plan import plan
from cpu_inference.cli.local_pools import cap_pools, plan_pools
from cpu_inference.cli.main import UserError
from cpu_inference.cli.model_cache import MachineMemory, engine_memory, fetch_models, machine_memory
from cpu_inference.config import Config
from cpu_inference.sizing.pools import ROUTER_RSS_BYTES
from model_download import Hub
from tests.cli import test_local as _local
from tests.cli.test_local import LocalRun, _alive, _children, _cmdline, _environ, _hub_env, _refused
from tests.runtime.engine.serving import ENGINE_DIR
from tests.runtime.model_download.constants import FILE, PUBLIC_REPO
from tests.support.engine import free_port

ENTRYPOINT = ENGINE_DIR / "entrypoint.py"
fake_hf, hub_cache = _local.fake_hf, _local.hub_cache  # the fake Hub (real SmolLM2 bytes) and its cache, as fixtures
_SMOLLM2 = """
      source: {hf_repo: HuggingFaceTB/SmolLM2-135M-Instruct-GGUF, file: smollm2-135m-instruct-q4_1.gguf}
      parameters_billions: 0.135
      quantization: Q4_1
      context_window: 2048
      context_per_slot: 256
      parallel_slots: 1
      task: chat"""
# Three pooled models in pool `small` (models_max 2: the third unloads the least recently used) + one dedicated.
FARM_POOLS = f"""
pattern: model-farm
farm:
  pools:
    - {{name: small, cpu: 2, memory_gib: 4, models_max: 2, replication: 1, replicas: {{min: 1, max: 2}}}}
model_groups:
  - defaults:{_SMOLLM2}
    models:
      - {{name: pooled-a}}
      - {{name: pooled-b}}
      - {{name: pooled-c}}
models:
  - name: hot-d
    serving: dedicated{_SMOLLM2.replace(chr(10) + "  ", chr(10))}
"""
POOLED = ["pooled-a", "pooled-b", "pooled-c"]


def _descendants(pid: int) -> list[int]:
    out = []
    for child in _children(pid):
        out += [child, *_descendants(child)]
    return out


@pytest.mark.engine
def test_a_pool_is_one_router_mode_process_with_the_charts_preset_and_every_model_answers_through_the_gateway(
    tmp_path, llama_server_bin, smollm2_gguf
):
    from tests.support.rendered import k8s_object, router_config_map

    cfg = tmp_path / "farm.yaml"
    cfg.write_text(FARM_POOLS)
    run = LocalRun(
        cfg,
        "--llama-server",
        str(llama_server_bin),
        "--stand-ins",
        "--threads",
        "1",
        "--log-dir",
        str(tmp_path / "logs"),
    )
    try:
        run.wait_for("Ctrl-C stops everything")
        out = "".join(run.seen)
        assert "starting 1 engine(s) and 1 pool(s) of 3 model(s)" in out
        assert f"gateway ready on {run.url} (4 of 4 models started)" in out
        found = re.search(
            r"pool small on (http://127\.0\.0\.1:\d+) \(models_max 2; .*\): pooled-a, pooled-b, pooled-c\n", out
        )
        assert found, out
        pool_url = found.group(1)
        # The CLI's children: the pool's entrypoint, the dedicated model's server and the gateway — no server per
        # pooled model, and no jsii runtime (the preset is rendered without cdk8s).
        procs = {pid: _cmdline(pid) for pid in _children(run.proc.pid)}
        assert len(procs) == 3, procs
        (pool_pid,) = [pid for pid, argv in procs.items() if argv[-2:] == [str(ENTRYPOINT), "pool"]]
        (hot,) = [argv for argv in procs.values() if "--alias" in argv]
        (gateway_pid,) = [pid for pid, argv in procs.items() if argv[1:3] == ["-m", "slm_router"]]
        assert hot[hot.index("--alias") + 1] == "hot-d" and hot[0] == str(llama_server_bin)
        env = _environ(pool_pid)
        assert (env["LLAMA_MODELS_MAX"], env["LLAMA_SERVER_BIN"], env["LLAMA_HOST"]) == (
            "2",
            str(llama_server_bin),
            "127.0.0.1",
        )
        preset = Path(env["LLAMA_MODELS_PRESET"])
        (router_pid,) = _children(pool_pid)  # the entrypoint supervises one router (pool_supervisor.py)
        router = _cmdline(router_pid)
        assert router[0] == str(llama_server_bin) and "--models-autoload" in router
        # The router reads the supervisor's effective preset: the chart's, minus any model whose file has not
        # landed (every file is in place locally, so the same sections).
        effective = Path(router[router.index("--models-preset") + 1])
        assert router[router.index("--models-max") + 1] == "2" and effective != preset
        assert effective.read_text() == preset.read_text()
        # The gateway: the dedicated model by URL, the pooled ones through gateway.pools with this one replica.
        gateway = json.loads(_environ(gateway_pid)["ROUTER_CONFIG_JSON"])["gateway"]
        hot_url = f"http://127.0.0.1:{hot[hot.index('--port') + 1]}"
        assert gateway["models"] == [{"name": "hot-d", "url": hot_url}]
        (entry,) = gateway["pools"]
        assert (entry["name"], entry["models"], entry["replicas"], entry["replication"]) == (
            "small",
            POOLED,
            [pool_url],
            1,
        )

        for name in [*POOLED, "hot-d"]:
            r = httpx.post(
                f"{run.url}/v1/chat/completions",
                timeout=180,
                json={"model": name, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2},
            )
            assert r.status_code == 200 and r.json()["model"] == name, r.text
            assert len(_children(router_pid)) <= 2  # LLAMA_MODELS_MAX: at most two models loaded
        states = {m["id"]: m["status"]["value"] for m in httpx.get(f"{pool_url}/models", timeout=10).json()["data"]}
        assert states == {"pooled-a": "unloaded", "pooled-b": "loaded", "pooled-c": "loaded"}  # the LRU one went

        everything = _descendants(run.proc.pid)
        code, out = run.stop(signal.SIGTERM)
        assert code == 0, out
        assert [pid for pid in everything if _alive(pid)] == []  # entrypoint, router and its model servers included
    finally:
        run.kill()

    # The preset it ran is the one the deployment's pool chart renders for this config (synthesized), with /models
    # moved to the local directory of symlinks at the same catalog keys, and the plan's 2 threads per loaded
    # model scaled to --threads 1.
    chart = k8s_object(str(cfg), "ConfigMap", "pool-small")["data"]["preset.ini"]
    assert chart.count("threads = 2") == 1 and "model = /models/pooled-a/" in chart
    models_dir = preset.parent / "models"
    assert preset.read_text() == chart.replace("model = /models/", f"model = {models_dir}/").replace(
        "threads = 2", "threads = 1"
    )
    for line in preset.read_text().splitlines():
        if line.startswith("model = "):
            assert Path(line.removeprefix("model = ")).resolve() == smollm2_gguf.resolve()  # --stand-ins serves each
    # The gateway's pool entry is the deployment's apart from the replica URLs and their number, and the
    # supervisor's side port (the deployment's default; a free one here, as the pool's env says).
    (deployed,) = router_config_map(str(cfg), "gateway")["gateway"]["pools"]
    local_only = ("replicas", "status_port")
    assert {k: v for k, v in deployed.items() if k not in local_only} == {
        k: v for k, v in entry.items() if k not in local_only
    }
    assert "status_port" not in deployed and entry["status_port"] == int(env["LLAMA_POOL_STATUS_PORT"])


# --- models_max against this machine's memory (pure: the numbers are sizing's, the memory is given) -----------


def _farm(text: str = FARM_POOLS) -> Config:
    return Config.model_validate(yaml.safe_load(text))


def _dedicated_need(config: Config) -> int:
    engines, _ = plan(config, None)
    return sum(
        engine_memory(e.name, e.model, file_size=None, slots=e.slots, ctx_per_slot=e.ctx_per_slot).needed  # type: ignore[arg-type]
        for e in engines
    )


def test_models_max_is_capped_by_the_memory_left_after_the_dedicated_engines():
    config = _farm()
    engines, _ = plan(config, None)
    (pool,) = plan_pools(config, None)
    footprint = pool.plan.per_model["pooled-a"].memory_bytes
    room = _dedicated_need(config) + ROUTER_RSS_BYTES + footprint + footprint // 2  # one loaded model fits, not two
    notes = cap_pools([pool], engines, MachineMemory(room, "available"), stand_ins=False, mapping={})
    assert pool.models_max == 1
    assert notes == [
        f"pool small: models_max 2 → 1 here: 1 × pooled-a ({footprint / 2**20:.0f} MiB loaded) fit in this "
        f"machine's {room / 2**20:.0f} MiB available"
    ]
    # Enough for both: the plan's 2 stands, no note.
    (pool,) = plan_pools(config, None)
    assert cap_pools([pool], engines, MachineMemory(room + footprint, "available"), stand_ins=False, mapping={}) == []
    assert pool.models_max == 2


def test_a_pool_that_cannot_hold_its_largest_model_here_is_refused_in_one_line():
    config = _farm()
    engines, _ = plan(config, None)
    (pool,) = plan_pools(config, None)
    footprint = pool.plan.per_model["pooled-a"].memory_bytes
    room = _dedicated_need(config) + ROUTER_RSS_BYTES + footprint - 1  # one byte short of one loaded model
    with pytest.raises(UserError) as refused:
        cap_pools([pool], engines, MachineMemory(room, "available"), stand_ins=False, mapping={})
    line = str(refused.value)
    assert "\n" not in line
    left = f"{(ROUTER_RSS_BYTES + footprint - 1) / 2**20:.0f} MiB"
    assert line == (
        f"pool 'small' cannot hold its largest model pooled-a on this machine: it needs {footprint / 2**20:.0f} MiB "
        f"loaded (1 slot(s) × 256 tokens, the pool plan) + 16 MiB for the router, but this machine has "
        f"{room / 2**20:.0f} MiB available, {left} of it after the dedicated engines — serve a smaller file with "
        "--model-map pooled-a=PATH, leave it out with --models, or use --stand-ins"
    )
    # Served by stand-ins, the configured sizes are not counted (as for dedicated engines): nothing is refused.
    (pool,) = plan_pools(config, None)
    assert (
        cap_pools([pool], engines, MachineMemory(room, "available"), stand_ins=True, mapping={}) == []
        and pool.models_max == 2
    )


BIG_POOL = """
pattern: model-farm
farm:
  pools:
    - {name: large, cpu: 16, memory_gib: 60, replication: 1, replicas: {min: 1, max: 1}}
models:
  - name: big
    source: {hf_repo: bartowski/Meta-Llama-3.1-70B-Instruct-GGUF, file: Meta-Llama-3.1-70B-Instruct-Q4_K_M.gguf}
    parameters_billions: 70.6
    quantization: Q4_K_M
    task: chat
"""


def test_the_cli_refuses_a_pool_this_machine_cannot_hold_before_any_download(tmp_path):
    (pool,) = plan_pools(_farm(BIG_POOL), None)
    need = pool.plan.per_model["big"].memory_bytes + ROUTER_RSS_BYTES
    memory = machine_memory()
    if memory is None or memory.bytes >= need:
        pytest.skip(f"this machine has {memory}: the 70B pool fits")
    cfg = tmp_path / "big.yaml"
    cfg.write_text(BIG_POOL)
    # No Hub at all: the refusal comes from the pool plan, before any request.
    line = _refused(cfg, _hub_env(f"http://127.0.0.1:{free_port()}", tmp_path / "cache"))
    assert line.startswith(
        "cpu-inference local: pool 'large' cannot hold its largest model big on this machine: it needs 45.1 GiB "
        "loaded (1 slot(s) × 4096 tokens, the pool plan) + 16 MiB for the router, but this machine has "
    ), line
    assert line.endswith(
        "— serve a smaller file with --model-map big=PATH, leave it out with --models, or use --stand-ins"
    ), line
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").rglob("*.gguf*"))


# --- a pooled model downloaded from the (fake) Hub into the cache, as `local` does without --stand-ins ------------

HUB_POOL = f"""
pattern: model-farm
farm:
  pools:
    - {{name: tiny, cpu: 1, memory_gib: 2, replication: 1, replicas: {{min: 1, max: 1}}}}
models:
  - name: tiny-pooled
    source: {{hf_repo: {PUBLIC_REPO}, file: {FILE}}}
    parameters_billions: 0.135
    quantization: Q4_1
    context_window: 2048
    context_per_slot: 256
    parallel_slots: 1
    task: chat
"""


def test_pooled_models_are_left_to_the_pool_check_not_summed_as_engines(tmp_path, fake_hf):
    """fetch_models sums dedicated engines against the machine; a pooled model's memory is the pool's (cap_pools)."""
    config = _farm(HUB_POOL)
    fake_hf.reset()
    tiny = MachineMemory(1, "available")
    with pytest.raises(
        UserError, match=r"^models\[0\] \(tiny-pooled\): needs .* but this machine has 0 MiB available — "
    ):
        fetch_models(config, hub=Hub(fake_hf.url), cache_dir=tmp_path / "a", memory=tiny, progress=_quiet())
    got = fetch_models(
        config,
        hub=Hub(fake_hf.url),
        cache_dir=tmp_path / "b",
        memory=tiny,
        progress=_quiet(),
        sized_elsewhere=["tiny-pooled"],
    )
    assert got["tiny-pooled"].path.is_file() and got["tiny-pooled"].how == "downloaded"


def _quiet():  # noqa: ANN202 - a rich Progress that draws nothing
    from rich.progress import Progress

    return Progress(disable=True)


@pytest.mark.engine
def test_a_pooled_model_is_served_from_the_downloaded_cache_file(tmp_path, fake_hf, hub_cache, llama_server_bin):
    cfg = tmp_path / "hub-pool.yaml"
    cfg.write_text(HUB_POOL)
    fake_hf.reset()
    run = LocalRun(
        cfg,
        "--llama-server",
        str(llama_server_bin),
        "--threads",
        "1",
        "--log-dir",
        str(tmp_path / "logs"),
        env=_hub_env(fake_hf.url, hub_cache),
    )
    try:
        run.wait_for("Ctrl-C stops everything")
        cached = hub_cache / "models" / PUBLIC_REPO / fake_hf.commit / FILE
        (link,) = (tmp_path / "logs" / "pool-tiny" / "models").rglob("*.gguf")
        assert link.resolve() == cached.resolve() and link.parent.parent.name == "tiny-pooled"
        assert "stands in" not in "".join(run.seen)
        r = httpx.post(
            f"{run.url}/v1/chat/completions",
            timeout=180,
            json={"model": "tiny-pooled", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2},
        )
        assert r.status_code == 200 and r.json()["model"] == "tiny-pooled", r.text
        code, out = run.stop(signal.SIGTERM)
        assert code == 0, out
    finally:
        run.kill()
