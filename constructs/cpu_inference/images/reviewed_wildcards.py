"""The IAM wildcards this construct's policies may contain, each reviewed with its reason.

Anything not listed here stays a cdk-nag finding (see nag.acknowledge_wildcards)."""

from __future__ import annotations

from cpu_inference._internal.aws_names import STATE_MACHINE_LOG_DELIVERY_ACTIONS, XRAY_WRITE_ACTIONS
from cpu_inference._internal.nag import Wildcard

# Actions without resource-level permissions: '*' is their only possible resource.
NO_RESOURCE_LEVEL = {"ecr:GetAuthorizationToken", *XRAY_WRITE_ACTIONS, *STATE_MACHINE_LOG_DELIVERY_ACTIONS}
SEG = r"(?:<AWS::\w+>|[^:<>]+)"  # a partition, region or account: literal or pseudo parameter
REVIEWED_WILDCARDS = [
    Wildcard(
        r"Action::kms:(ReEncrypt|GenerateDataKey)\*",
        "Action families CDK grants on this construct's one KMS key (the resource is that key) for encrypted build "
        "artifacts and logs.",
    ),
    Wildcard(
        r"Resource::\*",
        "These actions have no resource-level permissions (ECR login token; X-Ray and CloudWatch Logs delivery for "
        "Step Functions), so '*' is the only resource they accept; every ECR push action is scoped to the repository.",
        only_with=lambda actions: all(a in NO_RESOURCE_LEVEL for a in actions),
    ),
    Wildcard(
        r"Resource::\*",
        "The CDK Provider framework's waiter state machine policy (not configurable) adds log delivery for its "
        "logging on '*'; the waiter only retries this construct's isComplete function.",
        only_with=lambda actions: all(
            a in NO_RESOURCE_LEVEL | {"logs:CreateLogStream", "logs:PutLogEvents"} for a in actions
        ),
        path=r".*/Provider/waiter-state-machine/Role/DefaultPolicy",
    ),
    Wildcard(
        rf"Resource::arn:{SEG}:logs:{SEG}:{SEG}:log-group:/aws/codebuild/<\w+>:\*",
        "CDK's default grant on the CodeBuild log group named after this project; the project logs to this "
        "construct's KMS-encrypted log group instead.",
    ),
    Wildcard(
        rf"Resource::arn:{SEG}:codebuild:{SEG}:{SEG}:report-group/<\w+>-\*",
        "CDK's grant on the test-report groups named after this project (CodeBuild names them <project>-<group>).",
    ),
    Wildcard(
        rf"Resource::arn:{SEG}:states:{SEG}:{SEG}:execution:<\w+\.Name>:\*",
        "Executions of this construct's one build state machine; their names are generated per deployment.",
    ),
    Wildcard(
        r"Resource::<\w+\.Arn>:\*",
        "Versions and aliases of this construct's own handler functions, which the CDK Provider framework invokes.",
        only_with=lambda actions: set(actions) <= {"lambda:InvokeFunction"},
    ),
]
