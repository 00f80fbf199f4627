"""EscalationTarget: the router's escalation section and the exact IAM each kind needs (pure: a bare stack)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import aws_cdk as cdk
import pytest

from cpu_inference._internal.nag import flatten as _flat
from cpu_inference.patterns import EscalationTarget

ROOT = Path(__file__).resolve().parents[2]


def _router_config():
    spec = importlib.util.spec_from_file_location(
        "router_config_for_escalation", ROOT / "containers/router/slm_router/config.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def stack() -> cdk.Stack:
    return cdk.Stack(cdk.App(), "Esc", env=cdk.Environment(account="123456789012", region="eu-west-1"))


def test_openai_key_is_read_by_the_router_from_one_secret(stack: cdk.Stack) -> None:
    target = EscalationTarget(
        kind="openai", url="https://llm.example.com/v1", model_id="gpt-x", api_key_secret_name="prod/llm-key"
    )
    section = target.router_config()
    assert section == {
        "kind": "openai",
        "url": "https://llm.example.com/v1",
        "model_id": "gpt-x",
        "api_key_secret_arn": "prod/llm-key",
    }
    loaded = _router_config().from_dict({"escalation": section})
    assert loaded.escalation.api_key_secret_arn == "prod/llm-key"
    (statement,) = [stack.resolve(s.to_statement_json()) for s in target.policy_statements(stack)]
    assert statement["Action"] == "secretsmanager:GetSecretValue"
    assert (
        _flat(statement["Resource"])
        == "arn:<AWS::Partition>:secretsmanager:eu-west-1:123456789012:secret:prod/llm-key-??????"
    )


def test_kinds_need_their_field_and_grant_nothing_else(stack: cdk.Stack) -> None:
    with pytest.raises(ValueError, match="kind sagemaker needs endpoint_name"):
        EscalationTarget(kind="sagemaker").validate()
    assert EscalationTarget(kind="openai", url="http://10.0.0.5/v1").policy_statements(stack) == ()
    (sm,) = EscalationTarget(kind="sagemaker", endpoint_name="Big-LLM").policy_statements(stack)
    assert (
        _flat(stack.resolve(sm.to_statement_json())["Resource"])
        == "arn:<AWS::Partition>:sagemaker:eu-west-1:123456789012:endpoint/big-llm"
    )
    with pytest.raises(ValueError, match="needs the LLM's URL"):
        EscalationTarget(kind="model", model="llm").router_config()
