"""Copy-job inputs (review artifacts.md #15, #17, #3): token secrets encrypted with a customer-managed KMS key or
named by full ARN, the CodeBuild project description within CodeBuild's limit, and the documented recovery for a
copy longer than CloudFormation's hour checked against the real CLIs' parameters."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import botocore.session
import pytest
from aws_cdk import aws_kms as kms

from cpu_inference.artifacts import ModelArtifact, ModelArtifactProps, ModelBucket, ModelCatalog, ModelCatalogProps
from model_download.catalog import NAME, REPO, REVISION, CatalogEntry
from tests.support.cdk import apply_nag, synth, template_json

pytestmark = pytest.mark.synth

ENV = cdk.Environment(account="123456789012", region="us-east-1")
ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "constructs" / "cpu_inference" / "artifacts" / "README.md"
KEY_ARN = "arn:aws:kms:us-east-1:210987654321:key/1234abcd-12ab-34cd-56ef-1234567890ab"
SECRET_ARN = "arn:aws:secretsmanager:us-east-1:210987654321:secret:hf/shared-token-AbC123"
CODEBUILD = botocore.session.get_session().get_service_model("codebuild")


def _role_statements(stack: cdk.Stack, template: dict[str, Any], role: Any) -> list[dict[str, Any]]:
    rid = stack.get_logical_id(role.node.default_child)
    return [
        st
        for p in template["Resources"].values()
        if p["Type"] == "AWS::IAM::Policy" and {"Ref": rid} in p["Properties"]["Roles"]
        for st in p["Properties"]["PolicyDocument"]["Statement"]
    ]


def _actions(st: dict[str, Any]) -> set[str]:
    return set(st["Action"] if isinstance(st["Action"], list) else [st["Action"]])


def _env(template: dict[str, Any], name: str) -> Any:
    (project,) = [r for r in template["Resources"].values() if r["Type"] == "AWS::CodeBuild::Project"]
    return {e["Name"]: e["Value"] for e in project["Properties"]["Environment"]["EnvironmentVariables"]}[name]


# -- #15: the token secret's KMS key and full ARNs ---------------------------------------------------------


def test_a_cmk_encrypted_token_secret_gets_kms_decrypt_through_secrets_manager_only() -> None:
    app = cdk.App()
    apply_nag(app)
    stack = cdk.Stack(app, "Models", env=ENV)
    bucket = ModelBucket(stack, "ModelBucket")
    key = kms.Key.from_key_arn(stack, "TokenKey", KEY_ARN)
    art = ModelArtifact(
        stack,
        "Llama",
        props=ModelArtifactProps(
            model_bucket=bucket,
            name="llama",
            hf_repo="meta-llama/Llama-3.3-70B-Instruct-GGUF",
            file="m.gguf",
            token_secret_name=SECRET_ARN,
            token_secret_key=key,
        ),
    )
    synth(app)
    template = template_json(stack)
    statements = _role_statements(stack, template, art.role)
    secret = [st for st in statements if "secretsmanager:GetSecretValue" in _actions(st)]
    assert [st["Resource"] for st in secret] == [SECRET_ARN]  # the complete ARN, not a name pattern in this account
    decrypt = [st for st in statements if st["Resource"] == KEY_ARN]
    assert len(decrypt) == 1 and _actions(decrypt[0]) == {"kms:Decrypt"}
    # CDK's Secret.grant_read pattern (aws-secretsmanager secret.ts): the key only through Secrets Manager.
    assert decrypt[0]["Condition"] == {"StringEquals": {"kms:ViaService": "secretsmanager.us-east-1.amazonaws.com"}}
    # GetSecretValue's SecretId: "To retrieve a secret from another account, you must use an ARN" (botocore).
    assert (
        "another account, you must use an ARN"
        in botocore.session.get_session()
        .get_service_model("secretsmanager")
        .operation_model("GetSecretValue")
        .input_shape.members["SecretId"]
        .documentation
    )
    assert _env(template, "HF_TOKEN_SECRET_NAME") == SECRET_ARN


def test_a_named_secret_with_a_key_and_a_catalog_of_arns() -> None:
    app = cdk.App()
    apply_nag(app)
    stack = cdk.Stack(app, "Farm", env=ENV)
    bucket = ModelBucket(stack, "ModelBucket")
    key = kms.Key.from_key_arn(stack, "TokenKey", KEY_ARN)
    art = ModelArtifact(
        stack,
        "Gated",
        props=ModelArtifactProps(
            model_bucket=bucket,
            name="gated",
            hf_repo="acme/gated-GGUF",
            file="m.gguf",
            token_secret_name="hf/token",
            token_secret_key=key,
        ),
    )
    farm = ModelCatalog(
        stack,
        "Farm",
        props=ModelCatalogProps(
            model_bucket=bucket,
            token_secret_key=key,
            entries=(
                CatalogEntry(name="a", hf_repo="acme/a-GGUF", file="a.gguf", token_secret_name=SECRET_ARN),
                CatalogEntry(name="b", hf_repo="acme/b-GGUF", file="b.gguf", token_secret_name="hf/token"),
            ),
        ),
    )
    synth(app)
    template = template_json(stack)
    for role in (art.role, farm.role):
        statements = _role_statements(stack, template, role)
        assert [_actions(st) for st in statements if st["Resource"] == KEY_ARN] == [{"kms:Decrypt"}]
    resources = [
        st["Resource"]
        for st in _role_statements(stack, template, farm.role)
        if "secretsmanager:GetSecretValue" in _actions(st)
    ]
    assert SECRET_ARN in resources
    assert any("secret:hf/token-??????" in str(r) for r in resources)
    assert sorted(farm.token_secrets) == sorted(["hf/token", SECRET_ARN])


@pytest.mark.parametrize(
    "bad",
    [
        "arn:aws:secretsmanager:us-east-1:210987654321:secret:hf/token",  # partial: no -XXXXXX suffix
        "arn:aws:s3:::bucket/key",
    ],
)
def test_a_secret_arn_must_be_complete(bad: str) -> None:
    with pytest.raises(ValueError, match=r"ModelArtifactProps.token_secret_name .*complete ARN"):
        ModelArtifactProps(model_bucket=None, name="x", hf_repo="a/b", file="f.gguf", token_secret_name=bad).validate()  # type: ignore[arg-type]


def test_a_key_without_a_secret_is_refused() -> None:
    with pytest.raises(ValueError, match="token_secret_key applies only with token_secret_name"):
        ModelArtifactProps(
            model_bucket=None, name="x", hf_repo="a/b", file="f.gguf", token_secret_key=object()
        ).validate()  # type: ignore[arg-type]


# -- #17: the project description fits CodeBuild's limit --------------------------------------------------


def _longest(pattern: re.Pattern[str], alphabet: str = "a") -> str:
    """The longest value a validation regex of ours accepts, found by growing it (bounded)."""
    best = ""
    for n in range(1, 400):
        for candidate in (alphabet * n, f"{'o' * (n // 2)}/{'n' * (n - n // 2 - 1)}"):
            if pattern.match(candidate) and len(candidate) > len(best):
                best = candidate
    return best


def test_the_project_description_fits_codebuild_with_the_longest_inputs() -> None:
    limit = CODEBUILD.shape_for("ProjectDescription").metadata["max"]
    assert limit == 255
    repo, revision = _longest(REPO), _longest(REVISION)
    assert len(repo) > 90 and len(revision) >= 128 and _longest(NAME)
    app = cdk.App()
    stack = cdk.Stack(app, "Models", env=ENV)
    bucket = ModelBucket(stack, "ModelBucket")
    for i, snapshot in enumerate((False, True)):
        ModelArtifact(
            stack,
            f"Long{i}",
            props=ModelArtifactProps(
                model_bucket=bucket,
                name=f"long-{i}",
                hf_repo=repo,
                revision=revision,
                **({"snapshot": True} if snapshot else {"file": "d/" * 60 + "model-Q4_K_M.gguf"}),
            ),
        )
    template = template_json(stack)
    descriptions = [
        r["Properties"]["Description"] for r in template["Resources"].values() if r["Type"] == "AWS::CodeBuild::Project"
    ]
    assert len(descriptions) == 2
    for d in descriptions:
        assert len(d) <= limit, len(d)
        assert d.startswith("Copies hf://") and d.endswith("…")


# -- #3: the >1 h recovery, as documented, uses parameters the real CLIs have --------------------------------


def _readme_commands(prefix: str) -> list[list[str]]:
    """Shell commands of the README's plain/sh/bash fenced blocks (continuation lines joined) that start with prefix."""
    blocks: list[list[str]] = []
    fence: list[str] | None = None  # lines of the open fenced block, None outside one
    keep = False
    for line in README.read_text().splitlines():
        if line.startswith("```"):
            if fence is None:
                fence, keep = [], line[3:].strip() in ("", "sh", "bash")
            else:
                if keep:
                    blocks.append(fence)
                fence = None
            continue
        if fence is not None:
            fence.append(line)
    commands = re.split(r"(?<!\\)\n", "\n".join("\n".join(b) for b in blocks).replace("\\\n", " "))
    return [shlex.split(c.split(" #")[0]) for c in commands if c.strip().startswith(prefix)]


def test_the_documented_start_build_uses_startbuild_parameters_within_their_ranges() -> None:
    commands = _readme_commands("aws codebuild start-build")
    assert commands, "the README documents no `aws codebuild start-build` recovery"
    members = CODEBUILD.operation_model("StartBuild").input_shape.members
    cli_to_member = {f"--{re.sub(r'([A-Z])', lambda m: '-' + m.group(1).lower(), name)}": name for name in members}
    for argv in commands:
        opts = {
            a: argv[i + 1] if i + 1 < len(argv) and not argv[i + 1].startswith("--") else None
            for i, a in enumerate(argv)
            if a.startswith("--")
        }
        assert set(opts) <= set(cli_to_member), f"not a StartBuild parameter: {set(opts) - set(cli_to_member)}"
        assert "--project-name" in opts
        timeout = opts.get("--timeout-in-minutes-override")
        assert timeout is not None, (
            "without --timeout-in-minutes-override the build keeps the project's 55-minute limit"
        )
        meta = members["timeoutInMinutesOverride"].metadata
        assert meta["min"] <= int(timeout) <= meta["max"] and int(timeout) > 60


def test_the_documented_no_rollback_flag_exists_in_the_pinned_cdk_cli() -> None:
    deploys = _readme_commands("cdk deploy")
    assert deploys, "the README documents no `cdk deploy --no-rollback` recovery"
    # Over a stack in a paused failed state the CLI deploys only with --no-rollback (aws-cdk toolkit deploy-stack:
    # "From a failed state, a --no-rollback is possible as long as there is not a replacement"); a plain deploy
    # rolls it back first — deleting the copy job or restoring its old inputs.
    assert all("--no-rollback" in argv for argv in deploys), deploys
    cli = ROOT / "node_modules" / "aws-cdk" / "bin" / "cdk"
    node = ROOT / ".venv" / "bin" / "node"
    out = subprocess.run(
        [str(node), str(cli), "deploy", "--help"], capture_output=True, text=True, timeout=180, check=True
    ).stdout
    assert re.search(r"--rollback\s", out) and "--no-rollback" in out
