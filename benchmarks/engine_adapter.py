"""Engine benchmark: the SageMaker adapter's overhead and the sized slot configuration's payoff.

One run, one model, one llama-server binary (the engine pin), closed-loop load at a fixed concurrency:

  1. adapter vs direct: the same `entrypoint.py serve` process, requests through the adapter
     (POST /invocations) and straight to its loopback engine. The adapter's CPU time per token and as a
     share of the engine's is reported too: unlike tokens/s it does not swing with other load.
     Goal: adapter throughput >= 95% of direct.
  2. sized slots vs -np 1: the slots cpu_inference.sizing computes for this machine, against one slot.
     Goal: >= 1.5x output tokens/s, TTFT p95 <= 1 s.

Rounds rotate the three measurements (direct, adapter, -np 1) so noise from other work on the machine
spreads over all of them. Reported: per configuration, medians over all batches and over the quiet ones (other work
kept < 0.25 CPUs busy during the batch: /proc/stat minus this benchmark's own processes).
Every request streams (what InvokeEndpointWithResponseStream uses) and generates exactly --max-tokens
tokens (ignore_eos), so configurations do the same work.

    .venv/bin/python benchmarks/engine_adapter.py --model smollm2
    .venv/bin/python benchmarks/engine_adapter.py --model gemma --requests 16 --json /tmp/engine.json
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from urllib.parse import urlparse

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "constructs")]

from cpu_inference.sizing import InstanceType, ModelSpec, size  # noqa: E402
from tests.runtime.engine.serving import Endpoint, start_endpoint, stop_endpoint  # noqa: E402
from tests.support.engine import llama_server_path  # noqa: E402

PROMPTS = [
    "Explain how a heat pump works.",
    "Write a haiku about autumn rain.",
    "List three uses of copper.",
    "Summarize the plot of Hamlet.",
    "Describe a sunrise over the sea.",
    "Why is the sky blue?",
    "Give tips for a job interview.",
    "What is a prime number?",
    "Describe the water cycle.",
    "Write a limerick about a cat.",
    "How do vaccines work?",
    "Explain recursion to a child.",
]
MODELS = {
    "smollm2": ModelSpec(parameters_billions=0.135, quantization="Q4_1", task="chat"),
    "gemma": ModelSpec(parameters_billions=0.27, quantization="Q4_K_M", task="chat"),
}


@dataclass
class Batch:
    label: str
    requests: int
    tokens: int
    seconds: float
    ttft_p50: float
    ttft_p95: float
    errors: int
    adapter_cpu_s: float  # CPU time of the entrypoint/adapter process during the batch
    engine_cpu_s: float  # CPU time of llama-server during the batch
    others_cores: float  # CPUs kept busy by everything else on the machine (other users' work), on average

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds


def _one(base: str, path: str, body: dict) -> tuple[float, int]:
    """Stream one request; (time to first token, tokens generated)."""
    u = urlparse(base)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=300)
    try:
        t0 = time.perf_counter()
        conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            raise RuntimeError(f"HTTP {resp.status}: {resp.read()[:200]!r}")
        ttft, tokens = None, 0
        while line := resp.readline():
            if not line.startswith(b"data: ") or line.startswith(b"data: [DONE]"):
                continue
            event = json.loads(line[6:])
            for choice in event.get("choices", []):
                if choice.get("delta", {}).get("content"):
                    tokens += 1
                    ttft = ttft if ttft is not None else time.perf_counter() - t0
            if "timings" in event:
                tokens = event["timings"]["predicted_n"]
        return (ttft if ttft is not None else time.perf_counter() - t0), tokens
    finally:
        conn.close()


def machine_busy_seconds() -> float:
    """CPU seconds all CPUs spent busy since boot (/proc/stat: everything but idle and iowait)."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return (sum(values[:8]) - values[3] - values[4]) / os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def run_batch(
    label: str, base: str, path: str, *, requests: int, concurrency: int, max_tokens: int, ep: Endpoint
) -> Batch:
    """`concurrency` workers send `requests` streaming chats in total, back to back."""
    lock = threading.Lock()
    next_i = [0]
    ttfts: list[float] = []
    tokens = [0]
    errors = [0]

    def worker() -> None:
        while True:
            with lock:
                i = next_i[0]
                if i >= requests:
                    return
                next_i[0] += 1
            body = {
                "messages": [{"role": "user", "content": f"{PROMPTS[i % len(PROMPTS)]} (#{i})"}],
                "max_tokens": max_tokens,
                "ignore_eos": True,
                "stream": True,
                "temperature": 0.7,
            }
            try:
                ttft, n = _one(base, path, body)
            except Exception as e:  # noqa: BLE001 - counted and reported
                print(f"  {label}: request {i} failed: {e}", file=sys.stderr)
                with lock:
                    errors[0] += 1
                continue
            with lock:
                ttfts.append(ttft)
                tokens[0] += n

    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    pids = (ep.proc.pid, ep.engine_pid())
    cpu0 = [cpu_seconds(p) for p in pids]
    busy0, own0 = machine_busy_seconds(), sum(os.times()[:2])
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - t0
    adapter_cpu, engine_cpu = (cpu_seconds(p) - c for p, c in zip(pids, cpu0, strict=True))
    others = machine_busy_seconds() - busy0 - (sum(os.times()[:2]) - own0) - adapter_cpu - engine_cpu
    q = statistics.quantiles(ttfts, n=20, method="inclusive") if len(ttfts) > 1 else ttfts * 19
    return Batch(
        label,
        requests,
        tokens[0],
        seconds,
        statistics.median(ttfts),
        q[18],
        errors[0],
        adapter_cpu,
        engine_cpu,
        max(0.0, others / seconds),
    )


QUIET_CORES = 0.25  # a batch is quiet when other work kept fewer CPUs than this busy on average


def figures(results: dict[str, list[Batch]], quiet_only: bool) -> dict | None:
    """Per configuration, medians of tok/s and TTFT p95 over its batches (only the quiet ones if
    `quiet_only`), their ratios and the goals; None when a configuration has no such batch."""
    chosen = {k: [b for b in bs if not quiet_only or b.others_cores < QUIET_CORES] for k, bs in results.items()}
    if not all(chosen.values()):
        return None
    rate = {k: statistics.median(b.tokens_per_second for b in bs) for k, bs in chosen.items()}
    ttft = {k: statistics.median(b.ttft_p95 for b in bs) for k, bs in chosen.items()}
    direct, adapter, np1 = rate["direct"], rate["adapter"], rate["np1"]
    return {
        "batches": {k: len(bs) for k, bs in chosen.items()},
        "direct_tok_s": round(direct, 1),
        "adapter_tok_s": round(adapter, 1),
        "np1_tok_s": round(np1, 1),
        "adapter_vs_direct": round(adapter / direct, 3),
        "sized_vs_np1": round(direct / np1, 2),
        "ttft_p95_s": {k: round(v, 3) for k, v in ttft.items()},
        "goals": {
            "adapter >= 0.95 x direct": adapter >= 0.95 * direct,
            "sized >= 1.5 x np1": direct >= 1.5 * np1,
            "sized TTFT p95 <= 1 s (direct and through the adapter)": max(ttft["direct"], ttft["adapter"]) <= 1.0,
        },
    }


def local_instance(cpus: int) -> InstanceType:
    """This machine as a SageMaker-like instance whose engine owns `cpus` CPUs."""
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1024**3
    return InstanceType(
        "local", cpus, mem, "amd64" if os.uname().machine == "x86_64" else "arm64", "local", "native", False
    )


def model_path(name: str) -> Path:
    from tests.support.models import gemma_path, smollm2_path

    return smollm2_path() if name == "smollm2" else gemma_path()


def start(
    binary: Path, model: Path, workdir: Path, *, threads: int, slots: int, ctx_per_slot: int, queue: int
) -> Endpoint:
    workdir.mkdir(parents=True, exist_ok=True)
    return start_endpoint(
        binary,
        model,
        workdir,
        LLAMA_THREADS=str(threads),
        LLAMA_PARALLEL=str(slots),
        LLAMA_CTX_PER_SLOT=str(ctx_per_slot),
        LLAMA_QUEUE_DEPTH=str(queue),
        LLAMA_CACHE_RAM_MIB="256",
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", choices=sorted(MODELS), default="smollm2")
    ap.add_argument("--model-path", type=Path, help="GGUF file (default: the PyPI-shipped model for --model)")
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--requests", type=int, default=8, help="requests per batch")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=6, help="rounds of the three measurements")
    ap.add_argument(
        "--cpus",
        type=int,
        default=len(os.sched_getaffinity(0)),
        help="CPUs the engine owns (default: all); lower it when other work holds some of them",
    )
    ap.add_argument("--json", type=Path, help="write the results here")
    args = ap.parse_args(argv)

    binary = llama_server_path()
    model = args.model_path or model_path(args.model)
    spec = MODELS[args.model]
    sized = size(
        ModelSpec(**{**asdict(spec), "file_size_bytes": model.stat().st_size}),
        local_instance(args.cpus),
        target="sagemaker",
    )
    print(f"model {model.name}; engine {binary}")
    print(
        f"sized for this machine: threads={sized.threads} slots={sized.slots} ctx/slot={sized.ctx_per_slot}; concurrency {args.concurrency}"
    )
    common = dict(requests=args.requests, concurrency=args.concurrency, max_tokens=args.max_tokens)
    results: dict[str, list[Batch]] = {"direct": [], "adapter": [], "np1": []}
    with tempfile.TemporaryDirectory() as tmp:
        # Both engines stay up; only one is loaded at a time. Rounds rotate the order of the three
        # measurements so drift and noise from other work on the machine spread over all of them.
        sized_ep = start(
            binary,
            model,
            Path(tmp) / "sized",
            threads=sized.threads,
            slots=sized.slots,
            ctx_per_slot=sized.ctx_per_slot,
            queue=args.concurrency,
        )
        np1_ep = start(
            binary,
            model,
            Path(tmp) / "np1",
            threads=sized.threads,
            slots=1,
            ctx_per_slot=sized.ctx_per_slot,
            queue=args.concurrency,
        )
        targets = [
            ("direct", sized_ep, sized_ep.engine_url, "/v1/chat/completions"),
            ("adapter", sized_ep, sized_ep.url, "/invocations"),
            ("np1", np1_ep, np1_ep.engine_url, "/v1/chat/completions"),
        ]
        try:
            for _, ep, base, path in targets:
                run_batch("warm-up", base, path, **{**common, "requests": args.concurrency}, ep=ep)
            for r in range(args.rounds):
                for label, ep, base, path in targets[r % 3 :] + targets[: r % 3]:
                    b = run_batch(label, base, path, **common, ep=ep)
                    results[label].append(b)
                    print(
                        f"  round {r + 1} {label:8s} {b.tokens_per_second:7.1f} tok/s  TTFT p50 {b.ttft_p50:.3f}s p95 {b.ttft_p95:.3f}s"
                        f"  cpu adapter {b.adapter_cpu_s:.2f}s engine {b.engine_cpu_s:.2f}s  other load {b.others_cores:.1f} cores  errors {b.errors}",
                        flush=True,
                    )
        finally:
            stop_endpoint(sized_ep)
            stop_endpoint(np1_ep)

    summary = {
        "model": model.name,
        "threads": sized.threads,
        "slots": sized.slots,
        "ctx_per_slot": sized.ctx_per_slot,
        "concurrency": args.concurrency,
        "max_tokens": args.max_tokens,
        "requests_per_batch": args.requests,
        "rounds": args.rounds,
        # On a shared machine other work swings tokens/s by 10x (the engine's threads meet at a barrier every
        # op, so one preempted thread stalls all): figures over all batches, and over the quiet ones only.
        "all_batches": figures(results, quiet_only=False),
        "quiet_batches": figures(results, quiet_only=True),
        "adapter_cpu_per_engine_cpu": round(
            sum(b.adapter_cpu_s for b in results["adapter"]) / sum(b.engine_cpu_s for b in results["adapter"]), 4
        ),
        "adapter_cpu_ms_per_token": round(
            1000 * sum(b.adapter_cpu_s for b in results["adapter"]) / sum(b.tokens for b in results["adapter"]), 3
        ),
        "other_load_cores_median": round(statistics.median(b.others_cores for bs in results.values() for b in bs), 2),
        "errors": sum(b.errors for bs in results.values() for b in bs),
    }
    print(json.dumps(summary, indent=2))
    if args.json:
        args.json.write_text(
            json.dumps(
                {"summary": summary, "batches": {k: [asdict(b) for b in v] for k, v in results.items()}}, indent=2
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
