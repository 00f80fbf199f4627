"""Real checkers over synthesized templates: cfn-lint, cdk-nag, and stable snapshots."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import aws_cdk as cdk
from aws_cdk.assertions import Template
from cdk_nag import AwsSolutionsChecks

_ASSET_HASH = re.compile(r"[0-9a-f]{64}(?=\.(zip|json|tar|tar\.gz)\b|\b)")
_VERSION_ID = re.compile(r"(CurrentVersion[0-9A-F]{8})[0-9a-f]{32}")


def apply_nag(app: cdk.App) -> None:
    """Register cdk-nag's AwsSolutions pack (cdk-nag v3 is a CDK policy-validation plugin); call before synth.

    Violations make synth raise; acknowledge a finding with a reason via
    `cdk.Validations.of(construct).acknowledge(cdk.Acknowledgment(id="AwsSolutions-IAM5[Resource::*]", reason=...))`."""
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))


def _report(app: cdk.App) -> list[dict[str, Any]]:
    path = Path(app.outdir) / "validation-report.json"
    if not path.exists():
        return []
    return json.loads(path.read_text()).get("pluginReports", [])


def _violations(app: cdk.App, stack_path: str | None = None, severity: str = "error") -> list[str]:
    out: list[str] = []
    for plugin in _report(app):
        for v in plugin.get("violations", []):
            if v.get("severity", "error") != severity:
                continue
            for res in v.get("violatingConstructs", v.get("violatingResources", [])):
                path = res.get("constructPath", "")
                if stack_path is None or path == stack_path or path.startswith(stack_path + "/"):
                    out.append(f"{v['ruleName']} at {path}: {v.get('description', '')}")
    return out


def synth(app: cdk.App) -> cdk.cx_api.CloudAssembly:
    """app.synth(), turning a cdk-nag failure into an assertion listing every violation."""
    try:
        return app.synth()
    except RuntimeError as exc:
        if "Validation failed" not in str(exc):
            raise
        raise AssertionError("cdk-nag violations:\n" + "\n".join(_violations(app))) from None


def template_json(stack: cdk.Stack) -> dict[str, Any]:
    return Template.from_stack(stack).to_json()


def nag_errors(stack: cdk.Stack) -> list[str]:
    """Unacknowledged cdk-nag errors on a stack, read from the synthesized validation report."""
    app = stack.node.root
    synth(app)  # idempotent once synthesized
    return _violations(app, stack.node.path)


def nag_warnings(stack: cdk.Stack) -> list[str]:
    app = stack.node.root
    synth(app)
    return _violations(app, stack.node.path, "warning")


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
