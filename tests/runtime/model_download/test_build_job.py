"""isComplete against a real botocore CodeBuild client (Stubber: requests and responses checked against the service
model): what it waits out, when it stops a build, what the failure reason carries and how big it may get."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import botocore.session
import pytest
from botocore.config import Config
from botocore.retries.standard import ThrottledRetryableChecker, TransientRetryableChecker
from botocore.stub import Stubber

from model_download import snapshot_resource
from model_download.build_job import (
    BUILD_DEADLINE_SECONDS,
    MAX_COPY_TIMEOUT_MINUTES,
    QUERY_INTERVAL_SECONDS,
    REASON_BUDGET_BYTES,
    SERVICE_TIMEOUT_SECONDS,
    TRANSIENT_ERROR_CODES,
    WAITER_TOTAL_SECONDS,
)
from model_download.custom_resource import build_environment, completion, identity_environment, is_complete

PROPS = {
    "ProjectName": "CopyJob1A2B-xyz",
    "Bucket": "model-bucket",
    "KeyPrefix": "models/llama",
    "HfRepo": "bartowski/Llama-GGUF",
    "File": "Llama-Q4_K_M.gguf",
    "Revision": "main",
    "Sha256": "",
}
BUILD_ID = "CopyJob1A2B-xyz:0f0e0d0c-0b0a-0908-0706-050403020100"
DEEP_LINK = (
    "https://console.aws.amazon.com/cloudwatch/home?region=us-east-1#logEvent:group=/aws/codebuild/x;stream=0f0e"
)


def _client(service: str, **kwargs: Any):  # noqa: ANN202
    return botocore.session.get_session().create_client(
        service, region_name="us-east-1", aws_access_key_id="k", aws_secret_access_key="s", **kwargs
    )


def _event() -> dict[str, Any]:
    return {
        "RequestType": "Create",
        "RequestId": "r-1",
        "ResourceProperties": PROPS,
        "PhysicalResourceId": "s3://model-bucket/models/llama/@main/Llama-Q4_K_M.gguf",
        "Data": {"BuildId": BUILD_ID},
    }


def _build(status: str, *, complete: bool, age: timedelta = timedelta(minutes=3), **extra: Any) -> dict[str, Any]:
    return {
        "id": BUILD_ID,
        "buildStatus": status,
        "buildComplete": complete,
        "currentPhase": "BUILD",
        "startTime": datetime.now(UTC) - age,
        "logs": {"groupName": "/aws/codebuild/x", "streamName": "0f0e", "deepLink": DEEP_LINK},
        **extra,
    }


class Recorded:
    """A real client behind a Stubber, recording the operations sent."""

    def __init__(self, service: str) -> None:
        self.client = _client(service)
        self.calls: list[str] = []
        self.client.meta.events.register(
            f"before-parameter-build.{service}.*", lambda model, **_: self.calls.append(model.name)
        )
        self.stub = Stubber(self.client)
        self.stub.activate()


# -- finding 8: a transient error is "not yet", not a failed deployment ------------------------------------------


def test_every_code_botocore_retries_is_waited_out() -> None:
    retried = set(TransientRetryableChecker._TRANSIENT_ERROR_CODES) | set(
        ThrottledRetryableChecker._THROTTLED_ERROR_CODES
    )
    assert retried <= TRANSIENT_ERROR_CODES


@pytest.mark.parametrize(
    ("code", "status"),
    [
        ("ThrottlingException", 400),
        ("ServiceUnavailable", 503),
        ("InternalFailure", 500),
        ("AccessDeniedException", 400),
        ("SomethingNew", 502),
    ],
)
def test_a_transient_error_while_polling_answers_not_yet(code: str, status: int) -> None:
    codebuild = Recorded("codebuild")
    codebuild.stub.add_client_error("batch_get_builds", service_error_code=code, http_status_code=status)
    assert is_complete(_event(), codebuild=codebuild.client, logs=_client("logs")) == {"IsComplete": False}


def test_a_connection_error_while_polling_answers_not_yet() -> None:
    # A real connection to a closed port: botocore's EndpointConnectionError after its own retries.
    closed = _client(
        "codebuild", endpoint_url="http://127.0.0.1:9", config=Config(retries={"max_attempts": 1}, connect_timeout=1)
    )
    assert is_complete(_event(), codebuild=closed, logs=_client("logs")) == {"IsComplete": False}


def test_a_permanent_error_still_fails() -> None:
    codebuild = Recorded("codebuild")
    codebuild.stub.add_client_error(
        "batch_get_builds", service_error_code="InvalidInputException", http_status_code=400
    )
    with pytest.raises(Exception, match="InvalidInputException"):
        is_complete(_event(), codebuild=codebuild.client, logs=_client("logs"))


# -- finding 21: decide once CodeBuild says the build is complete ------------------------------------------------


@pytest.mark.parametrize("status", ["SUCCEEDED", "FAILED"])
def test_a_build_not_yet_complete_is_polled_again_and_its_log_not_read(status: str) -> None:
    codebuild, logs = Recorded("codebuild"), Recorded("logs")
    codebuild.stub.add_response("batch_get_builds", {"builds": [_build(status, complete=False)]}, {"ids": [BUILD_ID]})
    assert is_complete(_event(), codebuild=codebuild.client, logs=logs.client) == {"IsComplete": False}
    assert logs.calls == []


# -- finding 4: the budget and StopBuild ---------------------------------------------------------------------------


def test_the_budgets_nest_inside_cloudformations_hour() -> None:
    assert WAITER_TOTAL_SECONDS % QUERY_INTERVAL_SECONDS == 0  # provider-framework util.js: else synth fails
    assert BUILD_DEADLINE_SECONDS + 2 * QUERY_INTERVAL_SECONDS <= WAITER_TOTAL_SECONDS < SERVICE_TIMEOUT_SECONDS
    assert MAX_COPY_TIMEOUT_MINUTES * 60 <= BUILD_DEADLINE_SECONDS and MAX_COPY_TIMEOUT_MINUTES >= 55  # the default


def test_a_build_past_the_deadline_is_stopped_and_fails_the_deployment_with_its_log() -> None:
    codebuild = Recorded("codebuild")
    late = _build(
        "IN_PROGRESS", complete=False, age=timedelta(seconds=BUILD_DEADLINE_SECONDS + 5), currentPhase="QUEUED"
    )
    codebuild.stub.add_response("batch_get_builds", {"builds": [late]}, {"ids": [BUILD_ID]})
    codebuild.stub.add_response("stop_build", {"build": {**late, "buildStatus": "STOPPED"}}, {"id": BUILD_ID})
    with pytest.raises(RuntimeError) as failure:
        is_complete(_event(), codebuild=codebuild.client, logs=_client("logs"))
    assert codebuild.calls == ["BatchGetBuilds", "StopBuild"]
    reason = str(failure.value)
    assert reason.startswith(
        f"model copy did not finish within the deployment's {BUILD_DEADLINE_SECONDS // 60}-minute budget"
    )
    assert "stopped in phase QUEUED" in reason and reason.endswith(f"(build {BUILD_ID}; log: {DEEP_LINK})")


def test_a_build_within_the_deadline_is_left_running() -> None:
    codebuild = Recorded("codebuild")
    running = _build("IN_PROGRESS", complete=False, age=timedelta(seconds=BUILD_DEADLINE_SECONDS - 60))
    codebuild.stub.add_response("batch_get_builds", {"builds": [running]}, {"ids": [BUILD_ID]})
    assert is_complete(_event(), codebuild=codebuild.client, logs=_client("logs")) == {"IsComplete": False}
    assert codebuild.calls == ["BatchGetBuilds"]


# -- findings 12, 22: the reason carries the build's log link and fits the response in bytes -----------------------


def test_the_failure_reason_links_the_build_log() -> None:
    logs = Recorded("logs")
    logs.stub.add_response(
        "get_log_events", {"events": [{"message": "model_download: error: gated repo: set token_secret_name"}]}
    )
    with pytest.raises(RuntimeError) as failure:
        completion(_build("FAILED", complete=True), PROPS, logs.client)
    assert str(failure.value) == (
        f"model copy of bartowski/Llama-GGUF/Llama-Q4_K_M.gguf@main FAILED: gated repo: set "
        f"token_secret_name (build {BUILD_ID}; log: {DEEP_LINK})"
    )


@pytest.mark.parametrize("handler", ["file", "snapshot"])
def test_a_non_ascii_reason_fits_the_budget_in_bytes(handler: str) -> None:
    logs = Recorded("logs")
    line = "model_download: error: " + "; ".join(
        f'modèle-{i}: fichier « {"é" * 20} » introuvable "x"' for i in range(200)
    )
    logs.stub.add_response("get_log_events", {"events": [{"message": line}]})
    props = {**PROPS, "Snapshot": "safetensors", "Fingerprint": "f" * 64}
    complete = {"file": completion, "snapshot": snapshot_resource.completion}[handler]
    with pytest.raises(RuntimeError) as failure:
        complete(_build("FAILED", complete=True), props, logs.client)
    reason = str(failure.value)
    assert len(json.dumps(reason, ensure_ascii=False).encode()) - 2 <= REASON_BUDGET_BYTES
    assert len(reason) < REASON_BUDGET_BYTES  # multi-byte characters: fewer characters than bytes
    assert "… (the rest in the build log)" in reason and reason.endswith(f"; log: {DEEP_LINK})")


# -- finding 20: no empty environment values -------------------------------------------------------------------------


def test_empty_values_are_left_out_of_the_environment_and_the_overrides() -> None:
    props = {**PROPS, "TokenSecretName": "", "Sha256": ""}
    names = [e["name"] for e in build_environment(props)]
    assert "MODEL_SHA256" not in names and "HF_TOKEN_SECRET_NAME" not in names and "MODEL_REPO" in names
    assert all(e["value"] for e in identity_environment(props))
    assert {e["name"]: e["value"] for e in build_environment({**props, "Sha256": "ab" * 32})}[
        "MODEL_SHA256"
    ] == "ab" * 32
