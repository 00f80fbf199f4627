"""Bench reports: JSON (the record), Markdown (for people and PRs), PNG (latency and throughput vs
concurrency), and the cross-run comparison sorted by cost per 1,000 queries."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cpu_inference.evaluation.bench import REPORT_KIND
from cpu_inference.evaluation.server import engine_label, model_label


def _fmt(v: Any, spec: str = ".1f", none: str = "—") -> str:
    if v is None:
        return none
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return format(v, spec)
    return str(v)


def _usd(v: float | None) -> str:
    return "unknown" if v is None else f"${v:.4f}"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def bench_markdown(report: dict[str, Any]) -> str:
    t = report["target"]
    metric = "end-to-end" if t["latency_metric"] == "e2e" else "TTFT"
    price = report["price"]
    s = report["settings"]
    price_line = (
        f"${price['usd_per_hour']:g}/h per instance ({price['source']}: {price['detail']})"
        if price["usd_per_hour"] is not None
        else f"unknown — {price['detail']}"
    )
    out = [
        f"# Benchmark: {report['endpoint']}",
        "",
        f"**Result:** {report['verdict']}",
        "",
        f"- engine: {_engine_line(report)}",
        f"- instance: {report['instance_type'] or 'not given'} x{report['instance_count']} in {report['region']}; price: {price_line}",
        f"- target: p95 {metric} latency <= {t['p95_ms']:g} ms, error rate (errors + overload rejections) <= {t['max_error_rate']:.0%}",
        f"- load: closed loop, {s['requests_per_level']} requests per level, max_tokens {s['max_tokens']}, stream {s['stream']}, ignore_eos {s['ignore_eos']}, prompts: {s['prompts']}",
        f"- started {report['started_at']}, took {report['duration_s']:.1f} s",
        "",
    ]
    header = [
        "concurrency",
        "ok/total",
        "rejected (429/503)",
        "e2e p50 ms",
        "e2e p95 ms",
        "e2e p99 ms",
        "TTFT p50 ms",
        "TTFT p95 ms",
        "TPOT p50 ms",
        "queries/s",
        "out tok/s",
        "meets p95",
        "$ per 1k queries",
    ]
    rows = []
    for lv in report["levels"]:
        mark = "yes" if lv["meets_p95"] else "no"
        if report["selected"] and lv["concurrency"] == report["selected"]["concurrency"]:
            mark = "**yes (selected)**"
        rows.append(
            [
                str(lv["concurrency"]),
                f"{lv['ok']}/{lv['requests']}",
                str(lv.get("rejected", 0)),
                _fmt(lv["e2e_p50_ms"]),
                _fmt(lv["e2e_p95_ms"]),
                _fmt(lv["e2e_p99_ms"]),
                _fmt(lv["ttft_p50_ms"]),
                _fmt(lv["ttft_p95_ms"]),
                _fmt(lv["tpot_p50_ms"], ".2f"),
                _fmt(lv["qps"], ".3f"),
                _fmt(lv["output_tok_s"]),
                mark,
                _usd(lv["cost_per_1k_queries_usd"]),
            ]
        )
    out.append(markdown_table(header, rows))
    errors = [(lv["concurrency"], e) for lv in report["levels"] for e in lv.get("first_errors", [])]
    if errors:
        out += ["", "## Errors (first per level)", ""] + [f"- concurrency {c}: `{e}`" for c, e in errors]
    out += [
        "",
        f"Output tokens: {report['totals']['output_tokens']} measured (+{report['totals']['warmup_output_tokens']} in warm-up). TPOT = time per output token after the first.",
    ]
    if report.get("plot"):
        out += ["", f"![latency and throughput vs concurrency]({report['plot']})"]
    return "\n".join(out) + "\n"


def _engine_line(report: dict[str, Any]) -> str:
    server = report.get("server") or {}
    if not server.get("engine"):
        return f"{engine_label(report)} ({server.get('detail') or 'not recorded'})"
    extra = f", max_model_len {server['max_model_len']}" if server.get("max_model_len") else ""
    return f"{server['engine']}, model {server.get('model') or '?'}{extra} (owned_by {server.get('owned_by')!r}, {server.get('source')})"


def write_plot(report: dict[str, Any], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")  # headless: no display on build hosts and CI
    import matplotlib.pyplot as plt

    levels = report["levels"]
    xs = [lv["concurrency"] for lv in levels]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    for key, label in (("e2e_p50_ms", "e2e p50"), ("e2e_p95_ms", "e2e p95"), ("ttft_p95_ms", "TTFT p95")):
        ys = [lv[key] for lv in levels]
        if any(y is not None for y in ys):
            ax1.plot(xs, [float("nan") if y is None else y for y in ys], marker="o", label=label)
    ax1.axhline(
        report["target"]["p95_ms"],
        color="red",
        linestyle="--",
        linewidth=1,
        label=f"p95 target {report['target']['p95_ms']:g} ms",
    )
    if report["selected"]:
        ax1.axvline(report["selected"]["concurrency"], color="green", linestyle=":", linewidth=1, label="selected")
    ax1.set_xlabel("concurrency")
    ax1.set_ylabel("latency (ms)")
    ax1.set_title("Latency vs concurrency")
    ax1.legend(fontsize=8)
    ax2.plot(xs, [lv["output_tok_s"] for lv in levels], marker="o", color="tab:purple", label="output tok/s")
    ax2.set_xlabel("concurrency")
    ax2.set_ylabel("output tokens/s")
    ax3 = ax2.twinx()
    ax3.plot(xs, [lv["qps"] for lv in levels], marker="s", linestyle="--", color="tab:orange", label="queries/s")
    ax3.set_ylabel("queries/s")
    ax2.set_title("Throughput vs concurrency")
    handles = ax2.get_legend_handles_labels()[0] + ax3.get_legend_handles_labels()[0]
    ax2.legend(handles, [h.get_label() for h in handles], fontsize=8, loc="upper left")
    for ax in (ax1, ax2):
        ax.set_xticks(xs)
        ax.grid(alpha=0.3)
    fig.suptitle(f"{report['endpoint']} — {report['instance_type'] or 'instance not given'}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_bench_report(report: dict[str, Any], out_dir: Path, *, plot: bool = True) -> dict[str, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"json": out_dir / "bench.json", "markdown": out_dir / "bench.md"}
    if plot and report["levels"]:
        paths["plot"] = write_plot(report, out_dir / "bench.png")
        report = {**report, "plot": "bench.png"}
    paths["json"].write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    paths["markdown"].write_text(bench_markdown(report), encoding="utf-8")
    return paths


def load_bench_report(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"{p}: cannot read a bench report ({exc})") from exc
    if not isinstance(data, dict) or data.get("kind") != REPORT_KIND:
        raise ValueError(f"{p}: not a `cpu-inference bench` report (kind != {REPORT_KIND})")
    data["_path"] = str(p)
    return data


def _cost_key(report: dict[str, Any]) -> tuple[int, float]:
    sel = report.get("selected")
    cost = sel.get("cost_per_1k_queries_usd") if sel else None
    # Known costs first (cheapest first), then runs with unknown price, then runs that missed the target.
    if cost is not None:
        return (0, cost)
    return (1, 0.0) if sel else (2, 0.0)


def compare_rows(reports: Sequence[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    header = [
        "run",
        "engine",
        "model",
        "instance",
        "$/h",
        "p95 target ms",
        "selected concurrency",
        "p95 ms",
        "TTFT p95 ms",
        "queries/s",
        "out tok/s",
        "$ per 1k queries",
    ]
    rows = []
    for r in sorted(reports, key=_cost_key):
        sel = r.get("selected")
        price = r["price"]["usd_per_hour"]
        level = next((lv for lv in r.get("levels", []) if sel and lv["concurrency"] == sel["concurrency"]), None)
        rows.append(
            [
                r.get("_path", r["endpoint"]),
                engine_label(r),
                model_label(r),
                f"{r['instance_type'] or '?'} x{r['instance_count']}",
                "unknown" if price is None else f"{price:g}",
                f"{r['target']['p95_ms']:g} ({r['target']['latency_metric']})",
                str(sel["concurrency"]) if sel else "none met",
                _fmt(sel["p95_ms"]) if sel else "—",
                _fmt(level.get("ttft_p95_ms")) if level else "—",
                _fmt(sel["qps"], ".3f") if sel else "—",
                _fmt(sel["output_tok_s"]) if sel else "—",
                _usd(sel["cost_per_1k_queries_usd"]) if sel else "—",
            ]
        )
    return header, rows
