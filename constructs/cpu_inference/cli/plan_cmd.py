"""`cpu-inference plan [BEFORE.cdk.out] AFTER.cdk.out`: what `cdk deploy` will do inside the cluster and to stateful
AWS resources, and what would break — the deploy rehearsal (cpu_inference.testing.rehearsal) as a command.

With one assembly: the create-order check of a first deploy. With two (the deployed synth, then the new one): the
Kubernetes objects created / changed / deleted, the AWS resources replaced or removed, objects left in the cluster,
and every hazard of the update and of its rollback. Exit 1 when there is a problem or hazard, else 0."""

from __future__ import annotations

import argparse

from .main import UserError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("plan", help="rehearse a deploy offline: create order, or an update from one cdk.out to another (exit 1 on a hazard)")
    p.add_argument("assemblies", nargs="+", metavar="CDK_OUT", help="AFTER, or BEFORE AFTER (directories written by `cdk synth`)")
    p.add_argument("--assume-namespace", action="append", default=[], metavar="NAME",
                   help="a namespace that exists in the cluster already (created outside these stacks)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..k8s_object import Need
    from ..testing.rehearsal import create_order, load_assembly, plan

    if len(args.assemblies) > 2:
        raise UserError("give one cloud assembly (first deploy) or two (BEFORE AFTER)")
    try:
        assemblies = [load_assembly(a) for a in args.assemblies]
    except FileNotFoundError as exc:
        raise UserError(str(exc)) from exc
    assume = [Need("namespace", n) for n in args.assume_namespace]
    if len(assemblies) == 1:
        problems = create_order(assemblies[0], assume=assume)
        for f in problems:
            print(f)
        print(f"create order: {len(problems)} problems in {sum(len(s.manifests) for s in assemblies[0].stacks.values())} manifests")
        return 1 if problems else 0
    try:
        result = plan(*assemblies, assume=assume)
    except RuntimeError as exc:
        raise UserError(str(exc)) from exc
    print(result.text())
    return 1 if result.hazards else 0
