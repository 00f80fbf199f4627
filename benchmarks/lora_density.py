"""LoRA density benchmark (issue 26): N adapters on one base vs N full copies of the tuned (merged) model.

The real adapter of the SmolLM2 stand-in (scripts/build_lora.sh, `make lora`: tests/support/lora.py) and the same
adapter merged into the base at the base's quantization (Q4_1; scripts/build_lora.sh --merged, built on first use).
For each N, side by side in one run on this machine:

  adapters        ONE llama-server on the base GGUF with `--lora` repeated N times (N byte copies of the adapter GGUF
                  under different names, as N distinct fine-tunes would be) and --lora-init-without-apply; a request
                  picks its adapter with "lora": [{"id": i, "scale": 1}] (the pin's per-request field)
  merged-copies   N llama-servers, each on its OWN byte copy of the merged GGUF: distinct files, so no two processes
                  share page cache (distinct tuned models would not) — today's way to serve N tuned variants
  merged-shared   N llama-servers on the SAME merged file: the kernel keeps one copy of its mmapped pages (PSS splits
                  them), the best case for full copies, which only identical models get

Reported per mode and N: the sum of RSS and of PSS over the servers (from /proc/<pid>/smaps_rollup, after every model
or adapter answered once), models per GiB (N / RSS and N / PSS), and warm latency p50/p95 of a short completion (one
request at a time, round-robin over the N models or adapters). For the adapter server also the throughput of
concurrent requests (--concurrency) spread at random over its N adapters ("mixed": the pin never batches slots of
different adapter sets together, tools/server/server-context.cpp server_slot::can_batch_with) vs all on one adapter
("single") vs no adapter ("base"): the cost of unbatched mixed adapters, measured. Every server gets the same flags
(-t --threads -c --ctx -np --concurrency). JSON + Markdown go
to benchmarks/results/ (gitignored).

    LLAMA_ARG_REPACK=0 .venv/bin/python benchmarks/lora_density.py                 # N = 4 and 8
    LLAMA_ARG_REPACK=0 .venv/bin/python benchmarks/lora_density.py --n 2 --requests 8   # smoke
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:] = [str(ROOT), str(ROOT / "constructs"), str(ROOT / "containers")] + [
    p for p in sys.path if Path(p or ".").resolve() != ROOT / "benchmarks"
]

from inference_runtime.lora import base_lora, request_lora  # noqa: E402
from tests.support.engine import free_port, llama_server_path, stop_process, wait_healthy  # noqa: E402
from tests.support.lora import is_tuned, lora_adapter_path, merged_model_path  # noqa: E402
from tests.support.models import smollm2_path  # noqa: E402

GIB = 1024**3
PROMPTS = [
    "Why is the sky blue?",
    "Name three uses of copper.",
    "What is a prime number?",
    "Describe rain.",
    "Give one tip for an interview.",
    "Say hello in French.",
]


def rss_pss(pid: int) -> tuple[int, int]:
    """RSS and PSS in bytes (smaps_rollup: PSS divides each shared page among the processes that map it)."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:])
    return int(fields["Rss"].split()[0]) * 1024, int(fields["Pss"].split()[0]) * 1024


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


@dataclass
class Server:
    port: int
    proc: subprocess.Popen


@contextmanager
def servers(binary: Path, specs: list[tuple[Path, list[str]]], flags: list[str], logs: Path) -> Iterator[list[Server]]:
    """Start one llama-server per (model, extra args), all at once; stop them all at the end."""
    started: list[Server] = []
    with ExitStack() as stack:
        for model, extra in specs:
            port = free_port()
            log = stack.enter_context(open(logs / f"server-{port}.log", "wb"))  # noqa: SIM115
            cmd = [str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(port), *flags, *extra]
            started.append(Server(port, subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)))
        try:
            for s in started:
                wait_healthy(f"http://127.0.0.1:{s.port}", s.proc, timeout=300)
            yield started
        finally:
            for s in started:
                stop_process(s.proc)


BASE = -1  # a request to the adapter server's base: every adapter at scale 0 (base_lora; a request without `lora`
# would run with every adapter applied in this pin: inference_runtime/lora.py's docstring)


def complete(port: int, prompt: str, lora: int | None, max_tokens: int, ignore_eos: bool) -> tuple[str, int, float]:
    """One chat completion, temperature 0: (text, completion tokens, seconds). lora: an adapter id, BASE, or None
    (a server without adapters)."""
    body: dict[str, object] = {
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "ignore_eos": ignore_eos,
    }
    if lora is not None:
        body["lora"] = base_lora() if lora == BASE else request_lora(lora, 1.0)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    started = time.monotonic()
    try:
        conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
        r = conn.getresponse()
        data = json.loads(r.read())
        if r.status != 200:
            raise RuntimeError(f"HTTP {r.status}: {data}")
    finally:
        conn.close()
    seconds = time.monotonic() - started
    return data["choices"][0]["message"]["content"] or "", data["usage"]["completion_tokens"], seconds


@dataclass
class Row:
    mode: str
    n: int
    processes: int
    rss_gib: float
    pss_gib: float
    models_per_gib_rss: float
    models_per_gib_pss: float
    warm_p50_s: float
    warm_p95_s: float
    tuned_answers: str  # tuned / asked, from the warm-up round (every model or adapter once, prompts in turn)


@dataclass
class Throughput:
    n: int
    load: str  # mixed / single / base
    requests: int
    seconds: float
    req_per_s: float
    tokens_per_s: float
    p95_s: float


def measure(mode: str, n: int, targets: list[tuple[int, int | None]], procs: list[Server], args) -> Row:
    """targets: (port, lora id or None) per model/adapter. Warm-up (each once, checked tuned), memory, warm latency."""
    answers = [complete(port, PROMPTS[i % len(PROMPTS)], lora, 16, False)[0] for i, (port, lora) in enumerate(targets)]
    tuned = sum(is_tuned(answer) for answer in answers)
    mem = [rss_pss(s.proc.pid) for s in procs]
    rss, pss = sum(m[0] for m in mem), sum(m[1] for m in mem)
    latencies = []
    for i in range(args.warm_rounds * n):
        port, lora = targets[i % n]
        latencies.append(complete(port, PROMPTS[i % len(PROMPTS)], lora, args.max_tokens, True)[2])
    return Row(
        mode,
        n,
        len(procs),
        round(rss / GIB, 3),
        round(pss / GIB, 3),
        round(n / (rss / GIB), 1),
        round(n / (pss / GIB), 1),
        round(percentile(latencies, 0.5), 3),
        round(percentile(latencies, 0.95), 3),
        f"{tuned}/{n}",
    )


def throughput(port: int, n: int, load: str, args, rng: random.Random) -> Throughput:
    """`args.requests` requests by `args.concurrency` clients; the adapter of each: random (mixed), 0 (single), none."""
    loras = [rng.randrange(n) if load == "mixed" else (0 if load == "single" else BASE) for _ in range(args.requests)]
    jobs = iter(enumerate(loras))
    lock = threading.Lock()
    results: list[tuple[int, float]] = []

    def client() -> None:
        while True:
            with lock:
                job = next(jobs, None)
            if job is None:
                return
            i, lora = job
            _, tokens, seconds = complete(port, PROMPTS[i % len(PROMPTS)], lora, args.max_tokens, True)
            with lock:
                results.append((tokens, seconds))

    started = time.monotonic()
    threads = [threading.Thread(target=client) for _ in range(args.concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - started
    tokens = sum(r[0] for r in results)
    return Throughput(
        n,
        load,
        len(results),
        round(wall, 2),
        round(len(results) / wall, 2),
        round(tokens / wall, 1),
        round(percentile([r[1] for r in results], 0.95), 3),
    )


def run(args) -> tuple[list[Row], list[Throughput]]:
    binary = llama_server_path()
    base, adapter, merged = smollm2_path(), lora_adapter_path(), merged_model_path()
    flags = ["-t", str(args.threads), "-c", str(args.ctx * args.concurrency), "-np", str(args.concurrency)]
    rng = random.Random(args.seed)
    rows: list[Row] = []
    rates: list[Throughput] = []
    work = Path(tempfile.mkdtemp(prefix="lora-density-", dir=args.work_dir))
    try:
        for n in args.n:
            copies = work / f"n{n}"
            copies.mkdir()
            adapters = [copies / f"adapter-{i}.gguf" for i in range(n)]
            merges = [copies / f"merged-{i}.gguf" for i in range(n)]
            for path in adapters:
                shutil.copyfile(adapter, path)
            for path in merges:
                shutil.copyfile(merged, path)
            lora_args = [a for path in adapters for a in ("--lora", str(path))] + ["--lora-init-without-apply"]
            with servers(binary, [(base, lora_args)], flags, copies) as (server,):
                rows.append(measure("adapters", n, [(server.port, i) for i in range(n)], [server], args))
                for load in ("mixed", "single", "base"):
                    rates.append(throughput(server.port, n, load, args, rng))
                    print(rates[-1], file=sys.stderr)
            print(rows[-1], file=sys.stderr)
            for mode, files in (("merged-copies", merges), ("merged-shared", [merges[0]] * n)):
                with servers(binary, [(path, []) for path in files], flags, copies) as started:
                    rows.append(measure(mode, n, [(s.port, None) for s in started], started, args))
                print(rows[-1], file=sys.stderr)
            shutil.rmtree(copies)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return rows, rates


def markdown(rows: list[Row], rates: list[Throughput]) -> str:
    out = [
        "| N | mode | processes | RSS GiB | PSS GiB | models / GiB (RSS) | models / GiB (PSS) | warm p50 / p95 s | tuned |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        out.append(
            f"| {r.n} | {r.mode} | {r.processes} | {r.rss_gib} | {r.pss_gib} | {r.models_per_gib_rss} | "
            f"{r.models_per_gib_pss} | {r.warm_p50_s} / {r.warm_p95_s} | {r.tuned_answers} |"
        )
    out += ["", "| N | load (adapter server) | requests | req/s | tokens/s | p95 s |", "|---:|---|---:|---:|---:|---:|"]
    for t in rates:
        out.append(f"| {t.n} | {t.load} | {t.requests} | {t.req_per_s} | {t.tokens_per_s} | {t.p95_s} |")
    return "\n".join(out) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, nargs="+", default=[4, 8], help="adapters / merged copies (default 4 8)")
    parser.add_argument("--threads", type=int, default=2, help="-t of every server")
    parser.add_argument("--ctx", type=int, default=512, help="context per slot (-c = ctx x concurrency)")
    parser.add_argument("--concurrency", type=int, default=4, help="clients of the throughput loads, and -np")
    parser.add_argument("--requests", type=int, default=48, help="requests per throughput load")
    parser.add_argument("--max-tokens", type=int, default=8, help="tokens out per request (ignore_eos)")
    parser.add_argument("--warm-rounds", type=int, default=3, help="warm requests per model or adapter")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--work-dir", default=None, help="where the copies go (a disk, not tmpfs; default: TMPDIR)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = parser.parse_args()
    os.environ.setdefault("LLAMA_ARG_REPACK", "0")  # as the tests: no weight repacking (tests/conftest.py)
    rows, rates = run(args)
    args.out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    doc = {"args": {k: v for k, v in vars(args).items() if k != "out"}, "rows": [asdict(r) for r in rows]}
    doc["throughput"] = [asdict(t) for t in rates]
    (args.out / f"lora_density-{stamp}.json").write_text(json.dumps(doc, indent=2))
    table = markdown(rows, rates)
    (args.out / f"lora_density-{stamp}.md").write_text(table)
    print(table)


if __name__ == "__main__":
    main()
