"""Names AWS services give a meaning to (stdlib only): one definition each, imported where a name is built."""

# Step Functions docs, "Best practices" → "Logging to CloudWatch Logs" (bp-cwl): "CloudWatch Logs resource policies are
# limited to 5120 characters … prefix your CloudWatch Logs log group names with /aws/vendedlogs/" — a state machine
# logging elsewhere adds its group to the account's resource policy until it is full and new state machines fail.
VENDED_LOGS_PREFIX = "/aws/vendedlogs/states/"
