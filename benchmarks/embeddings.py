"""Embeddings/s of the model farm's embedding path vs transformers, side by side in one run.

- **Farm path**: llama-server --embeddings serving all-MiniLM-L6-v2 (the F16 GGUF scripts/build_encoders.sh converts
  with the engine pin's convert_hf_to_gguf.py; `make encoders`) with exactly the options a pool member gets: the
  example farm's (examples/model-farm-eks.yaml) pool plan for its `all-minilm` model (config.rules.plan_pool ->
  PoolPlan.engine_args: ctx-size, parallel, threads, embeddings — the keys of its preset section), threads capped
  by this machine's CPUs. Requests over HTTP to /v1/embeddings, two workloads:
    single  one sentence per request, `--concurrency` requests in flight (default: the plan's slots);
    batch   `--batch` sentences per request (default 32), one request at a time.
- **transformers**: the same checkpoint (cache models/all-minilm-l6-v2, F32) in the vLLM test environment's torch
  (torch.set_num_threads = the same threads), what sentence-transformers computes for it (tokenize, forward, mean
  pooling over the attention mask, L2 norm): single = one sentence per forward, batch = `--batch` per forward.
Every round runs the four measurements on the same unique sentences, alternating which engine goes first; medians
over the rounds. The engine's embeddings of the first batch are checked against transformers' (min cosine printed).

    .venv/bin/python benchmarks/embeddings.py                   # 5 rounds of 256 sentences per measurement
    .venv/bin/python benchmarks/embeddings.py --rounds 3 --sentences 128 --json /tmp/embeddings.json
    .venv/bin/python benchmarks/embeddings.py --parallel 8      # what-if: more slots than the pool plan gives
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Not this script's own directory first: benchmarks/model_download.py would shadow the model_download module.
sys.path[:] = [str(ROOT), str(ROOT / "constructs")] + [
    p for p in sys.path if Path(p or ".").resolve() != ROOT / "benchmarks"
]

from tests.support.encoder_reference import cosine  # noqa: E402
from tests.support.engine import free_port, llama_server_path, stop_process, wait_healthy  # noqa: E402
from tests.support.models import encoder_files  # noqa: E402
from tests.support.vllm import vllm_python  # noqa: E402

EXAMPLE = ROOT / "examples" / "model-farm-eks.yaml"
MODEL = "all-minilm"  # the example's all-MiniLM-L6-v2, pooled in `small`

SUBJECTS = [
    "The engineer",
    "A small cat",
    "Our new model",
    "The city council",
    "My neighbour",
    "This query",
    "The pod",
    "A red kite",
    "The scheduler",
    "An old library",
]
VERBS = [
    "describes",
    "ignores",
    "rebuilds",
    "measures",
    "questions",
    "celebrates",
    "moves",
    "explains",
    "sorts",
    "watches",
]
OBJECTS = [
    "the quarterly budget",
    "a noisy kettle",
    "every failing test",
    "the mountain trail",
    "three blue boxes",
    "the cache eviction policy",
    "a late train to Zürich",
    "the river at dawn",
    "its own reflection",
    "the long report",
]
TAILS = [
    "before lunch.",
    "with great care.",
    "for the second time today.",
    "although nobody asked.",
    "in under a minute.",
    "while it rains.",
    "and then sleeps.",
    "using only a pencil.",
    "after the update.",
    "near the old bridge.",
]


def sentences(n: int, seed: int) -> list[str]:
    """n distinct sentences of 16-22 tokens with [CLS]/[SEP] (a seeded mix, numbered so none repeats)."""
    rng = random.Random(seed)
    return [
        f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)} {rng.choice(TAILS)} ({seed}-{i})"
        for i in range(n)
    ]


def farm_options(max_threads: int) -> dict[str, str]:
    """The preset keys of the example farm's pool member MODEL (the chart renders exactly these), threads capped."""
    from cpu_inference.config import load
    from cpu_inference.config.rules import plan_pool

    config = load(str(EXAMPLE))
    (model,) = [m for m in config.models if m.name == MODEL]
    pool = config.pool_of(model)
    assert pool is not None, f"{MODEL} is not pooled in {EXAMPLE}"
    plan = plan_pool(config, pool)
    assert plan is not None
    options = plan.engine_args(MODEL)
    options["threads"] = str(min(int(options["threads"]), max_threads))
    return options


class Engine:
    """llama-server with the pool member's options; posts to /v1/embeddings over persistent connections."""

    def __init__(self, options: dict[str, str], log: Path) -> None:
        from cpu_inference.engines.tasks import task_options

        flags = [f"--{k}" for k, v in options.items() if v == "true"]
        assert set(flags) == {f"--{k}" for k in task_options("embedding")}, options
        valued = [a for k, v in options.items() if v != "true" for a in (f"--{k}", v)]
        self.port = free_port()
        self.out = open(log, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [
                str(llama_server_path()),
                "-m",
                str(encoder_files()["encoder_gguf"]),
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                *valued,
                *flags,
            ],
            stdout=self.out,
            stderr=subprocess.STDOUT,
        )
        wait_healthy(f"http://127.0.0.1:{self.port}", self.proc)

    def post(self, conn: http.client.HTTPConnection, inputs: str | list[str]) -> list[list[float]]:
        conn.request("POST", "/v1/embeddings", json.dumps({"input": inputs}), {"Content-Type": "application/json"})
        r = conn.getresponse()
        body = r.read()
        if r.status != 200:
            raise RuntimeError(f"/v1/embeddings {r.status}: {body[:300]!r}")
        return [d["embedding"] for d in sorted(json.loads(body)["data"], key=lambda d: d["index"])]

    def single(self, texts: list[str], concurrency: int) -> float:
        """Seconds for one request per sentence, `concurrency` in flight."""
        it = iter(texts)
        lock = threading.Lock()
        errors: list[BaseException] = []

        def worker() -> None:
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
            try:
                while True:
                    with lock:
                        text = next(it, None)
                    if text is None:
                        return
                    self.post(conn, text)
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)
            finally:
                conn.close()

        start = time.perf_counter()
        threads = [threading.Thread(target=worker) for _ in range(concurrency)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        return time.perf_counter() - start

    def batch(self, texts: list[str], size: int) -> tuple[float, list[list[float]]]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=300)
        first: list[list[float]] = []
        start = time.perf_counter()
        for i in range(0, len(texts), size):
            out = self.post(conn, texts[i : i + size])
            first = first or out
        elapsed = time.perf_counter() - start
        conn.close()
        return elapsed, first

    def stop(self) -> None:
        stop_process(self.proc)
        self.out.close()


TORCH_WORKER = r"""
import json, sys, time
import torch
from transformers import AutoTokenizer, BertModel
from transformers.utils import logging
logging.disable_progress_bar()
directory, threads = sys.argv[1], int(sys.argv[2])
torch.set_num_threads(threads)
tok = AutoTokenizer.from_pretrained(directory)
model = BertModel.from_pretrained(directory, add_pooling_layer=False).eval()

def encode(texts):
    enc = tok(texts, padding=True, truncation=True, max_length=512, return_tensors="pt")
    hidden = model(**enc).last_hidden_state
    mask = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)
    return torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9), p=2, dim=1)

print(json.dumps({"ready": torch.__version__}), flush=True)
for line in sys.stdin:
    req = json.loads(line)
    texts, size = req["texts"], req["batch"]
    first = None
    with torch.inference_mode():
        start = time.perf_counter()
        for i in range(0, len(texts), size):
            out = encode(texts[i:i + size])
            first = first if first is not None else out
        elapsed = time.perf_counter() - start
    print(json.dumps({"seconds": elapsed, "first": first.tolist()}), flush=True)
"""


class Torch:
    """A persistent transformers process (vLLM test environment): loads once, encodes on request."""

    def __init__(self, threads: int) -> None:
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error", "OMP_NUM_THREADS": str(threads)}
        self.proc = subprocess.Popen(
            [str(vllm_python()), "-c", TORCH_WORKER, str(encoder_files()["encoder_dir"]), str(threads)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert self.proc.stdout is not None
        self.version = json.loads(self.proc.stdout.readline())["ready"]

    def run(self, texts: list[str], size: int) -> tuple[float, list[list[float]]]:
        """(seconds measured at this client, the first batch's embeddings)."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        start = time.perf_counter()
        self.proc.stdin.write(json.dumps({"texts": texts, "batch": size}) + "\n")
        self.proc.stdin.flush()
        out = json.loads(self.proc.stdout.readline())
        return time.perf_counter() - start, out["first"]

    def stop(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        stop_process(self.proc)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--sentences", type=int, default=256, help="sentences per measurement (each round new ones)")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--concurrency", type=int, help="single-sentence requests in flight (default: the engine's slots)")
    ap.add_argument(
        "--parallel", type=int, help="override the plan's slots (what-if; the farm's figure is the default)"
    )
    ap.add_argument("--json", metavar="PATH")
    args = ap.parse_args()

    cpus = len(os.sched_getaffinity(0))
    options = farm_options(cpus)
    if args.parallel:  # a what-if: ctx-size keeps the plan's context per slot
        options["ctx-size"] = str(int(options["ctx-size"]) // int(options["parallel"]) * args.parallel)
        options["parallel"] = str(args.parallel)
    threads = int(options["threads"])
    concurrency = args.concurrency or int(options["parallel"])
    subprocess.run(["bash", str(ROOT / "scripts" / "build_encoders.sh")], check=True, capture_output=True)
    log = Path(os.environ.get("TMPDIR", "/tmp")) / f"embeddings-bench-{os.getpid()}.log"
    load_start = os.getloadavg()[0]
    engine, torch_ = Engine(options, log), Torch(threads)
    results: dict[str, list[float]] = {k: [] for k in ("llama single", "torch single", "llama batch", "torch batch")}
    min_cos = 1.0
    try:
        for r in range(-1, args.rounds):  # round -1: warm-up, not counted
            texts = sentences(args.sentences, seed=r + 1)
            order = ["llama", "torch"] if r % 2 == 0 else ["torch", "llama"]
            rates: dict[str, float] = {}
            firsts: dict[str, list[list[float]]] = {}
            for who in order:
                if who == "llama":
                    rates["llama single"] = len(texts) / engine.single(texts, concurrency)
                    seconds, firsts["llama"] = engine.batch(texts, args.batch)
                    rates["llama batch"] = len(texts) / seconds
                else:
                    seconds, _ = torch_.run(texts, 1)
                    rates["torch single"] = len(texts) / seconds
                    seconds, firsts["torch"] = torch_.run(texts, args.batch)
                    rates["torch batch"] = len(texts) / seconds
            min_cos = min(min_cos, *(cosine(a, b) for a, b in zip(firsts["llama"], firsts["torch"], strict=True)))
            if r >= 0:
                for k, v in rates.items():
                    results[k].append(v)
            print(
                f"round {r + 1 if r >= 0 else 'warm-up'}: " + ", ".join(f"{k} {v:.1f}/s" for k, v in rates.items()),
                flush=True,
            )
    finally:
        engine.stop()
        torch_.stop()
    med = {k: statistics.median(v) for k, v in results.items()}
    summary = {
        "options": options,
        "concurrency": concurrency,
        "batch": args.batch,
        "sentences": args.sentences,
        "rounds": args.rounds,
        "torch": torch_.version,
        "cpus": cpus,
        "load_avg": [load_start, os.getloadavg()[0]],
        "median_embeddings_per_s": med,
        "ratio_single": med["llama single"] / med["torch single"],
        "ratio_batch": med["llama batch"] / med["torch batch"],
        "min_cosine_first_batch": min_cos,
    }
    opts = " ".join(f"{k}={v}" for k, v in options.items())
    print(
        f"\nllama-server ({opts}; {concurrency} in flight) vs transformers (torch {torch_.version}, {threads} threads), "
        f"medians of {args.rounds} rounds x {args.sentences} sentences; load avg {load_start:.2f} -> {os.getloadavg()[0]:.2f}"
    )
    print(
        f"  single sentence: llama-server {med['llama single']:.1f}/s  transformers {med['torch single']:.1f}/s  "
        f"ratio {summary['ratio_single']:.2f}x"
    )
    print(
        f"  batch of {args.batch}:     llama-server {med['llama batch']:.1f}/s  transformers {med['torch batch']:.1f}/s  "
        f"ratio {summary['ratio_batch']:.2f}x"
    )
    print(f"  same embeddings: min cosine {min_cos:.6f} (first batch of each round)")
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
