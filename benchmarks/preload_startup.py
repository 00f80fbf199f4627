"""First request of a model preloaded at replica start (farm.pools[].preload) vs a cold one, side by side (issue 25).

Each run starts a fresh pool replica (the image's `entrypoint.py pool`, LLAMA_MODELS_MAX=2) over the preset the
chart renders (pool_preset.pool_preset): two byte copies of one stand-in, `hot` with preload (`load-on-startup =
true`), `cold` without. Once GET /models lists `hot` loaded (no request sent to it), each model's first request is
timed, request sent -> response head, the same non-streaming 1-token chat request as benchmarks/cold_load.py; the
order alternates between runs. Prints p50 / p95 in ms of both.

    LLAMA_ARG_REPACK=0 .venv/bin/python benchmarks/preload_startup.py --runs 7
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:] = [str(ROOT), str(ROOT / "constructs"), str(ROOT / "containers")] + [
    p for p in sys.path if Path(p or ".").resolve() != ROOT / "benchmarks"
]

from benchmarks.cold_load import CTX, ENTRYPOINT, PARALLEL, THREADS, chat_body, models_listing, pct_ms, request  # noqa: E402
from benchmarks.farm_density import stand_in_path  # noqa: E402

from cpu_inference._internal.resources import cache_dir  # noqa: E402
from cpu_inference.engines.pool_preset import PoolModel, pool_preset  # noqa: E402
from tests.support.engine import free_port, llama_server_path, stop_process, wait_healthy  # noqa: E402


def one_run(preset: Path, work: Path, binary: Path, env: dict[str, str], hot_first: bool) -> dict[str, float]:
    port = free_port()
    run_env = {
        **env,
        "LLAMA_SERVER_BIN": str(binary),
        "LLAMA_MODELS_PRESET": str(preset),
        "LLAMA_MODELS_MAX": "2",
        "LLAMA_HOST": "127.0.0.1",
        "LLAMA_PORT": str(port),
        "LLAMA_POOL_STATUS_PORT": "0",
    }
    with open(work / "pool.log", "ab") as out:
        proc = subprocess.Popen(
            [sys.executable, str(ENTRYPOINT), "pool"], env=run_env, stdout=out, stderr=subprocess.STDOUT, cwd=work
        )
    try:
        wait_healthy(f"http://127.0.0.1:{port}", proc, timeout=60)
        deadline = time.monotonic() + 120
        while models_listing(port)["hot"]["status"]["value"] != "loaded":
            if time.monotonic() > deadline:
                raise TimeoutError("hot was not loaded at start")
            time.sleep(0.05)
        out_s = {}
        for name in ("hot", "cold") if hot_first else ("cold", "hot"):
            status, head, data = request(port, "/v1/chat/completions", chat_body(name))
            if status != 200:
                raise RuntimeError(f"{name}: {status} {data}")
            out_s[name] = head
        return out_s
    finally:
        stop_process(proc, timeout=30)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--stand-in", default="smollm2", choices=["smollm2", "gemma"])
    ap.add_argument("--runs", type=int, default=7)
    a = ap.parse_args()
    binary = llama_server_path()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LLAMA_", "MODEL_", "SAGEMAKER_"))}
    env["LLAMA_ARG_REPACK"] = os.environ.get("LLAMA_ARG_REPACK", "0")
    source = stand_in_path(a.stand_in)
    load0 = os.getloadavg()[0]
    times: dict[str, list[float]] = {"hot": [], "cold": []}
    cache_dir().mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="preload-", dir=cache_dir()) as tmp:  # a disk, not tmpfs
        work = Path(tmp)
        models = []
        for name in ("hot", "cold"):  # distinct files, as a pool's volume holds one file per model
            key = f"{name}/0123456789abcdef/{source.name}"
            (work / key).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, work / key)
            (work / key).read_bytes()  # both in the page cache
            models.append(PoolModel(name, key, ctx_size=CTX, parallel=PARALLEL, threads=THREADS, preload=name == "hot"))
        preset = work / "preset.ini"
        preset.write_text(pool_preset(models, model_dir=str(work)))
        for i in range(a.runs):
            got = one_run(preset, work, binary, env, hot_first=i % 2 == 0)
            for k, v in got.items():
                times[k].append(v)
            print(f"run {i + 1}: hot {got['hot'] * 1000:.0f} ms, cold {got['cold'] * 1000:.0f} ms", file=sys.stderr)
    load = (load0, os.getloadavg()[0])
    for k in ("hot", "cold"):
        print(
            f"{a.stand_in} {k:4s} first request: p50 {pct_ms(times[k], 0.5):.0f} ms, p95 {pct_ms(times[k], 0.95):.0f} ms "
            f"({len(times[k])} runs)"
        )
    print(f"load average {load[0]:.1f} -> {load[1]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
