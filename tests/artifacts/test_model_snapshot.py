"""ModelArtifact in snapshot mode (a vLLM model's safetensors repo): one synth of a bucket, a snapshot artifact (gated,
token secret) and a serving role, cdk-nag applied. The buildspec in the template is compared with the one the
runtime tests run (tests/runtime/model_download/test_snapshot_resource.py) against the fake Hub and moto."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_iam as iam

from cpu_inference.artifacts import ModelArtifact, ModelArtifactProps, ModelBucket
from model_download.buildspec import SNAPSHOT_BUILD_SPEC, SNAPSHOT_RECEIPT
from tests.support.cdk import apply_nag, cfn_lint_errors, nag_errors, synth, template_json

pytestmark = pytest.mark.synth

ENV = cdk.Environment(account="123456789012", region="us-east-1")


@dataclass
class Synthesized:
    stack: cdk.Stack
    bucket: ModelBucket
    vllm: ModelArtifact
    gguf: ModelArtifact
    reader: iam.Role
    template: dict[str, Any]

    def props_of(self, construct: Any) -> dict[str, Any]:
        return self.template["Resources"][self.stack.get_logical_id(construct.node.default_child)]["Properties"]

    def statements(self, role: iam.IRole) -> list[dict[str, Any]]:
        rid = self.stack.get_logical_id(role.node.default_child)
        return [
            st
            for r in self.template["Resources"].values()
            if r["Type"] == "AWS::IAM::Policy" and {"Ref": rid} in r["Properties"]["Roles"]
            for st in r["Properties"]["PolicyDocument"]["Statement"]
        ]


@pytest.fixture(scope="module")
def synthesized() -> Synthesized:
    app = cdk.App()
    apply_nag(app)
    stack = cdk.Stack(app, "VllmModels", env=ENV)
    bucket = ModelBucket(stack, "ModelBucket")
    vllm = ModelArtifact(
        stack,
        "Qwen3",
        props=ModelArtifactProps(
            model_bucket=bucket,
            name="qwen3-0-6b",
            hf_repo="Qwen/Qwen3-0.6B",
            snapshot=True,
            token_secret_name="hf/token",
        ),
    )
    gguf = ModelArtifact(
        stack,
        "Smollm2",
        props=ModelArtifactProps(
            model_bucket=bucket,
            name="smollm2",
            hf_repo="bartowski/SmolLM2-1.7B-Instruct-GGUF",
            file="SmolLM2-1.7B-Instruct-Q4_K_M.gguf",
        ),
    )
    reader = iam.Role(stack, "ServingRole", assumed_by=iam.ServicePrincipal("sagemaker.amazonaws.com"))
    vllm.grant_read(reader)
    synth(app)
    return Synthesized(stack, bucket, vllm, gguf, reader, template_json(stack))


def _join(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and "Fn::Join" in value:
        sep, parts = value["Fn::Join"]
        return sep.join(_join(p) for p in parts)
    if isinstance(value, dict) and "Ref" in value:
        return f"<{value['Ref']}>"
    if isinstance(value, dict) and "Fn::GetAtt" in value:
        return f"<{'.'.join(value['Fn::GetAtt'])}>"
    return json.dumps(value)


def _as_list(v: Any) -> list[Any]:
    return v if isinstance(v, list) else [v]


def test_the_copy_resource_names_the_repo_and_the_snapshot_not_a_file(synthesized: Synthesized) -> None:
    copy = synthesized.props_of(synthesized.vllm.resource)
    assert set(copy) == {
        "ServiceToken",
        "ServiceTimeout",
        "ProjectName",
        "Bucket",
        "KeyPrefix",
        "HfRepo",
        "Revision",
        "Snapshot",
    }
    assert (copy["HfRepo"], copy["Revision"], copy["Snapshot"], copy["KeyPrefix"]) == (
        "Qwen/Qwen3-0.6B",
        "main",
        "safetensors",
        "models/qwen3-0-6b",
    )
    # A file artifact in the same stack keeps exactly its properties (a new one would re-run every existing copy).
    assert set(synthesized.props_of(synthesized.gguf.resource)) == {
        "ServiceToken",
        "ServiceTimeout",
        "ProjectName",
        "Bucket",
        "KeyPrefix",
        "HfRepo",
        "File",
        "Revision",
        "Sha256",
    }


def test_the_attributes_point_at_the_commit_prefix(synthesized: Synthesized) -> None:
    v = synthesized.vllm
    resolve = synthesized.stack.resolve
    copy = synthesized.stack.get_logical_id(v.resource.node.default_child)
    bucket = synthesized.stack.get_logical_id(synthesized.bucket.bucket.node.default_child)
    assert v.is_snapshot and not synthesized.gguf.is_snapshot and synthesized.gguf.manifest_key is None
    assert _join(resolve(v.s3_uri)) == f"s3://<{bucket}>/models/qwen3-0-6b/<{copy}.Commit>/"
    assert v.s3_uri == v.s3_prefix_uri and v.key == v.prefix and _join(resolve(v.key)).endswith("/")
    assert _join(resolve(v.manifest_key)) == f"models/qwen3-0-6b/<{copy}.Commit>/cpu-inference.manifest"
    assert resolve(v.sha256) == {"Fn::GetAtt": [copy, "Sha256"]} and resolve(v.file_count) == {
        "Fn::GetAtt": [copy, "Files"]
    }
    assert resolve(v.size_bytes) == {"Fn::GetAtt": [copy, "Size"]}  # the pods' MODEL_SIZE_BYTES check of the manifest


def test_the_job_runs_the_snapshot_buildspec_with_the_identity_in_its_environment(synthesized: Synthesized) -> None:
    project = synthesized.props_of(synthesized.vllm.project)
    assert json.loads(project["Source"]["BuildSpec"]) == SNAPSHOT_BUILD_SPEC
    assert SNAPSHOT_BUILD_SPEC["env"]["exported-variables"] == list(SNAPSHOT_RECEIPT)
    env = {e["Name"]: e["Value"] for e in project["Environment"]["EnvironmentVariables"]}
    assert set(env) == {
        "MODEL_REPO",
        "MODEL_REVISION",
        "MODEL_BUCKET",
        "MODEL_KEY_PREFIX",
        "HF_TOKEN_SECRET_NAME",
        "HF_ENDPOINT",
        "MODEL_CONCURRENCY",
    }
    assert (env["MODEL_REPO"], env["MODEL_KEY_PREFIX"], env["HF_TOKEN_SECRET_NAME"]) == (
        "Qwen/Qwen3-0.6B",
        "models/qwen3-0-6b",
        "hf/token",
    )
    assert project["TimeoutInMinutes"] == 55 and project["Environment"]["PrivilegedMode"] is False


def test_the_job_writes_only_its_model_prefix(synthesized: Synthesized) -> None:
    bucket_arn = f"<{synthesized.stack.get_logical_id(synthesized.bucket.bucket.node.default_child)}.Arn>"
    statements = synthesized.statements(synthesized.vllm.role)
    on_bucket = [st for st in statements if any(_join(r).startswith(bucket_arn) for r in _as_list(st["Resource"]))]
    writes = [st for st in on_bucket if "s3:PutObject" in _as_list(st["Action"])]
    assert [[_join(r) for r in _as_list(st["Resource"])] for st in writes] == [[f"{bucket_arn}/models/qwen3-0-6b/*"]]
    assert [st["Condition"] for st in on_bucket if st["Action"] == "s3:ListBucket"] == [
        {"StringLike": {"s3:prefix": ["models/qwen3-0-6b/*"]}}
    ]
    assert len(on_bucket) == 2
    reads = [
        _join(r)
        for st in synthesized.statements(synthesized.reader)
        if st["Action"] == "s3:GetObject"
        for r in _as_list(st["Resource"])
    ]
    assert reads == [f"{bucket_arn}/models/qwen3-0-6b/*"]


def test_cdk_nag_has_no_unacknowledged_errors(synthesized: Synthesized) -> None:
    assert nag_errors(synthesized.stack) == []


def test_cfn_lint_finds_no_errors(synthesized: Synthesized) -> None:
    assert cfn_lint_errors(synthesized.template) == []


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({}, r"give file \(one GGUF, llama\.cpp\) or snapshot=True \(the repo's safetensors, vLLM\)$"),
        ({"file": "m.gguf", "snapshot": True}, "not both"),
        (
            {"snapshot": True, "sha256": "a" * 64},
            r"sha256 pins one file; pin a snapshot with revision=<full commit sha>",
        ),
        ({"snapshot": True, "hf_repo": "no-owner"}, "hf_repo must be a Hugging Face repo"),
    ],
)
def test_snapshot_props_are_validated(change: dict[str, Any], message: str) -> None:
    base = {"model_bucket": None, "name": "qwen3-0-6b", "hf_repo": "Qwen/Qwen3-0.6B"}
    with pytest.raises(ValueError, match=message):
        ModelArtifactProps(**{**base, **change}).validate()  # type: ignore[arg-type]
