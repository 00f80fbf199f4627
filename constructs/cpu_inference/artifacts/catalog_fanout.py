"""The catalog copy off the deploy's critical path: a Step Functions STANDARD state machine whose Distributed Map
reads the catalog's work list (a JSON array of model names in S3, catalog.items_json), batches it (ItemBatcher) and
runs ONE build of the catalog's CodeBuild project per batch (`codebuild:startBuild.sync`), the batch's names as the
build's CATALOG_NAMES override — and the custom resource that STARTS an execution on Create and on every catalog
change, without waiting for it.

Bounded deploy time, whatever the catalog's size: the template holds the state machine and one StartExecution call
(both O(1) in the number of models); CloudFormation waits for neither the copy nor any build.

Failure handling (in the definition, not in CloudFormation):
- a batch whose StartBuild hits the account's concurrent-build quota (`CodeBuild.AccountLimitExceededException`) is
  retried with exponential backoff and jitter;
- a batch whose build fails (any entry of it failed: the job exits non-zero) is retried; a retry HEADs every key
  and skips what landed, so it re-copies only the failed entries;
- ToleratedFailurePercentage 100: a batch that still fails never stops the others; it is reported per batch in
  the results the Map writes under `farm/_runs/` (ResultWriter) and each failed model has its failure marker.

Rollback: when an update fails, CloudFormation rolls the StartExecution resource back with another Update carrying
the old catalog (aws/aws-cdk#17040): that starts a copy of the OLD catalog, which only HEADs keys that are in place
and skips them — harmless. The state machine's definition carries the catalog's location and fingerprint, and it is
updated before the resource that starts it (the resource references it), so an execution always copies the catalog
its definition names. The previous execution is stopped when its resource is replaced (every update has a new
execution ARN as its physical id, so CloudFormation deletes the old one in its cleanup: StopExecution — Step
Functions then stops the batch's build, .sync). A stop error never blocks a stack delete or cleanup."""

from __future__ import annotations

import json

import aws_cdk as cdk
from aws_cdk import aws_codebuild as codebuild
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3_assets as s3_assets
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks
from aws_cdk import custom_resources as cr
from constructs import Construct

from cpu_inference._internal import nag
from cpu_inference._internal.aws_names import STATE_MACHINE_LOG_DELIVERY_ACTIONS, VENDED_LOGS_PREFIX, XRAY_WRITE_ACTIONS
from cpu_inference.artifacts.model_bucket import ModelBucket
from model_download.buildspec import CATALOG_NAMES_ENV
from model_download.catalog import RUNS_PREFIX

# -- defaults and bounds (one owner; ModelCatalogProps imports them) ------------------------------------------------
# Entries per build. A build pays its provisioning (tens of seconds) once per batch; 10 entries of a farm of small
# models keep that under a few percent of the copy and a failed batch's retry cheap. The override value is the
# batch's JSON array: at most MAX_BATCH_SIZE x (63-character DNS-label names + 3) ≈ 3.3 KB.
DEFAULT_BATCH_SIZE = 10
MAX_BATCH_SIZE = 50
# Batches (builds) running at once. CodeBuild: "Quotas for the maximum number of concurrent running builds vary,
# depending on the compute type. For some platforms and compute types, the default is 20. For a new account, the
# quota can be as low as 5" (https://docs.aws.amazon.com/codebuild/latest/userguide/limits.html); past the quota
# builds queue, up to "five times the concurrent build limit", then StartBuild fails (builds-working.html). 4 stays
# under the lowest default and leaves a build for the stack's ModelArtifact copies, which the deploy awaits.
DEFAULT_MAX_CONCURRENCY = 4
# A Distributed Map runs at most 10,000 child workflow executions in parallel
# (https://docs.aws.amazon.com/step-functions/latest/dg/state-map-distributed.html, MaxConcurrency).
MAX_MAX_CONCURRENCY = 10_000

# Step Functions names a service integration's error `<Service>.<Exception>`; StartBuild's quota error is
# AccountLimitExceededException (botocore codebuild StartBuild errors). States.TaskFailed: the build itself failed.
ACCOUNT_LIMIT_ERROR = "CodeBuild.AccountLimitExceededException"
QUOTA_RETRY = {"interval_seconds": 60, "backoff_rate": 2.0, "max_attempts": 10, "max_delay_seconds": 900}
FAILED_BATCH_RETRY = {"interval_seconds": 120, "backoff_rate": 2.0, "max_attempts": 2}
TOLERATED_FAILURE_PERCENTAGE = 100  # one broken entry never stops the other batches
RESULT_WRITER_V2_FLAG = "@aws-cdk/aws-stepfunctions:useDistributedMapResultWriterV2"
# The stack-wide function behind every AwsCustomResource (aws-cdk-lib custom-resources aws-custom-resource.ts).
AWS_SDK_CALL_SINGLETON = "AWS679f53fac002430cb0da5b7982bd2287"
# The EventBridge rule Step Functions manages for CodeBuild's .sync integration (codebuild-iam.html).
CODEBUILD_SYNC_RULE = "StepFunctionsGetEventForCodeBuildStartBuildRule"


class CatalogFanout(Construct):
    """The copy's state machine ("CopyStateMachine", with its log group "CopyLogs") and the resource that starts
    it ("Start"). Attributes: state_machine, log_group, map_state, start (cr.AwsCustomResource: complete once the
    execution has STARTED), execution_arn (the started execution's ARN, a token), executions (the ARN pattern of
    its executions)."""

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        project: codebuild.IProject,
        model_bucket: ModelBucket,
        catalog_asset: s3_assets.Asset,
        items_asset: s3_assets.Asset,
        fingerprint: str,
        batch_size: int,
        max_concurrency: int,
        log_retention: logs.RetentionDays,
    ) -> None:
        super().__init__(scope, id)
        # ResultWriterV2 renders only under this feature flag (aws-cdk-lib cx-api FEATURE_FLAGS.md); set on this
        # construct alone, it changes nothing else of the app.
        self.node.set_context(RESULT_WRITER_V2_FLAG, True)
        stack = cdk.Stack.of(self)
        build = tasks.CodeBuildStartBuild(
            self,
            "CopyBatch",
            project=project,
            integration_pattern=sfn.IntegrationPattern.RUN_JOB,
            # What this execution copies travels with every batch: the catalog's location and fingerprint (the
            # worker refuses another catalog) and the batch's names.
            environment_variables_override={
                CATALOG_NAMES_ENV: codebuild.BuildEnvironmentVariable(
                    value=sfn.JsonPath.json_to_string(sfn.JsonPath.object_at("$.Items"))
                ),
                "CATALOG_BUCKET": codebuild.BuildEnvironmentVariable(value=catalog_asset.s3_bucket_name),
                "CATALOG_KEY": codebuild.BuildEnvironmentVariable(value=catalog_asset.s3_object_key),
                "CATALOG_FINGERPRINT": codebuild.BuildEnvironmentVariable(value=fingerprint),
            },
            # Only the build's id and status reach the results file, not the whole BatchGetBuilds record.
            result_selector={
                "BuildId.$": "$.Build.Id",
                "BuildStatus.$": "$.Build.BuildStatus",
            },
        )
        build.add_retry(
            errors=[ACCOUNT_LIMIT_ERROR],
            interval=cdk.Duration.seconds(QUOTA_RETRY["interval_seconds"]),
            backoff_rate=QUOTA_RETRY["backoff_rate"],
            max_attempts=int(QUOTA_RETRY["max_attempts"]),
            max_delay=cdk.Duration.seconds(QUOTA_RETRY["max_delay_seconds"]),
            jitter_strategy=sfn.JitterType.FULL,
        )
        build.add_retry(
            errors=[sfn.Errors.TASKS_FAILED],
            interval=cdk.Duration.seconds(FAILED_BATCH_RETRY["interval_seconds"]),
            backoff_rate=FAILED_BATCH_RETRY["backoff_rate"],
            max_attempts=int(FAILED_BATCH_RETRY["max_attempts"]),
            jitter_strategy=sfn.JitterType.FULL,
        )
        self.map_state = sfn.DistributedMap(
            self,
            "CopyBatches",
            item_reader=sfn.S3JsonItemReader(bucket=items_asset.bucket, key=items_asset.s3_object_key),
            item_batcher=sfn.ItemBatcher(max_items_per_batch=batch_size),
            max_concurrency=max_concurrency,
            tolerated_failure_percentage=TOLERATED_FAILURE_PERCENTAGE,
            map_execution_type=sfn.StateMachineType.STANDARD,  # .sync needs STANDARD child workflows
            result_writer_v2=sfn.ResultWriterV2(bucket=model_bucket.bucket, prefix=RUNS_PREFIX),
        )
        self.map_state.item_processor(build)

        # /aws/vendedlogs/: Step Functions' log delivery then does not grow the account's CloudWatch Logs resource
        # policy (review artifacts #5; _internal/aws_names.VENDED_LOGS_PREFIX). Unique per catalog of the stack.
        self.log_group = logs.LogGroup(
            self,
            "CopyLogs",
            log_group_name=f"{VENDED_LOGS_PREFIX}{cdk.Names.unique_resource_name(self, max_length=200, separator='-')}",
            retention=log_retention,
            removal_policy=cdk.RemovalPolicy.DESTROY,
        )
        # The role's policy is written here, statement by statement: CDK's own grants for the ItemReader and the
        # ResultWriter cover the whole asset bucket and the whole model bucket (`<bucket>/*`).
        self.role = iam.Role(
            self,
            "CopyStateMachineRole",
            assumed_by=iam.ServicePrincipal("states.amazonaws.com"),
            description="Model catalog copy: starts builds of its project, reads its work list, writes farm/_runs/",
        )
        self.state_machine = sfn.StateMachine(
            self,
            "CopyStateMachine",
            definition_body=sfn.DefinitionBody.from_chainable(self.map_state),
            state_machine_type=sfn.StateMachineType.STANDARD,
            comment="Copies a ModelCatalog into farm/ of the model bucket: one CodeBuild build per batch of entries",
            logs=sfn.LogOptions(destination=self.log_group, level=sfn.LogLevel.ALL, include_execution_data=False),
            tracing_enabled=True,
            role=self.role.without_policy_updates(),
        )
        self._grant(project, model_bucket, items_asset)

        start_call = cr.AwsSdkCall(
            service="SFN",
            action="startExecution",
            parameters={
                "stateMachineArn": self.state_machine.state_machine_arn,
                # Only to make a catalog change an Update of this resource: the definition holds what is copied.
                "input": json.dumps({"fingerprint": fingerprint}),
            },
            physical_resource_id=cr.PhysicalResourceId.from_response("executionArn"),
            output_paths=["executionArn"],
        )
        self.start = cr.AwsCustomResource(
            self,
            "Start",
            resource_type="Custom::ModelCatalogCopy",
            on_create=start_call,
            on_update=start_call,
            # A replaced (previous) execution, or the catalog leaving the stack, stops its copy. Never blocks a
            # delete or a cleanup: an execution that already ended (or was never started) is fine as it is.
            on_delete=cr.AwsSdkCall(
                service="SFN",
                action="stopExecution",
                parameters={
                    "executionArn": cr.PhysicalResourceIdReference(),
                    "cause": "its ModelCatalog resource was replaced or deleted",
                },
                ignore_error_codes_matching=".*",
            ),
            policy=cr.AwsCustomResourcePolicy.from_statements(
                [
                    iam.PolicyStatement(
                        actions=["states:StartExecution"], resources=[self.state_machine.state_machine_arn]
                    ),
                    iam.PolicyStatement(actions=["states:StopExecution"], resources=[self.executions]),
                ]
            ),
            install_latest_aws_sdk=False,
            timeout=cdk.Duration.minutes(2),
        )
        # An execution must find the role's policies in place (the map's child executions need the self policy).
        self.start.node.add_dependency(self.role, self.self_policy)
        self.execution_arn = self.start.get_response_field("executionArn")
        singleton = stack.node.try_find_child(AWS_SDK_CALL_SINGLETON)
        if singleton is not None:
            nag.aws_managed(
                singleton,
                ["service-role/AWSLambdaBasicExecutionRole"],
                "CDK's AwsCustomResource function (one per stack) logs with the Lambda basic execution policy only",
            )
        self._acknowledge()

    def _grant(self, project: codebuild.IProject, model_bucket: ModelBucket, items_asset: s3_assets.Asset) -> None:
        """Exactly what the definition calls. Sources: Step Functions IAM policies for CodeBuild (.sync:
        StartBuild, StopBuild, BatchGetBuilds, BatchGetReports on the project; events on Step Functions' managed
        rule, https://docs.aws.amazon.com/step-functions/latest/dg/codebuild-iam.html), for a Distributed Map
        (StartExecution on itself, Describe/StopExecution on its executions, RedriveExecution on its map runs;
        s3:GetObject of the ItemReader's object; the ResultWriter's s3:PutObject, GetObject,
        ListMultipartUploadParts, AbortMultipartUpload, https://docs.aws.amazon.com/step-functions/latest/dg/iam-policies-eg-dist-map.html),
        for CloudWatch Logs delivery and X-Ray (no resource-level permissions; cw-logs.html, xray-iam.html)."""
        stack = cdk.Stack.of(self)
        role = self.role
        role.add_to_policy(
            iam.PolicyStatement(
                actions=[
                    "codebuild:StartBuild",
                    "codebuild:StopBuild",
                    "codebuild:BatchGetBuilds",
                    "codebuild:BatchGetReports",
                ],
                resources=[project.project_arn],
            )
        )
        role.add_to_policy(
            iam.PolicyStatement(
                actions=["events:PutTargets", "events:PutRule", "events:DescribeRule"],
                resources=[stack.format_arn(service="events", resource="rule", resource_name=CODEBUILD_SYNC_RULE)],
            )
        )
        role.add_to_policy(
            iam.PolicyStatement(
                actions=["s3:GetObject"], resources=[items_asset.bucket.arn_for_objects(items_asset.s3_object_key)]
            )
        )
        # farm/_runs/ only, encrypted by the bucket's key (PutObject, GetObject, AbortMultipartUpload, ListBucket on
        # the prefix, kms:GenerateDataKey/Decrypt) + ListMultipartUploadParts, which the ResultWriter also needs.
        model_bucket.grant_write(role, RUNS_PREFIX)
        role.add_to_policy(
            iam.PolicyStatement(
                actions=["s3:ListMultipartUploadParts"],
                resources=[model_bucket.bucket.arn_for_objects(f"{RUNS_PREFIX}*")],
            )
        )
        role.add_to_policy(
            iam.PolicyStatement(
                actions=[*STATE_MACHINE_LOG_DELIVERY_ACTIONS, *XRAY_WRITE_ACTIONS],
                resources=["*"],
            )
        )
        # Its own ARN: a separate policy (the state machine depends on the role, this policy on the state machine).
        # Its executions' ARNs: the self policy below and the start resource's StopExecution both use them.
        executions = self.executions = stack.format_arn(
            service="states",
            resource="execution",
            resource_name=f"{self.state_machine.state_machine_name}:*",
            arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME,
        )
        map_runs = stack.format_arn(
            service="states",
            resource="execution",
            resource_name=f"{self.state_machine.state_machine_name}/*:*",
            arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME,
        )
        self.self_policy = iam.Policy(
            self,
            "CopyStateMachineSelfPolicy",
            roles=[role],
            statements=[
                iam.PolicyStatement(
                    actions=["states:StartExecution"], resources=[self.state_machine.state_machine_arn]
                ),
                iam.PolicyStatement(
                    actions=["states:DescribeExecution", "states:StopExecution"], resources=[executions]
                ),
                iam.PolicyStatement(actions=["states:RedriveExecution"], resources=[map_runs]),
            ],
        )

    def _acknowledge(self) -> None:
        nag.acknowledge_wildcards(
            self,
            {
                r"Resource::\*": (
                    "Step Functions' log delivery (logs:CreateLogDelivery, PutResourcePolicy, DescribeLogGroups, ...) "
                    "and X-Ray (xray:PutTraceSegments, ...) have no resource-level permissions"
                ),
                r"Resource::arn:<AWS::Partition>:states:.*:execution:.*CopyStateMachine.*\*": (
                    "A Distributed Map describes, stops and redrives its own child executions, named at run time; "
                    "the catalog's start resource stops only this state machine's executions"
                ),
                r"Resource::arn:<AWS::Partition>:events:.*:rule/StepFunctionsGetEventForCodeBuildStartBuildRule": (
                    "Step Functions' managed EventBridge rule for the CodeBuild .sync integration"
                ),
            },
        )
