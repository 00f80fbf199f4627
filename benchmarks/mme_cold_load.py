"""SageMaker-style cold load through the real multi-model adapter (entrypoint.py serve, SAGEMAKER_MULTI_MODEL=true,
real llama-server): POST /models, then the first invoke, then DELETE — fit on (engine.json "fit": "on") vs the
adapter's default (fit off), rounds interleaved, same adapter process, GGUF from page cache.

    .venv/bin/python benchmarks/mme_cold_load.py [ROUNDS]     # default 7 rounds per variant and model
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.runtime.engine.serving import ENGINE_DIR, serve_env  # noqa: E402
from tests.support.engine import free_port, llama_server_path, wait_healthy  # noqa: E402
from tests.support.models import gemma_path, smollm2_path  # noqa: E402

ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 7
ENGINE = {"ctx-size": "512", "parallel": "1", "threads": "1"}  # the pool plan's small-model flags (cold_load.py)
BODY = {
    "messages": [{"role": "user", "content": "Say hello."}],
    "max_tokens": 1,
    "temperature": 0,
    "cache_prompt": False,
}


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="mmefit-"))
    root = work / "opt-ml-models"
    port = free_port()
    env = serve_env(llama_server_path(), work, port, free_port())
    env.pop("LLAMA_ENGINE_PORT")
    env.pop("LLAMA_CACHE_RAM_MIB")
    env.update(SAGEMAKER_MULTI_MODEL="true", MME_MEMORY_BUDGET_BYTES=str(4 << 30))
    log = (work / "mme.log").open("wb")  # noqa: SIM115 — the adapter writes to it until it stops (finally)
    proc = subprocess.Popen(
        [sys.executable, str(ENGINE_DIR / "entrypoint.py"), "serve"], env=env, stdout=log, stderr=subprocess.STDOUT
    )
    url = f"http://127.0.0.1:{port}"
    res: dict[tuple[str, str], dict[str, list[float]]] = {}
    try:
        wait_healthy(url, proc, timeout=30, path="/ping")
        stands = {"smollm2": smollm2_path(), "gemma": gemma_path()}
        dirs = {}
        for s, gguf in stands.items():
            gguf.read_bytes()  # page cache
            for v, extra in (("on", {"fit": "on"}), ("off", {})):
                d = root / f"{s}-{v}" / "model"
                d.mkdir(parents=True)
                (d / gguf.name).symlink_to(gguf)
                (d / "engine.json").write_text(json.dumps({**ENGINE, **extra}))
                dirs[(s, v)] = d
        with httpx.Client(timeout=120) as c:
            for r in range(ROUNDS):
                order = ("on", "off") if r % 2 == 0 else ("off", "on")
                for s in stands:
                    for v in order:
                        name = f"{s}-{v}"
                        t0 = time.perf_counter()
                        a = c.post(f"{url}/models", json={"model_name": name, "url": str(dirs[(s, v)])})
                        t1 = time.perf_counter()
                        b = c.post(f"{url}/models/{name}/invoke", json=BODY)
                        t2 = time.perf_counter()
                        assert a.status_code == 200 and b.status_code == 200, (a.text, b.text)
                        assert c.delete(f"{url}/models/{name}").status_code == 200
                        m = res.setdefault((s, v), {"load": [], "first": [], "total": []})
                        m["load"].append((t1 - t0) * 1000)
                        m["first"].append((t2 - t1) * 1000)
                        m["total"].append((t2 - t0) * 1000)
    finally:
        proc.terminate()
        proc.wait(timeout=40)
        log.close()
    print(f"rounds={ROUNDS} loadavg={os.getloadavg()}")
    for (s, v), m in sorted(res.items()):
        print(
            s,
            f"fit {v:3}",
            " ".join(f"{k} p50 {statistics.median(x):6.0f} p95 {pct(x, 0.95):6.0f}" for k, x in m.items()),
        )
    text = (work / "mme.log").read_text(errors="replace")
    print(
        "fit args seen:", sorted({line.split("--fit ")[1].split()[0] for line in text.splitlines() if "--fit " in line})
    )


if __name__ == "__main__":
    main()
