"""`cpu-inference validate CONFIG`: every problem as one line (key path — fix); warnings from the AWS
decision framework for CPU inference. Exit 2 on errors."""

from __future__ import annotations

import argparse
import sys

from cpu_inference.config import load, warnings_for


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("validate", help="check a config.yaml (errors name the key and the fix)")
    p.add_argument("config", nargs="?", default="config.yaml")
    p.add_argument("--strict", action="store_true", help="treat warnings as errors")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    config = load(args.config)
    warnings = warnings_for(config)
    for w in warnings:
        print(w.render(args.config), file=sys.stderr)
    if warnings and args.strict:
        return 2
    farm = ""
    if config.pattern == "model-farm":
        pooled = sum(1 for m in config.models if config.serving_of(m) == "pool")
        farm = f": {pooled} in {len(config.farm.pools)} pool(s), {len(config.models) - pooled} dedicated"
    print(f"{args.config}: ok — {config.pattern} on {config.target}, {len(config.models)} model(s){farm}")
    return 0
