"""Eval reports: JSON (metrics, gate, every prediction) and Markdown (the verdict and the tables)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cpu_inference.evaluation.report import markdown_table

REPORT_KIND = "cpu-inference.eval"


def eval_markdown(report: dict[str, Any]) -> str:
    g = report["gate"]
    cand, base = report["candidate"], report["baseline"]
    shots = report["few_shot"]
    shot_line = "zero-shot" if not shots["count"] else f"{shots['count']}-shot ({shots['source']})"
    out = [
        f"# Quality gate: {report['task']} on {report['dataset']}",
        "",
        f"**{report['verdict']}**",
        "",
        f"- rule (fixed before the run): candidate {g['metric']} >= baseline {g['metric']} - {g['threshold'] * 100:g} pp",
        f"- candidate: {cand['endpoint']}{' model ' + cand['model'] if cand.get('model') else ''}",
        f"- baseline: {base['endpoint']}{' model ' + base['model'] if base.get('model') else ''}",
        f"- {report['examples_scored']} examples scored{' (subset of ' + str(report['examples_total']) + ')' if report['examples_scored'] < report['examples_total'] else ''}; prompt: {shot_line}; "
        f"output {'constrained by response_format json_schema' if report['constrained'] else 'unconstrained'}; max_tokens {report['max_tokens']}; temperature 0",
        "",
        "## Metrics",
        "",
    ]
    rows = []
    for m in report["metrics"]:
        c, b = cand["metrics"][m], base["metrics"][m]
        rows.append([m + (" (gate)" if m == g["metric"] else ""), f"{c:.1%}", f"{b:.1%}", f"{(c - b) * 100:+.1f} pp"])
    rows.append(["unparseable answers", str(cand["metrics"]["invalid"]), str(base["metrics"]["invalid"]), ""])
    rows.append(["request errors", str(cand["errors"]), str(base["errors"]), ""])
    rows.append(["wall time", f"{cand['seconds']:.1f} s", f"{base['seconds']:.1f} s", ""])
    out.append(markdown_table(["metric", "candidate", "baseline", "delta"], rows))
    per = "per_class" if "per_class" in cand["metrics"] else "per_tool" if "per_tool" in cand["metrics"] else None
    if per:
        out += ["", f"## Per-{'class' if per == 'per_class' else 'tool'} F1", ""]
        crow = []
        for label, cs in cand["metrics"][per].items():
            bs = base["metrics"][per][label]
            crow.append(
                [
                    label,
                    str(cs["support"]),
                    f"{cs['f1']:.2f}",
                    f"{cs['precision']:.2f}",
                    f"{cs['recall']:.2f}",
                    f"{bs['f1']:.2f}",
                    f"{bs['precision']:.2f}",
                    f"{bs['recall']:.2f}",
                ]
            )
        out.append(
            markdown_table(["label", "support", "cand F1", "cand P", "cand R", "base F1", "base P", "base R"], crow)
        )
    for name, run in (("candidate", cand), ("baseline", base)):
        if run["first_errors"]:
            out += ["", f"{name} errors: " + "; ".join(f"`{e}`" for e in run["first_errors"])]
    out += ["", "Every prediction (raw answer, parsed value, gold) is in eval.json."]
    return "\n".join(out) + "\n"


def write_eval_report(report: dict[str, Any], out_dir: Path) -> dict[str, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"json": out_dir / "eval.json", "markdown": out_dir / "eval.md"}
    paths["json"].write_text(json.dumps(report, indent=2, default=str) + "\n", encoding="utf-8")
    paths["markdown"].write_text(eval_markdown(report), encoding="utf-8")
    return paths
