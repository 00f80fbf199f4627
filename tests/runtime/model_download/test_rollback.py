"""A custom resource's life as CloudFormation and the CDK provider framework drive it: Create, an Update that fails
or succeeds, and the rollback's Update back to the old properties (aws/aws-cdk#17040, #29581) — for one file, a
snapshot. The handlers run for real; CodeBuild is a botocore Stubber on a real client (every
request and response is checked against the service model), so "no StartBuild" means no request at all."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import botocore.session
import pytest
from botocore.stub import ANY, Stubber

from model_download.build_job import PHYSICAL_ID_BUDGET_BYTES, deployed
from model_download.buildspec import RECEIPT, SNAPSHOT_RECEIPT
from model_download.custom_resource import is_complete, on_event

SERVICE_TOKEN = "arn:aws:lambda:us-east-1:123456789012:function:provider"
STACK_ID = "arn:aws:cloudformation:us-east-1:123456789012:stack/models/0f0e0d0c-0b0a-0908-0706-050403020100"
COMMIT_A, COMMIT_B = "a" * 40, "b" * 40
SHA_A, SHA_B = "1" * 64, "2" * 64


def _client(service: str):  # noqa: ANN202
    return botocore.session.get_session().create_client(
        service, region_name="us-east-1", aws_access_key_id="k", aws_secret_access_key="s"
    )


class CodeBuild:
    """A real botocore CodeBuild client behind a Stubber; `calls` lists every operation the handlers sent."""

    def __init__(self) -> None:
        self.client = _client("codebuild")
        self.calls: list[str] = []
        # Emitted for every operation before the Stubber answers (its before-call handler ends that chain).
        self.client.meta.events.register(
            "before-parameter-build.codebuild.*", lambda model, **_: self.calls.append(model.name)
        )
        self.stub = Stubber(self.client)
        self.stub.activate()

    def expect_start(self, project: str, request_id: str, build_id: str) -> None:
        self.stub.add_response(
            "start_build",
            {"build": {"id": build_id, "buildStatus": "IN_PROGRESS"}},
            {"projectName": project, "environmentVariablesOverride": ANY, "idempotencyToken": request_id},
        )

    def expect_poll(self, build_id: str, status: str, exported: dict[str, str] | None = None) -> None:
        build: dict[str, Any] = {
            "id": build_id,
            "buildStatus": status,
            "buildComplete": True,
            "startTime": datetime.now(UTC),
            "logs": {
                "deepLink": f"https://console.aws.amazon.com/cloudwatch/home?region=us-east-1#logEvent:group=/x;stream={build_id}"
            },
            "phases": [{"phaseType": "BUILD", "phaseStatus": status, "contexts": [{"message": "exit status 2"}]}],
        }
        if exported is not None:
            build["exportedEnvironmentVariables"] = [{"name": k, "value": v} for k, v in exported.items()]
        self.stub.add_response("batch_get_builds", {"builds": [build]}, {"ids": [build_id]})


def framework(request: dict[str, Any], codebuild: CodeBuild) -> dict[str, Any]:
    """What aws-cdk-lib 2.275's provider framework sends CloudFormation for one request (provider-framework/runtime/
    framework.js and cfn-response.js): onEvent; createResponseEvent = {...request, ...result, PhysicalResourceId:
    result's || (Create: RequestId, else the request's)}; isComplete until IsComplete (Data forbidden before);
    SUCCESS with {...event, ...isCompleteResult, Data: {...event.Data, ...isCompleteResult.Data}}; any exception →
    FAILED carrying the event's PhysicalResourceId."""
    logs = _client("logs")  # no log groups in these records: never called
    result = on_event(request, codebuild=codebuild.client)
    default = request["RequestId"] if request["RequestType"] == "Create" else request["PhysicalResourceId"]
    event = {**request, **result, "PhysicalResourceId": result.get("PhysicalResourceId") or default}
    try:
        while True:
            answer = is_complete(json.loads(json.dumps(event)), codebuild=codebuild.client, logs=logs)
            if answer["IsComplete"]:
                break
            assert not answer.get("Data"), '"Data" is not allowed if "IsComplete" is "False"'
    except RuntimeError as exc:
        return {
            "Status": "FAILED",
            "PhysicalResourceId": event["PhysicalResourceId"],
            "Reason": str(exc),
            "Data": event.get("Data"),
        }
    response = {**event, **answer, "Data": {**(event.get("Data") or {}), **(answer.get("Data") or {})}}
    assert len(response["PhysicalResourceId"].encode()) <= 1024  # crpg-ref-responses: "up to 1 KB"
    return {"Status": "SUCCESS", "PhysicalResourceId": response["PhysicalResourceId"], "Data": response["Data"]}


@dataclass(frozen=True)
class Kind:
    name: str
    old: dict[str, Any]  # identity properties of the deployed resource
    new: dict[str, Any]  # identity properties of the update
    exported: Callable[[dict[str, Any], str], dict[str, str]]  # the job's exported receipt for (props, commit)


def _file_receipt(props: dict[str, Any], commit: str) -> dict[str, str]:
    return {
        "MODEL_RESOLVED_COMMIT": commit,
        "MODEL_RESOLVED_SHA256": SHA_A if commit == COMMIT_A else SHA_B,
        "MODEL_RESOLVED_KEY": f"{props['KeyPrefix']}/{commit}/{props['File']}",
        "MODEL_RESOLVED_SIZE": "1234",
    }


def _snapshot_receipt(props: dict[str, Any], commit: str) -> dict[str, str]:
    return {
        "MODEL_RESOLVED_COMMIT": commit,
        "MODEL_RESOLVED_SHA256": SHA_A if commit == COMMIT_A else SHA_B,
        "MODEL_RESOLVED_KEY": f"{props['KeyPrefix']}/{commit}/",
        "MODEL_RESOLVED_SIZE": "99",
        "MODEL_RESOLVED_FILES": "5",
    }


_FILE = {
    "Bucket": "model-bucket",
    "KeyPrefix": "models/llama",
    "HfRepo": "bartowski/Llama-GGUF",
    "File": "Llama-Q4_K_M.gguf",
    "Revision": "main",
    "Sha256": "",
}
_SNAPSHOT = {
    "Bucket": "model-bucket",
    "KeyPrefix": "models/qwen",
    "HfRepo": "Qwen/Qwen3-8B",
    "Snapshot": "safetensors",
    "Revision": "main",
}
KINDS = [
    Kind("file", _FILE, {**_FILE, "Revision": "v2-typo"}, _file_receipt),
    Kind("snapshot", _SNAPSHOT, {**_SNAPSHOT, "Revision": "refs/pr/1"}, _snapshot_receipt),
    # No catalog: its copy is a Step Functions execution the deploy only starts (a rollback re-starts a copy of the
    # old catalog, which HEADs and skips — tests/artifacts/test_catalog_fanout.py), not a custom resource that waits.
]
RECEIPT_NAMES = {"file": RECEIPT, "snapshot": SNAPSHOT_RECEIPT}


def _request(
    kind: str, props: dict[str, Any], old: dict[str, Any] | None = None, physical_id: str | None = None
) -> dict[str, Any]:
    request = {
        "RequestType": "Create" if physical_id is None else "Update",
        "RequestId": str(uuid.uuid4()),
        "ResponseURL": "https://cloudformation-custom-resource-response-useast1.s3.amazonaws.com/x",
        "StackId": STACK_ID,
        "LogicalResourceId": "ModelCopy1A2B3C4D",
        "ResourceType": f"Custom::{kind}",
        "ResourceProperties": {"ServiceToken": SERVICE_TOKEN, "ProjectName": "CopyJob1A2B-xyz", **props},
    }
    if physical_id is not None:
        request |= {
            "PhysicalResourceId": physical_id,
            "OldResourceProperties": {"ServiceToken": SERVICE_TOKEN, "ProjectName": "CopyJob1A2B-xyz", **(old or {})},
        }
    return request


def _create(kind: Kind, codebuild: CodeBuild) -> dict[str, Any]:
    request = _request(kind.name, kind.old)
    codebuild.expect_start("CopyJob1A2B-xyz", request["RequestId"], "CopyJob1A2B-xyz:0001")
    codebuild.expect_poll("CopyJob1A2B-xyz:0001", "SUCCEEDED", kind.exported(request["ResourceProperties"], COMMIT_A))
    created = framework(request, codebuild)
    assert created["Status"] == "SUCCESS" and created["Data"]["BuildId"] == "CopyJob1A2B-xyz:0001"
    return created


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.name)
def test_the_rollback_of_a_failed_update_starts_nothing_and_keeps_the_attributes(kind: Kind) -> None:
    codebuild = CodeBuild()
    created = _create(kind, codebuild)

    update = _request(kind.name, kind.new, kind.old, created["PhysicalResourceId"])
    codebuild.expect_start("CopyJob1A2B-xyz", update["RequestId"], "CopyJob1A2B-xyz:0002")
    codebuild.expect_poll("CopyJob1A2B-xyz:0002", "FAILED")
    failed = framework(update, codebuild)
    assert failed["Status"] == "FAILED" and failed["PhysicalResourceId"] == created["PhysicalResourceId"]
    codebuild.stub.assert_no_pending_responses()

    # CloudFormation rolls back with an Update from the new properties to the old ones, same PhysicalResourceId.
    sent = len(codebuild.calls)
    rollback = _request(kind.name, kind.old, kind.new, failed["PhysicalResourceId"])
    rolled_back = framework(rollback, codebuild)

    assert codebuild.calls[sent:] == []  # no StartBuild, no BatchGetBuilds: the Hub is never asked again
    assert rolled_back == {
        "Status": "SUCCESS",
        "PhysicalResourceId": created["PhysicalResourceId"],
        "Data": created["Data"],
    }


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.name)
def test_after_a_successful_update_the_rollback_returns_the_old_receipt_without_a_build(kind: Kind) -> None:
    # This resource updated; a later resource of the stack failed (e.g. the endpoint that loads the new model).
    codebuild = CodeBuild()
    created = _create(kind, codebuild)
    update = _request(kind.name, kind.new, kind.old, created["PhysicalResourceId"])
    codebuild.expect_start("CopyJob1A2B-xyz", update["RequestId"], "CopyJob1A2B-xyz:0002")
    codebuild.expect_poll("CopyJob1A2B-xyz:0002", "SUCCEEDED", kind.exported(update["ResourceProperties"], COMMIT_B))
    updated = framework(update, codebuild)
    assert updated["Status"] == "SUCCESS" and updated["Data"] != created["Data"]

    sent = len(codebuild.calls)
    rolled_back = framework(_request(kind.name, kind.old, kind.new, updated["PhysicalResourceId"]), codebuild)

    assert codebuild.calls[sent:] == []
    assert (
        rolled_back["Status"] == "SUCCESS" and rolled_back["Data"] == created["Data"]
    )  # the old commit, not a new one
    # The id names the old receipt again (CloudFormation sees a replacement; Delete keeps every object) and still
    # remembers the update's, so deploying the update again is free too.
    assert [d.digest for d in deployed(rolled_back["PhysicalResourceId"])] == [
        d.digest for d in reversed(deployed(updated["PhysicalResourceId"]))
    ]
    again = framework(_request(kind.name, kind.new, kind.old, rolled_back["PhysicalResourceId"]), codebuild)
    assert codebuild.calls[sent:] == [] and again["Data"] == updated["Data"]


def test_an_update_that_changes_only_how_the_copy_runs_starts_nothing() -> None:
    codebuild = CodeBuild()
    created = _create(KINDS[0], codebuild)
    sent = len(codebuild.calls)
    # A replaced project (new ProjectName) or provider (ServiceToken): the identity — what is copied — is unchanged.
    update = _request("file", _FILE, _FILE, created["PhysicalResourceId"])
    update["ResourceProperties"] |= {"ProjectName": "CopyJob9Z9Z-new", "ServiceToken": SERVICE_TOKEN + "2"}
    same = framework(update, codebuild)
    assert codebuild.calls[sent:] == [] and same == {**created, "Status": "SUCCESS"}


def test_an_id_written_before_receipts_were_kept_runs_the_job() -> None:
    # A stack deployed by an older version: its id is the bare s3:// URI; the Update copies as before.
    codebuild = CodeBuild()
    update = _request("file", _FILE, _FILE, f"s3://model-bucket/models/llama/{COMMIT_A}/Llama-Q4_K_M.gguf")
    codebuild.expect_start("CopyJob1A2B-xyz", update["RequestId"], "CopyJob1A2B-xyz:0003")
    codebuild.expect_poll("CopyJob1A2B-xyz:0003", "SUCCEEDED", _file_receipt(_FILE, COMMIT_A))
    done = framework(update, codebuild)
    assert codebuild.calls == ["StartBuild", "BatchGetBuilds"] and deployed(done["PhysicalResourceId"])


def test_the_physical_id_fits_cloudformations_limit_with_the_longest_names() -> None:
    codebuild = CodeBuild()
    long = {**_FILE, "Bucket": "b" * 63, "KeyPrefix": "models/" + "n" * 63, "File": "dir/" * 60 + "é" * 200 + ".gguf"}
    project = "P" * 200
    request = _request("file", long)
    request["ResourceProperties"]["ProjectName"] = project
    build = f"{project}:0f0e0d0c-0b0a-0908-0706-050403020100"
    codebuild.expect_start(project, request["RequestId"], build)
    codebuild.expect_poll(build, "SUCCEEDED", _file_receipt(long, COMMIT_A))
    created = framework(request, codebuild)
    update = _request("file", {**long, "Revision": "v2"}, long, created["PhysicalResourceId"])
    update["ResourceProperties"]["ProjectName"] = project
    codebuild.expect_start(project, update["RequestId"], build)
    codebuild.expect_poll(build, "SUCCEEDED", _file_receipt(long, COMMIT_B))
    updated = framework(update, codebuild)

    for pid in (created["PhysicalResourceId"], updated["PhysicalResourceId"]):
        assert len(json.dumps(pid, ensure_ascii=False).encode()) - 2 <= PHYSICAL_ID_BUDGET_BYTES <= 1024
    assert deployed(updated["PhysicalResourceId"])[0].stored["Commit"] == COMMIT_B
