"""The copy job's deploy-time budget and the provider around it, as synthesized: one stack with a ModelArtifact and a
ModelCatalog (sharing the stack's copy provider), cdk-nag applied. Every number comes from model_download.build_job
(one owner), checked here against CloudFormation's and CodeBuild's limits."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import botocore.session
import pytest

from cpu_inference.artifacts import ModelArtifact, ModelArtifactProps, ModelBucket, ModelCatalog, ModelCatalogProps
from cpu_inference.artifacts.model_catalog import DEFAULT_BUILD_TIMEOUT_MINUTES
from model_download.build_job import (
    MAX_COPY_TIMEOUT_MINUTES,
    QUERY_INTERVAL_SECONDS,
    QUEUED_TIMEOUT_MINUTES,
    SERVICE_TIMEOUT_SECONDS,
    WAITER_TOTAL_SECONDS,
)
from model_download.catalog import CatalogEntry
from tests.support.cdk import apply_nag, nag_errors, synth, template_json

pytestmark = pytest.mark.synth

ENV = cdk.Environment(account="123456789012", region="us-east-1")


@dataclass
class Synthesized:
    app: cdk.App
    stack: cdk.Stack
    template: dict[str, Any]

    def resources(self, type_: str) -> dict[str, dict[str, Any]]:
        return {k: v for k, v in self.template["Resources"].items() if v["Type"] == type_}


@pytest.fixture(scope="module")
def synthesized() -> Synthesized:
    app = cdk.App()
    apply_nag(app)
    stack = cdk.Stack(app, "Models", env=ENV, stack_name="acme-models-prod")
    bucket = ModelBucket(stack, "ModelBucket")
    ModelArtifact(
        stack,
        "Smollm2",
        props=ModelArtifactProps(
            model_bucket=bucket,
            name="smollm2",
            hf_repo="bartowski/SmolLM2-1.7B-Instruct-GGUF",
            file="SmolLM2-1.7B-Instruct-Q4_K_M.gguf",
        ),
    )
    ModelCatalog(
        stack,
        "Farm",
        props=ModelCatalogProps(
            model_bucket=bucket,
            entries=(
                CatalogEntry(
                    name="m-0001", hf_repo="acme-models/classifier-0001-GGUF", file="classifier-0001-Q4_K_M.gguf"
                ),
            ),
        ),
    )
    synth(app)
    return Synthesized(app, stack, template_json(stack))


def test_the_waiter_logs_under_vendedlogs_named_after_the_stack(synthesized: Synthesized) -> None:
    # Step Functions bp-cwl: outside /aws/vendedlogs/ every logging state machine grows the account's 5,120-character
    # CloudWatch Logs resource policy.
    machines = synthesized.resources("AWS::StepFunctions::StateMachine")
    groups = synthesized.resources("AWS::Logs::LogGroup")
    names = []
    for machine in machines.values():
        for destination in machine["Properties"]["LoggingConfiguration"]["Destinations"]:
            arn = destination["CloudWatchLogsLogGroup"]["LogGroupArn"]["Fn::GetAtt"][0]
            names.append(groups[arn]["Properties"]["LogGroupName"])
    # The provider's waiter and the catalog's copy state machine (catalog_fanout: unique per construct).
    assert names[0] == "/aws/vendedlogs/states/acme-models-prod-model-copy-waiter"
    assert len(names) == 2 and names[1].startswith("/aws/vendedlogs/states/acmemodelsprod-Farm-Copy-")
    model = botocore.session.get_session().get_service_model("logs").shape_for("LogGroupName")
    assert all(len(n) <= model.metadata["max"] for n in names)


def test_the_budgets_are_build_jobs(synthesized: Synthesized) -> None:
    (machine,) = [
        m for k, m in synthesized.resources("AWS::StepFunctions::StateMachine").items() if "CopyProvider" in k
    ]
    definition = "".join(
        p if isinstance(p, str) else "" for p in machine["Properties"]["DefinitionString"]["Fn::Join"][1]
    )
    assert (
        f'"IntervalSeconds":{QUERY_INTERVAL_SECONDS},"MaxAttempts":{WAITER_TOTAL_SECONDS // QUERY_INTERVAL_SECONDS}'
        in definition
    )
    # The artifact's copy is awaited within CloudFormation's hour; the catalog's copy is only started (no wait).
    customs = [r for r in synthesized.template["Resources"].values() if r["Type"] == "Custom::ModelArtifact"]
    assert len(customs) == 1 and {r["Properties"]["ServiceTimeout"] for r in customs} == {str(SERVICE_TIMEOUT_SECONDS)}
    assert [r["Type"] for r in synthesized.template["Resources"].values() if r["Type"].startswith("Custom::")] == [
        "Custom::ModelArtifact",
        "Custom::ModelCatalogCopy",
    ]
    create = botocore.session.get_session().get_service_model("codebuild").operation_model("CreateProject").input_shape
    queued = create.members["queuedTimeoutInMinutes"].metadata
    for project in synthesized.resources("AWS::CodeBuild::Project").values():
        props = project["Properties"]
        assert (
            props["QueuedTimeoutInMinutes"] == QUEUED_TIMEOUT_MINUTES and queued["min"] <= QUEUED_TIMEOUT_MINUTES <= 10
        )
        # The artifact's job fits the deploy's hour; a catalog batch's build is bounded by CodeBuild alone.
        assert props["TimeoutInMinutes"] in (55, DEFAULT_BUILD_TIMEOUT_MINUTES) and MAX_COPY_TIMEOUT_MINUTES >= 55
        # No empty values (finding 20): the buildspec reads optional ones as ${VAR:+…}.
        assert all(v["Value"] != "" for v in props["Environment"]["EnvironmentVariables"])


def test_is_complete_may_stop_exactly_the_copy_jobs(synthesized: Synthesized) -> None:
    projects = set(synthesized.resources("AWS::CodeBuild::Project"))
    stops = [
        st
        for policy in synthesized.resources("AWS::IAM::Policy").values()
        for st in policy["Properties"]["PolicyDocument"]["Statement"]
        if "codebuild:StopBuild" in (st["Action"] if isinstance(st["Action"], list) else [st["Action"]])
    ]
    assert len(stops) == 2
    for st in stops:
        resources = st["Resource"] if isinstance(st["Resource"], list) else [st["Resource"]]
        assert [r["Fn::GetAtt"] for r in resources] == [[r["Fn::GetAtt"][0], "Arn"] for r in resources]
        assert {r["Fn::GetAtt"][0] for r in resources} <= projects and "*" not in str(resources)
    assert nag_errors(synthesized.stack) == []


@pytest.mark.parametrize("minutes", [MAX_COPY_TIMEOUT_MINUTES + 1, 60])
def test_a_job_timeout_past_the_deadline_is_refused(minutes: int) -> None:
    # The build is stopped BUILD_DEADLINE_SECONDS after it starts: a longer job timeout could never fire.
    artifact = ModelArtifactProps(
        model_bucket=None, name="m", hf_repo="o/r", file="f.gguf", copy_timeout_minutes=minutes
    )  # type: ignore[arg-type]
    with pytest.raises(
        ValueError, match=rf"ModelArtifactProps\.copy_timeout_minutes must be 5\.\.{MAX_COPY_TIMEOUT_MINUTES} "
    ):
        artifact.validate()
    # A catalog batch's build is not awaited by the deploy: CodeBuild's own range applies (5..2160).
    catalog = ModelCatalogProps(
        model_bucket=None,
        entries=(CatalogEntry(name="m", hf_repo="o/r", file="f.gguf"),),  # type: ignore[arg-type]
        copy_timeout_minutes=minutes,
    )
    catalog.validate()
    with pytest.raises(ValueError, match=r"ModelCatalogProps\.copy_timeout_minutes must be 5\.\.2160 "):
        dataclasses.replace(catalog, copy_timeout_minutes=2161).validate()
    ModelArtifactProps(
        model_bucket=None,
        name="m",
        hf_repo="o/r",
        file="f.gguf",  # type: ignore[arg-type]
        copy_timeout_minutes=MAX_COPY_TIMEOUT_MINUTES,
    ).validate()


def test_the_source_grant_acknowledgment_says_what_the_template_grants(synthesized: Synthesized) -> None:
    # CodeBuild's Source.s3 grants GetBucket*/List* on the whole asset bucket (only GetObject* is object-scoped).
    report = json.loads((Path(synthesized.app.outdir) / "validation-report.json").read_text())
    reasons = {
        v["reason"]
        for plugin in report["pluginReports"]
        for v in plugin["suppressedViolations"]
        if v["ruleName"].startswith("AwsSolutions-IAM5[Action::s3:") and "JobRole" in v["acknowledgedAt"]
    }
    assert reasons == {
        "CodeBuild's S3 source grant (Source.s3 -> bucket.grantRead): GetObject* on the one asset object "
        "holding the job's code; GetBucket*/List* on the whole CDK asset bucket, read-only"
    }
    bucket_wide = [
        st
        for policy in synthesized.resources("AWS::IAM::Policy").values()
        for st in policy["Properties"]["PolicyDocument"]["Statement"]
        if "s3:GetBucket*" in st["Action"]
        and any(isinstance(r, dict) and "Fn::Join" in r and not json.dumps(r).count("/") for r in st["Resource"])
    ]
    assert bucket_wide  # a resource with no object path: the bucket itself
