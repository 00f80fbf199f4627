"""ModelBucket: the S3 store for model files — KMS-encrypted, versioned, TLS-only, private, access-logged.

Objects live under `models/<name>/<revision>/<file>`; `grant_read(grantee, prefix)` hands a serving role one
model's prefix and nothing else."""

from __future__ import annotations

import re
from dataclasses import dataclass

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from .. import nag

MODELS_PREFIX = "models/"
ACCESS_LOG_PREFIX = "model-bucket/"


@dataclass(frozen=True)
class ModelBucketProps:
    """Defaults: a new bucket encrypted with a new rotating KMS key (S3 bucket keys on), versioned, TLS-only,
    all public access blocked, server access logs into a new log bucket kept 365 days; noncurrent model
    versions expire after 30 days (the 2 newest kept); incomplete multipart uploads are aborted after 1 day
    (the backstop if a copy job dies without aborting its own); RETAIN on stack deletion.

    Bring your own: `existing_bucket` (then `existing_key` names the key that encrypts it, if any; the bucket's
    own settings apply and nothing else is created) or, for a new bucket, `existing_key` and/or
    `existing_log_bucket`."""

    existing_bucket: s3.IBucket | None = None
    existing_key: kms.IKey | None = None
    existing_log_bucket: s3.IBucket | None = None
    bucket_name: str | None = None  # default: CloudFormation-generated
    noncurrent_version_expiration_days: int = 30
    noncurrent_versions_to_retain: int = 2
    abort_incomplete_uploads_after_days: int = 1
    access_log_retention_days: int = 365
    removal_policy: cdk.RemovalPolicy = cdk.RemovalPolicy.RETAIN

    def validate(self) -> None:
        if self.existing_bucket is not None:
            for name in ("existing_log_bucket", "bucket_name"):
                if getattr(self, name) is not None:
                    raise ValueError(f"ModelBucketProps.{name} applies only to a bucket this construct creates, not with existing_bucket")
        for name in ("noncurrent_version_expiration_days", "abort_incomplete_uploads_after_days", "access_log_retention_days"):
            if getattr(self, name) < 1:
                raise ValueError(f"ModelBucketProps.{name} must be at least 1, got {getattr(self, name)}")
        if not 0 <= self.noncurrent_versions_to_retain <= 100:
            raise ValueError(f"ModelBucketProps.noncurrent_versions_to_retain must be 0..100, got {self.noncurrent_versions_to_retain}")


def normalized_prefix(prefix: str) -> str:
    """`models/x/main` → `models/x/main/`; rejects empty, absolute and wildcard prefixes."""
    cleaned = prefix.strip("/")
    if not cleaned or "*" in cleaned or ".." in cleaned.split("/"):
        raise ValueError(f"a model prefix must be a non-empty S3 key prefix without '*' or '..', got {prefix!r}")
    return cleaned + "/"


class ModelBucket(Construct):
    """Attributes: props, bucket (IBucket), key (IKey | None: None for an existing SSE-S3 bucket),
    log_bucket (IBucket | None: None with existing_bucket)."""

    def __init__(self, scope: Construct, id: str, *, props: ModelBucketProps = ModelBucketProps()) -> None:
        super().__init__(scope, id)
        props.validate()
        self.props = props
        self.key: kms.IKey | None = props.existing_key
        self.log_bucket: s3.IBucket | None = None
        if props.existing_bucket is not None:
            self.bucket: s3.IBucket = props.existing_bucket
            return
        if self.key is None:
            self.key = kms.Key(
                self, "Key", enable_key_rotation=True, removal_policy=props.removal_policy,
                description=f"Encrypts the model files of {self.node.path}",
            )
        self.log_bucket = props.existing_log_bucket or self._new_log_bucket()
        self.bucket = s3.Bucket(
            self,
            "Bucket",
            bucket_name=props.bucket_name,
            encryption=s3.BucketEncryption.KMS,
            encryption_key=self.key,
            bucket_key_enabled=True,  # one data key per object instead of a KMS call per request
            versioned=True,
            enforce_ssl=True,
            minimum_tls_version=1.2,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            lifecycle_rules=[
                s3.LifecycleRule(
                    id="noncurrent-model-versions",
                    noncurrent_version_expiration=cdk.Duration.days(props.noncurrent_version_expiration_days),
                    noncurrent_versions_to_retain=props.noncurrent_versions_to_retain or None,
                    abort_incomplete_multipart_upload_after=cdk.Duration.days(props.abort_incomplete_uploads_after_days),
                )
            ],
            removal_policy=props.removal_policy,
        )
        self._log_into(self.log_bucket)

    def _log_into(self, log_bucket: s3.IBucket) -> None:
        """Server access logs with bucket-policy delivery (what S3 recommends, and what BUCKET_OWNER_ENFORCED
        log buckets require), set explicitly so it does not hinge on the app's S3 feature flags."""
        cfn = self.bucket.node.default_child
        assert isinstance(cfn, s3.CfnBucket)
        cfn.logging_configuration = s3.CfnBucket.LoggingConfigurationProperty(
            destination_bucket_name=log_bucket.bucket_name, log_file_prefix=ACCESS_LOG_PREFIX
        )
        # An imported log bucket ignores this (its owner grants logging.s3.amazonaws.com the same).
        log_bucket.add_to_resource_policy(
            iam.PolicyStatement(
                principals=[iam.ServicePrincipal("logging.s3.amazonaws.com")],
                actions=["s3:PutObject"],
                resources=[log_bucket.arn_for_objects(f"{ACCESS_LOG_PREFIX}*")],
                conditions={
                    "ArnLike": {"aws:SourceArn": self.bucket.bucket_arn},
                    "StringEquals": {"aws:SourceAccount": cdk.Stack.of(self).account},
                },
            )
        )

    def _new_log_bucket(self) -> s3.Bucket:
        # S3 delivers access logs only into SSE-S3 buckets (not SSE-KMS).
        bucket = s3.Bucket(
            self,
            "AccessLogs",
            encryption=s3.BucketEncryption.S3_MANAGED,
            enforce_ssl=True,
            minimum_tls_version=1.2,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            lifecycle_rules=[
                s3.LifecycleRule(id="expire-access-logs", expiration=cdk.Duration.days(self.props.access_log_retention_days))
            ],
            removal_policy=self.props.removal_policy,
        )
        nag.acknowledge(
            bucket, "AwsSolutions-S1",
            "This is the access-log bucket of the model bucket; logging it into itself would loop and another log bucket only moves the question",
        )
        return bucket

    # -- grants -----------------------------------------------------------------------------------------

    def grant_read(self, grantee: iam.IGrantable, prefix: str) -> iam.Grant:
        """s3:GetObject on `<prefix>*`, s3:ListBucket limited to that prefix, kms:Decrypt through the key."""
        p = normalized_prefix(prefix)
        grant = iam.Grant.add_to_principal(grantee=grantee, actions=["s3:GetObject"], resource_arns=[self.bucket.arn_for_objects(f"{p}*")])
        self._list(grantee, p)
        if self.key is not None:
            self.key.grant_decrypt(grantee)
        self._acknowledge_prefix(grantee, p, "Read of one model's prefix only: object keys under it (revision, file) vary by design")
        return grant

    def grant_write(self, grantee: iam.IGrantable, prefix: str) -> iam.Grant:
        """What the copy job needs under `<prefix>*`: multipart upload (+ abort), HEAD for the no-op check,
        s3:ListBucket limited to the prefix (so a missing key is a 404), kms:GenerateDataKey + kms:Decrypt."""
        p = normalized_prefix(prefix)
        grant = iam.Grant.add_to_principal(
            grantee=grantee,
            actions=["s3:PutObject", "s3:GetObject", "s3:AbortMultipartUpload", "s3:ListMultipartUploadParts"],
            resource_arns=[self.bucket.arn_for_objects(f"{p}*")],
        )
        self._list(grantee, p)
        if self.key is not None:
            self.key.grant(grantee, "kms:GenerateDataKey", "kms:Decrypt")
        self._acknowledge_prefix(grantee, p, "The copy job writes under one model's prefix only: object keys under it (revision, file) vary by design")
        return grant

    @staticmethod
    def _acknowledge_prefix(grantee: iam.IGrantable, prefix: str, reason: str) -> None:
        """The `<bucket>/<prefix>*` wildcard is the point of a prefix grant: acknowledge exactly that finding."""
        principal = grantee.grant_principal
        if isinstance(principal, Construct):
            pattern = rf"Resource::(<[^>]+\.Arn>|arn:[^*]+)/{re.escape(prefix)}\*"
            nag.acknowledge_wildcards(principal, {pattern: reason})

    def _list(self, grantee: iam.IGrantable, prefix: str) -> None:
        grantee.grant_principal.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["s3:ListBucket"],
                resources=[self.bucket.bucket_arn],
                conditions={"StringLike": {"s3:prefix": [f"{prefix}*"]}},
            )
        )
