"""ModelBucket + ModelArtifact templates: one synth per module of a plain App/Stack with one bucket and two
artifacts (one gated), cdk-nag applied; plus one small synth with a bucket the user brings."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3

from cpu_inference.artifacts import ModelArtifact, ModelArtifactProps, ModelBucket, ModelBucketProps
from model_download.buildspec import RECEIPT
from tests.support.cdk import apply_nag, cfn_lint_errors, nag_errors, synth, template_json

pytestmark = pytest.mark.synth

ENV = cdk.Environment(account="123456789012", region="us-east-1")
LLAMA_SHA = "4f7c7d1cde0e1b2a3f4e5d6c7b8a99887766554433221100ffeeddccbbaa9988"
LLAMA_COMMIT = "9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b"


@dataclass
class Synthesized:
    stack: cdk.Stack
    bucket: ModelBucket
    slm: ModelArtifact
    llm: ModelArtifact
    reader: iam.Role
    template: dict[str, Any]

    def resources(self, type_: str) -> dict[str, dict[str, Any]]:
        return {k: v for k, v in self.template["Resources"].items() if v["Type"] == type_}

    def logical_id(self, construct: Any) -> str:
        return self.stack.get_logical_id(construct.node.default_child)

    def statements(self, role: iam.IRole) -> list[dict[str, Any]]:
        rid = self.stack.get_logical_id(role.node.default_child)
        out: list[dict[str, Any]] = []
        for policy in self.resources("AWS::IAM::Policy").values():
            if {"Ref": rid} in policy["Properties"]["Roles"]:
                out += policy["Properties"]["PolicyDocument"]["Statement"]
        return out


@pytest.fixture(scope="module")
def synthesized() -> Synthesized:
    app = cdk.App()
    apply_nag(app)
    stack = cdk.Stack(app, "Models", env=ENV)
    bucket = ModelBucket(stack, "ModelBucket")
    slm = ModelArtifact(
        stack,
        "Smollm2",
        props=ModelArtifactProps(
            model_bucket=bucket,
            name="smollm2",
            hf_repo="bartowski/SmolLM2-1.7B-Instruct-GGUF",
            file="SmolLM2-1.7B-Instruct-Q4_K_M.gguf",
        ),
    )
    llm = ModelArtifact(
        stack,
        "Llama70b",
        props=ModelArtifactProps(
            model_bucket=bucket,
            name="llama-70b",
            hf_repo="meta-llama/Llama-3.3-70B-Instruct-GGUF",
            file="Llama-3.3-70B-Instruct-Q4_K_M.gguf",
            revision=LLAMA_COMMIT,
            sha256=LLAMA_SHA,
            token_secret_name="hf/llama-token",
        ),
    )
    # A serving role, as an endpoint or pod identity would get it.
    reader = iam.Role(stack, "ServingRole", assumed_by=iam.ServicePrincipal("sagemaker.amazonaws.com"))
    slm.grant_read(reader)
    synth(app)
    return Synthesized(stack, bucket, slm, llm, reader, template_json(stack))


def _join(value: Any) -> str:
    """Flatten Fn::Join / Ref / GetAtt into text, for matching ARNs."""
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


def _copy_resource(s: Synthesized, artifact: ModelArtifact) -> dict[str, Any]:
    return s.template["Resources"][s.stack.get_logical_id(artifact.resource.node.default_child)]["Properties"]


def test_the_copy_resource_carries_the_model_identity(synthesized: Synthesized) -> None:
    llm = _copy_resource(synthesized, synthesized.llm)
    assert {k: llm[k] for k in ("HfRepo", "File", "Revision", "Sha256")} == {
        "HfRepo": "meta-llama/Llama-3.3-70B-Instruct-GGUF",
        "File": "Llama-3.3-70B-Instruct-Q4_K_M.gguf",
        "Revision": LLAMA_COMMIT,
        "Sha256": LLAMA_SHA,
    }
    # What is copied, never how: a new token secret, endpoint or concurrency must not re-run the copy (and move
    # a branch revision to a newer commit); those are the project's environment.
    assert set(llm) == {
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
    # The job picks the key (models/<name>/<commit>/<file>): the template names only the model's root.
    assert llm["KeyPrefix"] == "models/llama-70b" and "Key" not in llm
    assert llm["Bucket"] == {"Ref": synthesized.logical_id(synthesized.bucket.bucket)}
    assert int(llm["ServiceTimeout"]) == 3600  # CloudFormation's ceiling for a custom resource

    slm = _copy_resource(synthesized, synthesized.slm)
    assert (slm["Revision"], slm["Sha256"]) == ("main", "")  # verified against the Hub's sha256
    copy = synthesized.stack.get_logical_id(synthesized.slm.resource.node.default_child)
    resolve = synthesized.stack.resolve
    assert _join(resolve(synthesized.slm.key)) == f"models/smollm2/<{copy}.Commit>/SmolLM2-1.7B-Instruct-Q4_K_M.gguf"
    assert resolve(synthesized.slm.commit) == {"Fn::GetAtt": [copy, "Commit"]}
    assert resolve(synthesized.slm.sha256) == {"Fn::GetAtt": [copy, "Sha256"]}
    assert synthesized.llm.sha256 == LLAMA_SHA  # pinned in the props: the job refuses any other digest
    assert synthesized.slm.model_prefix == "models/smollm2/"


def test_the_job_role_writes_only_its_model_prefix_and_reads_only_its_secret(synthesized: Synthesized) -> None:
    bucket_arn = f"<{synthesized.logical_id(synthesized.bucket.bucket)}.Arn>"
    key_arn = f"<{synthesized.stack.get_logical_id(synthesized.bucket.key.node.default_child)}.Arn>"
    for artifact, name in ((synthesized.slm, "smollm2"), (synthesized.llm, "llama-70b")):
        statements = synthesized.statements(artifact.role)
        on_bucket = [st for st in statements if any(_join(r).startswith(bucket_arn) for r in _as_list(st["Resource"]))]
        writes = [st for st in on_bucket if "s3:PutObject" in _as_list(st["Action"])]
        assert len(writes) == 1 and [_join(r) for r in _as_list(writes[0]["Resource"])] == [
            f"{bucket_arn}/models/{name}/*"
        ]
        assert set(writes[0]["Action"]) == {"s3:PutObject", "s3:GetObject", "s3:AbortMultipartUpload"}
        listing = [st for st in on_bucket if st["Action"] == "s3:ListBucket"]
        assert listing and all(st["Condition"] == {"StringLike": {"s3:prefix": [f"models/{name}/*"]}} for st in listing)
        assert len(on_bucket) == 2  # nothing else touches the model bucket
        kms_statements = [st for st in statements if any(str(a).startswith("kms:") for a in _as_list(st["Action"]))]
        assert [(sorted(_as_list(st["Action"])), _join(st["Resource"])) for st in kms_statements] == [
            (["kms:Decrypt", "kms:GenerateDataKey"], key_arn)
        ]
        secrets = [st for st in statements if any(str(a).startswith("secretsmanager:") for a in _as_list(st["Action"]))]
        if artifact is synthesized.llm:
            assert [_join(st["Resource"]) for st in secrets] == [
                "arn:<AWS::Partition>:secretsmanager:us-east-1:123456789012:secret:hf/llama-token-??????"
            ]
        else:
            assert secrets == []


def test_a_serving_role_reads_one_model_prefix(synthesized: Synthesized) -> None:
    bucket_arn = f"<{synthesized.logical_id(synthesized.bucket.bucket)}.Arn>"
    statements = synthesized.statements(synthesized.reader)
    gets = [st for st in statements if st["Action"] == "s3:GetObject"]
    # Every commit of that model: the old fleet still reads the previous commit's key during a rolling update.
    assert [_join(st["Resource"]) for st in gets] == [f"{bucket_arn}/models/smollm2/*"]
    lists = [st for st in statements if st["Action"] == "s3:ListBucket"]
    assert [st["Condition"] for st in lists] == [{"StringLike": {"s3:prefix": ["models/smollm2/*"]}}]
    assert any(st["Action"] == "kms:Decrypt" for st in statements)
    assert not any("s3:PutObject" in _as_list(st["Action"]) for st in statements)


def test_the_bucket_is_encrypted_versioned_tls_only_private_logged_and_expires_old_versions(
    synthesized: Synthesized,
) -> None:
    buckets = synthesized.resources("AWS::S3::Bucket")
    model = buckets[synthesized.logical_id(synthesized.bucket.bucket)]["Properties"]
    key_id = synthesized.stack.get_logical_id(synthesized.bucket.key.node.default_child)
    assert synthesized.template["Resources"][key_id]["Properties"]["EnableKeyRotation"] is True
    sse = model["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]
    assert sse["ServerSideEncryptionByDefault"] == {
        "SSEAlgorithm": "aws:kms",
        "KMSMasterKeyID": {"Fn::GetAtt": [key_id, "Arn"]},
    }
    assert sse["BucketKeyEnabled"] is True
    assert model["VersioningConfiguration"] == {"Status": "Enabled"}
    assert model["PublicAccessBlockConfiguration"] == {
        "BlockPublicAcls": True,
        "BlockPublicPolicy": True,
        "IgnorePublicAcls": True,
        "RestrictPublicBuckets": True,
    }
    log_id = synthesized.logical_id(synthesized.bucket.log_bucket)
    assert model["LoggingConfiguration"] == {"DestinationBucketName": {"Ref": log_id}, "LogFilePrefix": "model-bucket/"}
    (rule,) = model["LifecycleConfiguration"]["Rules"]
    assert rule["NoncurrentVersionExpiration"] == {"NoncurrentDays": 30, "NewerNoncurrentVersions": 2}
    assert rule["AbortIncompleteMultipartUpload"] == {"DaysAfterInitiation": 1} and rule["Status"] == "Enabled"

    policies = {
        p["Properties"]["Bucket"]["Ref"]: p["Properties"]["PolicyDocument"]["Statement"]
        for p in synthesized.resources("AWS::S3::BucketPolicy").values()
    }
    model_id = synthesized.logical_id(synthesized.bucket.bucket)
    assert any(
        st["Effect"] == "Deny" and st["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
        for st in policies[model_id]
    )
    delivery = [st for st in policies[log_id] if st.get("Principal") == {"Service": "logging.s3.amazonaws.com"}]
    assert delivery and delivery[0]["Condition"]["ArnLike"] == {"aws:SourceArn": {"Fn::GetAtt": [model_id, "Arn"]}}
    logs = buckets[log_id]["Properties"]
    assert logs["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]["ServerSideEncryptionByDefault"] == {
        "SSEAlgorithm": "AES256"
    }


def test_the_copy_job_runs_the_package_with_a_bounded_timeout(synthesized: Synthesized) -> None:
    project = synthesized.template["Resources"][synthesized.logical_id(synthesized.llm.project)]["Properties"]
    spec = json.loads(project["Source"]["BuildSpec"])
    (command,) = spec["phases"]["build"]["commands"]
    assert command.startswith("python3 -m model_download ") and '--token-secret "$HF_TOKEN_SECRET_NAME"' in command
    # Pinned to the resolved commit, and the receipt reaches the waiter as CodeBuild exported variables.
    assert " --pin-commit " in command and spec["env"]["exported-variables"] == list(RECEIPT)
    assert project["Source"]["Type"] == "S3" and project["Environment"]["PrivilegedMode"] is False
    assert project["TimeoutInMinutes"] == 55 and project["Environment"]["ComputeType"] == "BUILD_GENERAL1_LARGE"
    env = {e["Name"]: e["Value"] for e in project["Environment"]["EnvironmentVariables"]}
    assert env["HF_TOKEN_SECRET_NAME"] == "hf/llama-token" and env["MODEL_SHA256"] == LLAMA_SHA
    assert all(e["Type"] == "PLAINTEXT" for e in project["Environment"]["EnvironmentVariables"])  # names, never values


def test_one_provider_polls_every_artifact_for_at_most_an_hour(synthesized: Synthesized) -> None:
    handlers = sorted(
        f["Properties"]["Handler"]
        for f in synthesized.resources("AWS::Lambda::Function").values()
        if f["Properties"].get("Handler", "").startswith("model_download.")
    )
    assert handlers == ["model_download.custom_resource.is_complete", "model_download.custom_resource.on_event"]
    (machine,) = synthesized.resources("AWS::StepFunctions::StateMachine").values()
    definition = _join(machine["Properties"]["DefinitionString"])
    assert '"IntervalSeconds":30' in definition and '"MaxAttempts":112' in definition  # 30 s × 112 = 56 min (build_job)
    assert machine["Properties"]["LoggingConfiguration"]["Level"] == "ALL"
    tokens = {
        json.dumps(r["Properties"]["ServiceToken"]) for r in synthesized.resources("Custom::ModelArtifact").values()
    }
    assert len(tokens) == 1


def test_cdk_nag_has_no_unacknowledged_errors(synthesized: Synthesized) -> None:
    assert nag_errors(synthesized.stack) == []


def test_cfn_lint_finds_no_errors(synthesized: Synthesized) -> None:
    assert cfn_lint_errors(synthesized.template) == []


def test_an_existing_bucket_and_key_are_used_as_given() -> None:
    app = cdk.App()
    stack = cdk.Stack(app, "Existing", env=ENV)
    key = kms.Key.from_key_arn(
        stack, "Key", "arn:aws:kms:us-east-1:123456789012:key/11111111-2222-3333-4444-555555555555"
    )
    bucket = ModelBucket(
        stack,
        "Models",
        props=ModelBucketProps(
            existing_bucket=s3.Bucket.from_bucket_name(stack, "Bucket", "acme-models"),
            existing_key=key,
        ),
    )
    artifact = ModelArtifact(
        stack,
        "Qwen",
        props=ModelArtifactProps(
            model_bucket=bucket,
            name="qwen3-0-6b",
            hf_repo="Qwen/Qwen3-0.6B-GGUF",
            file="Qwen3-0.6B-Q8_0.gguf",
        ),
    )
    template = template_json(stack)
    assert not [r for r in template["Resources"].values() if r["Type"] in ("AWS::S3::Bucket", "AWS::KMS::Key")]
    assert bucket.log_bucket is None and artifact.bucket is bucket.bucket
    statements = [
        st
        for r in template["Resources"].values()
        if r["Type"] == "AWS::IAM::Policy"
        for st in r["Properties"]["PolicyDocument"]["Statement"]
    ]
    resources = {_join(r) for st in statements for r in _as_list(st["Resource"])}
    assert "arn:<AWS::Partition>:s3:::acme-models/models/qwen3-0-6b/*" in resources
    assert key.key_arn in resources


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"name": "Llama_70B"}, "name must be a DNS label"),
        ({"hf_repo": "no-owner"}, "hf_repo must be a Hugging Face repo"),
        ({"sha256": "ABC"}, "sha256 must be 64 lowercase hex"),
        ({"file": "../etc/passwd"}, "file must be a path inside the repo"),
        (
            {"copy_timeout_minutes": 120},
            r"copy_timeout_minutes must be 5\.\.55 \(CloudFormation waits at most one hour",
        ),
        ({"token_secret_name": "a", "existing_token_secret": object()}, "not both"),
    ],
)
def test_artifact_props_are_validated(change: dict[str, Any], message: str) -> None:
    base = {
        "model_bucket": None,
        "name": "llama-70b",
        "hf_repo": "meta-llama/Llama-3.3-70B-Instruct-GGUF",
        "file": "m.gguf",
    }
    with pytest.raises(ValueError, match=message):
        ModelArtifactProps(**{**base, **change}).validate()  # type: ignore[arg-type]


def test_bucket_props_are_validated() -> None:
    with pytest.raises(ValueError, match="bucket_name applies only to a bucket this construct creates"):
        ModelBucketProps(existing_bucket=object(), bucket_name="x").validate()  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="noncurrent_version_expiration_days must be at least 1"):
        ModelBucketProps(noncurrent_version_expiration_days=0).validate()
