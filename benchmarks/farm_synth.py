"""Synth time and template size of a model farm: 20 vs 1,000 models, EKS and SageMaker, side by side in one run.

The configs are generated from the shipped examples (tests/support/farm_config.thousand_model_farm: the example's
dedicated hot models plus pooled models spread over its groups and pools). Each case runs in its own process
(`cpu-inference`'s app exactly as `cdk synth` builds it, cdk-nag included), alternating, `--rounds` times; the
medians go to benchmarks/results/farm_synth-<time>.{json,md} (gitignored).

    .venv/bin/python benchmarks/farm_synth.py              # 20 vs 1,000 models, both targets, 3 rounds
    .venv/bin/python benchmarks/farm_synth.py --sizes 1300 --dedicated 300 --rounds 1 --per-stack
                                                           # 300 dedicated + 1,000 pooled: every stack's bytes/resources

Nested stacks (farm.dedicated_stacks: the dedicated models' stacks) are templates of their own: each is measured.
--dedicated lifts CDK's synth-time 500-resource check (context @aws-cdk/core:stackResourceLimit 0) while the dedicated
models' copies (one ModelArtifact each) still sit in the parent stack; the per-stack table shows what that leaves there.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
from cpu_inference.app import build_app
from cpu_inference.config import load
import aws_cdk as cdk
from pathlib import Path
from tests.support.cdk import apply_nag, synth
t1 = time.perf_counter()
config = load(sys.argv[1])
app, stack = build_app(config, app=cdk.App(outdir=sys.argv[2], context=json.loads(sys.argv[3])))
apply_nag(app)
assembly = synth(app)
t2 = time.perf_counter()
files = sorted(f for f in Path(assembly.directory).glob("*.json") if "template" in f.name)
print(json.dumps({"import_s": t1 - t0, "synth_s": t2 - t1, "models": len(config.models),
                  "templates": [{"file": f.name, "bytes": f.stat().st_size,
                                 "resources": len(json.loads(f.read_text())["Resources"])} for f in files]}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[20, 1000])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument(
        "--dedicated", type=int, default=None, help="dedicated (hot) models of each farm (default: the example's)"
    )
    ap.add_argument("--per-stack", action="store_true", help="also print every template's bytes and resources")
    args = ap.parse_args()
    hot = {} if args.dedicated is None else {"hot": args.dedicated}
    context = json.dumps({} if args.dedicated is None else {"@aws-cdk/core:stackResourceLimit": 0})
    from tests.support.farm_config import thousand_model_farm

    tmp = Path(tempfile.mkdtemp(prefix="farm-synth-"))
    cases = [(t, n) for t in ("eks", "sagemaker") for n in args.sizes]
    paths = {c: thousand_model_farm(tmp / f"{c[0]}-{c[1]}.yaml", c[0], total=c[1], **hot) for c in cases}
    runs: dict[tuple[str, int], list[dict]] = {c: [] for c in cases}
    for r in range(args.rounds):
        for c in cases:
            out = subprocess.run(
                [sys.executable, "-c", CHILD, str(paths[c]), str(tmp / f"out-{c[0]}-{c[1]}-{r}"), context],
                cwd=ROOT,
                capture_output=True,
                text=True,
                check=True,
            )
            runs[c].append(json.loads(out.stdout.strip().splitlines()[-1]))
    rows = []
    for (target, n), rs in runs.items():
        t = rs[0]["templates"]
        rows.append(
            {
                "target": target,
                "models": n,
                "synth_s": statistics.median(x["synth_s"] for x in rs),
                "templates": len(t),
                "largest_bytes": max(x["bytes"] for x in t),
                "total_bytes": sum(x["bytes"] for x in t),
                "resources": max(x["resources"] for x in t),
            }
        )
    md = [
        "| target | models | synth s (median) | templates | largest template bytes | resources |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    md += [
        f"| {r['target']} | {r['models']} | {r['synth_s']:.1f} | {r['templates']} | {r['largest_bytes']:,} | {r['resources']} |"
        for r in rows
    ]
    if args.per_stack:
        md += ["", "| target | models | template | bytes | resources |", "|---|---:|---|---:|---:|"]
        md += [
            f"| {target} | {n} | {x['file']} | {x['bytes']:,} | {x['resources']} |"
            for (target, n), rs in runs.items()
            for x in rs[0]["templates"]
        ]
    print("\n".join(md))
    results = ROOT / "benchmarks" / "results"
    results.mkdir(exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%S")
    (results / f"farm_synth-{stamp}.json").write_text(json.dumps(rows, indent=2))
    (results / f"farm_synth-{stamp}.md").write_text("\n".join(md) + "\n")


if __name__ == "__main__":
    main()
