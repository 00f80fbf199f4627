"""LlamaCppImage with a repository and a key the user brings: nothing of theirs is re-created or
reconfigured, and the build roles still push only to that repository."""

from __future__ import annotations

import json

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_kms as kms

from cpu_inference.images import LlamaCppImage, LlamaCppImageProps
from tests.support.cdk import apply_nag, cfn_lint_errors, nag_errors, template_json

pytestmark = pytest.mark.synth

KEY_ARN = "arn:aws:kms:eu-west-1:111111111111:key/0b4e2c1a-1111-2222-3333-444455556666"


@pytest.fixture(scope="module")
def synth(make_context):
    app = cdk.App()
    stack = cdk.Stack(app, "Brought", env=cdk.Environment(account="111111111111", region="eu-west-1"))
    repository = ecr.Repository.from_repository_name(stack, "Repo", "team/router")
    key = kms.Key.from_key_arn(stack, "Key", KEY_ARN)
    context = make_context("router")
    (context / "engine-pin.env").unlink()
    image = LlamaCppImage(
        stack,
        "Router",
        props=LlamaCppImageProps(
            context_dir=context,
            name="router",
            pin_file=None,
            existing_repository=repository,
            existing_key=key,
            platforms=("arm64", "amd64"),
        ),
    )
    apply_nag(app)
    return stack, image, template_json(stack)


def test_nothing_of_the_users_is_created(synth) -> None:
    _, image, template = synth
    kinds = {r["Type"] for r in template["Resources"].values()}
    assert "AWS::ECR::Repository" not in kinds and "AWS::KMS::Key" not in kinds
    for project in (r for r in template["Resources"].values() if r["Type"] == "AWS::CodeBuild::Project"):
        assert project["Properties"]["EncryptionKey"] == KEY_ARN
    build = next(r for r in template["Resources"].values() if r["Type"] == "Custom::ContainerImageBuild")
    assert build["Properties"]["RepositoryName"] == "team/router"
    assert build["Properties"]["EnginePin"] == "" and image.tag.startswith("router-")


def test_push_actions_are_scoped_to_the_brought_repository(synth) -> None:
    _, _, template = synth
    pushes = [
        s
        for r in template["Resources"].values()
        if r["Type"] == "AWS::IAM::Policy"
        for s in r["Properties"]["PolicyDocument"]["Statement"]
        if "ecr:PutImage" in s["Action"]
    ]
    assert len(pushes) == 3
    for statement in pushes:
        assert json.dumps(statement["Resource"]).endswith(':ecr:eu-west-1:111111111111:repository/team/router"]]}')


def test_clean_under_cdk_nag_and_cfn_lint(synth) -> None:
    stack, _, template = synth
    assert nag_errors(stack) == []
    assert cfn_lint_errors(template) == []
