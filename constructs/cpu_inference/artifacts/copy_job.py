"""The CodeBuild copy job that ModelArtifact (one model) and ModelCatalog (batches of pooled models) both run: its
role, its log group, the project on the stack's runner asset (copy_provider.runner_asset), the provider's right to
start and watch it (ModelArtifact only), and the cdk-nag acknowledgments of what CodeBuild grants by default.

The project's environment holds every input of the job (model_download's `build_environment`), so
`aws codebuild start-build` re-runs the same copy by hand; the custom resource overrides only the identity."""

from __future__ import annotations

from typing import Any, Protocol

import aws_cdk as cdk
from aws_cdk import aws_codebuild as codebuild
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from constructs import Construct

from cpu_inference._internal import nag
from cpu_inference.artifacts.copy_provider import ModelCopyProvider, runner_asset
from model_download.build_job import QUEUED_TIMEOUT_MINUTES, SERVICE_TIMEOUT_SECONDS

# A region/account as cdk-nag prints them: a literal for env-bound stacks, a pseudo parameter otherwise.
_REGION = r"(?:<AWS::Region>|[a-z0-9-]+)"
_ACCOUNT = r"(?:<AWS::AccountId>|\d{12})"


class CopyJobSettings(Protocol):
    """How a copy job runs — the fields ModelArtifactProps and ModelCatalogProps share."""

    @property
    def compute_type(self) -> codebuild.ComputeType: ...
    @property
    def build_image(self) -> codebuild.IBuildImage | None: ...
    @property
    def copy_timeout_minutes(self) -> int: ...
    @property
    def log_retention(self) -> logs.RetentionDays: ...


def copy_job_role(scope: Construct, description: str) -> iam.Role:
    """The job's own role ("JobRole"); the caller grants it exactly the bucket prefix it writes."""
    return iam.Role(
        scope, "JobRole", assumed_by=iam.ServicePrincipal("codebuild.amazonaws.com"), description=description
    )


def copy_job_project(
    scope: Construct,
    *,
    provider: ModelCopyProvider | None,
    role: iam.IRole,
    description: str,
    build_spec: dict[str, Any],
    environment: list[dict[str, str]],
    settings: CopyJobSettings,
) -> tuple[logs.LogGroup, codebuild.Project]:
    """The job's log group ("CodeBuildLogs") and project ("CopyJob"), which `provider` (if any) may start and
    watch; without one (ModelCatalog) the caller grants who starts it. environment: model_download's
    build_environment(...) of the resource's properties."""
    log_group = logs.LogGroup(
        scope, "CodeBuildLogs", retention=settings.log_retention, removal_policy=cdk.RemovalPolicy.DESTROY
    )
    runner = runner_asset(scope)
    project = codebuild.Project(
        scope,
        "CopyJob",
        description=description,
        source=codebuild.Source.s3(bucket=runner.bucket, path=runner.s3_object_key),
        build_spec=codebuild.BuildSpec.from_object(build_spec),
        environment=codebuild.BuildEnvironment(
            build_image=settings.build_image or codebuild.LinuxBuildImage.AMAZON_LINUX_2023_5,
            compute_type=settings.compute_type,
            privileged=False,
        ),
        # The same inputs as the custom resource's overrides: `aws codebuild start-build` re-runs this copy.
        environment_variables={e["name"]: codebuild.BuildEnvironmentVariable(value=e["value"]) for e in environment},
        role=role,
        timeout=cdk.Duration.minutes(settings.copy_timeout_minutes),
        # Waiting for capacity (the account's concurrent-build quota) fails in minutes, naming the queue, instead
        # of eating the deployment's hour.
        queued_timeout=cdk.Duration.minutes(QUEUED_TIMEOUT_MINUTES),
        logging=codebuild.LoggingOptions(cloud_watch=codebuild.CloudWatchLoggingOptions(log_group=log_group)),
    )
    if provider is not None:
        provider.allow(project, log_group)
    return log_group, project


def copy_job_resource(
    scope: Construct,
    *,
    provider: ModelCopyProvider,
    project: codebuild.IProject,
    role: iam.IRole,
    resource_type: str,
    properties: dict[str, Any],
    identity: tuple[str, ...],
) -> cdk.CustomResource:
    """The custom resource ("Copy") that runs the job at deploy time. Its properties are the project's name and
    the `identity` keys of `properties` only: what is copied; how (token secret, endpoint, parallelism) lives only
    in the project's environment, so changing it updates the project and re-runs nothing."""
    resource = cdk.CustomResource(
        scope,
        "Copy",
        service_token=provider.service_token,
        resource_type=resource_type,
        properties={"ProjectName": project.project_name, **{k: properties[k] for k in identity}},
        service_timeout=cdk.Duration.seconds(SERVICE_TIMEOUT_SECONDS),
    )
    resource.node.add_dependency(role)  # the job must find its permissions in place before it starts
    return resource


def acknowledge_copy_job(role: iam.IRole, project: codebuild.Project, *, encrypted: str) -> None:
    """cdk-nag: what CodeBuild grants a project by default. encrypted: what holds the copied bytes' encryption
    (e.g. "the model object is encrypted by the bucket's key")."""
    nag.acknowledge_wildcards(
        role,
        {
            rf"Resource::arn:<AWS::Partition>:logs:{_REGION}:{_ACCOUNT}:log-group:/aws/codebuild/<.*CopyJob[0-9A-F]{{8}}>:\*": (
                "CodeBuild's default grant on the project's default log group (streams named at run time); the job logs to its own group"
            ),
            rf"Resource::arn:<AWS::Partition>:codebuild:{_REGION}:{_ACCOUNT}:report-group/<.*CopyJob[0-9A-F]{{8}}>-\*": (
                "CodeBuild's default test-report permissions, limited to report groups named after this project"
            ),
            r"Action::s3:(GetObject|GetBucket|List)\*": (
                "CodeBuild's S3 source grant (Source.s3 -> bucket.grantRead): GetObject* on the one asset object holding the "
                "job's code; GetBucket*/List* on the whole CDK asset bucket, read-only"
            ),
        },
    )
    nag.acknowledge(
        project,
        "AwsSolutions-CB4",
        f"The job produces no build artifacts (NO_ARTIFACTS, no cache) for a KMS key to encrypt; {encrypted}",
    )
