"""Where the SLM pre-filter sends the requests its small model should not answer, and what that costs in IAM.

EscalationTarget is the pattern's input (config.yaml `escalation`, with kind `model`: a self-hosted LLM of the
pattern); what the router reads is the one escalation type, slm_router.config.Escalation (`router_escalation`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import aws_cdk as cdk
from aws_cdk import aws_iam as iam

from slm_router.config import ENDPOINT_NAME, ESCALATION_KINDS, Escalation

KINDS = (*ESCALATION_KINDS, "model")  # the router's kinds, and a model of the pattern (rendered as kind openai)


@dataclass(frozen=True)
class EscalationTarget:
    """kind: `openai` (url, optional model_id, optional api_key_secret_name: a Secrets Manager secret with the
    key, which the router reads at run time — encrypted with the account's aws/secretsmanager key, or grant
    kms:Decrypt on your key to the router role), `sagemaker` (endpoint_name of an existing endpoint), `bedrock`
    (model_id: a foundation-model id), or `model` (model: the name of a self-hosted model of the pattern with role
    llm)."""

    kind: Literal["openai", "sagemaker", "bedrock", "model"]
    url: str | None = None
    api_key_secret_name: str | None = None
    endpoint_name: str | None = None
    model_id: str | None = None
    model: str | None = None

    def validate(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"EscalationTarget.kind must be one of {KINDS}, got {self.kind!r}")
        need = {"openai": "url", "sagemaker": "endpoint_name", "bedrock": "model_id", "model": "model"}[self.kind]
        if not getattr(self, need):
            raise ValueError(f"EscalationTarget: kind {self.kind} needs {need}")
        if self.kind == "openai" and not str(self.url).startswith(("https://", "http://")):
            raise ValueError(f"EscalationTarget.url must be an http(s) URL, got {self.url!r}")
        if self.kind == "sagemaker" and not ENDPOINT_NAME.fullmatch(str(self.endpoint_name)):
            raise ValueError(f"EscalationTarget.endpoint_name {self.endpoint_name!r} is not a SageMaker endpoint name")

    def router_escalation(self, *, llm_url: str | None = None, region: str | None = None) -> Escalation:
        """The router's `escalation` section (containers/router/README.md). `llm_url`: the self-hosted LLM's root
        URL for kind `model`; `region`: for AWS kinds (empty: the SDK's own chain)."""
        if self.kind == "model":
            if not llm_url:
                raise ValueError("EscalationTarget kind model needs the LLM's URL")
            return Escalation.of(kind="openai", url=f"{llm_url}/v1", model_id=self.model)
        if self.kind == "openai":
            keys: dict[str, Any] = {"kind": "openai", "url": self.url}
            if self.model_id:
                keys["model_id"] = self.model_id
            if self.api_key_secret_name:  # the router reads it at run time with its own role: never in a manifest
                keys["api_key_secret_arn"] = self.api_key_secret_name
            return Escalation.of(**keys)
        if self.kind == "sagemaker":
            return Escalation.of(
                kind="sagemaker", endpoint_name=self.endpoint_name, **({"region": region} if region else {})
            )
        return Escalation.of(kind="bedrock", model_id=self.model_id, **({"region": region} if region else {}))

    def router_config(self, *, llm_url: str | None = None, region: str | None = None) -> dict[str, Any]:
        """router_escalation(...) as its JSON object."""
        return self.router_escalation(llm_url=llm_url, region=region).to_dict()

    def policy_statements(self, scope: cdk.Stack) -> tuple[iam.PolicyStatement, ...]:
        """Least privilege for the router's role: invoke exactly the one endpoint or foundation model."""
        if self.kind == "sagemaker":
            arn = scope.format_arn(
                service="sagemaker", resource="endpoint", resource_name=str(self.endpoint_name).lower()
            )
            return (
                iam.PolicyStatement(
                    actions=["sagemaker:InvokeEndpoint", "sagemaker:InvokeEndpointWithResponseStream"], resources=[arn]
                ),
            )
        if self.kind == "openai" and self.api_key_secret_name:
            # Secrets Manager ARNs end in a random 6-character suffix: `<name>-??????` matches exactly that secret.
            arn = scope.format_arn(
                service="secretsmanager",
                resource="secret",
                resource_name=f"{self.api_key_secret_name}-??????",
                arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME,
            )
            return (iam.PolicyStatement(actions=["secretsmanager:GetSecretValue"], resources=[arn]),)
        if self.kind == "bedrock":
            arn = scope.format_arn(
                service="bedrock", account="", resource="foundation-model", resource_name=str(self.model_id)
            )
            return (
                iam.PolicyStatement(
                    actions=["bedrock:InvokeModel", "bedrock:InvokeModelWithResponseStream"], resources=[arn]
                ),
            )
        return ()
