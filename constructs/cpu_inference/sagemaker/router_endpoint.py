"""RouterEndpoint: the SLM pre-filter's router (containers/router) on a SageMaker real-time endpoint.

The router's whole config is the Model's environment (ROUTER_CONFIG_JSON, compact JSON), so a change of
labels, threshold or escalation creates a new Model and EndpointConfig and CloudFormation rolls the endpoint.
The container is started with `serve` and answers GET /ping and POST /invocations on 8080 (ROUTER_PORT).
It reaches the SLM (and a SageMaker LLM) through SageMaker Runtime and a Bedrock LLM through Bedrock Runtime,
so its network is never isolated; its role may invoke exactly those endpoints / that one model.

Names and the order of the resources: SageMakerEndpointBase (endpoint_base.py), as for GravitonEndpoint.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from urllib.parse import urlsplit

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_sagemaker as sagemaker
from constructs import Construct, IDependable

from cpu_inference.sagemaker._permissions import INVOKE_ACTIONS
from cpu_inference.sagemaker.endpoint_base import Descriptions, SageMakerEndpointBase
from cpu_inference.sagemaker.graviton_endpoint import GravitonEndpoint
from cpu_inference.sagemaker.router_props import ENV_VALUE_MAX_BYTES, ROUTER_PORT, RouterEndpointProps

BEDROCK_ACTIONS = [
    "bedrock:InvokeModel",
    "bedrock:InvokeModelWithResponseStream",
]  # also authorize Converse / ConverseStream


class RouterEndpoint(SageMakerEndpointBase):
    """Attributes: SageMakerEndpointBase's, and router_config (dict), config_json (ROUTER_CONFIG_JSON)."""

    TAG = "cpu-inference:router"
    IMAGE_REPOSITORY = "the router's repository"
    props: RouterEndpointProps

    def __init__(self, scope: Construct, id: str, *, props: RouterEndpointProps) -> None:
        super().__init__(scope, id, props=props)

    # -- derived values ---------------------------------------------------------------------------

    def _derive(self) -> None:
        stack = cdk.Stack.of(self)
        self.router_config = self.props.router_config(region=stack.region)
        self.config_json = self._config_json(stack)

    def _environment(self) -> dict[str, str]:
        return {"ROUTER_CONFIG_JSON": self.config_json, "ROUTER_PORT": str(ROUTER_PORT)}

    def _default_target_concurrency(self) -> float:
        return self.props.target_in_flight()

    def _max_in_flight(self) -> int:
        # The router is an asyncio relay whose CPU stays low while it waits on the SLM and LLM; each request in
        # flight holds one of its AWS call threads, and max_in_flight (429 beyond it) is what runs out.
        return self.props.max_in_flight

    def _config_json(self, stack: cdk.Stack) -> str:
        """Compact JSON; with deploy-time values (an env-agnostic stack's Region) a CloudFormation Fn::Join."""
        raw = json.dumps(self.router_config, separators=(",", ":"), ensure_ascii=False)
        if not cdk.Token.is_unresolved(raw):
            # validate() estimated the size; the exact one is known here.
            if len(raw.encode()) > ENV_VALUE_MAX_BYTES:
                raise ValueError(
                    f"RouterEndpointProps: the router config is {len(raw.encode())} bytes but SageMaker allows {ENV_VALUE_MAX_BYTES} (ROUTER_CONFIG_JSON) — shorten few_shot or instructions"
                )
            return raw
        return stack.to_json_string(self.router_config)

    # -- resources --------------------------------------------------------------------------------

    def _descriptions(self) -> Descriptions:
        name = self.props.name
        return Descriptions(
            key=f"{name} router endpoint: ML storage volume and container logs",
            role=f"SageMaker execution role of the {name} router: pulls its image, writes its logs, invokes its SLM and LLM",
            security_group=f"SageMaker router {name}: no inbound; HTTPS out to SageMaker Runtime, Bedrock, ECR",
        )

    def _network_isolation(self) -> bool:
        return False  # the router calls SageMaker Runtime / Bedrock, which an isolated container cannot reach

    def _container(self) -> sagemaker.CfnModel.ContainerDefinitionProperty:
        return sagemaker.CfnModel.ContainerDefinitionProperty(
            image=self.image_uri, mode="SingleModel", environment=self.environment
        )

    def _endpoint_dependencies(self) -> Iterable[IDependable]:
        # Serve only once the models it routes to are InService (the first requests would otherwise fall back).
        return [u.endpoint for u in (self.props.slm, self.props.escalation.endpoint) if isinstance(u, GravitonEndpoint)]

    def _grant_upstreams(self) -> None:
        """Invoke the SLM endpoint and the escalation target, nothing else."""
        p = self.props
        stack = cdk.Stack.of(self)
        targets = [("InvokeSlm", p.slm)]
        if p.escalation.kind == "sagemaker":
            assert p.escalation.endpoint is not None
            targets.append(("InvokeLlm", p.escalation.endpoint))
        for sid, target in targets:
            if isinstance(target, GravitonEndpoint):
                target.grant_invoke(self.role)
            else:
                name = target if cdk.Token.is_unresolved(target) else target.lower()  # endpoint ARNs are lowercase
                arn = stack.format_arn(service="sagemaker", resource="endpoint", resource_name=name)
                self.role.add_to_principal_policy(iam.PolicyStatement(sid=sid, actions=INVOKE_ACTIONS, resources=[arn]))
        if p.escalation.kind == "bedrock":
            self.role.add_to_principal_policy(
                iam.PolicyStatement(
                    sid="InvokeBedrockModel", actions=BEDROCK_ACTIONS, resources=[self.bedrock_model_arn]
                )
            )

    @property
    def bedrock_model_arn(self) -> str:
        """`arn:<partition>:bedrock:<region>::foundation-model/<model id>` (foundation models have no account)."""
        assert self.props.escalation.model_id is not None
        return cdk.Stack.of(self).format_arn(
            service="bedrock", account="", resource="foundation-model", resource_name=self.props.escalation.model_id
        )

    def _egress(self) -> list[tuple[int, str]]:
        """Egress of a created security group: HTTPS, plus the port of an OpenAI-compatible escalation URL."""
        rules = [(443, "SageMaker Runtime, Bedrock and ECR (VPC endpoints or NAT)")]
        port = self._openai_port()
        if port is not None and port != 443:
            rules.append((port, "the OpenAI-compatible escalation URL"))
        return rules

    def _openai_port(self) -> int | None:
        e = self.props.escalation
        if e.kind != "openai" or e.url is None or cdk.Token.is_unresolved(e.url):
            return None
        parts = urlsplit(e.url)
        return parts.port or (443 if parts.scheme == "https" else 80)
