"""lambda/image_build/handler.py: starting the workflow, polling it, the digest it returns, and the
reason a failed build gives CloudFormation (Step Functions API stubbed with botocore's Stubber)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import boto3
import pytest
from botocore.stub import Stubber

HANDLER = Path(__file__).resolve().parents[2] / "lambda" / "image_build" / "handler.py"
ARN = "arn:aws:states:eu-west-1:111111111111:stateMachine:Workflow"
EXECUTION = "arn:aws:states:eu-west-1:111111111111:execution:Workflow:llama-server-0123456789abcdef-1a2b3c4d5e6f"
DIGEST = "sha256:" + "ab" * 32
ARM, AMD = "sha256:" + "01" * 32, "sha256:" + "02" * 32
URI = "111111111111.dkr.ecr.eu-west-1.amazonaws.com/llama"
PROPS = {
    "ServiceToken": "arn:aws:lambda:eu-west-1:111111111111:function:framework",
    "StateMachineArn": ARN,
    "RepositoryName": "llama",
    "RepositoryUri": URI,
    "Tag": "llama-server-0123456789abcdef",
    "ContentHash": "0123456789abcdef" * 4,
    "ContextAssetHash": "f" * 64,
    "EnginePin": "LLAMA_CPP_PYTHON_VERSION=0.3.36",
}


@pytest.fixture(scope="module")
def handler():
    spec = importlib.util.spec_from_file_location("image_build_handler", HANDLER)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


@pytest.fixture()
def sfn():
    client = boto3.client("stepfunctions", region_name="eu-west-1", aws_access_key_id="x", aws_secret_access_key="x")
    with Stubber(client) as stubber:
        yield client, stubber
        stubber.assert_no_pending_responses()


def variables(**values: str) -> list[dict[str, str]]:
    return [{"Name": k, "Value": v} for k, v in values.items()]


def workflow_output(manifest_digest: str = DIGEST) -> str:
    """The state machine's output as its ResultSelectors shape it."""
    return json.dumps(
        {
            "tag": PROPS["Tag"],
            "contentHash": PROPS["ContentHash"],
            "platformBuilds": [
                {"BuildId": "arm:1", "ExportedEnvironmentVariables": variables(IMAGE_DIGEST=ARM, ARCH="arm64")},
                {"BuildId": "amd:1", "ExportedEnvironmentVariables": variables(IMAGE_DIGEST=AMD, ARCH="amd64")},
            ],
            "manifestBuild": {
                "BuildId": "manifest:1",
                "ExportedEnvironmentVariables": variables(IMAGE_DIGEST=manifest_digest),
            },
        }
    )


def describe(status: str, **extra) -> dict:
    return {
        "executionArn": EXECUTION,
        "stateMachineArn": ARN,
        "status": status,
        "startDate": "2026-11-22T08:00:00Z",
        **extra,
    }


def test_create_starts_one_execution_with_the_tag(handler, sfn) -> None:
    client, stubber = sfn
    event = {"RequestType": "Create", "RequestId": "1a2b3c4d-5e6f-7a8b-9c0d-ef0123456789", "ResourceProperties": PROPS}
    expected_name = "llama-server-0123456789abcdef-1a2b3c4d5e6f"
    stubber.add_response(
        "start_execution",
        {"executionArn": EXECUTION, "startDate": "2026-11-22T08:00:00Z"},
        {
            "stateMachineArn": ARN,
            "name": expected_name,
            "input": json.dumps({"tag": PROPS["Tag"], "contentHash": PROPS["ContentHash"]}),
        },
    )
    result = handler.on_event(event, sfn=client)
    assert result == {"PhysicalResourceId": f"llama:{PROPS['Tag']}", "Data": {"ExecutionArn": EXECUTION}}


def test_update_starts_a_new_execution_under_a_new_name(handler, sfn) -> None:
    client, stubber = sfn
    event = {
        "RequestType": "Update",
        "RequestId": "ffffeeee-dddd-cccc-bbbb-aaaa99998888",
        "PhysicalResourceId": "llama:llama-server-old",
        "ResourceProperties": PROPS,
    }
    stubber.add_response("start_execution", {"executionArn": EXECUTION, "startDate": "2026-11-22T08:00:00Z"})
    assert handler.on_event(event, sfn=client)["PhysicalResourceId"] == f"llama:{PROPS['Tag']}"


def test_delete_touches_nothing(handler, sfn) -> None:
    client, _ = sfn  # any call would fail: the stubber has no responses queued
    event = {"RequestType": "Delete", "RequestId": "r", "PhysicalResourceId": "llama:t", "ResourceProperties": PROPS}
    assert handler.on_event(event, sfn=client) == {"PhysicalResourceId": "llama:t"}
    assert handler.is_complete(event, sfn=client) == {"IsComplete": True}


def test_execution_names_fit_step_functions_rules(handler) -> None:
    name = handler.execution_name("x" * 120 + ".v1", "1a2b3c4d-5e6f-7a8b-9c0d-ef0123456789")
    assert len(name) <= 80 and name.endswith("-1a2b3c4d5e6f")
    assert set(name) <= set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_")


def poll_event() -> dict:
    return {
        "RequestType": "Create",
        "RequestId": "r",
        "PhysicalResourceId": f"llama:{PROPS['Tag']}",
        "ResourceProperties": PROPS,
        "Data": {"ExecutionArn": EXECUTION},
    }


def test_running_is_not_complete(handler, sfn) -> None:
    client, stubber = sfn
    stubber.add_response("describe_execution", describe("RUNNING"), {"executionArn": EXECUTION})
    assert handler.is_complete(poll_event(), sfn=client) == {"IsComplete": False}


def test_success_returns_the_manifest_digest_and_uri(handler, sfn) -> None:
    client, stubber = sfn
    stubber.add_response(
        "describe_execution", describe("SUCCEEDED", output=workflow_output()), {"executionArn": EXECUTION}
    )
    result = handler.is_complete(poll_event(), sfn=client)
    assert result == {
        "IsComplete": True,
        "Data": {
            "ImageDigest": DIGEST,
            "ImageUri": f"{URI}@{DIGEST}",
            "Tag": PROPS["Tag"],
            "Digest-amd64": AMD,
            "Digest-arm64": ARM,
        },
    }


def test_success_without_a_valid_digest_fails_the_deployment(handler, sfn) -> None:
    client, stubber = sfn
    stubber.add_response(
        "describe_execution", describe("SUCCEEDED", output=workflow_output("")), {"executionArn": EXECUTION}
    )
    with pytest.raises(handler.BuildFailed, match=r"manifest build manifest:1 exported IMAGE_DIGEST='', not a sha256"):
        handler.is_complete(poll_event(), sfn=client)


def test_a_platform_build_without_its_digest_fails_the_deployment(handler, sfn) -> None:
    # SageMaker endpoints are given Digest-<arch>: a platform build that exported none must fail here, naming it,
    # not later as a missing attribute of the custom resource.
    doc = json.loads(workflow_output())
    doc["platformBuilds"][1]["ExportedEnvironmentVariables"] = variables(IMAGE_DIGEST="", ARCH="amd64")
    client, stubber = sfn
    stubber.add_response(
        "describe_execution", describe("SUCCEEDED", output=json.dumps(doc)), {"executionArn": EXECUTION}
    )
    with pytest.raises(
        handler.BuildFailed, match=r"platform build amd:1 exported ARCH='amd64' IMAGE_DIGEST='', not an architecture"
    ):
        handler.is_complete(poll_event(), sfn=client)


CODEBUILD_FAILURE = {
    "Id": "LlamaServerBuildArm64:0f1e",
    "BuildStatus": "FAILED",
    "Phases": [
        {"PhaseType": "SUBMITTED", "PhaseStatus": "SUCCEEDED"},
        {"PhaseType": "PROVISIONING", "PhaseStatus": "SUCCEEDED"},
        {
            "PhaseType": "BUILD",
            "PhaseStatus": "FAILED",
            "Contexts": [
                {
                    "StatusCode": "COMMAND_EXECUTION_ERROR",
                    "Message": "Error while executing command: (. Reason: exit status 1",
                }
            ],
        },
    ],
    "Logs": {"DeepLink": "https://console.aws.amazon.com/cloudwatch/home#logsV2:log-groups/x"},
}


def test_failed_build_fails_the_deployment_naming_build_phase_and_log(handler, sfn) -> None:
    client, stubber = sfn
    failed = describe("FAILED", error="States.TaskFailed", cause=json.dumps({"Build": CODEBUILD_FAILURE}))
    stubber.add_response("describe_execution", failed, {"executionArn": EXECUTION})
    with pytest.raises(handler.BuildFailed) as raised:
        handler.is_complete(poll_event(), sfn=client)
    reason = str(raised.value)
    assert reason.startswith("image build FAILED: States.TaskFailed: CodeBuild LlamaServerBuildArm64:0f1e FAILED")
    assert "in phase BUILD: Error while executing command" in reason
    assert "log: https://console.aws.amazon.com/cloudwatch/" in reason
    assert reason.endswith(f"(execution {EXECUTION})")


@pytest.mark.parametrize("status", ["TIMED_OUT", "ABORTED"])
def test_timed_out_or_aborted_fails_too(handler, sfn, status: str) -> None:
    client, stubber = sfn
    stubber.add_response("describe_execution", describe(status), {"executionArn": EXECUTION})
    with pytest.raises(handler.BuildFailed, match=f"image build {status}: no error name"):
        handler.is_complete(poll_event(), sfn=client)


def test_failure_reasons_stay_short_with_huge_causes(handler) -> None:
    reason = handler.failure_reason("FAILED", "States.Runtime", "x" * 100_000, EXECUTION)
    assert len(reason) == 1500 and reason.endswith("...")


def test_camel_case_causes_are_read_too(handler) -> None:
    cause = json.dumps(
        {"id": "b:1", "buildStatus": "TIMED_OUT", "phases": [{"phaseType": "BUILD", "phaseStatus": "TIMED_OUT"}]}
    )
    assert "CodeBuild b:1 TIMED_OUT, in phase BUILD" in handler.failure_reason(
        "FAILED", "States.TaskFailed", cause, EXECUTION
    )
