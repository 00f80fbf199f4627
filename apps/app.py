"""The config.yaml-driven CDK app: `cdk synth` (config path from cdk context `config`, default config.yaml)."""

from __future__ import annotations

import sys

import aws_cdk as cdk

from cpu_inference.app import build_app
from cpu_inference.config import ConfigError, load, warnings_for


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
    build_app(config, app=app)
    app.synth()


if __name__ == "__main__":
    main()
