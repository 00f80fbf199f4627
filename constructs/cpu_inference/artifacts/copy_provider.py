"""ModelCopyProvider: one custom-resource provider per stack for every ModelArtifact in it, and the one S3 asset of
the model_download package every copy job of the stack runs (`runner_asset()`, ModelCatalog's builds too — the
catalog's copy is started by its own state machine and needs no provider).

CDK's Provider framework with an isComplete waiter (Step Functions): onEvent starts the artifact's CodeBuild
copy job, isComplete polls it every 30 s, fails the deployment when the job fails and, when it succeeds, returns
the job's receipt (the commit the revision resolved to, sha256, key) as the resource's attributes — the framework
merges isComplete's `Data` into the response (provider-framework/runtime/framework.js). CloudFormation gives a
custom resource no more than one hour (ServiceTimeout ≤ 3600 s); the budgets inside it are model_download.build_job's
(one owner): the waiter gives up at WAITER_TOTAL_SECONDS, isComplete stops a build still running at
BUILD_DEADLINE_SECONDS. A copy that needs longer is pre-seeded with `cpu-inference download` (the artifact then
finds it in place)."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_codebuild as codebuild
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3_assets as s3_assets
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import custom_resources as cr
from constructs import Construct

from cpu_inference._internal import nag
from cpu_inference._internal.aws_names import VENDED_LOGS_PREFIX
from cpu_inference.artifacts.runtime_package import staged_root
from model_download.build_job import (
    QUERY_INTERVAL_SECONDS,
    WAITER_TOTAL_SECONDS,
)

PROVIDER_ID = "CpuInferenceModelCopyProvider"
RUNNER_ID = "CpuInferenceModelCopyRunner"
RUNTIME = lambda_.Runtime.PYTHON_3_14

_FRAMEWORK_WILDCARDS = {
    r"Resource::<.*framework(onEvent|isComplete|onTimeout)[0-9A-F]{8}\.Arn>:\*": (
        "The provider framework invokes its own functions; ':*' covers their versions and aliases only"
    ),
    r"Resource::<.*CopyProvider(OnEvent|IsComplete)[0-9A-F]{8}\.Arn>:\*": (
        "The provider framework invokes this construct's two handler functions; ':*' covers their versions and aliases only"
    ),
}


def runner_asset(scope: Construct) -> s3_assets.Asset:
    """The model_download package as one S3 asset, created on first use and shared by every copy job of the stack
    (ModelArtifact's, awaited through the provider; ModelCatalog's, started by its state machine)."""
    stack = cdk.Stack.of(scope)
    existing = stack.node.try_find_child(RUNNER_ID)
    if isinstance(existing, s3_assets.Asset):
        return existing
    return s3_assets.Asset(stack, RUNNER_ID, path=str(staged_root()))


class ModelCopyProvider(Construct):
    """Attributes: on_event (Function), is_complete (Function), provider (cr.Provider), service_token;
    runner_asset(): the model_download package that every copy job of the stack runs."""

    @classmethod
    def of(cls, scope: Construct) -> ModelCopyProvider:
        stack = cdk.Stack.of(scope)
        found = stack.node.try_find_child(PROVIDER_ID)
        return found if isinstance(found, ModelCopyProvider) else cls(stack, PROVIDER_ID)

    def __init__(self, scope: Construct, id: str) -> None:
        super().__init__(scope, id)
        code = lambda_.Code.from_asset(str(staged_root()))
        self.on_event = self._function(
            "OnEvent", "model_download.custom_resource.on_event", code, "starts a model copy job"
        )
        self.is_complete = self._function(
            "IsComplete", "model_download.custom_resource.is_complete", code, "polls a model copy job"
        )
        # One provider per stack (of()), and stack names are unique in an account and region.
        self.waiter_log_group = logs.LogGroup(
            self,
            "WaiterLogs",
            log_group_name=f"{VENDED_LOGS_PREFIX}{cdk.Stack.of(self).stack_name}-model-copy-waiter",
            retention=logs.RetentionDays.ONE_YEAR,
            removal_policy=cdk.RemovalPolicy.DESTROY,
        )
        self.provider = cr.Provider(
            self,
            "Provider",
            on_event_handler=self.on_event,
            is_complete_handler=self.is_complete,
            query_interval=cdk.Duration.seconds(QUERY_INTERVAL_SECONDS),
            total_timeout=cdk.Duration.seconds(WAITER_TOTAL_SECONDS),
            disable_waiter_state_machine_logging=False,
            waiter_state_machine_log_options=cr.LogOptions(destination=self.waiter_log_group, level=sfn.LogLevel.ALL),
        )
        self.service_token = self.provider.service_token
        self._acknowledged: set[str] = set()
        self._acknowledge_framework()

    def _function(self, id: str, handler: str, code: lambda_.Code, what: str) -> lambda_.Function:
        log_group = logs.LogGroup(
            self, f"{id}Logs", retention=logs.RetentionDays.ONE_YEAR, removal_policy=cdk.RemovalPolicy.DESTROY
        )
        role = iam.Role(
            self,
            f"{id}Role",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description=f"Custom resource that {what}",
        )
        role.add_to_policy(
            iam.PolicyStatement(
                actions=["logs:CreateLogStream", "logs:PutLogEvents"], resources=[log_group.log_group_arn]
            )
        )
        return lambda_.Function(
            self,
            id,
            runtime=RUNTIME,
            handler=handler,
            code=code,
            role=role,
            log_group=log_group,
            timeout=cdk.Duration.minutes(1),
            memory_size=256,
            description=f"cpu-inference: {what}",
        )

    def runner_asset(self) -> s3_assets.Asset:
        """The stack's model_download package asset (module-level runner_asset): the same one ModelCatalog's
        builds run, which need no provider."""
        return runner_asset(self)

    def allow(self, project: codebuild.IProject, job_logs: logs.ILogGroup) -> None:
        """Let the handlers start, watch and (past the deadline) stop one copy job, and read its log for the error
        line. StartBuild, BatchGetBuilds and StopBuild all take the project's ARN as their resource (CodeBuild
        permissions reference: https://docs.aws.amazon.com/codebuild/latest/userguide/auth-and-access-control-permissions-reference.html)."""
        self.on_event.add_to_role_policy(
            iam.PolicyStatement(actions=["codebuild:StartBuild"], resources=[project.project_arn])
        )
        self.is_complete.add_to_role_policy(
            iam.PolicyStatement(
                actions=["codebuild:BatchGetBuilds", "codebuild:StopBuild"], resources=[project.project_arn]
            )
        )
        self.is_complete.add_to_role_policy(
            iam.PolicyStatement(actions=["logs:GetLogEvents"], resources=[job_logs.log_group_arn])
        )
        nag.acknowledge_wildcards(self, _FRAMEWORK_WILDCARDS, self._acknowledged)

    def _acknowledge_framework(self) -> None:
        nag.acknowledge_wildcards(self, _FRAMEWORK_WILDCARDS, self._acknowledged)
        nag.acknowledge(
            self.provider,
            "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole]",
            "The CDK provider framework's own functions use the Lambda basic execution policy: CloudWatch Logs writes only",
        )
        waiter = self.provider.node.try_find_child("waiter-state-machine")
        if waiter is not None:
            nag.acknowledge_wildcards(
                waiter,
                {
                    r"Resource::\*": "Step Functions' log delivery to CloudWatch Logs (logs:CreateLogDelivery, PutResourcePolicy, "
                    "DescribeLogGroups, ...) has no resource-level permissions; the waiter logs at level ALL",
                },
            )
        nag.acknowledge(
            self.provider,
            "AwsSolutions-SF2",
            "The provider framework's waiter state machine exposes no tracing option; it only loops isComplete calls, each logged at level ALL",
        )
