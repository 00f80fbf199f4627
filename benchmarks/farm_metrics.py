"""Per-model series of a real farm with traffic on every model: how many series, how many bytes per scrape.

A generated farm of `--models` pooled models (one pool; each model a distinct Hub repo, every one served locally by
the SmolLM2 stand-in) runs under `cpu-inference local --stand-ins` — the gateway and the pool's supervisor over the
real llama-server router, as a pool replica runs them. Every model gets `--requests` chat completions (1 token), so
every model is cold-loaded at least once (models_max is far below the model count). Then the gateway's and the
supervisor's /metrics are scraped and counted (series = sample lines; per-model series = those with a `model`
label), and `cpu-inference farm report` runs over the same scrapes. Results go to
benchmarks/results/farm_metrics-<time>.{json,md} (gitignored).

    .venv/bin/python benchmarks/farm_metrics.py                  # 500 models, 1 request each (~10 min on 2 cores)
    .venv/bin/python benchmarks/farm_metrics.py --models 50      # a quick look
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-m", "cpu_inference.cli.main"]


def farm_config(path: Path, models: int) -> Path:
    """One pool holding `models` small classifiers (distinct repos: distinct catalog keys and preset sections)."""
    lines = [
        "project: {name: metrics-bench}",
        "target: eks",
        "pattern: model-farm",
        "farm:",
        "  pools:",
        "  - {name: small, cpu: 2, memory_gib: 8, replicas: {min: 1, max: 2}, replication: 1}",
        "model_groups:",
        "- defaults: {pool: small, task: classification, context_window: 2048, parameters_billions: 0.135}",
        "  models:",
    ]
    for i in range(models):
        repo = f"acme-farm/classifier-{i:04d}-GGUF"
        lines.append(f"  - {{name: m-{i:04d}, source: {{hf_repo: {repo}, file: SmolLM2-135M-Instruct-Q4_K_M.gguf}}}}")
    path.write_text("\n".join(lines) + "\n")
    return path


def start_farm(config: Path, port: int, log_dir: Path) -> tuple[subprocess.Popen, str, list[str]]:
    """`cpu-inference local --stand-ins`; returns (process, gateway URL, supervisor /metrics URLs) once ready."""
    proc = subprocess.Popen(
        [*CLI, "local", str(config), "--stand-ins", "--port", str(port), "--log-dir", str(log_dir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert proc.stdout is not None
    supervisors: list[str] = []
    deadline = time.monotonic() + 600
    for line in proc.stdout:
        print(f"  local: {line.rstrip()}", flush=True)
        found = re.search(r"status and metrics: (http://\S+?)\)", line)
        if found:
            supervisors.append(found.group(1) + "/metrics")
        if line.startswith("gateway ready on"):
            return proc, line.split()[3], supervisors
        if time.monotonic() > deadline:
            break
    proc.kill()
    raise SystemExit(f"the local farm did not become ready (logs in {log_dir})")


def ask(gateway: str, model: str) -> int:
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1}).encode()
    request = urllib.request.Request(
        gateway.rstrip("/") + "/v1/chat/completions", body, {"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=300) as response:
            response.read()
            return response.status
    except urllib.error.HTTPError as e:
        return e.code


def scrape(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=30) as response:
        text = response.read().decode()
    samples = [line for line in text.splitlines() if line and not line.startswith("#")]
    per_model = [line for line in samples if 'model="' in line]
    families = Counter(re.match(r"[a-zA-Z_:][a-zA-Z0-9_:]*", line).group(0) for line in per_model)  # type: ignore[union-attr]
    models = {m.group(1) for line in per_model if (m := re.search(r'model="([^"]*)"', line))}
    return {
        "url": url,
        "bytes": len(text.encode()),
        "series": len(samples),
        "per_model_series": len(per_model),
        "models_with_series": len(models),
        "per_model_families": dict(sorted(families.items())),
        "text": text,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=int, default=500)
    ap.add_argument("--requests", type=int, default=1, help="requests per model")
    ap.add_argument("--concurrency", type=int, default=2)
    ap.add_argument("--port", type=int, default=18600)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="farm-metrics-"))
    config = farm_config(work / "farm.yaml", args.models)
    proc, gateway, supervisors = start_farm(config, args.port, work / "logs")
    try:
        names = [f"m-{i:04d}" for i in range(args.models)] * args.requests
        started = time.perf_counter()
        with ThreadPoolExecutor(args.concurrency) as pool:
            codes = Counter(pool.map(lambda m: ask(gateway, m), names))
        wall = time.perf_counter() - started
        scrapes = [scrape(gateway.rstrip("/") + "/metrics"), *(scrape(u) for u in supervisors)]
        for s in scrapes:
            (work / f"scrape-{len(s['url'])}-{abs(hash(s['url'])) % 10**6}.prom").write_text(s.pop("text"))
        report = subprocess.run(
            [
                *CLI,
                "farm",
                "report",
                str(config),
                *(f"--metrics={s['url']}" for s in scrapes),
                "--hourly-cost",
                "small=1",
            ],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=120,
        )
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
    result = {
        "models": args.models,
        "requests": sum(codes.values()),
        "status_codes": dict(codes),
        "wall_s": round(wall, 1),
        "scrapes": scrapes,
        "report_head": report.stdout.splitlines()[:12] + report.stderr.splitlines()[-3:],
    }
    out = ROOT / "benchmarks" / "results"
    out.mkdir(exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    (out / f"farm_metrics-{stamp}.json").write_text(json.dumps(result, indent=2))
    rows = [
        "| scrape | bytes | series | per-model series | models with series | per-model families |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for s in scrapes:
        fam = ", ".join(f"{k} {v}" for k, v in s["per_model_families"].items())
        rows.append(
            f"| {s['url']} | {s['bytes']:,} | {s['series']:,} | {s['per_model_series']:,} | {s['models_with_series']} | {fam} |"
        )
    md = "\n".join(
        [
            f"{args.models} models, {result['requests']} requests in {result['wall_s']} s: {dict(codes)}",
            "",
            *rows,
            "",
            "```",
            *result["report_head"],
            "```",
        ]
    )
    (out / f"farm_metrics-{stamp}.md").write_text(md + "\n")
    print(md)


if __name__ == "__main__":
    main()
