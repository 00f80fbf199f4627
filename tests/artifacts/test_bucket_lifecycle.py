"""ModelBucket lifecycle (review artifacts.md #2, #18, #19): what a failed FIRST deploy leaves behind and whether
the retry works, DESTROY on a versioned bucket, and the copy job's object actions derived from the code it runs.

#2 is proved in two steps: the synthesized DeletionPolicy/UpdateReplacePolicy values, then a small model of
CloudFormation's create rollback and of the CDK CLI's retry, run over those templates (sources on the model)."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import botocore.session
import pytest
from botocore import xform_name

from cpu_inference.artifacts import (
    ModelArtifact,
    ModelArtifactProps,
    ModelBucket,
    ModelBucketProps,
    ModelCatalog,
    ModelCatalogProps,
)
from model_download.catalog import CatalogEntry
from tests.support.cdk import apply_nag, synth, template_json

pytestmark = pytest.mark.synth

ENV = cdk.Environment(account="123456789012", region="us-east-1")
LAMBDA = Path(__file__).resolve().parents[2] / "lambda" / "model_download"
COPY_TYPES = ("Custom::ModelArtifact", "Custom::ModelCatalog")


def _artifact(stack: cdk.Stack, bucket: ModelBucket, id_: str = "Slm") -> ModelArtifact:
    return ModelArtifact(
        stack,
        id_,
        props=ModelArtifactProps(
            model_bucket=bucket,
            name="smollm2",
            hf_repo="bartowski/SmolLM2-1.7B-Instruct-GGUF",
            file="SmolLM2-1.7B-Instruct-Q4_K_M.gguf",
        ),
    )


def _catalog(stack: cdk.Stack, bucket: ModelBucket) -> ModelCatalog:
    return ModelCatalog(
        stack,
        "Farm",
        props=ModelCatalogProps(
            model_bucket=bucket,
            entries=(CatalogEntry(name="m-0001", hf_repo="acme/classifier-GGUF", file="classifier-Q4_K_M.gguf"),),
        ),
    )


def _policies(template: dict[str, Any], type_: str) -> list[tuple[str | None, str | None]]:
    return [
        (r.get("DeletionPolicy"), r.get("UpdateReplacePolicy"))
        for r in template["Resources"].values()
        if r["Type"] == type_
    ]


def _by_logical_id(stack: cdk.Stack, construct: Any) -> str:
    return stack.get_logical_id(construct.node.default_child)


# -- the synthesized policies ---------------------------------------------------------------------------


def test_a_bucket_copied_into_by_its_own_stack_is_retained_even_on_a_failed_create() -> None:
    """The app's layout (bucket and copies in one stack): a failed copy may already have written GBs, so the bucket
    and the key that encrypts them are Retain — never RetainExceptOnCreate, whose delete of a non-empty bucket fails
    the rollback (see the model below). The access-log bucket is Retain in every layout."""
    for add in (_artifact, _catalog):
        app = cdk.App()
        stack = cdk.Stack(app, "Models", env=ENV)
        bucket = ModelBucket(stack, "ModelBucket")
        add(stack, bucket)
        template = template_json(stack)
        assert _policies(template, "AWS::KMS::Key") == [("Retain", "Retain")]
        assert sorted(_policies(template, "AWS::S3::Bucket")) == [("Retain", "Retain"), ("Retain", "Retain")]


def test_a_bucket_in_a_stack_without_copies_is_deleted_only_if_its_own_create_rolls_back() -> None:
    """The bucket's own stack writes nothing into it while it is created: RetainExceptOnCreate (CDK's
    RETAIN_ON_UPDATE_OR_DELETE) for the bucket and its key, so a failed first create leaves nothing that clashes
    with the retry; every later operation (update, delete) retains them as before."""
    app = cdk.App()
    store = cdk.Stack(app, "ModelStore", env=ENV)
    copies = cdk.Stack(app, "Models", env=ENV)
    bucket = ModelBucket(store, "ModelBucket", props=ModelBucketProps(bucket_name="acme-models-us-east-1"))
    _artifact(copies, bucket)
    _catalog(copies, bucket)
    synth(app)
    template = template_json(store)
    assert _policies(template, "AWS::KMS::Key") == [("RetainExceptOnCreate", "Retain")]
    buckets = {
        k: (r.get("DeletionPolicy"), r.get("UpdateReplacePolicy"))
        for k, r in template["Resources"].items()
        if r["Type"] == "AWS::S3::Bucket"
    }
    assert buckets == {
        _by_logical_id(store, bucket.bucket): ("RetainExceptOnCreate", "Retain"),
        _by_logical_id(store, bucket.log_bucket): ("Retain", "Retain"),  # access logs may already be delivered
    }
    assert not any(r["Type"] in COPY_TYPES for r in template["Resources"].values())


def test_a_fixed_bucket_name_with_a_copy_in_the_same_stack_is_refused_at_synth() -> None:
    for add in (_artifact, _catalog):
        app = cdk.App()
        stack = cdk.Stack(app, "Models", env=ENV)
        bucket = ModelBucket(stack, "ModelBucket", props=ModelBucketProps(bucket_name="acme-models-us-east-1"))
        with pytest.raises(
            ValueError, match=r"ModelBucketProps.bucket_name 'acme-models-us-east-1'.*every retry.*stack of its own"
        ):
            add(stack, bucket)


def test_an_existing_bucket_is_left_alone() -> None:
    from aws_cdk import aws_s3 as s3

    app = cdk.App()
    stack = cdk.Stack(app, "Models", env=ENV)
    bucket = ModelBucket(
        stack,
        "ModelBucket",
        props=ModelBucketProps(existing_bucket=s3.Bucket.from_bucket_name(stack, "B", "acme-models")),
    )
    _artifact(stack, bucket)
    template = template_json(stack)
    assert not _policies(template, "AWS::S3::Bucket") and not _policies(template, "AWS::KMS::Key")


# -- a model of CloudFormation's create rollback and of the CDK CLI's retry -------------------------------
#
# Sources (the rules the model encodes, one per line of `rollback_create` / `retry`):
# - DeletionPolicy attribute (https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-attribute-deletionpolicy.html):
#   Retain keeps the resource; RetainExceptOnCreate: "If the stack operation that created the resource is rolled
#   back, CloudFormation deletes the resource"; no policy means Delete; "For Amazon S3 buckets, you must delete all
#   objects in the bucket for deletion to succeed".
# - RetainExceptOnCreate announcement (https://aws.amazon.com/about-aws/whats-new/2023/07/aws-cloudformation-deletion-policies-dev-test-cycle/):
#   "If resources are retained during rollback, they interfere with retries of the stack operation."
# - Stack status ROLLBACK_FAILED: a resource could not be deleted while a failed create rolled back
#   (https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/view-stack-events.html#cfn-console-view-stack-data-resources-status-codes).
# - aws-cdk CLI `StackStatus.isCreationFailure` (ROLLBACK_COMPLETE or ROLLBACK_FAILED): `cdk deploy` deletes such a
#   stack, then creates it again — the delete meets the same non-empty bucket, the create any retained fixed name.
# - A KMS key's delete is ScheduleKeyDeletion, which never fails for a key in use: objects of a retained bucket
#   encrypted by a deleted key become unreadable (lost).


@dataclass(frozen=True)
class Res:
    logical_id: str
    type: str
    deletion_policy: str
    fixed_name: str | None
    holds_data: bool  # worst case at the moment the create rolls back


@dataclass(frozen=True)
class Rollback:
    status: str
    orphans: tuple[Res, ...]
    lost: tuple[Res, ...]
    stuck: tuple[Res, ...]


def resources_at_rollback(template: dict[str, Any]) -> list[Res]:
    """Worst case per resource: the model bucket holds data iff a copy of the same template writes into it (a
    failed copy may have written GBs; another artifact may have succeeded); a log bucket holds the access logs of
    the create's own requests (delivery is best effort, so possibly already there); a key holds data iff a bucket it
    encrypts does."""
    res = template["Resources"]
    copied_into = {str(r["Properties"].get("Bucket")) for r in res.values() if r["Type"] in COPY_TYPES}
    logged_into = {
        str(r["Properties"]["LoggingConfiguration"]["DestinationBucketName"])
        for r in res.values()
        if r["Type"] == "AWS::S3::Bucket" and "LoggingConfiguration" in r["Properties"]
    }
    out: dict[str, Res] = {}
    for lid, r in res.items():
        if r["Type"] != "AWS::S3::Bucket":
            continue
        data = str({"Ref": lid}) in copied_into or str({"Ref": lid}) in logged_into
        out[lid] = Res(lid, r["Type"], r.get("DeletionPolicy", "Delete"), r["Properties"].get("BucketName"), data)
    for lid, r in res.items():
        if r["Type"] == "AWS::KMS::Key":
            encrypts = [
                b
                for b, br in res.items()
                if br["Type"] == "AWS::S3::Bucket" and lid in str(br["Properties"].get("BucketEncryption"))
            ]
            out[lid] = Res(
                lid, r["Type"], r.get("DeletionPolicy", "Delete"), None, any(out[b].holds_data for b in encrypts)
            )
    return list(out.values())


def rollback_create(resources: list[Res]) -> Rollback:
    orphans, lost, stuck = [], [], []
    for r in resources:
        if r.deletion_policy == "Retain":
            orphans.append(r)
        elif r.type == "AWS::S3::Bucket" and r.holds_data:
            stuck.append(r)  # DELETE_FAILED: the bucket is not empty
        elif r.holds_data:
            lost.append(r)
    return Rollback("ROLLBACK_FAILED" if stuck else "ROLLBACK_COMPLETE", tuple(orphans), tuple(lost), tuple(stuck))


def retry_succeeds(rollback: Rollback) -> bool:
    if rollback.stuck:  # cdk deploy deletes the ROLLBACK_FAILED stack first: the same bucket fails again
        return False
    return not any(r.fixed_name for r in rollback.orphans)  # a retained fixed name: "already exists"


def test_the_model_reproduces_the_failures_it_must_avoid() -> None:
    """The model is not a tautology: the two designs the review warns about fail in it."""
    bucket = Res("Bucket", "AWS::S3::Bucket", "Retain", "acme-models", True)
    assert not retry_succeeds(rollback_create([bucket]))  # finding 2: Retain + fixed name → every retry fails
    except_on_create = Res("Bucket", "AWS::S3::Bucket", "RetainExceptOnCreate", None, True)
    rb = rollback_create([except_on_create])
    assert rb.status == "ROLLBACK_FAILED" and not retry_succeeds(rb)  # a copy wrote: the delete fails the rollback
    key = Res("Key", "AWS::KMS::Key", "RetainExceptOnCreate", None, True)  # encrypts a retained bucket with data
    assert rollback_create([Res("B", "AWS::S3::Bucket", "Retain", None, True), key]).lost == (key,)


@pytest.mark.parametrize("layout", ["one-stack", "one-stack-catalog", "store-stack"])
def test_a_failed_first_deploy_never_blocks_the_retry_and_never_loses_copied_data(layout: str) -> None:
    app = cdk.App()
    apply_nag(app)
    if layout == "store-stack":
        store = cdk.Stack(app, "ModelStore", env=ENV)
        copies = cdk.Stack(app, "Models", env=ENV)
        bucket = ModelBucket(store, "ModelBucket", props=ModelBucketProps(bucket_name="acme-models-us-east-1"))
        _artifact(copies, bucket)
        stacks = [store, copies]
    else:
        stack = cdk.Stack(app, "Models", env=ENV)
        bucket = ModelBucket(stack, "ModelBucket")
        (_catalog if layout.endswith("catalog") else _artifact)(stack, bucket)
        stacks = [stack]
    synth(app)  # cdk-nag clean
    for stack in stacks:
        resources = resources_at_rollback(template_json(stack))
        assert bool(resources) == (stack is stacks[0]), stack.node.path  # the copies' own stack holds no bucket or key
        rb = rollback_create(resources)
        assert rb.status == "ROLLBACK_COMPLETE", (stack.node.path, rb)
        assert rb.lost == (), (stack.node.path, rb)
        assert retry_succeeds(rb), (stack.node.path, rb)
    if layout == "store-stack":
        # The store's own failed create leaves only the (generated-name) log bucket; the copies' stack holds no bucket.
        store_rb = rollback_create(resources_at_rollback(template_json(stacks[0])))
        assert [r.logical_id for r in store_rb.orphans] == [_by_logical_id(stacks[0], bucket.log_bucket)]
        assert store_rb.orphans[0].fixed_name is None


# -- #19: DESTROY on a versioned bucket ----------------------------------------------------------------------


@pytest.mark.parametrize("policy", [cdk.RemovalPolicy.SNAPSHOT, cdk.RemovalPolicy.RETAIN_ON_UPDATE_OR_DELETE])
def test_only_retain_or_destroy_are_accepted(policy: cdk.RemovalPolicy) -> None:
    with pytest.raises(ValueError, match="ModelBucketProps.removal_policy must be RETAIN .* or DESTROY"):
        ModelBucketProps(removal_policy=policy).validate()


def test_destroy_without_auto_delete_is_refused() -> None:
    with pytest.raises(ValueError, match=r"removal_policy=DESTROY needs auto_delete_objects=True.*versioned"):
        ModelBucketProps(removal_policy=cdk.RemovalPolicy.DESTROY).validate()
    with pytest.raises(ValueError, match=r"auto_delete_objects=True applies only with removal_policy=DESTROY"):
        ModelBucketProps(auto_delete_objects=True).validate()


def test_destroy_with_auto_delete_empties_both_buckets_before_deleting_them() -> None:
    app = cdk.App()
    apply_nag(app)
    stack = cdk.Stack(app, "Scratch", env=ENV)
    bucket = ModelBucket(
        stack, "ModelBucket", props=ModelBucketProps(removal_policy=cdk.RemovalPolicy.DESTROY, auto_delete_objects=True)
    )
    _artifact(stack, bucket)
    synth(app)  # cdk-nag clean, auto-delete provider included
    template = template_json(stack)
    assert sorted(_policies(template, "AWS::S3::Bucket")) == [("Delete", "Delete"), ("Delete", "Delete")]
    assert _policies(template, "AWS::KMS::Key") == [("Delete", "Delete")]
    emptied = sorted(
        str(r["Properties"]["BucketName"])
        for r in template["Resources"].values()
        if r["Type"] == "Custom::S3AutoDeleteObjects"
    )
    assert emptied == sorted(str({"Ref": _by_logical_id(stack, b)}) for b in (bucket.bucket, bucket.log_bucket))


# -- #18: the copy job's object actions are exactly what the code calls --------------------------------------

# S3 operation → IAM action (Service Authorization Reference, Amazon S3 actions:
# https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazons3.html; HeadObject needs s3:GetObject,
# the multipart calls s3:PutObject, ListParts s3:ListMultipartUploadParts).
_IAM_ACTION = {
    "put_object": "s3:PutObject",
    "create_multipart_upload": "s3:PutObject",
    "upload_part": "s3:PutObject",
    "complete_multipart_upload": "s3:PutObject",
    "head_object": "s3:GetObject",
    "get_object": "s3:GetObject",
    "abort_multipart_upload": "s3:AbortMultipartUpload",
    "list_parts": "s3:ListMultipartUploadParts",
}
_BUCKET_LEVEL = {"list_objects_v2", "list_objects", "list_multipart_uploads"}  # s3:ListBucket*, granted separately


def _s3_operations_called() -> set[str]:
    ops = {xform_name(name) for name in botocore.session.get_session().get_service_model("s3").operation_names}
    called: set[str] = set()
    for path in LAMBDA.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ops:
                called.add(node.func.attr)
    return called


def test_the_write_grant_is_what_the_copy_code_calls() -> None:
    called = _s3_operations_called()
    assert {
        "put_object",
        "create_multipart_upload",
        "upload_part",
        "complete_multipart_upload",
        "head_object",
    } <= called
    assert called - _BUCKET_LEVEL <= set(_IAM_ACTION), (
        f"an S3 call without an IAM mapping here: {called - set(_IAM_ACTION)}"
    )
    needed = {_IAM_ACTION[op] for op in called - _BUCKET_LEVEL}

    app = cdk.App()
    stack = cdk.Stack(app, "Models", env=ENV)
    bucket = ModelBucket(stack, "ModelBucket")
    art = _artifact(stack, bucket)
    template = template_json(stack)
    role = _by_logical_id(stack, art.role)
    object_actions = [
        set(st["Action"] if isinstance(st["Action"], list) else [st["Action"]])
        for p in template["Resources"].values()
        if p["Type"] == "AWS::IAM::Policy" and {"Ref": role} in p["Properties"]["Roles"]
        for st in p["Properties"]["PolicyDocument"]["Statement"]
        if "s3:PutObject" in (st["Action"] if isinstance(st["Action"], list) else [st["Action"]])
    ]
    assert object_actions == [needed]
    assert "s3:ListMultipartUploadParts" not in needed  # nothing calls list_parts
