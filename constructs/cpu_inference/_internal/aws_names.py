"""Names AWS services give a meaning to (stdlib only): one definition each, imported where a name is built."""

# Step Functions docs, "Best practices" → "Logging to CloudWatch Logs" (bp-cwl): "CloudWatch Logs resource policies are
# limited to 5120 characters … prefix your CloudWatch Logs log group names with /aws/vendedlogs/" — a state machine
# logging elsewhere adds its group to the account's resource policy until it is full and new state machines fail.
VENDED_LOGS_PREFIX = "/aws/vendedlogs/states/"

# What a state machine's execution role needs to deliver its logs to CloudWatch Logs and its traces to X-Ray; none has
# resource-level permissions, so `*` is the only resource (Step Functions docs, "Using CloudWatch Logs to log execution
# history" → IAM policy; X-Ray's managed policy AWSXrayWriteOnlyAccess).
STATE_MACHINE_LOG_DELIVERY_ACTIONS = (
    "logs:CreateLogDelivery",
    "logs:GetLogDelivery",
    "logs:UpdateLogDelivery",
    "logs:DeleteLogDelivery",
    "logs:ListLogDeliveries",
    "logs:PutResourcePolicy",
    "logs:DescribeResourcePolicies",
    "logs:DescribeLogGroups",
)
XRAY_WRITE_ACTIONS = (
    "xray:PutTraceSegments",
    "xray:PutTelemetryRecords",
    "xray:GetSamplingRules",
    "xray:GetSamplingTargets",
)
