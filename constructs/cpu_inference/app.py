"""Build the CDK app for a config: one environment-agnostic stack per config (no lookups, no credentials)."""

from __future__ import annotations

import aws_cdk as cdk

from cpu_inference.config import Config
from cpu_inference.patterns.from_config import model_farm_props, slm_prefilter_props
from cpu_inference.patterns.model_farm import ModelFarm
from cpu_inference.patterns.slm_prefilter import SlmPrefilter


def stack_name(config: Config) -> str:
    return f"{config.project.name}-{config.pattern}"


def build_app(config: Config, *, app: cdk.App | None = None) -> tuple[cdk.App, cdk.Stack]:
    app = app or cdk.App()
    stack = cdk.Stack(
        app,
        stack_name(config),
        description=f"cdk-cpu-inference: {config.pattern} on {config.target} ({len(config.models)} model(s))",
        # The CDK CLI uploads the template file as written; CloudFormation takes at most 1 MB from S3
        # (aws-cdk-lib core/lib/stack.js TEMPLATE_BODY_MAXIMUM_SIZE=1e6). Indentation is ~20% of a big
        # template's bytes and buys nothing once deployed.
        suppress_template_indentation=True,
    )
    for key, value in {"project": config.project.name, **config.project.tags}.items():
        cdk.Tags.of(stack).add(key, value)
    if config.pattern == "slm-prefilter":
        SlmPrefilter(stack, "SlmPrefilter", props=slm_prefilter_props(config))
    else:
        ModelFarm(stack, "ModelFarm", props=model_farm_props(config))
    return app, stack
