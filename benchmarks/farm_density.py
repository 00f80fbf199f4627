"""Farm density benchmark: many GGUF models served by router-mode pools vs one llama-server per model.

Issue 13 (a 1,000-model farm) at a size this machine holds: --models distinct GGUF files (byte copies of the
two stand-ins, SmolLM2-135M and Gemma-3-270M, under different names: distinct files so no two models share
page cache, as distinct fine-tunes would not), one seeded Zipf-distributed request mix, served side by side
in one run by

  pool       one llama-server in router mode (--models-dir, --models-max N): it spawns a child server per
             model on first request and stops the least recently used idle one above N. N comes from a
             memory budget (--memory-budget-gib) divided by cpu_inference.sizing's estimate for one model.
  per-model  one llama-server per model, all started up front (today's farm: every model always loaded).

Both use the same engine flags per model (-t --threads -c --ctx -np --slots). Reported per mode: memory of
the whole process tree sampled from /proc during the run (peak sum of RSS and of PSS: identical library pages
count once in PSS), models per GiB (models served / peak RSS), latency p50/p95 of warm and cold requests
(pool: cold = the model was not loaded when the request arrived, from the router's /models/sse events;
per-model: every request is warm, and the cold figure is each server's start-to-healthy time), throughput,
and the pool's load/unload counts. JSON and Markdown go to benchmarks/results/ (gitignored).

    .venv/bin/python benchmarks/farm_density.py                                  # 50 models, 400 requests
    .venv/bin/python benchmarks/farm_density.py --models 10 --requests 40 --memory-budget-gib 1.5   # smoke
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Not this script's own directory first: benchmarks/model_download.py would shadow the model_download module
# that cpu_inference's model cache (gemma_path) imports.
sys.path[:] = [str(ROOT), str(ROOT / "constructs")] + [
    p for p in sys.path if Path(p or ".").resolve() != ROOT / "benchmarks"
]

from cpu_inference.sizing import GIB, ModelSpec  # noqa: E402
from cpu_inference.sizing.pools import pool_plan  # noqa: E402
from tests.support.engine import free_port, llama_server_path, wait_healthy  # noqa: E402

STAND_INS = {
    "smollm2": ModelSpec(parameters_billions=0.135, quantization="Q4_1", task="chat"),
    "gemma": ModelSpec(parameters_billions=0.27, quantization="Q4_K_M", task="chat"),
}
PROMPTS = [
    "Why is the sky blue?",
    "Name three uses of copper.",
    "What is a prime number?",
    "Describe rain.",
    "Give one tip for an interview.",
    "What does a heat pump do?",
    "Say hello in French.",
    "Define recursion.",
]


def stand_in_path(name: str) -> Path:
    from tests.support.models import gemma_path, smollm2_path

    return smollm2_path() if name == "smollm2" else gemma_path()


@dataclass(frozen=True)
class FarmModel:
    name: str
    path: Path
    stand_in: str


def make_models(n: int, stand_ins: list[str], models_dir: Path, link: str) -> list[FarmModel]:
    """n model files named model-000.gguf..., cycling over the stand-ins. `copy` gives distinct files (own page
    cache each, like distinct fine-tunes); `hardlink`/`symlink` share one file's pages (cheaper, flatters RSS)."""
    models_dir.mkdir(parents=True, exist_ok=True)
    out = []
    for i in range(n):
        stand_in = stand_ins[i % len(stand_ins)]
        src, dst = stand_in_path(stand_in), models_dir / f"model-{i:03d}.gguf"
        if not dst.exists():
            {"copy": shutil.copyfile, "hardlink": os.link, "symlink": os.symlink}[link](src, dst)
        out.append(FarmModel(dst.stem, dst, stand_in))
    return out


def zipf_mix(models: list[FarmModel], requests: int, s: float, seed: int) -> list[str]:
    """Seeded Zipf(s) over the models: the model of popularity rank r is asked with weight 1/r^s. Ranks are a
    seeded shuffle of the models so popularity does not follow the stand-in alternation."""
    rng = random.Random(seed)
    ranked = [m.name for m in models]
    rng.shuffle(ranked)
    weights = [1 / (r**s) for r in range(1, len(ranked) + 1)]
    return rng.choices(ranked, weights=weights, k=requests)


# ---- /proc memory of a process tree ------------------------------------------------------------------------


def tree(pid: int) -> list[int]:
    pids, todo = [], [pid]
    while todo:
        p = todo.pop()
        pids.append(p)
        try:
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            pass
    return pids


def rss_pss_bytes(pid: int) -> tuple[int, int]:
    try:
        fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:])
        return int(fields["Rss"].split()[0]) * 1024, int(fields["Pss"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        return 0, 0  # exited between listing and reading


class MemorySampler(threading.Thread):
    """Peak (sum of RSS, sum of PSS, process count) over the trees of `roots`, sampled every `interval` s."""

    def __init__(self, roots: list[int], interval: float = 0.5):
        super().__init__(daemon=True)
        self.roots, self.interval = roots, interval
        self.peak_rss = self.peak_pss = self.peak_procs = 0
        self.stop_event = threading.Event()

    def sample(self) -> tuple[int, int, int]:
        pids = [p for r in self.roots for p in tree(r)]
        mem = [rss_pss_bytes(p) for p in pids]
        return sum(m[0] for m in mem), sum(m[1] for m in mem), len(pids)

    def run(self) -> None:
        while not self.stop_event.is_set():
            rss, pss, procs = self.sample()
            self.peak_rss, self.peak_pss, self.peak_procs = (
                max(self.peak_rss, rss),
                max(self.peak_pss, pss),
                max(self.peak_procs, procs),
            )
            self.stop_event.wait(self.interval)

    def stop(self) -> None:
        self.stop_event.set()
        self.join()


# ---- load generation ---------------------------------------------------------------------------------------


@dataclass
class Result:
    model: str
    start: float
    end: float
    status: int
    tokens: int
    cold: bool = False

    @property
    def seconds(self) -> float:
        return self.end - self.start


def chat(port: int, model: str, prompt: str, max_tokens: int) -> tuple[int, int]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=900)
    try:
        body = {
            "model": model,
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": max_tokens,
            "ignore_eos": True,
        }
        conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
        r = conn.getresponse()
        data = json.loads(r.read() or b"{}")
        return r.status, data.get("usage", {}).get("completion_tokens", 0)
    except (OSError, http.client.HTTPException, ValueError):
        return 0, 0
    finally:
        conn.close()


def closed_loop(mix: list[str], port_of, concurrency: int, max_tokens: int) -> tuple[list[Result], float]:
    """`concurrency` clients take the next request of the mix until it is exhausted; (results, wall seconds)."""
    results: list[Result] = []
    lock, nxt = threading.Lock(), iter(enumerate(mix))

    def client() -> None:
        while True:
            with lock:
                item = next(nxt, None)
            if item is None:
                return
            i, model = item
            t0 = time.monotonic()
            status, tokens = chat(port_of(model), model, PROMPTS[i % len(PROMPTS)], max_tokens)
            with lock:
                results.append(Result(model, t0, time.monotonic(), status, tokens))

    t0 = time.monotonic()
    threads = [threading.Thread(target=client) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results, time.monotonic() - t0


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    v = sorted(values)
    return round(v[min(len(v) - 1, math.ceil(q * len(v)) - 1)], 3)


@dataclass
class ModeReport:
    mode: str
    models: int
    processes_peak: int
    peak_rss_gib: float
    peak_pss_gib: float
    models_per_gib_rss: float
    requests: int
    errors: int
    wall_s: float
    requests_per_s: float
    tokens_per_s: float
    warm: dict
    cold: dict
    loads: int | None = None
    unloads: int | None = None
    models_max: int | None = None
    extra: dict = field(default_factory=dict)


def latency(values: list[float]) -> dict:
    return {"n": len(values), "p50_s": pct(values, 0.50), "p95_s": pct(values, 0.95)}


def report(
    mode: str, n_models: int, mem: MemorySampler, results: list[Result], wall: float, cold_values: list[float], **kw
) -> ModeReport:
    ok = [r for r in results if r.status == 200]
    return ModeReport(
        mode=mode,
        models=n_models,
        processes_peak=mem.peak_procs,
        peak_rss_gib=round(mem.peak_rss / GIB, 3),
        peak_pss_gib=round(mem.peak_pss / GIB, 3),
        models_per_gib_rss=round(n_models / (mem.peak_rss / GIB), 2) if mem.peak_rss else 0.0,
        requests=len(results),
        errors=len(results) - len(ok),
        wall_s=round(wall, 2),
        requests_per_s=round(len(ok) / wall, 3),
        tokens_per_s=round(sum(r.tokens for r in ok) / wall, 2),
        warm=latency([r.seconds for r in ok if not r.cold]),
        cold=latency(cold_values),
        **kw,
    )


# ---- pool: router mode -------------------------------------------------------------------------------------


class RouterEvents(threading.Thread):
    """The router's GET /models/sse stream: (time, model, status) of every model status event."""

    def __init__(self, port: int):
        super().__init__(daemon=True)
        self.port, self.events = port, []
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=None)

    def run(self) -> None:
        try:
            self.conn.request("GET", "/models/sse")
            r = self.conn.getresponse()
            for raw in r:
                line = raw.decode().strip()
                if line.startswith("data: "):
                    ev = json.loads(line[6:])
                    # "model_status" when a child is spawned (loading), "status_change" for every later
                    # transition (server-models.cpp load / update_status; the README names only the first)
                    if ev.get("event") in ("model_status", "status_change"):
                        self.events.append((time.monotonic(), ev["model"], ev["data"]["status"]))
        except (OSError, http.client.HTTPException, ValueError):
            return

    def close(self) -> None:
        if self.conn.sock:
            self.conn.sock.shutdown(2)

    def was_cold(self, r: Result) -> bool:
        """Not loaded when the request arrived (status timeline from the events), or loaded during it."""
        state = "unloaded"
        for t, model, status in self.events:
            if model != r.model:
                continue
            if t <= r.start:
                state = status
            elif t <= r.end and status == "loading":
                return True
        return state != "loaded"


def run_pool(
    binary: Path, models_dir: Path, models: list[FarmModel], mix: list[str], models_max: int, args, workdir: Path
) -> ModeReport:
    port = free_port()
    with open(workdir / "router.log", "wb") as log:
        proc = subprocess.Popen(
            [
                str(binary),
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--models-dir",
                str(models_dir),
                "--models-max",
                str(models_max),
                "-t",
                str(args.threads),
                "-c",
                str(args.ctx),
                "-np",
                str(args.slots),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_healthy(f"http://127.0.0.1:{port}", proc, timeout=60)
            events = RouterEvents(port)
            events.start()
            time.sleep(0.3)  # subscribed before the first request
            mem = MemorySampler([proc.pid])
            mem.start()
            results, wall = closed_loop(mix, lambda _m: port, args.concurrency, args.max_tokens)
            mem.stop()
            time.sleep(0.5)
            events.close()
            for r in results:
                r.cold = events.was_cold(r)
            statuses = [s for _, _, s in events.events]
            return report(
                "pool",
                len(models),
                mem,
                results,
                wall,
                [r.seconds for r in results if r.cold and r.status == 200],
                loads=statuses.count("loaded"),
                unloads=statuses.count("unloaded"),
                models_max=models_max,
            )
        finally:
            proc.terminate()  # the router stops its children (unload_all) before it exits
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()


# ---- per-model: one llama-server each ----------------------------------------------------------------------


def run_per_model(binary: Path, models: list[FarmModel], mix: list[str], args, workdir: Path) -> ModeReport:
    procs: dict[str, tuple[subprocess.Popen, int]] = {}
    start_times: list[float] = []
    with contextlib.ExitStack() as logs:
        try:
            # Started a few at a time (start-up is CPU-bound); each one's start-to-healthy time is its cold start.
            pending = list(models)
            while pending:
                batch, pending = pending[: args.start_batch], pending[args.start_batch :]
                t0 = time.monotonic()
                for m in batch:
                    port = free_port()
                    log = logs.enter_context(open(workdir / f"{m.name}.log", "wb"))
                    procs[m.name] = (
                        subprocess.Popen(
                            [
                                str(binary),
                                "-m",
                                str(m.path),
                                "--host",
                                "127.0.0.1",
                                "--port",
                                str(port),
                                "--alias",
                                m.name,
                                "-t",
                                str(args.threads),
                                "-c",
                                str(args.ctx),
                                "-np",
                                str(args.slots),
                            ],
                            stdout=log,
                            stderr=subprocess.STDOUT,
                        ),
                        port,
                    )
                for m in batch:
                    p, port = procs[m.name]
                    wait_healthy(f"http://127.0.0.1:{port}", p, timeout=300)
                    start_times.append(time.monotonic() - t0)
            mem = MemorySampler([p.pid for p, _ in procs.values()])
            mem.start()
            results, wall = closed_loop(mix, lambda m: procs[m][1], args.concurrency, args.max_tokens)
            mem.stop()
            return report(
                "per-model", len(models), mem, results, wall, start_times, extra={"start_batch": args.start_batch}
            )
        finally:
            for p, _ in procs.values():
                p.terminate()
            for p, _ in procs.values():
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    p.kill()


# ---- output ------------------------------------------------------------------------------------------------


def markdown(summary: dict, reports: list[ModeReport]) -> str:
    head = (
        f"# Farm density: {summary['models']} models, {summary['requests']} requests (Zipf s={summary['zipf_s']}, seed {summary['seed']})\n\n"
        f"Engine flags per model: `-t {summary['threads']} -c {summary['ctx']} -np {summary['slots']}`, concurrency {summary['concurrency']}, "
        f"{summary['max_tokens']} tokens out; model files: {summary['link']} of {', '.join(summary['stand_ins'])}; "
        f"pool --models-max {summary['models_max']} (budget {summary['memory_budget_gib']} GiB / {summary['estimate_per_model_mib']} MiB per model); "
        f"load average {summary['loadavg_start']} -> {summary['loadavg_end']}.\n\n"
    )
    rows = [
        "| mode | processes (peak) | peak RSS GiB | peak PSS GiB | models / GiB (RSS) | req/s | tok/s | warm p50 / p95 s | cold p50 / p95 s (n) | loads / unloads | errors |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in reports:
        rows.append(
            f"| {r.mode} | {r.processes_peak} | {r.peak_rss_gib} | {r.peak_pss_gib} | {r.models_per_gib_rss} | {r.requests_per_s} | {r.tokens_per_s} | "
            f"{r.warm['p50_s']} / {r.warm['p95_s']} | {r.cold['p50_s']} / {r.cold['p95_s']} ({r.cold['n']}) | "
            f"{'-' if r.loads is None else f'{r.loads} / {r.unloads}'} | {r.errors} |"
        )
    note = (
        "\nPool cold = the model was not loaded when the request arrived (router /models/sse). Per-model cold = a server's "
        "start-to-healthy time (its requests are all warm).\n"
    )
    return head + "\n".join(rows) + "\n" + note


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", type=int, default=50, help="distinct GGUF model files")
    ap.add_argument(
        "--stand-ins", default="smollm2,gemma", help="comma-separated, cycled over the files: smollm2, gemma"
    )
    ap.add_argument(
        "--link",
        choices=["copy", "hardlink", "symlink"],
        default="copy",
        help="copy = distinct files (default, the issue's setup); links share one file's page cache",
    )
    ap.add_argument("--requests", type=int, default=400)
    ap.add_argument("--zipf-s", type=float, default=1.1)
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1, help="llama.cpp threads per model server")
    ap.add_argument("--ctx", type=int, default=512, help="context size per model server")
    ap.add_argument("--slots", type=int, default=1, help="parallel slots per model server")
    ap.add_argument(
        "--memory-budget-gib",
        type=float,
        default=4.0,
        help="the pool replica's memory: --models-max from cpu_inference.sizing.pools.pool_plan for this budget",
    )
    ap.add_argument("--models-max", type=int, help="override the budget-derived --models-max")
    ap.add_argument("--modes", default="pool,per-model", help="comma-separated: pool, per-model (run in this order)")
    ap.add_argument("--start-batch", type=int, default=4, help="per-model servers started at once")
    ap.add_argument("--workdir", type=Path, help="where the model files go (default: a temp dir, removed at the end)")
    ap.add_argument(
        "--out", type=Path, default=ROOT / "benchmarks" / "results", help="directory for the JSON and Markdown results"
    )
    args = ap.parse_args(argv)

    stand_ins = [s.strip() for s in args.stand_ins.split(",") if s.strip()]
    unknown = sorted(set(stand_ins) - set(STAND_INS))
    if unknown:
        ap.error(f"--stand-ins: unknown {unknown}; choose from {sorted(STAND_INS)}")
    binary = llama_server_path()
    tmp = None if args.workdir else tempfile.mkdtemp(prefix="farm-density-", dir="/tmp")
    workdir = args.workdir or Path(tmp)
    try:
        models = make_models(args.models, stand_ins, workdir / "models", args.link)
        # --models-max as the library sizes a pool (cpu_inference.sizing.pools, what the EKS pools and `size` use): the
        # budget minus the router's RSS over the largest loaded footprint (weights + KV for the slots + compute
        # buffers + the measured per-child runtime), with the same ctx and slots the servers run here.
        specs = {
            m.name: ModelSpec(
                **{
                    **asdict(STAND_INS[m.stand_in]),
                    "file_size_bytes": m.path.stat().st_size,
                    "parallel_slots": args.slots,
                    "context_per_slot": args.ctx // args.slots,
                }
            )
            for m in models
        }
        plan = pool_plan(
            specs, cpu=args.threads, memory_bytes=int(args.memory_budget_gib * GIB), models_max=args.models_max
        )
        estimate = plan.per_model[plan.largest_model].memory_bytes
        models_max = max(1, plan.models_max)
        mix = zipf_mix(models, args.requests, args.zipf_s, args.seed)
        summary = {
            "models": len(models),
            "stand_ins": stand_ins,
            "link": args.link,
            "requests": args.requests,
            "zipf_s": args.zipf_s,
            "seed": args.seed,
            "distinct_models_requested": len(set(mix)),
            "concurrency": args.concurrency,
            "max_tokens": args.max_tokens,
            "threads": args.threads,
            "ctx": args.ctx,
            "slots": args.slots,
            "memory_budget_gib": args.memory_budget_gib,
            "estimate_per_model_mib": round(estimate / 2**20),
            "models_max": models_max,
            "engine": str(binary),
            "loadavg_start": os.getloadavg()[0],
        }
        print(
            f"{len(models)} models ({args.link}), {args.requests} requests over {summary['distinct_models_requested']} models; "
            f"pool --models-max {models_max}",
            flush=True,
        )
        reports = []
        for mode in [m.strip() for m in args.modes.split(",") if m.strip()]:
            (workdir / mode).mkdir(exist_ok=True)
            if mode == "pool":
                reports.append(run_pool(binary, workdir / "models", models, mix, models_max, args, workdir / mode))
            elif mode == "per-model":
                reports.append(run_per_model(binary, models, mix, args, workdir / mode))
            else:
                ap.error(f"--modes: unknown mode {mode!r}; choose from pool, per-model")
            print(json.dumps(asdict(reports[-1])), flush=True)
        summary["loadavg_end"] = os.getloadavg()[0]
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)

    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / f"farm_density-{time.strftime('%Y%m%dT%H%M%S')}"
    stem.with_suffix(".json").write_text(
        json.dumps({"summary": summary, "modes": [asdict(r) for r in reports]}, indent=2)
    )
    md = markdown(summary, reports)
    stem.with_suffix(".md").write_text(md)
    print(md)
    print(f"written: {stem}.json, {stem}.md")
    return 0 if all(r.errors == 0 for r in reports) else 1


if __name__ == "__main__":
    sys.exit(main())
