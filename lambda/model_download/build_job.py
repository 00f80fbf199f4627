"""What both custom resources (one model's Custom::ModelArtifact, custom_resource.py and snapshot_resource.py; the
retired Custom::ModelCatalog, catalog_resource.py, now its Delete only) do with their CodeBuild job: start it with
the identity as environment overrides, poll it, read the receipt it exported, say why it failed in one line (the
job's own `model_download: error:` line when its log is readable, else CodeBuild's phase messages, plus the build
log's link) — and never run it again for an identity the resource already deployed.

Time budget (one owner: the constants below; copy_job/copy_provider/ModelArtifactProps derive from them).
CloudFormation waits at most SERVICE_TIMEOUT_SECONDS for a custom resource, counted from its request; the provider's
waiter gives up earlier (WAITER_TOTAL_SECONDS) so its message, not CloudFormation's bare timeout, reaches the
stack; isComplete stops a build still running BUILD_DEADLINE_SECONDS after it was started, earlier still, so the
reason names the build and its log and the copy does not run on after the deployment failed.

Rollback. When an Update fails, the provider framework keeps the PhysicalResourceId and CloudFormation rolls back
with ANOTHER Update whose ResourceProperties are the old ones (aws/aws-cdk#17040, #29581; the same Update comes
when this resource succeeded and a later one failed). Re-running the job then would resolve a branch revision again
(the pin could move) and ask the Hub again (an outage would turn the rollback into UPDATE_ROLLBACK_FAILED). So the
PhysicalResourceId carries what was deployed — the identity's digest and the receipt, for the current and the
previous identity — and an Update to either is answered from the id alone: no Hub, no CodeBuild, the same
attributes as before.

Sources: botocore codebuild StartBuild (`environmentVariablesOverride`, `idempotencyToken`), BatchGetBuilds
(`buildStatus`: SUCCEEDED, FAILED, FAULT, TIMED_OUT, IN_PROGRESS, STOPPED; `buildComplete`; `startTime`;
`exportedEnvironmentVariables`; `logs.groupName/streamName/deepLink`), StopBuild (`id`)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qsl, urlencode

from .errors import ERROR_PREFIX

FAILED = frozenset({"FAILED", "FAULT", "STOPPED", "TIMED_OUT"})

# -- the deploy-time budget ---------------------------------------------------------------------------------------
# AWS::CloudFormation::CustomResource ServiceTimeout: "must be an integer from 1 to 3600" seconds
# (https://docs.aws.amazon.com/cdk/api/v2/docs/aws-cdk-lib.CfnCustomResourceProps.html).
SERVICE_TIMEOUT_SECONDS = 3600
QUERY_INTERVAL_SECONDS = 30
# The waiter (Step Functions Retry: MaxAttempts x IntervalSeconds, custom-resources provider-framework util.js
# calculateRetryPolicy) starts after onEvent and each attempt adds an isComplete invocation (~1-2 s) to the interval:
# 112 attempts leave ~4 minutes of CloudFormation's hour for that, so the framework answers first.
WAITER_TOTAL_SECONDS = SERVICE_TIMEOUT_SECONDS - 8 * QUERY_INTERVAL_SECONDS
# Counted from the build's startTime (StartBuild, inside onEvent); two polls before the waiter gives up.
BUILD_DEADLINE_SECONDS = WAITER_TOTAL_SECONDS - 2 * QUERY_INTERVAL_SECONDS
# CodeBuild's timeoutInMinutes counts after the queue; a longer job timeout could never be reached before the
# deadline stops the build. The default, 55, is the maximum.
MAX_COPY_TIMEOUT_MINUTES = BUILD_DEADLINE_SECONDS // 60
# queuedTimeoutInMinutes (botocore: 5..480): a build that waits for capacity (account concurrency quota) fails
# fast, naming the queue, instead of eating the hour.
QUEUED_TIMEOUT_MINUTES = 10

# -- CloudFormation's response limits (https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/crpg-ref-responses.html):
# "The total size of the response body can't exceed 4096 bytes"; PhysicalResourceId "can be up to 1 KB in size".
# The FAILED body (cfn-response.js submitResponse) holds the reason wrapped by framework.js (`Error: `, the
# `Logs: /aws/lambda/<fn>` line, ~4 Node frames: ~400 B), StackId (<=~215 B), RequestId, LogicalResourceId (<=255 B),
# the PhysicalResourceId and Data {BuildId} (<=~300 B): 2000 + 768 leave room for all of it at their maxima.
REASON_BUDGET_BYTES = 2000
PHYSICAL_ID_BUDGET_BYTES = 768

# -- errors isComplete waits out (botocore 1.44 retries/standard.py: TransientRetryableChecker,
# ThrottledRetryableChecker, ThrottlingStatusCodeChecker). botocore has already retried them when they reach us;
# the next poll is 30 s later. AccessDenied: IAM is eventually consistent and the handler's policy is created with
# the stack (https://docs.aws.amazon.com/IAM/latest/UserGuide/troubleshoot_general.html#troubleshoot_general_eventual-consistency).
TRANSIENT_ERROR_CODES = frozenset(
    {
        "RequestTimeout",
        "RequestTimeoutException",
        "PriorRequestNotComplete",
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottledException",
        "TooManyRequestsException",
        "ProvisionedThroughputExceededException",
        "TransactionInProgressException",
        "RequestLimitExceeded",
        "BandwidthLimitExceeded",
        "LimitExceededException",
        "RequestThrottled",
        "SlowDown",
        "EC2ThrottledException",
        "InternalFailure",
        "InternalServerError",
        "ServiceUnavailable",
        "AccessDenied",
        "AccessDeniedException",
    }
)
TRANSIENT_STATUS_CODES = frozenset({429, 500, 502, 503, 504})


def client(name: str):  # noqa: ANN201
    import boto3

    return boto3.client(name)


def plaintext_environment(values: Mapping[str, Any]) -> list[dict[str, str]]:
    """CodeBuild environment variables (names and locations only — never a secret's value). Empty values are left
    out: the buildspecs read optional ones as `${VAR:+…}` (unset and empty alike), and whether CodeBuild accepts an
    empty value is not documented (botocore EnvironmentVariable.value has no minimum; reports differ)."""
    return [{"name": k, "value": str(v), "type": "PLAINTEXT"} for k, v in values.items() if str(v) != ""]


def only(environment: Iterable[dict[str, str]], names: Iterable[str]) -> list[dict[str, str]]:
    """The variables of `environment` named in `names` (StartBuild's overrides: the job's identity)."""
    keep = set(names)
    return [e for e in environment if e["name"] in keep]


def start_build(
    props: Mapping[str, Any], overrides: list[dict[str, str]], codebuild=None, request_id: str | None = None
) -> dict[str, Any]:  # noqa: ANN001
    """StartBuild of the resource's project (`ProjectName`) with `overrides`; the build record. The CloudFormation
    request id is the idempotency token: a retried invocation of the same request gets the same build
    (botocore StartBuildInput.idempotencyToken, "valid for 5 minutes")."""
    codebuild = codebuild or client("codebuild")
    extra = {"idempotencyToken": request_id} if request_id else {}
    return codebuild.start_build(projectName=props["ProjectName"], environmentVariablesOverride=overrides, **extra)[
        "build"
    ]


# -- what was deployed, in the PhysicalResourceId -------------------------------------------------------------------

_VERSION = "1"


@dataclass(frozen=True)
class Deployed:
    """One deployed identity: its digest and the receipt values needed to rebuild the attributes."""

    digest: str
    stored: dict[str, str]


def identity_digest(props: Mapping[str, Any], names: Iterable[str]) -> str:
    """A digest of the identity properties `names` (what is copied; nothing about how)."""
    canonical = json.dumps([[k, props.get(k)] for k in names], separators=(",", ":"), sort_keys=True)
    return hashlib.sha256(canonical.encode()).hexdigest()[:32]


def _section(prefix: str, deployed: Deployed) -> list[tuple[str, str]]:
    return [(prefix, deployed.digest), *((f"{prefix}.{k}", v) for k, v in deployed.stored.items())]


def _json_bytes(text: str) -> int:
    """Bytes `text` takes inside the JSON response (framework JSON.stringify: UTF-8, quotes and controls escaped)."""
    return len(json.dumps(text, ensure_ascii=False).encode()) - 2


def _fit(text: str, room: int) -> str:
    """The longest prefix of `text` that takes at most `room` bytes in the JSON response."""
    while text and _json_bytes(text) > room:
        text = text[: len(text) - max(1, (_json_bytes(text) - room) // 6)]  # a character takes 1..6 bytes as JSON
    return text


def physical_id(location: str, current: Deployed, previous: Deployed | None = None) -> str:
    """`<location>#<payload>`: location is for people (s3://bucket/key); the payload (URL-encoded, so it holds no
    '#') is what was deployed. Within PHYSICAL_ID_BUDGET_BYTES: the location is shortened first, then the
    previous identity is dropped."""
    for prev in (previous, None) if previous is not None else (None,):
        payload = urlencode([("v", _VERSION), *_section("c", current), *(_section("p", prev) if prev else [])])
        room = PHYSICAL_ID_BUDGET_BYTES - len(payload) - 1
        if room >= min(_json_bytes(location), 16):
            return f"{_fit(location, room)}#{payload}"
    raise ValueError(f"receipt too long for a PhysicalResourceId: {current}")


def deployed(physical_resource_id: str | None) -> list[Deployed]:
    """What a PhysicalResourceId says was deployed: [current, previous] (either may be missing); [] for an id this
    code did not write (a Create's placeholder, an id from an older version)."""
    _, hash_, payload = (physical_resource_id or "").rpartition("#")
    if not hash_:
        return []
    fields = parse_qsl(payload, keep_blank_values=True)
    if not fields or fields[0] != ("v", _VERSION):
        return []
    out: list[Deployed] = []
    for prefix in ("c", "p"):
        digest = next((v for k, v in fields if k == prefix), None)
        if digest:
            out.append(Deployed(digest, {k[len(prefix) + 1 :]: v for k, v in fields if k.startswith(prefix + ".")}))
    return out


@dataclass(frozen=True)
class Receipts:
    """How one kind of resource keeps its receipt in the PhysicalResourceId.

    identity: the properties that say what is copied; stored: the attributes kept in the id; attributes(props,
    stored): every attribute, rebuilt (the rest derive from the properties); location(props, attributes): where it
    landed, for people."""

    identity: tuple[str, ...]
    stored: tuple[str, ...]
    attributes: Callable[[Mapping[str, Any], Mapping[str, str]], dict[str, str]]
    location: Callable[[Mapping[str, Any], Mapping[str, str]], str]

    def digest(self, props: Mapping[str, Any]) -> str:
        return identity_digest(props, self.identity)

    def succeeded(self, event: Mapping[str, Any], data: Mapping[str, str]) -> dict[str, Any]:
        """isComplete's answer for a build that produced `data`: the id records it, and the identity it replaces."""
        props = event["ResourceProperties"]
        before = deployed(event.get("PhysicalResourceId")) if event["RequestType"] == "Update" else []
        current = Deployed(self.digest(props), {k: data[k] for k in self.stored})
        previous = before[0] if before and before[0].digest != current.digest else None
        return {
            "IsComplete": True,
            "PhysicalResourceId": physical_id(self.location(props, data), current, previous),
            "Data": dict(data),
        }

    def completion(
        self,
        build: dict[str, Any],
        props: dict[str, Any],
        logs,
        event: Mapping[str, Any] | None,  # noqa: ANN001
        resolved: Callable[[dict[str, Any], dict[str, Any]], dict[str, str]],
        headline: Callable[[dict[str, Any]], str],
    ) -> dict[str, Any]:
        """isComplete's answer for one complete BatchGetBuilds record: on success the attributes `resolved(build,
        props)` checks and returns, recorded in the id; "not yet" while it runs; for a failed build an error whose
        text CloudFormation shows as the status reason (`headline(props)`, the status, the job's error line, the log).
        event: the isComplete event (its PhysicalResourceId names what this build replaces); default a Create."""
        status = build.get("buildStatus", "IN_PROGRESS")
        if status == "SUCCEEDED":
            return self.succeeded(
                event or {"RequestType": "Create", "ResourceProperties": props}, resolved(build, props)
            )
        if status not in FAILED:
            return {"IsComplete": False}
        raise RuntimeError(failure_reason(f"{headline(props)} {status}", failure_detail(build, logs), build))

    def is_complete(
        self,
        event: dict[str, Any],
        what: str,
        completion: Callable[[dict[str, Any], dict[str, Any], Any, dict[str, Any]], dict[str, Any]],
        codebuild=None,
        logs=None,
    ) -> dict[str, Any]:  # noqa: ANN001
        """isComplete: at once when onEvent answered from the id (already_complete), else by polling the build."""
        return self.already_complete(event) or poll(
            event, what, lambda build, props, logs: completion(build, props, logs, event), codebuild, logs
        )

    def redeploy(self, event: Mapping[str, Any]) -> dict[str, Any] | None:
        """onEvent for an Update to an identity already deployed (unchanged, or the previous one — a rollback): the
        answer without a build; None when the job must run."""
        if event["RequestType"] != "Update":
            return None
        props = event["ResourceProperties"]
        digest = self.digest(props)
        found = deployed(event.get("PhysicalResourceId"))
        for n, d in enumerate(found):
            if d.digest == digest:
                data = self.attributes(props, d.stored)
                pid = event["PhysicalResourceId"] if n == 0 else physical_id(self.location(props, data), d, found[0])
                print(f"unchanged: {self.location(props, data)} is already deployed for these properties; no build")
                return {"PhysicalResourceId": pid, "Data": data}
        return None

    def already_complete(self, event: Mapping[str, Any]) -> dict[str, Any] | None:
        """isComplete after redeploy(): the id already holds this identity, so there is no build to poll."""
        if event["RequestType"] == "Delete":
            return None
        found = deployed(event.get("PhysicalResourceId"))
        props = event["ResourceProperties"]
        if found and found[0].digest == self.digest(props):
            return {
                "IsComplete": True,
                "PhysicalResourceId": event["PhysicalResourceId"],
                "Data": self.attributes(props, found[0].stored),
            }
        return None


# -- polling -------------------------------------------------------------------------------------------------------


def transient(exc: BaseException) -> bool:
    """An AWS error the next poll may not see: throttling, 5xx, a connection problem, AccessDenied (IAM propagation)."""
    from botocore.exceptions import ClientError, ConnectionError, HTTPClientError

    if isinstance(exc, (ConnectionError, HTTPClientError)):
        return True
    if isinstance(exc, ClientError):
        error = exc.response.get("Error") or {}
        status = (exc.response.get("ResponseMetadata") or {}).get("HTTPStatusCode")
        return error.get("Code") in TRANSIENT_ERROR_CODES or status in TRANSIENT_STATUS_CODES
    return False


def _now() -> datetime:
    return datetime.now(UTC)


def poll(
    event: Mapping[str, Any],
    what: str,
    complete: Callable[[dict[str, Any], dict[str, Any], Any], dict[str, Any]],
    codebuild=None,
    logs=None,  # noqa: ANN001
) -> dict[str, Any]:
    """isComplete: a Delete is complete at once; otherwise `complete(build, properties, logs)` decides from the
    BatchGetBuilds record of the build onEvent started (`Data.BuildId`) once CodeBuild says it is complete
    (`buildComplete`: its logs and exported variables are final). A transient error answers "not yet"; a build
    past BUILD_DEADLINE_SECONDS is stopped and fails the deployment."""
    if event["RequestType"] == "Delete":
        return {"IsComplete": True}
    build_id = event["Data"]["BuildId"]
    codebuild = codebuild or client("codebuild")
    try:
        builds = codebuild.batch_get_builds(ids=[build_id]).get("builds") or []
    except Exception as exc:
        if not transient(exc):
            raise
        print(f"{what} build {build_id}: {type(exc).__name__}: {exc}; asking again at the next poll")
        return {"IsComplete": False}
    if not builds:
        raise RuntimeError(f"{what} build {build_id} not found")
    build = builds[0]
    if not build.get("buildComplete"):
        _stop_if_over_budget(build, what, codebuild)
        return {"IsComplete": False}
    return complete(build, event["ResourceProperties"], logs or client("logs"))


def _stop_if_over_budget(build: Mapping[str, Any], what: str, codebuild) -> None:  # noqa: ANN001
    started = build.get("startTime")
    if not isinstance(started, datetime):
        return
    elapsed = (_now() - started).total_seconds()
    if elapsed < BUILD_DEADLINE_SECONDS:
        return
    try:
        codebuild.stop_build(id=build["id"])
    except Exception as exc:  # noqa: BLE001 - the deployment fails either way; the build's own timeout still applies
        print(f"{what} build {build.get('id')}: StopBuild failed: {type(exc).__name__}: {exc}")
    phase = build.get("currentPhase") or build.get("buildStatus") or "IN_PROGRESS"
    raise RuntimeError(
        failure_reason(
            f"{what} did not finish within the deployment's {BUILD_DEADLINE_SECONDS // 60}-minute budget (CloudFormation "
            f"waits at most {SERVICE_TIMEOUT_SECONDS // 60} minutes for a custom resource)",
            f"stopped in phase {phase} after {int(elapsed // 60)} minutes; copy it outside the deployment (README: "
            f"Time limit) and deploy again",
            build,
        )
    )


def failure_reason(head: str, detail: str, build: Mapping[str, Any]) -> str:
    """`<head>: <detail> (build <id>; log: <deepLink>)`, the detail cut so the whole takes at most
    REASON_BUDGET_BYTES of the JSON response (UTF-8 bytes, escapes included)."""
    link = (build.get("logs") or {}).get("deepLink")
    tail = f" (build {build.get('id')}" + (f"; log: {link})" if link else ")")
    text = f"{head}: {detail}{tail}"
    if _json_bytes(text) <= REASON_BUDGET_BYTES:
        return text
    marker = " … (the rest in the build log)"
    room = REASON_BUDGET_BYTES - _json_bytes(f"{head}: {marker}{tail}")
    return f"{head}: {_fit(detail, room).rstrip()}{marker}{tail}"


def receipt(build: Mapping[str, Any], names: Mapping[str, str], what: str, build_spec: str) -> dict[str, str]:
    """The exported variables `names` (variable -> attribute) of a succeeded build, as attributes; raises when the
    job exported none of them (a project still on an older buildspec)."""
    exported = {v.get("name"): v.get("value") or "" for v in build.get("exportedEnvironmentVariables") or []}
    missing = [name for name in names if not exported.get(name)]
    if missing:
        raise RuntimeError(
            f"{what} build {build.get('id')} succeeded but exported no {', '.join(missing)}: the project's buildspec "
            f"must be model_download.buildspec.{build_spec} (redeploy the stack)"
        )
    return {attr: exported[name] for name, attr in names.items()}


def job_error_line(build: Mapping[str, Any], logs) -> str | None:  # noqa: ANN001
    """The copy job's own `model_download: error:` line from its CloudWatch log stream, if readable."""
    info = build.get("logs") or {}
    group, stream = info.get("groupName"), info.get("streamName")
    if not group or not stream:
        return None
    try:
        events = logs.get_log_events(logGroupName=group, logStreamName=stream, limit=200, startFromHead=False)["events"]
    except Exception:  # noqa: BLE001 - the build status alone still fails the deployment
        return None
    for ev in reversed(events):
        message = ev.get("message", "")
        if ERROR_PREFIX in message:
            return message[message.index(ERROR_PREFIX) + len(ERROR_PREFIX) :].strip()
    return None


def failure_detail(build: Mapping[str, Any], logs) -> str:  # noqa: ANN001
    """Why a failed build failed: the job's error line, else the failed phases' messages."""
    detail = job_error_line(build, logs)
    if detail is None:
        phases = [p for p in build.get("phases", []) if p.get("phaseStatus") not in (None, "SUCCEEDED")]
        contexts = [c.get("message", "") for p in phases for c in p.get("contexts", []) if c.get("message")]
        detail = "; ".join(contexts) or "see the build log"
    return detail
