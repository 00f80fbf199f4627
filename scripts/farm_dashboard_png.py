"""Drive weighted traffic through a running local farm (`cpu-inference local CONFIG --stand-ins`), scrape its
/metrics while it runs, and render the operator's view as a PNG: requests per model over time, traffic and cost
share, busy time and cold loads per model, and the `cpu-inference farm report` table (idle models included).

    .venv/bin/cpu-inference local examples/model-farm-eks.yaml --stand-ins --port 18000 --models A,B,... &
    .venv/bin/python scripts/farm_dashboard_png.py examples/model-farm-eks.yaml \
        --gateway http://127.0.0.1:18000 --supervisor http://127.0.0.1:8081/metrics \
        --traffic smollm2-135m=8,gemma3-1b=4,llama3-2-1b=2 --requests 120 \
        --hourly-cost small=3 --hourly-cost medium=5 --out docs/farm-dashboard.png --report-out /tmp/report.txt

Every number comes from the farm's own /metrics (the gateway's and, when given, the pool supervisors'); matplotlib
(already a dependency of `cpu-inference bench`) draws them.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import textwrap
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from cpu_inference.cli import farm_cmd
from cpu_inference.config.loader import load

SCRAPE_EVERY_S = 2.0


def ask(gateway: str, model: str) -> int:
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 8}).encode()
    req = urllib.request.Request(
        gateway.rstrip("/") + "/v1/chat/completions", data=body, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=120) as r:  # noqa: S310 - loopback
            r.read()
            return r.status
    except urllib.error.HTTPError as exc:
        return exc.code


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("config")
    p.add_argument("--gateway", default="http://127.0.0.1:18000")
    p.add_argument("--supervisor", action="append", default=[], help="a pool supervisor's /metrics URL (repeatable)")
    p.add_argument("--traffic", required=True, help="MODEL=WEIGHT,... (requests are drawn with these weights)")
    p.add_argument("--requests", type=int, default=120)
    p.add_argument("--concurrency", type=int, default=2)
    p.add_argument("--hourly-cost", action="append", default=[])
    p.add_argument("--seed", type=int, default=25)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--report-out", type=Path)
    args = p.parse_args()

    weights = {k: float(v) for k, v in (item.split("=") for item in args.traffic.split(","))}
    rng = random.Random(args.seed)
    plan = rng.choices(list(weights), weights=list(weights.values()), k=args.requests)
    sources = [args.gateway.rstrip("/") + "/metrics", *args.supervisor]

    series: list[tuple[float, farm_cmd.Counts]] = []
    done = threading.Event()

    def scraper() -> None:
        while not done.is_set():
            series.append((time.monotonic(), farm_cmd.scrape(sources, None)))
            done.wait(SCRAPE_EVERY_S)

    before = farm_cmd.scrape(sources, None)
    start = time.monotonic()
    thread = threading.Thread(target=scraper, daemon=True)
    thread.start()
    with ThreadPoolExecutor(args.concurrency) as pool:
        codes = list(pool.map(lambda m: ask(args.gateway, m), plan))
    done.set()
    thread.join()
    window = time.monotonic() - start
    after = farm_cmd.scrape(sources, None)
    series.append((time.monotonic(), after))
    print(
        f"{len(codes)} requests in {window:.0f} s: " + ", ".join(f"{c}: {codes.count(c)}" for c in sorted(set(codes)))
    )

    counts = farm_cmd.delta(before, after)
    config = load(args.config)
    groups = farm_cmd.groups_of(config)
    given = farm_cmd.parse_costs(args.hourly_cost, {g.name for g in groups})
    ns = argparse.Namespace(instance_type=None, price_per_hour=None, region=None)
    farm_cmd.price_groups(groups, given, config, counts, ns, window / 3600)
    report = farm_cmd.build_report(config, counts, groups, window)
    table = farm_cmd.render_table(report)
    print(table)
    if args.report_out:
        args.report_out.write_text(table + "\n")
    render(report, table, series, before, start, args.out, bool(args.supervisor))
    print(f"wrote {args.out}")
    return 0


def render(
    report: dict[str, Any],
    table: str,
    series: list[tuple[float, farm_cmd.Counts]],
    before: farm_cmd.Counts,
    start: float,
    out: Path,
    supervisors: bool,
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = report["models"]
    names = [r["model"] for r in rows]
    fig = plt.figure(figsize=(14, 10), dpi=110)
    grid = fig.add_gridspec(3, 2, height_ratios=[1, 1, 1.05])
    fig.suptitle("cpu-inference farm — local run (`cpu-inference local --stand-ins`), from its /metrics", fontsize=13)

    ax = fig.add_subplot(grid[0, 0])
    for name in names:
        xs, ys = [], []
        for t, c in series:
            d = farm_cmd.delta(before, c)
            xs.append(t - start)
            ys.append(sum(v for (m, _), v in d.requests.items() if m == name))
        ax.plot(xs, ys, label=name)
    ax.set_title("Requests per model (gateway_requests_total)")
    ax.set_xlabel("s")
    ax.legend(fontsize=8)

    ax = fig.add_subplot(grid[0, 1])
    x = range(len(names))
    ax.bar([i - 0.2 for i in x], [r["traffic_share"] * 100 for r in rows], width=0.4, label="traffic %")
    ax.bar([i + 0.2 for i in x], [(r["cost_share"] or 0) * 100 for r in rows], width=0.4, label="cost % (busy share)")
    ax.set_xticks(list(x), names, rotation=20, fontsize=8)
    ax.set_title("Share of traffic and of cost")
    ax.legend(fontsize=8)

    ax = fig.add_subplot(grid[1, 0])
    ax.barh(names[::-1], [r["busy_seconds"] for r in rows][::-1], color="tab:purple")
    ax.set_title("Busy time per model (Σ gateway_request_seconds, s)")

    ax = fig.add_subplot(grid[1, 1])
    if supervisors:
        ax.bar(names, [r["cold_loads"] for r in rows], color="tab:red", label="cold loads")
        ax2 = ax.twinx()
        ax2.plot(names, [r["mean_cold_load_seconds"] or 0 for r in rows], "ko-", label="mean cold-load s")
        ax.set_title("Cold loads and mean cold-load time (pool supervisors)")
    else:
        mean = [r["busy_seconds"] / max(1.0, r["requests"] - r["unavailable_503"]) for r in rows]
        ax.bar(names, mean, color="tab:orange")
        ax.set_title("Mean time to head per model (s) — supervisor series not scraped")
    ax.tick_params(axis="x", rotation=20, labelsize=8)

    ax = fig.add_subplot(grid[2, :])
    ax.axis("off")
    wrapped = "\n".join(textwrap.fill(line, 150, subsequent_indent="    ") for line in table.splitlines())
    ax.text(0, 1, wrapped, family="monospace", fontsize=7.5, va="top")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)


if __name__ == "__main__":
    sys.exit(main())
