"""Every logging state machine of a synthesized stack logs to a log group under /aws/vendedlogs/, with a name that
CloudWatch Logs accepts, no other group of the stack shares, and a retained group cannot block a later stack.

Step Functions (https://docs.aws.amazon.com/step-functions/latest/dg/bp-cwl.html): "CloudWatch Logs resource policies
are limited to 5120 characters … prefix your CloudWatch Logs log group names with /aws/vendedlogs/" — otherwise every
logging state machine adds its group to the account's resource policy until new state machines fail.

Checked on every shipped config (config.yaml, examples/*.yaml: the image workflows and their Provider waiters, the
model-copy waiter) and on one stack with two images of the same props (one under a same-named parent)."""

from __future__ import annotations

import re
from typing import Any

import aws_cdk as cdk
import botocore.session
import pytest
from constructs import Construct

from cpu_inference.app import build_app
from cpu_inference.artifacts.copy_provider import ModelCopyProvider
from cpu_inference.artifacts.model_catalog import ModelCatalog
from cpu_inference.config import load
from cpu_inference.images import LlamaCppImage, LlamaCppImageProps
from tests.app.conftest import CONFIGS, ROOT
from tests.support.cdk import apply_nag, cfn_lint_errors, synth, template_json

pytestmark = pytest.mark.synth

VENDED = "/aws/vendedlogs/"
# AWS::StackId is arn:<partition>:cloudformation:<region>:<account>:stack/<stack name>/<uuid>
# (https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/pseudo-parameter-reference.html#cfn-pseudo-param-stackid).
FIRST_STACK = "51af3dc0-da77-11e4-872e-1234567db123"
NEXT_STACK = "0f2c6e80-6a1b-11f0-9c4d-0a1b2c3d4e5f"


def _log_group_name_shape() -> tuple[re.Pattern[str], int, int]:
    shape = botocore.session.get_session().get_service_model("logs").operation_model("CreateLogGroup").input_shape
    meta = shape.members["logGroupName"].metadata
    return re.compile(meta["pattern"]), meta["min"], meta["max"]


def _resolve(value: Any, stack_name: str, stack_uuid: str) -> Any:
    """The deploy-time value of a property built from the intrinsics these names use; anything else is an error."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return [_resolve(v, stack_name, stack_uuid) for v in value]
    ((fn, arg),) = value.items()
    if fn == "Ref" and arg == "AWS::StackId":
        return f"arn:aws:cloudformation:us-east-1:123456789012:stack/{stack_name}/{stack_uuid}"
    if fn == "Ref" and arg == "AWS::StackName":
        return stack_name
    if fn == "Fn::Join":
        sep, parts = arg
        return sep.join(_resolve(parts, stack_name, stack_uuid))
    if fn == "Fn::Split":
        sep, source = arg
        return _resolve(source, stack_name, stack_uuid).split(sep)
    if fn == "Fn::Select":
        index, items = arg
        return _resolve(items, stack_name, stack_uuid)[int(index)]
    raise AssertionError(f"unexpected intrinsic in a log group name: {value}")


def _logging_groups(template: dict[str, Any]) -> dict[str, list[str]]:
    """Log group logical id → the state machines (logical ids) that log to it."""
    resources = template["Resources"]
    out: dict[str, list[str]] = {}
    for machine_id, machine in resources.items():
        if machine["Type"] != "AWS::StepFunctions::StateMachine":
            continue
        logging = machine["Properties"].get("LoggingConfiguration")
        if not logging:
            continue
        for destination in logging["Destinations"]:
            arn = destination["CloudWatchLogsLogGroup"]["LogGroupArn"]
            assert isinstance(arn, dict) and "Fn::GetAtt" in arn, (
                f"{machine_id} logs to a group outside the stack: {arn}"
            )
            group_id = arn["Fn::GetAtt"][0]
            assert resources[group_id]["Type"] == "AWS::Logs::LogGroup"
            out.setdefault(group_id, []).append(machine_id)
    return out


def _check(stacks: list[tuple[cdk.Stack, dict[str, Any]]], expected_machines: int) -> None:
    pattern, low, high = _log_group_name_shape()
    names: dict[str, str] = {}  # name → "stack/logical id"
    machines = 0
    problems: list[str] = []
    for stack, template in stacks:
        for group_id, users in _logging_groups(template).items():
            machines += len(users)
            group = template["Resources"][group_id]
            where = f"{stack.stack_name}/{group_id} (used by {', '.join(users)})"
            raw = group["Properties"].get("LogGroupName")
            if raw is None:
                problems.append(f"{where}: no LogGroupName (CloudFormation generates one outside {VENDED})")
                continue
            name = _resolve(raw, stack.stack_name, FIRST_STACK)
            if not name.startswith(VENDED):
                problems.append(f"{where}: {name!r} is not under {VENDED}")
            if not (low <= len(name) <= high and pattern.fullmatch(name)):
                problems.append(
                    f"{where}: {name!r} breaks logs CreateLogGroup logGroupName {pattern.pattern} {low}..{high}"
                )
            if name in names:
                problems.append(f"{where}: {name!r} is also {names[name]}")
            names[name] = where
            # A group CloudFormation keeps when the stack goes (or a failed first create rolls back) must not hold
            # the name the next stack of the same name creates: a named AWS::Logs::LogGroup that exists fails the
            # create (AlreadyExists; "Resource names must be unique across all your active stacks",
            # https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-properties-name.html).
            if group.get("DeletionPolicy", "Delete") != "Delete" and name == _resolve(
                raw, stack.stack_name, NEXT_STACK
            ):
                problems.append(f"{where}: retained ({group['DeletionPolicy']}) under a fixed name {name!r}")
    assert not problems, "\n".join(problems)
    assert machines == expected_machines


def _images(stack: cdk.Stack) -> int:
    return sum(isinstance(c, LlamaCppImage) for c in stack.node.find_all())


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_shipped_state_machines_log_under_vendedlogs(path) -> None:
    _, stack = build_app(load(path), app=cdk.App())
    # Each image: its workflow and its Provider waiter; the stack's model-copy waiter (when a model is copied alone
    # or awaited); a farm's catalog copy (the Distributed Map).
    copies = sum(isinstance(c, ModelCopyProvider) for c in stack.node.find_all())
    catalogs = sum(isinstance(c, ModelCatalog) for c in stack.node.find_all())
    assert copies + catalogs >= 1  # every shipped config copies its models
    _check([(stack, template_json(stack))], expected_machines=2 * _images(stack) + copies + catalogs)


def test_two_images_of_one_stack_and_two_stacks_never_share_a_group(make_context) -> None:
    app = cdk.App()
    env = cdk.Environment(account="123456789012", region="us-east-1")
    stacks = []
    # Green: the longest stack name CloudFormation accepts (128) and a long construct path, so the name must be cut.
    for stack_name, parent in (("images-blue", "Serving"), ("images-green" + "n" * 116, "Serving" * 60)):
        stack = cdk.Stack(app, stack_name, env=env, stack_name=stack_name)
        props = LlamaCppImageProps(context_dir=make_context(stack_name[:12]))
        LlamaCppImage(stack, "Engine", props=props)
        LlamaCppImage(Construct(stack, parent), "Engine", props=props)  # same props, same id, another parent
        stacks.append(stack)
    apply_nag(app)
    synth(app)
    templates = [(s, template_json(s)) for s in stacks]
    _check(templates, expected_machines=8)
    assert not [e for _, t in templates for e in cfn_lint_errors(t)]
