"""The catalog copy off the deploy's critical path: a 10-model and a 1,000-model farm (each stack also holds one
ModelArtifact, whose copy the deploy still awaits), cdk-nag applied. The template must hold no wait for the catalog
(no Custom::ModelCatalog, no provider waiter for it), a Distributed Map with the batching/retry/tolerance settings,
and the same resources and size for 10 and 1,000 models; IAM is checked against botocore's service models."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from typing import Any, cast

import aws_cdk as cdk
import botocore.session
import pytest

from cpu_inference.artifacts import ModelArtifact, ModelArtifactProps, ModelBucket, ModelCatalog, ModelCatalogProps
from cpu_inference.artifacts.catalog_fanout import (
    ACCOUNT_LIMIT_ERROR,
    DEFAULT_BATCH_SIZE,
    DEFAULT_MAX_CONCURRENCY,
    FAILED_BATCH_RETRY,
    QUOTA_RETRY,
)
from model_download.buildspec import CATALOG_BUILD_SPEC, CATALOG_NAMES_ENV
from model_download.catalog import RUNS_PREFIX, CatalogEntry, failure_key
from tests.support.cdk import apply_nag, cfn_lint_errors, nag_errors, synth, template_json

pytestmark = pytest.mark.synth

ENV = cdk.Environment(account="123456789012", region="us-east-1")


def entries(count: int) -> tuple[CatalogEntry, ...]:
    return tuple(
        CatalogEntry(
            name=f"m-{i:04d}",
            hf_repo=f"acme-models/classifier-{i:04d}-GGUF",
            file=f"classifier-{i:04d}-Q4_K_M.gguf",
            token_secret_name="hf/acme-token" if i % 5 == 0 else None,
        )
        for i in range(count)
    )


@dataclass
class Farm:
    stack: cdk.Stack
    bucket: ModelBucket
    catalog: ModelCatalog
    template: dict[str, Any]
    template_bytes: int

    def resources(self, type_: str) -> dict[str, dict[str, Any]]:
        return {k: v for k, v in self.template["Resources"].items() if v["Type"] == type_}

    def logical_id(self, construct: Any) -> str:
        return self.stack.get_logical_id(construct.node.default_child)

    def definition(self) -> dict[str, Any]:
        """The state machine's ASL with CloudFormation references flattened to <LogicalId>."""
        sm = self.template["Resources"][self.logical_id(self.catalog.fanout.state_machine)]
        parts = sm["Properties"]["DefinitionString"]["Fn::Join"][1]
        text = "".join(p if isinstance(p, str) else f"<{p.get('Ref') or '.'.join(p['Fn::GetAtt'])}>" for p in parts)
        return json.loads(text)

    def policies_of(self, logical_role_id: str) -> list[dict[str, Any]]:
        return [
            st
            for p in self.resources("AWS::IAM::Policy").values()
            if {"Ref": logical_role_id} in p["Properties"]["Roles"]
            for st in p["Properties"]["PolicyDocument"]["Statement"]
        ]


@pytest.fixture(scope="module")
def farms() -> dict[int, Farm]:
    app = cdk.App()
    apply_nag(app)
    built = {}
    for count in (10, 1000):
        stack = cdk.Stack(app, f"Fanout{count:04d}", env=ENV)  # names of one length: byte counts compare
        bucket = ModelBucket(stack, "ModelBucket")
        ModelArtifact(
            stack,
            "Router",
            props=ModelArtifactProps(
                model_bucket=bucket,
                name="router-slm",
                hf_repo="bartowski/SmolLM2-1.7B-Instruct-GGUF",
                file="SmolLM2-1.7B-Instruct-Q4_K_M.gguf",
            ),
        )
        catalog = ModelCatalog(
            stack, "Farm", props=ModelCatalogProps(model_bucket=bucket, entries=entries(count), layouts=("gguf", "mme"))
        )
        built[count] = (stack, bucket, catalog)
    assembly = synth(app)
    return {
        count: Farm(
            stack,
            bucket,
            catalog,
            template_json(stack),
            os.path.getsize(assembly.get_stack_by_name(stack.stack_name).template_full_path),
        )
        for count, (stack, bucket, catalog) in built.items()
    }


def test_the_deploy_waits_for_no_catalog_copy(farms: dict[int, Farm]) -> None:
    farm = farms[1000]
    assert farm.resources("Custom::ModelCatalog") == {}
    # The one provider waiter left is the ModelArtifact's (its copy is still awaited); the catalog's start resource
    # is an AwsCustomResource (one SDK call, no isComplete) pointing at the singleton SDK-call function.
    (start,) = farm.resources("Custom::ModelCatalogCopy").values()
    props = start["Properties"]
    assert "ServiceTimeout" not in props and json.loads(props["Delete"])["action"] == "stopExecution"
    token = props["ServiceToken"]["Fn::GetAtt"][0]
    assert token.startswith("AWS679f53fac002430cb0da5b7982bd2287")
    waiters = farm.resources("AWS::StepFunctions::StateMachine")
    assert len(waiters) == 2  # the ModelArtifact's provider waiter + the catalog copy
    artifact_tokens = {
        json.dumps(r["Properties"]["ServiceToken"]) for r in farm.resources("Custom::ModelArtifact").values()
    }
    assert json.dumps(props["ServiceToken"]) not in artifact_tokens
    for call in ("Create", "Update"):
        body = "".join(p if isinstance(p, str) else "<ref>" for p in props[call]["Fn::Join"][1])
        call_json = json.loads(body)
        assert call_json["action"] == "startExecution" and call_json["physicalResourceId"] == {
            "responsePath": "executionArn"
        }
        assert json.loads(call_json["parameters"]["input"]) == {"fingerprint": farm.catalog.fingerprint}


def test_the_template_does_not_grow_with_the_number_of_models(farms: dict[int, Farm]) -> None:
    small, large = farms[10], farms[1000]
    by_type = lambda f: sorted(r["Type"] for r in f.template["Resources"].values())  # noqa: E731
    assert by_type(small) == by_type(large)
    assert len(small.template["Resources"]) == len(large.template["Resources"])
    assert large.template_bytes == small.template_bytes
    text = json.dumps(large.template)
    assert "m-0999" not in text and "classifier-0999" not in text
    print(
        f"\ntemplate bytes: 10 models {small.template_bytes}, 1,000 models {large.template_bytes}; "
        f"resources {len(small.template['Resources'])} / {len(large.template['Resources'])}"
    )


def test_a_distributed_map_batches_the_work_list_and_runs_one_build_per_batch(farms: dict[int, Farm]) -> None:
    farm = farms[1000]
    definition = farm.definition()
    (map_state,) = definition["States"].values()
    assert map_state["Type"] == "Map"
    assert map_state["ItemProcessor"]["ProcessorConfig"] == {"Mode": "DISTRIBUTED", "ExecutionType": "STANDARD"}
    assert map_state["ItemBatcher"] == {"MaxItemsPerBatch": DEFAULT_BATCH_SIZE}
    assert map_state["MaxConcurrency"] == DEFAULT_MAX_CONCURRENCY
    assert map_state["ToleratedFailurePercentage"] == 100
    reader = map_state["ItemReader"]
    assert reader["ReaderConfig"] == {"InputType": "JSON"} and reader["Resource"].endswith(":states:::s3:getObject")
    assert reader["Parameters"]["Key"] == farm.catalog.items_asset.s3_object_key
    writer = map_state["ResultWriter"]
    assert writer["Parameters"] == {"Bucket": f"<{farm.logical_id(farm.bucket.bucket)}>", "Prefix": RUNS_PREFIX}
    (task,) = map_state["ItemProcessor"]["States"].values()
    assert task["Resource"].endswith(":states:::codebuild:startBuild.sync")
    assert task["Parameters"]["ProjectName"] == f"<{farm.logical_id(farm.catalog.project)}>"
    overrides = {o["Name"]: o for o in task["Parameters"]["EnvironmentVariablesOverride"]}
    assert overrides[CATALOG_NAMES_ENV]["Value.$"] == "States.JsonToString($.Items)"
    assert overrides["CATALOG_FINGERPRINT"]["Value"] == farm.catalog.fingerprint
    assert overrides["CATALOG_KEY"]["Value"] == farm.catalog.catalog_asset.s3_object_key
    quota, failed = task["Retry"]
    assert quota == {
        "ErrorEquals": [ACCOUNT_LIMIT_ERROR],
        "IntervalSeconds": QUOTA_RETRY["interval_seconds"],
        "MaxAttempts": QUOTA_RETRY["max_attempts"],
        "BackoffRate": QUOTA_RETRY["backoff_rate"],
        "MaxDelaySeconds": QUOTA_RETRY["max_delay_seconds"],
        "JitterStrategy": "FULL",
    }
    assert (
        failed["ErrorEquals"] == ["States.TaskFailed"] and failed["MaxAttempts"] == FAILED_BATCH_RETRY["max_attempts"]
    )
    # The build's command passes the override on; without it (start-build by hand) the whole catalog is copied.
    (command,) = cast(Any, CATALOG_BUILD_SPEC)["phases"]["build"]["commands"]
    assert f'${{{CATALOG_NAMES_ENV}:+--names "${CATALOG_NAMES_ENV}"}}' in command
    assert "exported-variables" not in CATALOG_BUILD_SPEC["env"]


def test_the_quota_error_is_one_codebuild_declares_for_startbuild() -> None:
    model = botocore.session.get_session().get_service_model("codebuild")
    errors = {e.name for e in model.operation_model("StartBuild").error_shapes}
    assert ACCOUNT_LIMIT_ERROR.split(".", 1) == ["CodeBuild", "AccountLimitExceededException"]
    assert "AccountLimitExceededException" in errors


def test_the_state_machine_logs_under_vended_logs(farms: dict[int, Farm]) -> None:
    farm = farms[1000]
    lid = farm.logical_id(farm.catalog.fanout.log_group)
    name = farm.template["Resources"][lid]["Properties"]["LogGroupName"]
    assert name.startswith("/aws/vendedlogs/states/") and len(name) <= 512
    (sm,) = [
        r
        for k, r in farm.resources("AWS::StepFunctions::StateMachine").items()
        if k == farm.logical_id(farm.catalog.fanout.state_machine)
    ]
    assert sm["Properties"]["StateMachineType"] == "STANDARD"
    assert sm["Properties"]["LoggingConfiguration"]["Level"] == "ALL"


def _flat(value: Any) -> str:
    from cpu_inference._internal.nag import flatten

    return flatten(value)


def _as_list(v: Any) -> list[Any]:
    return v if isinstance(v, list) else [v]


def _actions_exist(statements: list[dict[str, Any]]) -> None:
    """Every action names an operation of its service's botocore model (IAM action = API operation here)."""
    session = botocore.session.get_session()
    models = {}
    for st in statements:
        for action in _as_list(st["Action"]):
            prefix, op = action.split(":", 1)
            service = {
                "states": "stepfunctions",
                "xray": "xray",
                "logs": "logs",
                "events": "events",
                "s3": "s3",
                "codebuild": "codebuild",
                "kms": "kms",
            }[prefix]
            if service not in models:
                models[service] = set(session.get_service_model(service).operation_names)
            ops = models[service]
            if prefix == "s3" and op == "ListBucket":
                op = "ListObjectsV2"  # the IAM action behind ListObjects(V2)
            if prefix == "s3" and op == "ListMultipartUploadParts":
                op = "ListParts"
            if prefix == "logs" and op in {
                "CreateLogDelivery",
                "GetLogDelivery",
                "UpdateLogDelivery",
                "DeleteLogDelivery",
                "ListLogDeliveries",
            }:
                continue  # permission-only actions for vended log delivery (no API of their own)
            assert op in ops, f"{action}: no {service} operation {op}"


def test_the_state_machine_may_start_only_its_project_and_write_only_runs(farms: dict[int, Farm]) -> None:
    farm = farms[1000]
    fanout = farm.catalog.fanout
    statements = farm.policies_of(farm.logical_id(fanout.role))
    _actions_exist(statements)
    codebuild_statements = [st for st in statements if any(a.startswith("codebuild:") for a in _as_list(st["Action"]))]
    assert [_flat(st["Resource"]) for st in codebuild_statements] == [f"<{farm.logical_id(farm.catalog.project)}.Arn>"]
    bucket_arn = f"<{farm.logical_id(farm.bucket.bucket)}.Arn>"
    on_bucket = [r for st in statements for r in map(_flat, _as_list(st["Resource"])) if r.startswith(bucket_arn)]
    assert set(on_bucket) == {bucket_arn, f"{bucket_arn}/{RUNS_PREFIX}*"}
    (list_bucket,) = [st for st in statements if st["Action"] == "s3:ListBucket"]
    assert list_bucket["Condition"] == {"StringLike": {"s3:prefix": [f"{RUNS_PREFIX}*"]}}
    reads = [st for st in statements if st["Action"] == "s3:GetObject"]
    assert [_flat(st["Resource"]).rsplit("/", 1)[1] for st in reads] == [farm.catalog.items_asset.s3_object_key]
    # No statement on a whole bucket's objects.
    assert not [r for st in statements for r in map(_flat, _as_list(st["Resource"])) if re.search(r"[>:]/\*$", r)]
    wildcard = [st for st in statements if st["Resource"] == "*"]
    assert {a.split(":")[0] for st in wildcard for a in _as_list(st["Action"])} == {"logs", "xray"}


def test_the_builds_write_only_farm_and_the_start_resource_only_starts_and_stops_its_executions(
    farms: dict[int, Farm],
) -> None:
    farm = farms[1000]
    bucket_arn = f"<{farm.logical_id(farm.bucket.bucket)}.Arn>"
    statements = farm.policies_of(farm.logical_id(farm.catalog.role))
    writes = [st for st in statements if "s3:PutObject" in _as_list(st["Action"])]
    assert [[_flat(r) for r in _as_list(st["Resource"])] for st in writes] == [[f"{bucket_arn}/farm/*"]]
    start_policy = farm.catalog.fanout.start.node.find_child("CustomResourcePolicy")
    (policy,) = [p for k, p in farm.resources("AWS::IAM::Policy").items() if k == farm.logical_id(start_policy)]
    start_statements = policy["Properties"]["PolicyDocument"]["Statement"]
    _actions_exist(start_statements)
    sm = f"<{farm.logical_id(farm.catalog.fanout.state_machine)}>"
    assert {(st["Action"], _flat(st["Resource"])) for st in start_statements} == {
        ("states:StartExecution", sm),
        (
            "states:StopExecution",
            f"arn:<AWS::Partition>:states:us-east-1:123456789012:execution:<{farm.logical_id(farm.catalog.fanout.state_machine)}.Name>:*",
        ),
    }


def test_the_failure_marker_key_is_known_at_synth(farms: dict[int, Farm]) -> None:
    farm = farms[1000]
    entry = entries(1000)[999]
    assert farm.catalog.failure_key("m-0999") == failure_key(entry)
    assert failure_key(entry) == farm.catalog.gguf_key("m-0999").rsplit("/", 1)[0] + "/copy-failed.json"
    assert farm.catalog.mme_key("m-0999").startswith(failure_key(entry).rsplit("/", 1)[0] + "-")


@pytest.mark.parametrize("count", [10, 1000])
def test_cdk_nag_and_cfn_lint_are_clean(farms: dict[int, Farm], count: int) -> None:
    assert nag_errors(farms[count].stack) == []
    assert cfn_lint_errors(farms[count].template) == []
