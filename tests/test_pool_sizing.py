"""Pool sizing (cpu_inference.sizing.pools): models-max from memory at the largest model's footprint, threads per
loaded model, per-model context and slots; and the plan's memory figures against the real engine in router mode."""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from cpu_inference import sizing
from cpu_inference.sizing.pools import CHILD_RUNTIME_BYTES, ROUTER_RSS_BYTES, model_slots, pool_plan
from inference_runtime.llama_flags import POOLED_SIZED
from tests.support.engine import free_port, stop_process, wait_healthy

GIB, MIB = sizing.GIB, sizing.MIB
# The two stand-ins as a farm would list them (file sizes: the PyPI wheels' GGUFs).
SMOLLM2 = sizing.ModelSpec(parameters_billions=0.135, quantization="Q4_1", task="classification", context_window=2048)
GEMMA = sizing.ModelSpec(parameters_billions=0.27, quantization="Q4_K_M", task="classification", context_window=2048)


def test_models_max_is_what_fits_at_the_largest_footprint() -> None:
    specs = {f"m-{i}": SMOLLM2 for i in range(30)} | {
        "big": sizing.ModelSpec(parameters_billions=3.2, task="extraction")
    }
    plan = pool_plan(specs, cpu=8, memory_bytes=16 * GIB)
    big = plan.per_model["big"]
    assert plan.largest_model == "big"
    assert plan.models_max == plan.models_max_fit == (16 * GIB - ROUTER_RSS_BYTES) // big.memory_bytes
    assert (
        plan.models_max * big.memory_bytes + ROUTER_RSS_BYTES
        <= 16 * GIB
        < (plan.models_max + 1) * big.memory_bytes + ROUTER_RSS_BYTES
    )
    # the request holds the router and the models_max heaviest models: any loaded set fits in it
    heaviest = sorted((s.memory_bytes for s in plan.per_model.values()), reverse=True)[: plan.models_max]
    assert plan.memory_request_bytes == ROUTER_RSS_BYTES + sum(heaviest) <= 16 * GIB and plan.fits


def test_few_models_load_all_and_request_only_their_memory() -> None:
    plan = pool_plan({"a": SMOLLM2, "b": GEMMA}, cpu=4, memory_bytes=8 * GIB)
    assert plan.models_max == 2 and plan.models_max_fit > 2
    assert (
        plan.memory_request_bytes
        == ROUTER_RSS_BYTES + plan.per_model["a"].memory_bytes + plan.per_model["b"].memory_bytes
    )


def test_a_models_max_override_is_kept_and_flags_what_memory_allows() -> None:
    plan = pool_plan({f"m-{i}": GEMMA for i in range(50)}, cpu=4, memory_bytes=2 * GIB, models_max=40)
    assert plan.models_max == 40 and plan.models_max_fit < 40 and not plan.fits


def test_a_model_bigger_than_the_pool_fits_zero() -> None:
    plan = pool_plan({"big": sizing.ModelSpec(parameters_billions=8)}, cpu=4, memory_bytes=2 * GIB)
    assert plan.models_max_fit == 0 and not plan.fits


def test_footprint_is_weights_kv_compute_and_the_measured_child() -> None:
    spec = sizing.ModelSpec(parameters_billions=1.0, task="chat", context_window=4096, file_size_bytes=700 * MIB)
    s = model_slots(spec)
    # farm models take 1-2 slots (2 below 2B) of the task's context (chat: 4096)
    assert (s.parallel, s.ctx_per_slot, s.ctx_size) == (2, 4096, 8192)
    kv = 8192 * sizing.kv_bytes_per_token(spec)
    assert s.memory_bytes == 700 * MIB + kv + int(sizing.COMPUTE_BUFFER_FRACTION * 700 * MIB) + CHILD_RUNTIME_BYTES
    assert model_slots(sizing.ModelSpec(parameters_billions=3.2)).parallel == 1
    assert model_slots(sizing.ModelSpec(parameters_billions=0.1, parallel_slots=3)).parallel == 3


def test_threads_per_model_follow_the_largest_model_within_the_pool_cpus() -> None:
    small = {"a": SMOLLM2}
    assert pool_plan(small, cpu=4, memory_bytes=8 * GIB).threads_per_model == 2  # sizing.default_pod_cpu(<1B) = 2
    assert pool_plan(small, cpu=1, memory_bytes=8 * GIB).threads_per_model == 1
    medium = {"a": SMOLLM2, "b": sizing.ModelSpec(parameters_billions=3.2)}
    plan = pool_plan(medium, cpu=8, memory_bytes=16 * GIB)
    assert plan.threads_per_model == 4 and plan.concurrent_models == 2


def test_an_empty_pool_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one model"):
        pool_plan({}, cpu=4, memory_bytes=GIB)


# ---- the real engine: a router-mode pool run with exactly the plan's per-model flags --------------------------


def _rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Rss:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no Rss in smaps_rollup")


def _children(pid: int) -> list[int]:
    kids: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):  # a thread that ended while listing
            kids += [int(c) for c in (task / "children").read_text().split()]
    return kids


def _chat(base: str, model: str) -> None:
    body = json.dumps(
        {"model": model, "messages": [{"role": "user", "content": "Hi there, tell me a story"}], "max_tokens": 8}
    )
    req = urllib.request.Request(
        f"{base}/v1/chat/completions", data=body.encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=300) as r:
        assert r.status == 200


@pytest.mark.engine
def test_plan_bounds_the_real_router_and_its_children(
    llama_server_bin: Path, smollm2_gguf: Path, gemma_gguf: Path, tmp_path: Path
) -> None:
    """Each child's RSS after a request is within its planned footprint, the router within ROUTER_RSS_BYTES and
    the whole pool within the plan's memory request (fails if the measured constants are set too low)."""
    files = {"smollm2": smollm2_gguf, "gemma": gemma_gguf}
    specs = {"smollm2": SMOLLM2, "gemma": GEMMA}
    specs = {
        n: sizing.ModelSpec(**{**s.__dict__, "file_size_bytes": files[n].stat().st_size}) for n, s in specs.items()
    }
    plan = pool_plan(specs, cpu=1, memory_bytes=2 * GIB)
    assert plan.models_max == 2 and plan.threads_per_model == 1
    sections = "".join(
        f"[{n}]\nmodel = {files[n]}\n" + "".join(f"{k} = {v}\n" for k, v in plan.engine_args(n).items())
        for n in plan.per_model
    )
    (tmp_path / "pool.ini").write_text("version = 1\n" + sections)
    port = free_port()
    with open(tmp_path / "router.log", "wb") as log:
        proc = subprocess.Popen(
            [
                str(llama_server_bin),
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--models-preset",
                str(tmp_path / "pool.ini"),
                "--models-max",
                str(plan.models_max),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            base = f"http://127.0.0.1:{port}"
            wait_healthy(base, proc, timeout=60)
            with urllib.request.urlopen(f"{base}/v1/models", timeout=30) as r:
                args = {m["id"]: m["status"]["args"] for m in json.loads(r.read())["data"]}
            for name, flags in args.items():  # the child gets exactly the plan's options
                assert {o.key: flags[flags.index(o.flag) + 1] for o in POOLED_SIZED} == plan.engine_args(name)
            child_rss: dict[str, int] = {}
            for name in ("smollm2", "gemma"):
                before = set(_children(proc.pid))
                _chat(base, name)
                (child,) = set(_children(proc.pid)) - before
                time.sleep(0.3)
                child_rss[name] = _rss(child)
            router_rss = _rss(proc.pid)
        finally:
            stop_process(proc, timeout=30)
    print(
        {n: f"{v / MIB:.1f} MiB (plan {plan.per_model[n].memory_bytes / MIB:.1f})" for n, v in child_rss.items()},
        f"router {router_rss / MIB:.1f} MiB",
    )
    for name, rss in child_rss.items():
        assert files[name].stat().st_size < rss <= plan.per_model[name].memory_bytes, name
    assert router_rss <= ROUTER_RSS_BYTES
    assert router_rss + sum(child_rss.values()) <= plan.memory_request_bytes
