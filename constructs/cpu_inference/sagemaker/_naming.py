"""How an endpoint's resources are named: the placement slug in the logical IDs that must change with the
instance type, the placement-hashed endpoint name, and the log group SageMaker writes to."""

from __future__ import annotations

import hashlib
import re

import aws_cdk as cdk
from constructs import Construct


def placement_slug(instance_type: str) -> str:
    """`ml.c7g.8xlarge` → `MlC7g8xlarge` (part of the logical IDs that must change with the instance type)."""
    return "".join(part.capitalize() for part in re.split(r"[^A-Za-z0-9]+", instance_type) if part)


def endpoint_name(scope: Construct, *, name: str, instance_type: str, variant_name: str, prefix: str | None) -> str:
    """`<prefix>-<hash>`: lowercase (SageMaker ARNs are), at most 63 characters, unique per construct path,
    and different for every placement (instance type, variant) so a re-placement is a new endpoint."""
    digest = hashlib.sha256(f"{scope.node.path}|{instance_type}|{variant_name}".encode()).hexdigest()[:8]
    if prefix is None:
        stack = cdk.Stack.of(scope)
        base = stack.stack_name if not cdk.Token.is_unresolved(stack.stack_name) else stack.node.id
        prefix = f"{base}-{name}"
    prefix = re.sub(r"-+", "-", re.sub(r"[^a-z0-9-]", "-", prefix.lower()))[:54].strip("-") or name[:54]
    return f"{prefix}-{digest}"


def log_group_name(endpoint: str) -> str:
    """The group SageMaker writes an endpoint's container logs to."""
    return f"/aws/sagemaker/Endpoints/{endpoint}"
