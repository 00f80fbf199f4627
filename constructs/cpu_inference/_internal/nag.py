"""cdk-nag acknowledgments through CDK's own `Validations.of(scope).acknowledge` (what cdk-nag 3 reads), so the
library has no runtime dependency on cdk-nag.

cdk-nag 3 names each finding precisely (`AwsSolutions-IAM5[Resource::<Bucket.Arn>/models/x/*]`,
`AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/X]`) and acknowledges them one by one, so
`acknowledge_wildcards` reads the policies under a scope and acknowledges exactly the wildcards that match a
reviewed pattern, each with its reason: any other wildcard stays an error.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from constructs import IConstruct

_PLUGIN = "AwsSolutions::"


def acknowledge(scope: IConstruct, rule: str, reason: str) -> None:
    """Acknowledge one AwsSolutions finding on scope and everything under it."""
    if len(reason) < 20:
        raise ValueError(f"a cdk-nag acknowledgment needs a real reason, got {reason!r}")
    cdk.Validations.of(scope).acknowledge(cdk.Acknowledgment(id=f"{_PLUGIN}{rule}", reason=reason))


def aws_managed(scope: IConstruct, names: Iterable[str], reason: str) -> None:
    """Acknowledge AwsSolutions-IAM4 for exactly these AWS managed policies."""
    for name in names:
        acknowledge(scope, f"AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/{name}]", reason)


@dataclass(frozen=True)
class Wildcard:
    """A reviewed kind of IAM wildcard: which findings it covers (regex) and why it is acceptable.

    `only_with` (optional) must hold for the statement's actions, e.g. Resource::* is acceptable only when
    every action of the statement has no resource-level permissions; `path` limits it to policies whose
    construct path matches."""

    finding: str
    reason: str
    only_with: Callable[[list[str]], bool] | None = None
    path: str = ".*"


def flatten(value: Any) -> str:
    """A resolved CloudFormation value flattened the way cdk-nag names findings (its flattenCfnReference):
    Ref → <Id>, GetAtt → <Id.Attr>, Join joined, Sub's ${x} → <x>, anything else as compact JSON."""
    if isinstance(value, str):
        return value.replace("${", "<").replace("}", ">")
    if isinstance(value, dict) and len(value) == 1:
        ((fn, arg),) = value.items()
        if fn == "Ref":
            return f"<{flatten(arg)}>"
        if fn == "Fn::GetAtt":
            return f"<{arg if isinstance(arg, str) else '.'.join(flatten(a) for a in arg)}>"
        if fn == "Fn::Join":
            sep, parts = arg
            return sep.join(flatten(p) for p in parts)
        if fn in ("Fn::Sub", "Fn::ImportValue"):
            return flatten(arg)
    return json.dumps(value, separators=(",", ":"))


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def wildcard_findings(statement: dict[str, Any]) -> list[str]:
    """cdk-nag's IAM5 finding names for one resolved statement (none for Deny)."""
    if statement.get("Effect") != "Allow":
        return []
    findings = [f"Action::{a}" for a in _as_list(statement.get("Action", [])) if "*" in a]
    findings += [f"Resource::{r}" for r in map(flatten, _as_list(statement.get("Resource", []))) if "*" in r]
    return list(dict.fromkeys(findings))


def _policies(scope: IConstruct) -> list[iam.Policy]:
    return [node for node in scope.node.find_all() if isinstance(node, iam.Policy)]


def acknowledge_wildcards(
    scope: IConstruct,
    reviewed: Mapping[str, str] | Iterable[Wildcard],
    seen: set[str] | None = None,
) -> list[str]:
    """Acknowledge the reviewed wildcards of every iam.Policy under scope; returns those acknowledged.

    `reviewed` is either regex → reason or a list of Wildcard rules. `seen` carries what earlier calls
    acknowledged, for scopes whose policies keep growing (grants added after the first call)."""
    rules = [Wildcard(p, why) for p, why in reviewed.items()] if isinstance(reviewed, Mapping) else list(reviewed)
    stack = cdk.Stack.of(scope)
    seen = set() if seen is None else seen
    done: list[str] = []
    for policy in _policies(scope):
        document = stack.resolve(policy.document) or {}
        for statement in document.get("Statement", []):
            actions = _as_list(statement.get("Action", []))
            for finding in wildcard_findings(statement):
                rule = next(
                    (
                        w
                        for w in rules
                        if re.fullmatch(w.finding, finding)
                        and re.fullmatch(w.path, policy.node.path)
                        and (w.only_with is None or w.only_with(actions))
                    ),
                    None,
                )
                where = f"{policy.node.path}: {finding}"
                if rule is None or where in seen:
                    continue
                seen.add(where)
                acknowledge(policy, f"AwsSolutions-IAM5[{finding}]", rule.reason)
                done.append(where)
    return done


def reviewed_policy(policy: iam.ManagedPolicy | iam.Policy, reason: str) -> list[str]:
    """Acknowledge every IAM5 finding of a policy reviewed as a whole (e.g. an upstream reference policy)."""
    document = cdk.Stack.of(policy).resolve(policy.document) or {}
    findings = list(dict.fromkeys(f for st in document.get("Statement", []) for f in wildcard_findings(st)))
    for finding in findings:
        acknowledge(policy, f"AwsSolutions-IAM5[{finding}]", reason)
    return findings


def role_managed_policies(role: IConstruct, reason: str) -> list[str]:
    """Acknowledge AwsSolutions-IAM4 for every AWS managed policy attached to the CfnRole(s) under `role`
    (service-required attachments such as the EKS node or Lambda execution policies)."""
    done: list[str] = []
    for node in role.node.find_all():
        if isinstance(node, iam.CfnRole):
            for arn in cdk.Stack.of(node).resolve(node.managed_policy_arns) or []:
                flat = flatten(arn)
                if ":iam::aws:" in flat:
                    acknowledge(node, f"AwsSolutions-IAM4[Policy::{flat}]", reason)
                    done.append(flat)
    return done
