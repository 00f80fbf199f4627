"""`cpu-inference stacks [CDK_OUT]`: list the stacks of a synthesized cloud assembly (used by `make synth`)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from cpu_inference.cli.main import UserError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("stacks", help="list the stacks in a synthesized cloud assembly (cdk.out)")
    p.add_argument("cdk_out", nargs="?", default="cdk.out")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    manifest = Path(args.cdk_out) / "manifest.json"
    if not manifest.exists():
        raise UserError(f"{manifest} not found — run `cdk synth` first")
    artifacts = json.loads(manifest.read_text())["artifacts"]
    stacks = sorted(name for name, a in artifacts.items() if a["type"] == "aws:cloudformation:stack")
    for name in stacks:
        template = Path(args.cdk_out) / artifacts[name]["properties"]["templateFile"]
        count = len(json.loads(template.read_text()).get("Resources", {}))
        print(f"{artifacts[name].get('displayName', name)}  ({count} resources)")
    return 0
