"""The cdk-nag acknowledgment helper: it acknowledges exactly the reviewed IAM wildcards, so cdk-nag
still fails a stack on any other wildcard (a negative control for the construct's nag-clean test)."""

from __future__ import annotations

import aws_cdk as cdk
import pytest
from aws_cdk import aws_iam as iam

from cpu_inference._internal.nag import Wildcard, acknowledge_wildcards, wildcard_findings
from cpu_inference._internal.nag import flatten as render
from tests.support.cdk import apply_nag, template_json

pytestmark = pytest.mark.synth


def test_render_matches_cdk_nag_notation() -> None:
    value = {
        "Fn::Join": [
            "",
            ["arn:", {"Ref": "AWS::Partition"}, ":states:eu-west-1:1:execution:", {"Fn::GetAtt": ["Wf", "Name"]}, ":*"],
        ]
    }
    assert render(value) == "arn:<AWS::Partition>:states:eu-west-1:1:execution:<Wf.Name>:*"
    assert render({"Fn::GetAtt": "Fn.Arn"}) == "<Fn.Arn>"


def test_findings_name_wildcard_actions_and_resources_of_allow_statements() -> None:
    statement = {
        "Effect": "Allow",
        "Action": ["s3:GetObject*", "s3:PutObject"],
        "Resource": ["arn:aws:s3:::b", "arn:aws:s3:::b/*"],
    }
    assert wildcard_findings(statement) == ["Action::s3:GetObject*", "Resource::arn:aws:s3:::b/*"]
    assert wildcard_findings({**statement, "Effect": "Deny"}) == []


def test_only_reviewed_wildcards_are_acknowledged_and_nag_still_fails_the_rest() -> None:
    app = cdk.App()
    stack = cdk.Stack(app, "NagControl")
    role = iam.Role(stack, "Role", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
    role.add_to_policy(iam.PolicyStatement(actions=["ecr:GetAuthorizationToken"], resources=["*"]))
    role.add_to_policy(iam.PolicyStatement(actions=["s3:GetObject"], resources=["arn:aws:s3:::bucket/*"]))
    reviewed = [
        Wildcard(
            r"Resource::\*",
            "GetAuthorizationToken has no resource-level permissions.",
            only_with=lambda actions: actions == ["ecr:GetAuthorizationToken"],
        )
    ]
    done = acknowledge_wildcards(stack, reviewed)
    assert done == ["NagControl/Role/DefaultPolicy: Resource::*"]
    apply_nag(app)
    with pytest.raises(RuntimeError) as failed:
        template_json(stack)
    report = str(failed.value)
    assert "AwsSolutions-IAM5[Resource::arn:aws:s3:::bucket/*]" in report  # unreviewed: still an error
    assert "AwsSolutions-IAM5[Resource::*]" not in report  # reviewed: acknowledged


def test_a_reviewed_pattern_does_not_cover_other_actions() -> None:
    app = cdk.App()
    stack = cdk.Stack(app, "NagControl2")
    role = iam.Role(stack, "Role", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
    role.add_to_policy(
        iam.PolicyStatement(actions=["ecr:GetAuthorizationToken", "s3:ListAllMyBuckets"], resources=["*"])
    )
    reviewed = [
        Wildcard(
            r"Resource::\*",
            "only for actions without resource-level permissions",
            only_with=lambda actions: set(actions) <= {"ecr:GetAuthorizationToken"},
        )
    ]
    assert acknowledge_wildcards(stack, reviewed) == []
