"""Engine benchmark: the same model on llama.cpp (GGUF Q8_0 and Q4_K_M) and on vLLM CPU (BF16 safetensors).

One checkpoint, three forms: SmolLM2-135M-Instruct as BF16 safetensors (what vLLM serves), converted to a BF16 GGUF
by llama.cpp's own `convert_hf_to_gguf.py` and quantized by `llama-quantize` (both from the engine pin's sdist) to
Q8_0 and Q4_K_M. The forms are made once and cached under ~/.cache/cpu-inference/models/.

Each engine is started the way it deploys: its container entrypoint in EKS mode (containers/llama-server/
entrypoint.py, containers/vllm-cpu/entrypoint.py) with the environment `cpu_inference.sizing` renders for the same
CPU budget (a 2-CPU pod on an m7i.large: llama.cpp 2 threads x 4 slots; vLLM 1 OMP thread + 1 CPU reserved for its
scheduler, 4 sequences). Engines run one after another, never together. Load comes from the project's own bench
(`cpu_inference.evaluation`): the same prompts (benchmarks/engine_prompts.txt, 126-132 prompt tokens with the chat
template), closed loop at concurrency 4, exactly --max-tokens output tokens per request (`ignore_eos`, which both
servers accept: llama.cpp tools/server/server-schema.cpp, vLLM ChatCompletionRequest), after a warm-up batch at the
same concurrency. Per engine it reports output tok/s, TTFT p50/p95, the peak memory of the whole process tree (PSS
from /proc/<pid>/smaps_rollup summed over the tree: shared pages split between the processes that map them; and
RSS summed, which counts shared pages once per process), startup seconds (process start to /health 200) and the
tree's CPU seconds per 1,000 output tokens. Each run's bench.json is kept, and `bench compare` of them is printed.

    .venv/bin/python benchmarks/engines.py                       # ~6 min on 2 vCPUs once the models exist
    .venv/bin/python benchmarks/engines.py --requests 16 --only vllm --json /tmp/engines.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "constructs")]

from cpu_inference._internal.resources import cache_dir  # noqa: E402
from cpu_inference.engines import LLAMA_CPP, VLLM  # noqa: E402
from cpu_inference.evaluation.bench import BenchPlan, run_bench  # noqa: E402
from cpu_inference.evaluation.client import OpenAIClient  # noqa: E402
from cpu_inference.evaluation.loadgen import LoadSettings, load_prompts, run_level  # noqa: E402
from cpu_inference.evaluation.pricing import Price  # noqa: E402
from cpu_inference.evaluation.report import compare_rows, markdown_table, write_bench_report  # noqa: E402
from cpu_inference.sizing import ModelSpec, instance, size  # noqa: E402
from tests.support.engine import free_port, llama_server_path, wait_healthy  # noqa: E402

CACHE = cache_dir()
MODELS = CACHE / "models"
BASE = "smollm2-135m-instruct"
BF16_DIR = MODELS / f"{BASE}-bf16"  # made by scripts/gguf_to_safetensors.py from the PyPI GGUF
QUANTS = ("Q8_0", "Q4_K_M")
PROMPTS = ROOT / "benchmarks" / "engine_prompts.txt"
INSTANCE = "m7i.large"  # 2 vCPUs: the budget both engines get
# SmolLM2-135M's shape (config.json: 30 layers, 3 KV heads, head_dim 64), so the KV sizing is exact.
SHAPE = dict(parameters_billions=0.135, layers=30, kv_heads=3, head_dim=64, task="chat")


def pin() -> dict[str, str]:
    pairs = (
        ln.split("=", 1)
        for ln in (ROOT / "containers/llama-server/engine-pin.env").read_text().splitlines()
        if "=" in ln and not ln.startswith("#")
    )
    return {k.strip(): v.strip() for k, v in pairs}


# ---------------------------------------------------------------- the three forms of the model


def gguf_path(quant: str) -> Path:
    return MODELS / f"{BASE}-{quant.lower()}.gguf"


def prepare_models(python: str) -> dict[str, Path]:
    """BF16 checkpoint -> BF16 GGUF (convert_hf_to_gguf.py) -> Q8_0 / Q4_K_M (llama-quantize); cached."""
    if not (BF16_DIR / "config.json").is_file():
        raise SystemExit(
            f"{BF16_DIR} missing: make it with `{python} scripts/gguf_to_safetensors.py <smollm2 .gguf> {BF16_DIR}`"
        )
    out = {q: gguf_path(q) for q in QUANTS}
    if all(p.is_file() for p in out.values()):
        return out
    p = pin()
    sdist = CACHE / "sdist" / p["LLAMA_CPP_PYTHON_SDIST"]
    if not sdist.is_file():
        sdist.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "-q",
                "--no-deps",
                "--no-binary",
                ":all:",
                f"llama-cpp-python=={p['LLAMA_CPP_PYTHON_VERSION']}",
                "-d",
                str(sdist.parent),
            ],
            check=True,
        )
    subprocess.run(
        ["sha256sum", "-c", "--quiet", "-"], input=f"{p['LLAMA_CPP_PYTHON_SHA256']}  {sdist}\n", text=True, check=True
    )
    quantize = (
        subprocess.run(
            ["bash", str(ROOT / "scripts/build_llama_quantize.sh")], check=True, capture_output=True, text=True
        )
        .stdout.strip()
        .splitlines()[-1]
    )
    with tempfile.TemporaryDirectory(prefix="engines-bench-") as tmp:
        prefix = f"llama_cpp_python-{p['LLAMA_CPP_PYTHON_VERSION']}/vendor/llama.cpp/"
        keep = ("convert_hf_to_gguf.py", "conversion/", "gguf-py/")
        with tarfile.open(sdist) as tar:
            members = [
                m for m in tar.getmembers() if m.name.startswith(prefix) and m.name[len(prefix) :].startswith(keep)
            ]
            tar.extractall(tmp, members=members, filter="data")
        src = Path(tmp) / prefix
        bf16 = Path(tmp) / f"{BASE}-bf16.gguf"
        # The sdist's own gguf-py goes first on sys.path (the script inserts it unless NO_LOCAL_GGUF is set).
        subprocess.run(
            [python, str(src / "convert_hf_to_gguf.py"), str(BF16_DIR), "--outtype", "bf16", "--outfile", str(bf16)],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        for quant, dest in out.items():
            if not dest.is_file():
                tmp_out = dest.with_suffix(".gguf.tmp")
                subprocess.run(
                    [quantize, str(bf16), str(tmp_out), quant],
                    check=True,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
                tmp_out.replace(dest)
    return out


# ---------------------------------------------------------------- process-tree memory and CPU


def tree_pids(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(d.name))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo += children.get(pid, [])
    return out


def smaps_kib(pid: int) -> tuple[int, int]:
    """(PSS, RSS) in KiB from /proc/<pid>/smaps_rollup; (0, 0) once the process is gone."""
    pss = rss = 0
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                pss = int(line.split()[1])
            elif line.startswith("Rss:"):
                rss = int(line.split()[1])
    except OSError:
        pass
    return pss, rss


def cpu_seconds(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def machine_busy_seconds() -> float:
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return (sum(values[:8]) - values[3] - values[4]) / os.sysconf("SC_CLK_TCK")


def wait_quiet(own: list[int], max_wait: float, *, below: float = 0.3, window: float = 5.0) -> float:
    """Wait (at most max_wait s) until other work keeps < `below` CPUs busy over `window` s; returns that load.
    On a shared machine a preempted llama.cpp thread stalls the others at every barrier, so noise is not small."""
    deadline = time.monotonic() + max_wait
    while True:
        pids = own + [os.getpid()]
        busy0, cpu0 = machine_busy_seconds(), cpu_seconds(pids)
        time.sleep(window)
        others = (machine_busy_seconds() - busy0 - (cpu_seconds(pids) - cpu0)) / window
        if others < below or time.monotonic() > deadline:
            return round(max(others, 0.0), 2)


@dataclass
class MemorySampler:
    """Samples the tree's summed PSS and RSS every `interval` s; keeps the peaks and the processes at the PSS peak."""

    root: int
    interval: float = 0.5
    peak_pss_kib: int = 0
    peak_rss_kib: int = 0
    at_peak: list[dict] = field(default_factory=list)
    last_pss_kib: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def sample(self) -> None:
        rows = []
        for pid in tree_pids(self.root):
            pss, rss = smaps_kib(pid)
            try:
                name = Path(f"/proc/{pid}/comm").read_text().strip()
            except OSError:
                name = "?"
            rows.append({"pid": pid, "name": name, "pss_mib": round(pss / 1024, 1), "rss_mib": round(rss / 1024, 1)})
        pss = int(sum(r["pss_mib"] for r in rows) * 1024)
        rss = int(sum(r["rss_mib"] for r in rows) * 1024)
        self.last_pss_kib = pss
        self.peak_rss_kib = max(self.peak_rss_kib, rss)
        if pss > self.peak_pss_kib:
            self.peak_pss_kib, self.at_peak = pss, rows

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def __enter__(self) -> MemorySampler:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join()


# ---------------------------------------------------------------- one engine run


@dataclass(frozen=True)
class Engine:
    label: str  # "llama.cpp Q8_0"
    engine: str
    weights: str  # the model form, e.g. "GGUF Q8_0"
    model: Path
    served_name: str
    command: list[str]
    env: dict[str, str]  # what the sizing renders + the container's own variables
    sized_env: dict[str, str]


def engines(ggufs: dict[str, Path], vllm_python: str, port: int, only: set[str]) -> list[Engine]:
    it = instance(INSTANCE)
    out = []
    if LLAMA_CPP in only:
        for quant, path in ggufs.items():
            sized = size(
                ModelSpec(**SHAPE, quantization=quant, file_size_bytes=path.stat().st_size), it, target="eks", cpu=2
            ).engine_env()
            env = {
                **sized,
                "MODEL_PATH": str(path),
                "LLAMA_SERVER_BIN": str(llama_server_path()),
                "LLAMA_HOST": "127.0.0.1",
                "LLAMA_PORT": str(port),
                "LLAMA_MODEL_ALIAS": path.stem,
            }
            out.append(
                Engine(
                    f"llama.cpp {quant}",
                    LLAMA_CPP,
                    f"GGUF {quant}",
                    path,
                    path.stem,
                    [sys.executable, str(ROOT / "containers/llama-server/entrypoint.py")],
                    env,
                    sized,
                )
            )
    if VLLM in only:
        sized = size(ModelSpec(**SHAPE, engine=VLLM, dtype="bfloat16"), it, target="eks", cpu=2).engine_env()
        env = {
            **sized,
            "MODEL_PATH": str(BF16_DIR),
            "SERVE_MODEL_NAME": BF16_DIR.name,
            "SERVE_HOST": "127.0.0.1",
            "SERVE_PORT": str(port),
        }
        out.append(
            Engine(
                "vLLM BF16",
                VLLM,
                "safetensors BF16",
                BF16_DIR,
                BF16_DIR.name,
                [vllm_python, str(ROOT / "containers/vllm-cpu/entrypoint.py")],
                env,
                sized,
            )
        )
    return out


def model_size_mib(path: Path) -> float:
    files = [path] if path.is_file() else list(path.glob("*.safetensors"))
    return round(sum(f.stat().st_size for f in files) / 2**20, 1)


def stop_group(proc: subprocess.Popen, timeout: float = 30) -> None:
    """SIGTERM to the process group this run started (vLLM's EngineCore and worker are in it), then SIGKILL."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    except ProcessLookupError:
        proc.wait()


def record_stream(base: str, model: str, path: Path) -> None:
    """Keep one short streamed answer's raw bytes: what each engine's SSE looks like (a test replays vLLM's)."""
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "Say hello."}],
        "max_tokens": 8,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    req = urllib.request.Request(
        f"{base}/v1/chat/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=300) as r:
        path.write_bytes(r.read())


def run_engine(
    e: Engine, prompts: list, *, requests: int, concurrency: int, max_tokens: int, out_dir: Path, port: int, wait: float
) -> dict:
    base = f"http://127.0.0.1:{port}"
    log_path = out_dir / f"{e.served_name}.log"
    load_before = os.getloadavg()
    print(
        f"== {e.label}: starting ({' '.join(e.command)}), load average {load_before[0]:.2f}",
        file=sys.stderr,
        flush=True,
    )
    env = {**{k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "LLAMA_", "SERVE_"))}, **e.env}
    with open(log_path, "wb") as log:
        t0 = time.perf_counter()
        proc = subprocess.Popen(e.command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            with MemorySampler(proc.pid) as mem:
                wait_healthy(base, proc, timeout=900)
                startup_s = time.perf_counter() - t0
                raw_models = urllib.request.urlopen(f"{base}/v1/models", timeout=10).read()
                (out_dir / f"{e.served_name}.v1-models.json").write_bytes(raw_models)
                models_body = json.loads(raw_models)
                record_stream(base, e.served_name, out_dir / f"{e.served_name}.chat-stream.sse")
                client = OpenAIClient(base, timeout=600)
                quiet = wait_quiet(tree_pids(proc.pid), wait)
                print(
                    f"   healthy after {startup_s:.1f} s; other load before measuring {quiet:.2f} cores",
                    file=sys.stderr,
                    flush=True,
                )
                load = LoadSettings(max_tokens=max_tokens, model=e.served_name, ignore_eos=True, max_seconds=3600)
                try:
                    # Warm-up at the measured concurrency: batch shapes, caches and compiled graphs before timing.
                    warm = run_level(
                        client,
                        prompts,
                        concurrency=concurrency,
                        requests=concurrency,
                        settings=load,
                        prompt_offset=requests,
                    )
                    pids = tree_pids(proc.pid)
                    cpu0, busy0, self0, wall0 = (
                        cpu_seconds(pids),
                        machine_busy_seconds(),
                        cpu_seconds([os.getpid()]),
                        time.perf_counter(),
                    )
                    # No latency target here (an hour): every run is "selected" at its one level, so compare lists all.
                    plan = BenchPlan(
                        endpoint=base,
                        concurrency=(concurrency,),
                        requests=requests,
                        p95_ms=3_600_000,
                        instance_type=None,
                        warmup=0,
                        prompt_source=f"{PROMPTS.relative_to(ROOT)} ({len(prompts)})",
                        load=load,
                    )
                    report = run_bench(client, prompts, plan, Price(None, "unknown", "engine benchmark: no price"))
                    wall = time.perf_counter() - wall0
                    engine_cpu = cpu_seconds(pids) - cpu0
                    others = (machine_busy_seconds() - busy0 - engine_cpu - (cpu_seconds([os.getpid()]) - self0)) / wall
                finally:
                    client.close()
                mem.sample()
                steady_pss = mem.last_pss_kib
        finally:
            stop_group(proc)
    report["instance_type"] = f"{INSTANCE} budget, 2 CPUs (local)"
    write_bench_report(report, out_dir / e.served_name, plot=False)
    level = report["levels"][0]
    ok = level["ok"] or 1
    out_tokens = [r.output_tokens for r in warm if r.ok]
    return {
        "label": e.label,
        "engine": e.engine,
        "weights": e.weights,
        "model": str(e.model),
        "model_size_mib": model_size_mib(e.model),
        "served_name": e.served_name,
        "sized_env": e.sized_env,
        "server": report["server"],
        "v1_models": models_body,
        "startup_s": round(startup_s, 1),
        "requests": level["requests"],
        "ok": level["ok"],
        "errors": level["errors"],
        "output_tok_s": level["output_tok_s"],
        "ttft_p50_ms": level["ttft_p50_ms"],
        "ttft_p95_ms": level["ttft_p95_ms"],
        "e2e_p50_ms": level["e2e_p50_ms"],
        "e2e_p95_ms": level["e2e_p95_ms"],
        "tpot_p50_ms": level["tpot_p50_ms"],
        "output_tokens_per_request": round(level["output_tokens"] / ok, 2),
        "prompt_tokens_per_request": round(level["prompt_tokens"] / ok, 1),
        "warmup_output_tokens": out_tokens,
        "peak_pss_mib": round(mem.peak_pss_kib / 1024, 1),
        "peak_rss_mib": round(mem.peak_rss_kib / 1024, 1),
        "steady_pss_mib": round(steady_pss / 1024, 1),
        "processes_at_peak": mem.at_peak,
        "engine_cpu_s_per_1k_tokens": round(1000 * engine_cpu / max(level["output_tokens"], 1), 2),
        "engine_cores_busy": round(engine_cpu / wall, 2),
        "other_load_cores": round(max(others, 0.0), 2),
        "other_load_cores_before": quiet,
        "load_average_before": [round(v, 2) for v in load_before],
        "load_average_after": [round(v, 2) for v in os.getloadavg()],
        "bench_json": str(out_dir / e.served_name / "bench.json"),
        "log": str(log_path),
    }


# ---------------------------------------------------------------- output


def table(results: list[dict]) -> str:
    header = [
        "engine",
        "model form",
        "size MiB",
        "sized threads",
        "startup s",
        "output tok/s",
        "TTFT p50 ms",
        "TTFT p95 ms",
        "e2e p95 ms",
        "out tokens/req",
        "prompt tokens/req",
        "peak PSS MiB (tree)",
        "peak RSS MiB (tree, summed)",
        "CPU s / 1k tok",
        "other load (cores)",
        "ok/total",
    ]
    rows = [
        [
            r["label"],
            r["weights"],
            f"{r['model_size_mib']:.0f}",
            r["sized_env"].get("LLAMA_THREADS")
            or f"{r['sized_env']['OMP_NUM_THREADS']} OMP + {r['sized_env']['VLLM_CPU_NUM_OF_RESERVED_CPU']} reserved",
            f"{r['startup_s']:.1f}",
            f"{r['output_tok_s']:.1f}",
            f"{r['ttft_p50_ms']:.0f}",
            f"{r['ttft_p95_ms']:.0f}",
            f"{r['e2e_p95_ms']:.0f}",
            f"{r['output_tokens_per_request']:g}",
            f"{r['prompt_tokens_per_request']:g}",
            f"{r['peak_pss_mib']:.0f}",
            f"{r['peak_rss_mib']:.0f}",
            f"{r['engine_cpu_s_per_1k_tokens']:.1f}",
            f"{r['other_load_cores']:.2f}",
            f"{r['ok']}/{r['requests']}",
        ]
        for r in results
    ]
    return markdown_table(header, rows)


def implies(results: list[dict], max_tokens: int) -> str:
    """One line drawn from the figures: the fastest form against each other one, and the memory and startup spread."""
    done = [r for r in results if r["ok"]]
    if len(done) < 2:
        return "implies: nothing to compare (fewer than two engines served requests)"
    fast = max(done, key=lambda r: r["output_tok_s"])
    parts = []
    for r in sorted(done, key=lambda r: -r["output_tok_s"]):
        if r is fast:
            continue
        parts.append(
            f"{fast['output_tok_s'] / r['output_tok_s']:.2f}x {r['label']}'s output tok/s, "
            f"TTFT p95 {fast['ttft_p95_ms'] / r['ttft_p95_ms']:.2f}x, peak PSS {fast['peak_pss_mib'] / r['peak_pss_mib']:.2f}x, "
            f"startup {fast['startup_s'] / r['startup_s']:.2f}x its"
        )
    small = min(done, key=lambda r: r["peak_pss_mib"])
    big = max(done, key=lambda r: r["peak_pss_mib"])
    unequal = [r["label"] for r in done if r["output_tokens_per_request"] != max_tokens]
    line = f"implies: on the same 2-CPU budget {fast['label']} serves " + "; ".join(parts)
    line += f". Memory per replica spans {small['peak_pss_mib']:.0f} MiB ({small['label']}) to {big['peak_pss_mib']:.0f} MiB ({big['label']}), {big['peak_pss_mib'] / small['peak_pss_mib']:.1f}x"
    if unequal:
        line += f". CAUTION: {', '.join(unequal)} did not generate exactly {max_tokens} tokens per request, so tok/s are not like for like"
    if max(r["other_load_cores"] for r in done) > 0.25:
        line += ". CAUTION: other work kept > 0.25 cores busy during a run; figures are noisy"
    return line + "."


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=32, help="measured requests per engine (default 32)")
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--only", default=f"{LLAMA_CPP},{VLLM}", help="engines to run, comma-separated (default both)")
    ap.add_argument(
        "--vllm-python",
        default=None,
        help="a python with vllm-cpu installed, also running convert_hf_to_gguf.py "
        "(default: the scripts/build_vllm_env.sh environment, built first if missing)",
    )
    ap.add_argument("--out", type=Path, help="results directory (default benchmarks/results/engines-<UTC time>)")
    ap.add_argument("--json", type=Path, help="also write the results JSON here")
    ap.add_argument(
        "--wait-quiet",
        type=float,
        default=300,
        help="before measuring an engine, wait up to this many s for other work to leave the CPUs (default 300)",
    )
    ap.add_argument("--prepare-only", action="store_true", help="make the GGUF forms and stop")
    args = ap.parse_args()
    only = {s.strip() for s in args.only.split(",") if s.strip()}
    t0 = time.perf_counter()
    if args.vllm_python is None:
        from tests.support.vllm import vllm_python

        args.vllm_python = str(vllm_python())
    ggufs = prepare_models(args.vllm_python)
    print(
        f"models ready in {time.perf_counter() - t0:.0f} s: {', '.join(str(p) for p in ggufs.values())}, {BF16_DIR}",
        file=sys.stderr,
    )
    if args.prepare_only:
        return 0
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S")
    out_dir = args.out or ROOT / "benchmarks/results" / f"engines-{stamp}"
    out_dir.mkdir(parents=True, exist_ok=True)
    # Every request gets its own ticket number up front, so no engine can answer a repeated prompt from its prefix
    # or prompt cache (only the chat template's system preamble is shared, by both engines alike).
    base_prompts = load_prompts(PROMPTS)
    prompts = [
        [{"role": "user", "content": f"Ticket {4100 + i}: {base_prompts[i % len(base_prompts)][0]['content']}"}]
        for i in range(args.requests + args.concurrency)
    ]
    results = []
    for e in engines(ggufs, args.vllm_python, free_port(), only):
        port = int(e.env.get("LLAMA_PORT") or e.env["SERVE_PORT"])
        results.append(
            run_engine(
                e,
                prompts,
                requests=args.requests,
                concurrency=args.concurrency,
                max_tokens=args.max_tokens,
                out_dir=out_dir,
                port=port,
                wait=args.wait_quiet,
            )
        )
    md = table(results)
    line = implies(results, args.max_tokens)
    header, rows = compare_rows(
        [json.loads(Path(r["bench_json"]).read_text()) | {"_path": Path(r["bench_json"]).parent.name} for r in results]
    )
    compare = markdown_table(header, rows)
    cpu = next(
        (
            ln.split(":", 1)[1].strip()
            for ln in Path("/proc/cpuinfo").read_text().splitlines()
            if ln.startswith("model name")
        ),
        "?",
    )
    setup = (
        f"{os.cpu_count()} vCPUs ({cpu}); concurrency {args.concurrency}, {args.requests} measured requests per engine after {args.concurrency} warm-up, "
        f"max_tokens {args.max_tokens} with ignore_eos, prompts {PROMPTS.relative_to(ROOT)}"
    )
    print(f"\n{setup}\n\n{md}\n\n{line}\n\n`cpu-inference bench compare` of the runs:\n\n{compare}\n")
    record = {
        "kind": "cpu-inference.engines-benchmark",
        "started": stamp,
        "setup": setup,
        "results": results,
        "implies": line,
        "compare": compare,
    }
    (out_dir / "engines.json").write_text(json.dumps(record, indent=2) + "\n")
    (out_dir / "engines.md").write_text(f"{setup}\n\n{md}\n\n{line}\n\n{compare}\n")
    if args.json:
        args.json.write_text(json.dumps(record, indent=2) + "\n")
    print(f"wrote {out_dir}/engines.json, engines.md", file=sys.stderr)
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
