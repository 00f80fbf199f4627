"""ModelArtifact: one model file — or, for vLLM, a repo's safetensors snapshot — copied from the Hugging Face Hub
into the ModelBucket at deploy time.

`hf_repo/file@revision` → `s3://<bucket>/models/<name>/<commit>/<file>`, by a CodeBuild job running the
`model_download` package (parallel ranged GETs streamed into a multipart upload, sha256-verified before the
upload completes, aborted on any failure), driven by a custom resource whose isComplete waiter fails the
deployment when the job fails. Changing the repo, file, revision or sha256 changes the custom resource's
properties and re-runs the job (the token secret, Hub endpoint and concurrency are the project's environment
only: changing them re-runs nothing); a run that finds the same object (same sha256) in place copies nothing.

Pinned at the first deploy: the job resolves the revision (a branch such as `main`) to the commit the Hub
reports and writes to a key naming that commit, which is never overwritten. The custom resource returns the
commit, sha256 and key as attributes, and every consumer (SageMaker's model data, the pods' fetch URI and
expected sha256) reads those attributes — CloudFormation does not re-run an unchanged custom resource, so a
scaled-out instance or a new pod gets exactly the bytes the running ones got, even after `main` moved or the
job was re-run by hand. A changed revision lands at a new key: a new SageMaker Model (rolling update), a new
pod spec.

Why CodeBuild: a 40 GB 70B Q4 file does not fit Lambda's 15 minutes or its 10 GB of ephemeral storage; CodeBuild
runs up to hours on managed images (no Docker at synth, no VPC or cluster to provide), bills per minute only
while copying, logs to CloudWatch, and reports its state through BatchGetBuilds — exactly what an isComplete
waiter polls. The project's environment holds the same inputs, so a copy longer than CloudFormation's one-hour
custom-resource limit is seeded by the project itself: `cdk deploy --no-rollback` (a rollback would delete the
project or restore its old inputs), `aws codebuild start-build --timeout-in-minutes-override …`, `cdk deploy
--no-rollback` again (README, "A copy longer than the hour").

Snapshot (`snapshot=True`, a vLLM model): every file vLLM loads from the repo (safetensors shards + index, config,
generation config, tokenizer files — model_download.snapshot_select) lands at `models/<name>/<commit>/`, each
verified like the single file, and a manifest (`cpu-inference.manifest`, sorted `path sha256 size` lines) is
written last: `sha256` is the manifest's digest, `s3_uri` the prefix (ends in '/').
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import aws_cdk as cdk
from aws_cdk import aws_codebuild as codebuild
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct

from cpu_inference.artifacts.copy_job import acknowledge_copy_job, copy_job_project, copy_job_resource, copy_job_role
from cpu_inference.artifacts.copy_provider import ModelCopyProvider
from cpu_inference.artifacts.model_bucket import MODELS_PREFIX, ModelBucket
from model_download.build_job import MAX_COPY_TIMEOUT_MINUTES
from model_download.buildspec import BUILD_SPEC, SNAPSHOT_BUILD_SPEC
from model_download.catalog import NAME, REPO, REVISION, SHA256
from model_download.custom_resource import IDENTITY_PROPERTIES, build_environment
from model_download.hub import DEFAULT_ENDPOINT, DEFAULT_REVISION
from model_download.snapshot import MANIFEST_NAME
from model_download.snapshot_resource import IDENTITY_PROPERTIES as SNAPSHOT_IDENTITY_PROPERTIES
from model_download.snapshot_resource import SNAPSHOT_LAYOUT
from model_download.snapshot_resource import build_environment as snapshot_environment

# CodeBuild CreateProject `description`: botocore codebuild ProjectDescription, max 255 characters.
PROJECT_DESCRIPTION_MAX = 255

# A complete secret ARN, as DescribeSecret returns it: `…:secret:<name>-<6 random characters>` (Secrets Manager
# user guide, https://docs.aws.amazon.com/secretsmanager/latest/userguide/troubleshoot.html#ARN_secretnamehyphen,
# linked from botocore's SecretId doc). GetSecretValue's SecretId: "To retrieve a secret from another
# account, you must use an ARN" (botocore secretsmanager) — so the job is handed the ARN itself.
SECRET_ARN = re.compile(r"^arn:aws[a-z-]*:secretsmanager:[a-z0-9-]+:\d{12}:secret:.+-[A-Za-z0-9]{6}$")


def project_description(text: str) -> str:
    """`text` cut to CodeBuild's limit (a repo, file path and 128-character revision can exceed it)."""
    return text if len(text) <= PROJECT_DESCRIPTION_MAX else text[: PROJECT_DESCRIPTION_MAX - 1] + "…"


def check_token_secret(where: str, value: str | None) -> None:
    """A token secret is a name or a complete ARN (a partial ARN would make the grant and the job disagree)."""
    if (
        value is not None
        and not cdk.Token.is_unresolved(value)
        and value.startswith("arn:")
        and not SECRET_ARN.match(value)
    ):
        raise ValueError(
            f"{where} {value!r}: give the secret's name, or its complete ARN (arn:…:secretsmanager:<region>:<account>:"
            "secret:<name>-<6 characters>, as `aws secretsmanager describe-secret` prints it)"
        )


def import_token_secret(scope: Construct, id: str, name_or_arn: str) -> secretsmanager.ISecret:
    """The token secret by name or by complete ARN."""
    if name_or_arn.startswith("arn:"):
        return secretsmanager.Secret.from_secret_complete_arn(scope, id, name_or_arn)
    return secretsmanager.Secret.from_secret_name_v2(scope, id, name_or_arn)


def grant_token_secret(secret: secretsmanager.ISecret, key: kms.IKey | None, grantee: iam.IGrantable) -> None:
    """GetSecretValue/DescribeSecret on the secret and, with `key` (the customer-managed KMS key that encrypts it),
    kms:Decrypt on that key through Secrets Manager only — the condition CDK's SecretBase.grantRead uses
    (kms:ViaService secretsmanager.<region>.amazonaws.com; KMS developer guide, services-secrets-manager). Stated
    on the role, so it holds for an imported or other-account key too (whose key policy must admit the role)."""
    secret.grant_read(grantee)
    if key is not None:
        grantee.grant_principal.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["kms:Decrypt"],
                resources=[key.key_arn],
                conditions={
                    "StringEquals": {"kms:ViaService": f"secretsmanager.{cdk.Stack.of(secret).region}.amazonaws.com"}
                },
            )
        )


@dataclass(frozen=True)
class ModelArtifactProps:
    """One model file (`file`, a GGUF for llama.cpp) or a repo's safetensors snapshot (`snapshot=True`, for vLLM)
    to copy into `model_bucket`. Give exactly one: an explicit flag rather than "no file means the whole repo", so
    a forgotten `file` is an error, never a silent multi-file copy of another format.

    name: the model's name (DNS label); the object lands at `models/<name>/<commit>/<file>` (commit: what the
    Hub resolves `revision` to at the first deploy) and the copy job can write nothing outside `models/<name>/`.
    snapshot: copy what vLLM loads from the repo (safetensors shards + index, config.json, generation_config.json,
    tokenizer files) to `models/<name>/<commit>/`, sealed by a manifest; a repo without safetensors is refused.
    sha256: expected hex digest of `file` (default: the sha256 the Hub reports for the LFS file; the copy is
    verified either way). A snapshot is pinned by `revision=<commit sha>` instead (each file is checked against
    the Hub's listing at that commit).
    token_secret_name / existing_token_secret: a Secrets Manager secret holding a Hugging Face token (the raw
    token, or JSON with a `token` key) for gated models; the job reads it at run time, it never enters the template.
    token_secret_name is a name or a complete ARN (required for a secret in another account; the job then reads
    it by ARN). token_secret_key: the customer-managed KMS key that encrypts that secret, if any — the job role
    gets kms:Decrypt on it through Secrets Manager only (a secret in another account needs a CMK whose key policy,
    like the secret's resource policy, admits the job role). An existing_token_secret carries its own key
    (`Secret.from_secret_attributes(..., encryption_key=...)`).
    copy_timeout_minutes: the job's timeout, 5..55 (default 55) — inside CloudFormation's one-hour ceiling for a
    custom resource, so a slow copy fails with the job's own TIMED_OUT rather than a bare CloudFormation timeout.
    At 55 minutes a 40 GB file needs ≥ 13 MB/s; a LARGE CodeBuild host with 8 parallel ranges does far more.
    compute_type: default LARGE (8 vCPU, 15 GB): network bandwidth grows with the host size, and the job hashes
    every byte twice (per part for S3, whole file for the check). build_image: default Amazon Linux 2023 x86_64
    standard 5.0. concurrency: parallel ranged GETs (default 8; memory ≈ (concurrency + 2) × 16 MiB).
    """

    model_bucket: ModelBucket
    name: str
    hf_repo: str
    file: str | None = None
    snapshot: bool = False
    revision: str = DEFAULT_REVISION
    sha256: str | None = None
    token_secret_name: str | None = None
    existing_token_secret: secretsmanager.ISecret | None = None
    token_secret_key: kms.IKey | None = None
    hf_endpoint: str = DEFAULT_ENDPOINT
    copy_timeout_minutes: int = 55
    compute_type: codebuild.ComputeType = codebuild.ComputeType.LARGE
    build_image: codebuild.IBuildImage | None = None
    concurrency: int = 8
    log_retention: logs.RetentionDays = logs.RetentionDays.THREE_MONTHS

    def validate(self) -> None:
        def check(field: str, value: str | None, pattern: re.Pattern[str], what: str) -> None:
            if value is not None and not cdk.Token.is_unresolved(value) and not pattern.match(value):
                raise ValueError(f"ModelArtifactProps.{field} must be {what}, got {value!r}")

        check("name", self.name, NAME, "a DNS label (lowercase letters, digits, '-'; at most 63)")
        check("hf_repo", self.hf_repo, REPO, "a Hugging Face repo as owner/name")
        check("revision", self.revision, REVISION, "a branch, tag or commit (letters, digits, . _ - /)")
        check("sha256", self.sha256, SHA256, "64 lowercase hex characters")
        if ".." in self.revision.split("/"):
            raise ValueError(f"ModelArtifactProps.revision must not contain '..', got {self.revision!r}")
        if self.snapshot and self.file is not None:
            raise ValueError(
                "ModelArtifactProps: give file (one GGUF, llama.cpp) or snapshot=True (the repo's safetensors, vLLM), not both"
            )
        if self.snapshot and self.sha256 is not None:
            raise ValueError(
                "ModelArtifactProps.sha256 pins one file; pin a snapshot with revision=<full commit sha> instead"
            )
        if not self.snapshot and self.file is None:
            raise ValueError(
                "ModelArtifactProps: give file (one GGUF, llama.cpp) or snapshot=True (the repo's safetensors, vLLM)"
            )
        if self.file is not None and (
            not self.file or self.file.startswith("/") or ".." in self.file.split("/") or "*" in self.file
        ):
            raise ValueError(
                f"ModelArtifactProps.file must be a path inside the repo (no leading '/', '..' or '*'), got {self.file!r}"
            )
        if self.token_secret_name is not None and self.existing_token_secret is not None:
            raise ValueError("ModelArtifactProps: give token_secret_name or existing_token_secret, not both")
        check_token_secret("ModelArtifactProps.token_secret_name", self.token_secret_name)
        if self.token_secret_key is not None and not self.token_secret_name:
            raise ValueError(
                "ModelArtifactProps.token_secret_key applies only with token_secret_name (an existing_token_secret "
                "carries its own encryption_key)"
            )
        if not self.hf_endpoint.startswith(("https://", "http://")):
            raise ValueError(f"ModelArtifactProps.hf_endpoint must be an http(s) URL, got {self.hf_endpoint!r}")
        if not 5 <= self.copy_timeout_minutes <= MAX_COPY_TIMEOUT_MINUTES:
            raise ValueError(
                f"ModelArtifactProps.copy_timeout_minutes must be 5..{MAX_COPY_TIMEOUT_MINUTES} (CloudFormation waits at most one hour "
                f"for a custom resource and the deployment stops the job before that; pre-seed bigger copies with `cpu-inference download`), got {self.copy_timeout_minutes}"
            )
        if not 1 <= self.concurrency <= 64:
            raise ValueError(f"ModelArtifactProps.concurrency must be 1..64, got {self.concurrency}")

    @property
    def model_prefix(self) -> str:
        """`models/<name>/` — every commit of this model lands under it."""
        return f"{MODELS_PREFIX}{self.name}/"


class ModelArtifact(Construct):
    """Attributes: props, model_bucket, bucket (IBucket), resource (the custom resource — depend on it to start
    serving only after the copy), the copy's result as the resource's attributes (tokens): commit (the commit
    the revision resolved to), sha256 (the verified digest; the literal when props pin it), key
    (`models/<name>/<commit>/<file>`), prefix (`models/<name>/<commit>/`), s3_uri, s3_prefix_uri (SageMaker's
    model data); for a snapshot (is_snapshot) key = prefix, s3_uri = s3_prefix_uri (ends in '/'), sha256 = the
    manifest's digest, manifest_key (`<prefix>cpu-inference.manifest`) and file_count (tokens; None for a file);
    size_bytes (token: the file's bytes, or every snapshot file's);
    model_prefix (`models/<name>/`, every commit), token_secret (ISecret | None), role (the job's
    role), log_group, project (the CodeBuild copy job), provider (the stack's ModelCopyProvider)."""

    def __init__(self, scope: Construct, id: str, *, props: ModelArtifactProps) -> None:
        super().__init__(scope, id)
        props.validate()
        self.props = props
        self.model_bucket = props.model_bucket
        self.bucket = props.model_bucket.bucket
        self.model_prefix = props.model_prefix
        self.provider = ModelCopyProvider.of(self)

        self.token_secret: secretsmanager.ISecret | None = props.existing_token_secret
        if self.token_secret is None and props.token_secret_name:
            self.token_secret = import_token_secret(self, "TokenSecret", props.token_secret_name)

        self.role = copy_job_role(
            self,
            f"Model copy job for {props.name}: writes only {MODELS_PREFIX}{props.name}/ of the model bucket",
        )
        props.model_bucket.grant_write(self.role, f"{MODELS_PREFIX}{props.name}/")
        if self.token_secret is not None:
            grant_token_secret(self.token_secret, props.token_secret_key, self.role)

        self.is_snapshot = props.snapshot
        # A file artifact's properties stay exactly what they were (a new property would re-run every existing copy).
        what = {"Snapshot": SNAPSHOT_LAYOUT} if props.snapshot else {"File": props.file, "Sha256": props.sha256 or ""}
        properties = {
            "Bucket": self.bucket.bucket_name,
            "KeyPrefix": self.model_prefix.rstrip("/"),
            "HfRepo": props.hf_repo,
            **what,
            "Revision": props.revision,
            # What the job passes to GetSecretValue: the name or ARN as given (an ARN reaches another account).
            "TokenSecretName": props.token_secret_name
            or (self.token_secret.secret_name if self.token_secret is not None else ""),
            "HfEndpoint": props.hf_endpoint,
            "Concurrency": str(props.concurrency),
        }
        source = (
            f"hf://{props.hf_repo}@{props.revision} (safetensors snapshot)"
            if props.snapshot
            else f"hf://{props.hf_repo}/{props.file}@{props.revision}"
        )
        self.log_group, self.project = copy_job_project(
            self,
            provider=self.provider,
            role=self.role,
            description=project_description(f"Copies {source} into the model bucket"),
            build_spec=SNAPSHOT_BUILD_SPEC if props.snapshot else BUILD_SPEC,
            environment=(snapshot_environment if props.snapshot else build_environment)(properties),
            settings=props,
        )

        # Identity only: a change of token secret, endpoint or concurrency updates the project, not the copy.
        self.resource = copy_job_resource(
            self,
            provider=self.provider,
            project=self.project,
            role=self.role,
            resource_type="Custom::ModelArtifact",
            properties=properties,
            identity=SNAPSHOT_IDENTITY_PROPERTIES if props.snapshot else IDENTITY_PROPERTIES,
        )

        # Where the copy landed, as the job reported it (model_download.custom_resource.resolved). Only the commit
        # is a token: the file name stays a literal path segment that consumers read (MODEL_PATH, the pod's file).
        self.commit = self.resource.get_att_string("Commit")
        self.sha256 = props.sha256 or self.resource.get_att_string("Sha256")
        self.prefix = f"{self.model_prefix}{self.commit}/"
        self.key = self.prefix if props.snapshot else f"{self.prefix}{props.file}"
        self.s3_uri = f"s3://{self.bucket.bucket_name}/{self.key}"
        self.s3_prefix_uri = f"s3://{self.bucket.bucket_name}/{self.prefix}"
        self.manifest_key = f"{self.prefix}{MANIFEST_NAME}" if props.snapshot else None
        self.file_count = self.resource.get_att_string("Files") if props.snapshot else None
        self.size_bytes = self.resource.get_att_string("Size")  # of the file, or of every file of a snapshot
        acknowledge_copy_job(self.role, self.project, encrypted="the model object is encrypted by the bucket's key")

    def grant_read(self, grantee: iam.IGrantable) -> iam.Grant:
        """Read this model's objects (`models/<name>/`, every commit) and nothing else of the bucket: during a
        rolling update the old fleet — a replaced SageMaker instance, a restarted pod of the old ReplicaSet —
        still reads the previous commit's key after the policy moved on."""
        return self.model_bucket.grant_read(grantee, self.model_prefix)
