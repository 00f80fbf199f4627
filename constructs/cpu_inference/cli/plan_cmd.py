"""`cpu-inference plan [BEFORE.cdk.out] AFTER.cdk.out`: what `cdk deploy` will do inside the cluster and to stateful
AWS resources, and what would break — the deploy rehearsal (cpu_inference.testing.rehearsal) as a command.

With one assembly: the create-order check of a first deploy and the delete order of `cdk destroy`. With two (the
deployed synth, then the new one): the Kubernetes objects created / changed / deleted, the AWS resources replaced or
removed, objects left in the cluster, and every hazard of the update and of its rollback. Exit 1 when there is a
problem or hazard, else 0."""

from __future__ import annotations

import argparse

from cpu_inference.cli.main import UserError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "plan",
        help="rehearse a deploy offline: create order, or an update from one cdk.out to another (exit 1 on a hazard)",
    )
    p.add_argument(
        "assemblies", nargs="+", metavar="CDK_OUT", help="AFTER, or BEFORE AFTER (directories written by `cdk synth`)"
    )
    p.add_argument(
        "--assume-namespace",
        action="append",
        default=[],
        metavar="NAME",
        help="a namespace that exists in the cluster already (created outside these stacks)",
    )
    p.add_argument(
        "--accept",
        action="append",
        default=[],
        metavar="CODE:LOGICAL_ID",
        help="a hazard you have reviewed and accept (printed, not counted), e.g. stateful-replaced:WaiterLogs1234",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from cpu_inference._internal.k8s_object import Need
    from cpu_inference.testing.rehearsal import create_order, delete_order, load_assembly, plan

    if len(args.assemblies) > 2:
        raise UserError("give one cloud assembly (first deploy) or two (BEFORE AFTER)")
    try:
        assemblies = [load_assembly(a) for a in args.assemblies]
    except FileNotFoundError as exc:
        raise UserError(str(exc)) from exc
    assume = [Need("namespace", n) for n in args.assume_namespace]
    if len(assemblies) == 1:
        problems = create_order(assemblies[0], assume=assume) + delete_order(assemblies[0])
        for f in problems:
            print(f)
        print(
            f"create and delete order: {len(problems)} problems in {sum(len(s.manifests) for s in assemblies[0].stacks.values())} manifests"
        )
        return 1 if problems else 0
    try:
        result = plan(*assemblies, assume=assume)
    except RuntimeError as exc:
        raise UserError(str(exc)) from exc
    accepted = {tuple(a.split(":", 1)) for a in args.accept if ":" in a}
    bad = [a for a in args.accept if ":" not in a]
    if bad:
        raise UserError(
            f"--accept {bad[0]!r}: write CODE:LOGICAL_ID as printed in a hazard line, e.g. stateful-replaced:WaiterLogs1234"
        )
    kept = [h for h in result.hazards if (h.code, h.where.rsplit("/", 1)[-1]) not in accepted]
    skipped = [h for h in result.hazards if h not in kept]
    result.hazards = kept
    print(result.text())
    for h in skipped:
        print(f"  accepted: {h}")
    return 1 if kept else 0
