"""Real checkers over synthesized templates: cfn-lint, cdk-nag, and stable snapshots."""

from __future__ import annotations

import json
import re
from typing import Any

import aws_cdk as cdk
from aws_cdk.assertions import Annotations, Match, Template
from cdk_nag import AwsSolutionsChecks

_ASSET_HASH = re.compile(r"[0-9a-f]{64}(?=\.(zip|json|tar|tar\.gz)\b|\b)")
_VERSION_ID = re.compile(r"(CurrentVersion[0-9A-F]{8})[0-9a-f]{32}")


def apply_nag(app: cdk.App | cdk.Stack) -> None:
    """Add cdk-nag's AwsSolutions pack; must be called before synth."""
    cdk.Aspects.of(app).add(AwsSolutionsChecks(verbose=True))


def template_json(stack: cdk.Stack) -> dict[str, Any]:
    return Template.from_stack(stack).to_json()


def nag_errors(stack: cdk.Stack) -> list[str]:
    """Unsuppressed AwsSolutions errors on a stack whose app had apply_nag() before synth."""
    found = Annotations.from_stack(stack).find_error("*", Match.string_like_regexp(r"AwsSolutions-.*"))
    return [f"{m.id}: {m.entry.data}" for m in found]


def nag_warnings(stack: cdk.Stack) -> list[str]:
    found = Annotations.from_stack(stack).find_warning("*", Match.string_like_regexp(r"AwsSolutions-.*"))
    return [f"{m.id}: {m.entry.data}" for m in found]


def cfn_lint_matches(template: dict[str, Any], regions: tuple[str, ...] = ("us-east-1", "eu-west-1")) -> list[str]:
    from cfnlint.api import ManualArgs, lint

    matches = lint(json.dumps(template), config=ManualArgs(regions=list(regions)))
    return [f"{m.rule.id} {'/'.join(str(p) for p in m.path)}: {m.message}" for m in matches]


def cfn_lint_errors(template: dict[str, Any]) -> list[str]:
    return [m for m in cfn_lint_matches(template) if m.startswith("E")]


def normalized(template: dict[str, Any]) -> dict[str, Any]:
    """Template with asset hashes masked, so snapshots change only when the infrastructure does."""
    text = json.dumps(template, sort_keys=True)
    text = _ASSET_HASH.sub("<asset-hash>", text)
    text = _VERSION_ID.sub(r"\1<hash>", text)
    return json.loads(text)
