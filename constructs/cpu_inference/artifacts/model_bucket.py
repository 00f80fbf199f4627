"""ModelBucket: the S3 store for model files — KMS-encrypted, versioned, TLS-only, private, access-logged.

Objects live under `models/<name>/<revision>/<file>`; `grant_read(grantee, prefix)` hands a serving role one
model's prefix and nothing else.

A failed FIRST deploy (review artifacts.md #2). CloudFormation rolls a failed create back by deleting what it
created, except `Retain` resources ("If resources are retained during rollback, they interfere with retries of the
stack operation" — AWS, RetainExceptOnCreate announcement, 2023-07); `RetainExceptOnCreate` is deleted then, and
"For Amazon S3 buckets, you must delete all objects in the bucket for deletion to succeed" (DeletionPolicy
attribute doc) — a non-empty bucket ends the rollback in ROLLBACK_FAILED, which `cdk deploy` answers by deleting
the stack first, and that delete fails the same way. So:
- bucket and key: `RetainExceptOnCreate` while no copy job of their own stack writes into the bucket (nothing can
  be in it when that stack's create rolls back); `Retain` as soon as one does (a failed copy may have written GBs:
  they are kept, and the key that encrypts them with them). `grant_write` decides.
- the access-log bucket: always `Retain` — the create's own requests are logged and delivery is best effort, so it
  is not provably empty.
- a fixed `bucket_name` with a copy job in the same stack is refused: the retained bucket would keep the name and
  every retry would fail with "already exists". Create the ModelBucket in a stack of its own (its create copies
  nothing, so it never strands a name) and pass it to the stacks that copy into it."""

from __future__ import annotations

import re
from dataclasses import dataclass

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from cpu_inference._internal import nag

MODELS_PREFIX = "models/"
ACCESS_LOG_PREFIX = "model-bucket/"


@dataclass(frozen=True)
class ModelBucketProps:
    """Defaults: a new bucket encrypted with a new rotating KMS key (S3 bucket keys on), versioned, TLS-only,
    all public access blocked, server access logs into a new log bucket kept 365 days; noncurrent model
    versions expire after 30 days (the 2 newest kept); incomplete multipart uploads are aborted after 1 day
    (the backstop if a copy job dies without aborting its own); retained on stack deletion and on updates
    (removal_policy RETAIN; see the module docstring for what a failed first create does).
    removal_policy: RETAIN (default) or DESTROY — DESTROY only with auto_delete_objects=True (CDK's auto-delete
    custom resource empties the versioned bucket and its log bucket first: CloudFormation deletes only an empty
    bucket); every object version is then deleted with the stack.

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
    auto_delete_objects: bool = False

    def validate(self) -> None:
        if self.existing_bucket is not None:
            for name in ("existing_log_bucket", "bucket_name"):
                if getattr(self, name) is not None:
                    raise ValueError(
                        f"ModelBucketProps.{name} applies only to a bucket this construct creates, not with existing_bucket"
                    )
            if self.auto_delete_objects:
                raise ValueError(
                    "ModelBucketProps.auto_delete_objects applies only to a bucket this construct creates, not with existing_bucket"
                )
        if self.removal_policy not in (cdk.RemovalPolicy.RETAIN, cdk.RemovalPolicy.DESTROY):
            raise ValueError(
                f"ModelBucketProps.removal_policy must be RETAIN (default; RetainExceptOnCreate is chosen by the construct "
                f"where it is safe) or DESTROY, got {self.removal_policy}"
            )
        if self.removal_policy == cdk.RemovalPolicy.DESTROY and not self.auto_delete_objects:
            raise ValueError(
                "ModelBucketProps.removal_policy=DESTROY needs auto_delete_objects=True: the bucket is versioned and "
                "CloudFormation deletes only an empty bucket, so the stack's deletion would end in DELETE_FAILED (or keep RETAIN)"
            )
        if self.auto_delete_objects and self.removal_policy != cdk.RemovalPolicy.DESTROY:
            raise ValueError("ModelBucketProps.auto_delete_objects=True applies only with removal_policy=DESTROY")
        for name in (
            "noncurrent_version_expiration_days",
            "abort_incomplete_uploads_after_days",
            "access_log_retention_days",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"ModelBucketProps.{name} must be at least 1, got {getattr(self, name)}")
        if not 0 <= self.noncurrent_versions_to_retain <= 100:
            raise ValueError(
                f"ModelBucketProps.noncurrent_versions_to_retain must be 0..100, got {self.noncurrent_versions_to_retain}"
            )


def _deployed_with(stack: cdk.Stack) -> cdk.Stack:
    """The top-level stack whose CloudFormation operation creates `stack` (a nested stack rolls back with it)."""
    while stack.nested_stack_parent is not None:
        stack = stack.nested_stack_parent
    return stack


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
        self._copied_by_own_stack = False
        destroy = props.removal_policy == cdk.RemovalPolicy.DESTROY
        if props.existing_bucket is not None:
            self.bucket: s3.IBucket = props.existing_bucket
            return
        if self.key is None:
            self.key = kms.Key(
                self,
                "Key",
                enable_key_rotation=True,
                removal_policy=props.removal_policy,
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
                    abort_incomplete_multipart_upload_after=cdk.Duration.days(
                        props.abort_incomplete_uploads_after_days
                    ),
                )
            ],
            removal_policy=props.removal_policy,
            auto_delete_objects=destroy,
        )
        self._log_into(self.log_bucket)
        if not destroy:
            self._retain(on_create=False)  # until a copy job of this stack writes into the bucket (grant_write)

    def _owned(self) -> list[cdk.Resource]:
        """The resources whose lifetime follows the bucket's data: the bucket and the key this construct created."""
        owned: list[cdk.Resource] = [self.bucket] if isinstance(self.bucket, s3.Bucket) else []
        if isinstance(self.key, kms.Key) and self.props.existing_key is None:
            owned.append(self.key)
        return owned

    def _retain(self, *, on_create: bool) -> None:
        """RETAIN (DeletionPolicy Retain) or RETAIN_ON_UPDATE_OR_DELETE (RetainExceptOnCreate; UpdateReplacePolicy
        Retain either way) on the bucket and its key."""
        policy = cdk.RemovalPolicy.RETAIN if on_create else cdk.RemovalPolicy.RETAIN_ON_UPDATE_OR_DELETE
        for resource in self._owned():
            resource.apply_removal_policy(policy)

    def _note_writer(self, grantee: iam.IGrantable) -> None:
        """A writer deployed by the bucket's own stack may fill it during that stack's first create: keep the
        bucket and key through a rollback, and refuse a fixed name that the kept bucket would strand."""
        if self.props.existing_bucket is not None or self.props.removal_policy != cdk.RemovalPolicy.RETAIN:
            return
        principal = grantee.grant_principal
        writer_stack = _deployed_with(cdk.Stack.of(principal)) if isinstance(principal, Construct) else None
        if writer_stack is not None and writer_stack is not _deployed_with(cdk.Stack.of(self)):
            return  # another stack's operation: this stack's create never holds its data
        if self.props.bucket_name is not None:
            where = principal.node.path if isinstance(principal, Construct) else str(principal)
            raise ValueError(
                f"ModelBucketProps.bucket_name {self.props.bucket_name!r}: {where} writes into the bucket from the bucket's own "
                "stack; if that stack's first deploy fails after a copy wrote, CloudFormation keeps the bucket and every retry "
                "fails with 'already exists'. Create the ModelBucket in a stack of its own and pass it to this stack, or leave "
                "bucket_name unset"
            )
        if not self._copied_by_own_stack:
            self._copied_by_own_stack = True
            self._retain(on_create=True)

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
                s3.LifecycleRule(
                    id="expire-access-logs", expiration=cdk.Duration.days(self.props.access_log_retention_days)
                )
            ],
            # RETAIN even on a failed create: access logs of the create's own requests may already be in it.
            removal_policy=self.props.removal_policy,
            auto_delete_objects=self.props.removal_policy == cdk.RemovalPolicy.DESTROY,
        )
        nag.acknowledge(
            bucket,
            "AwsSolutions-S1",
            "This is the access-log bucket of the model bucket; logging it into itself would loop and another log bucket only moves the question",
        )
        return bucket

    # -- grants -----------------------------------------------------------------------------------------

    def grant_read(self, grantee: iam.IGrantable, prefix: str) -> iam.Grant:
        """s3:GetObject on `<prefix>*`, s3:ListBucket limited to that prefix, kms:Decrypt through the key."""
        p = normalized_prefix(prefix)
        grant = iam.Grant.add_to_principal(
            grantee=grantee, actions=["s3:GetObject"], resource_arns=[self.bucket.arn_for_objects(f"{p}*")]
        )
        self._list(grantee, p)
        if self.key is not None:
            self.key.grant_decrypt(grantee)
        self._acknowledge_prefix(
            grantee, p, "Read of one model's prefix only: object keys under it (revision, file) vary by design"
        )
        return grant

    def grant_write(self, grantee: iam.IGrantable, prefix: str) -> iam.Grant:
        """What the copy job needs under `<prefix>*`: multipart upload (+ abort), HEAD for the no-op check,
        s3:ListBucket limited to the prefix (so a missing key is a 404), kms:GenerateDataKey + kms:Decrypt.
        A grantee of the bucket's own stack makes the bucket and key Retain even on a failed create (module doc).
        Object actions: exactly what model_download calls (PutObject, Create/UploadPart/CompleteMultipartUpload →
        s3:PutObject; HeadObject → s3:GetObject; AbortMultipartUpload) — no ListParts, so no
        s3:ListMultipartUploadParts (Service Authorization Reference, Amazon S3)."""
        p = normalized_prefix(prefix)
        self._note_writer(grantee)
        grant = iam.Grant.add_to_principal(
            grantee=grantee,
            actions=["s3:PutObject", "s3:GetObject", "s3:AbortMultipartUpload"],
            resource_arns=[self.bucket.arn_for_objects(f"{p}*")],
        )
        self._list(grantee, p)
        if self.key is not None:
            self.key.grant(grantee, "kms:GenerateDataKey", "kms:Decrypt")
        self._acknowledge_prefix(
            grantee,
            p,
            "The copy job writes under one model's prefix only: object keys under it (revision, file) vary by design",
        )
        return grant

    def _acknowledge_prefix(self, grantee: iam.IGrantable, prefix: str, reason: str) -> None:
        """The `<bucket>/<prefix>*` wildcard is the point of a prefix grant: acknowledge exactly that finding."""
        principal = grantee.grant_principal
        if not isinstance(principal, Construct):
            return
        pattern = rf"Resource::(<[^>]+\.Arn>|arn:[^*]+)/{re.escape(prefix)}\*"
        nag.acknowledge_wildcards(principal, {pattern: reason})
        own, theirs = cdk.Stack.of(self), cdk.Stack.of(principal)
        if isinstance(self.bucket, s3.Bucket) and theirs is not own and not (own.nested or theirs.nested):
            # A ModelBucket in a stack of its own: the grantee's policy reads the ARN through CDK's export, which
            # cdk-nag names `<stack>:ExportsOutput…` — only known once the reference is resolved; export_value
            # gives the same export CDK makes for the reference (Stack.exportValue).
            imported = theirs.resolve(own.export_value(self.bucket.bucket_arn))
            nag.acknowledge(principal, f"AwsSolutions-IAM5[Resource::{nag.flatten(imported)}/{prefix}*]", reason)

    def _list(self, grantee: iam.IGrantable, prefix: str) -> None:
        grantee.grant_principal.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["s3:ListBucket"],
                resources=[self.bucket.bucket_arn],
                conditions={"StringLike": {"s3:prefix": [f"{prefix}*"]}},
            )
        )
