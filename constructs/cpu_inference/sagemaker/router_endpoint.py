"""RouterEndpoint: the SLM pre-filter's router (containers/router) on a SageMaker real-time endpoint.

The router's whole config is the Model's environment (ROUTER_CONFIG_JSON, compact JSON), so a change of
labels, threshold or escalation creates a new Model and EndpointConfig and CloudFormation rolls the endpoint.
The container is started with `serve` and answers GET /ping and POST /invocations on 8080 (ROUTER_PORT).
It reaches the SLM (and a SageMaker LLM) through SageMaker Runtime and a Bedrock LLM through Bedrock Runtime,
so its network is never isolated; its role may invoke exactly those endpoints / that one model.

Names follow GravitonEndpoint: Model and EndpointConfig names are generated, the endpoint name is
`<prefix>-<hash of construct path + placement>` and the EndpointConfig/Endpoint logical IDs carry the
instance type, so a new instance type is a new endpoint created before the old one goes.
"""

from __future__ import annotations

import json
from urllib.parse import urlsplit

import aws_cdk as cdk
from aws_cdk import aws_applicationautoscaling as appscaling
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sagemaker as sagemaker
from constructs import Construct

from .. import nag
from . import endpoint_parts as parts
from .endpoint_parts import INVOKE_ACTIONS, placement_slug
from .graviton_endpoint import GravitonEndpoint
from .monitoring import EndpointMonitoring
from .router_props import ENV_VALUE_MAX_BYTES, ROUTER_PORT, RouterEndpointProps

BEDROCK_ACTIONS = ["bedrock:InvokeModel", "bedrock:InvokeModelWithResponseStream"]  # also authorize Converse / ConverseStream


class RouterEndpoint(Construct):
    """Attributes: props, router_config (dict), config_json (ROUTER_CONFIG_JSON), environment, image_uri, key,
    role (= grant_principal), log_group, security_groups, model (CfnModel), endpoint_config, endpoint,
    endpoint_name, endpoint_arn, variant_name, target_concurrency, scalable_target / scaling_policy (or None),
    monitoring (EndpointMonitoring), alarms, dashboard."""

    def __init__(self, scope: Construct, id: str, *, props: RouterEndpointProps) -> None:
        super().__init__(scope, id)
        props.validate()
        self.props = props
        stack = cdk.Stack.of(self)
        self.instance = props.instance
        self.variant_name = props.variant_name
        slug = placement_slug(props.instance_type)
        self.endpoint_name = parts.endpoint_name(
            self, name=props.name, instance_type=props.instance_type, variant_name=props.variant_name, prefix=props.endpoint_name_prefix,
        )
        self.target_concurrency = props.target_in_flight() if props.scales else None

        self.router_config = props.router_config(region=stack.region)
        self.config_json = self._config_json(stack)
        self.environment: dict[str, str] = {"ROUTER_CONFIG_JSON": self.config_json, "ROUTER_PORT": str(ROUTER_PORT)}

        self.key: kms.IKey = props.encryption_key or parts.create_key(
            self, description=f"{props.name} router endpoint: ML storage volume and container logs",
            removal_policy=props.removal_policy, endpoint=self.endpoint_name,
        )
        self.log_group = parts.endpoint_log_group(
            self, slug, endpoint=self.endpoint_name, retention=props.log_retention, key=self.key, own_key=props.encryption_key is None,
        )
        self.role: iam.IRole = parts.execution_role(
            self, props.existing_role,
            f"SageMaker execution role of the {props.name} router: pulls its image, writes its logs, invokes its SLM and LLM",
        )
        self.grant_principal = self.role
        self.image_uri: str = props.image.image_uri
        parts.grant_basics(self.role, image=props.image, log_group=self.log_group, key=self.key)
        self._grant_upstreams(stack)
        self.security_groups: list[ec2.ISecurityGroup] = parts.security_groups(
            self, self.role, vpc=props.vpc, given=props.security_groups,
            description=f"SageMaker router {props.name}: no inbound; HTTPS out to SageMaker Runtime, Bedrock, ECR",
            egress=self._egress,
        )

        self.model = sagemaker.CfnModel(
            self, "Model",
            execution_role_arn=self.role.role_arn,
            # Never isolated: the router calls SageMaker Runtime / Bedrock, which an isolated container cannot reach.
            enable_network_isolation=False,
            primary_container=sagemaker.CfnModel.ContainerDefinitionProperty(
                image=self.image_uri, mode="SingleModel", environment=self.environment,
            ),
            vpc_config=parts.vpc_config(props.vpc, props.vpc_subnets, self.security_groups),
        )
        # CreateModel checks the image with the role: its policy must exist first.
        self.model.node.add_dependency(self.role)

        self.endpoint_config = parts.endpoint_config(
            self, slug, props, model=self.model, key=self.key,
            container_startup_health_check_timeout_in_seconds=(
                int(props.startup_health_check_timeout.to_seconds()) if props.startup_health_check_timeout else None
            ),
        )
        self.endpoint = parts.create_endpoint(
            self, slug, name=self.endpoint_name, config=self.endpoint_config, scales=props.scales, log_group=self.log_group,
        )
        # Serve only once the models it routes to are InService (the first requests would otherwise fall back).
        for upstream in (props.slm, props.escalation.endpoint):
            if isinstance(upstream, GravitonEndpoint):
                self.endpoint.node.add_dependency(upstream.endpoint)
        self.endpoint_arn: str = self.endpoint.ref

        # The router is an asyncio relay whose CPU stays low while it waits on the SLM and LLM; each request in
        # flight holds one of its AWS call threads, and max_in_flight (429 beyond it) is what runs out.
        self.scalable_target: appscaling.ScalableTarget | None
        self.scaling_policy: appscaling.TargetTrackingScalingPolicy | None
        self.scalable_target, self.scaling_policy = parts.autoscaling(self, slug, props, endpoint=self.endpoint, target=self.target_concurrency)

        self.monitoring: EndpointMonitoring = parts.monitoring(
            self, props, endpoint=self.endpoint_name, vcpus=self.instance.vcpus,
            target_concurrency=self.target_concurrency, max_in_flight=props.max_in_flight,
        )
        self.alarms = self.monitoring.alarms
        self.dashboard = self.monitoring.dashboard
        cdk.Tags.of(self).add("cpu-inference:router", props.name)
        self._acknowledge()

    # -- derived values ---------------------------------------------------------------------------

    def _config_json(self, stack: cdk.Stack) -> str:
        """Compact JSON; with deploy-time values (an env-agnostic stack's Region) a CloudFormation Fn::Join."""
        raw = json.dumps(self.router_config, separators=(",", ":"), ensure_ascii=False)
        if not cdk.Token.is_unresolved(raw):
            # validate() estimated the size; the exact one is known here.
            if len(raw.encode()) > ENV_VALUE_MAX_BYTES:
                raise ValueError(f"RouterEndpointProps: the router config is {len(raw.encode())} bytes but SageMaker allows {ENV_VALUE_MAX_BYTES} (ROUTER_CONFIG_JSON) — shorten few_shot or instructions")
            return raw
        return stack.to_json_string(self.router_config)

    # -- resources --------------------------------------------------------------------------------

    def _grant_upstreams(self, stack: cdk.Stack) -> None:
        """Invoke the SLM endpoint and the escalation target, nothing else."""
        p = self.props
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
            self.role.add_to_principal_policy(iam.PolicyStatement(sid="InvokeBedrockModel", actions=BEDROCK_ACTIONS, resources=[self.bedrock_model_arn]))

    @property
    def bedrock_model_arn(self) -> str:
        """`arn:<partition>:bedrock:<region>::foundation-model/<model id>` (foundation models have no account)."""
        assert self.props.escalation.model_id is not None
        return cdk.Stack.of(self).format_arn(service="bedrock", account="", resource="foundation-model", resource_name=self.props.escalation.model_id)

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

    # -- public API -------------------------------------------------------------------------------

    def grant_invoke(self, grantee: iam.IGrantable) -> iam.Grant:
        """InvokeEndpoint and InvokeEndpointWithResponseStream on the router endpoint only (its clients)."""
        return parts.grant_invoke(grantee, self.endpoint_arn)

    # -- cdk-nag ----------------------------------------------------------------------------------

    def _acknowledge(self) -> None:
        if isinstance(self.role, Construct):
            nag.acknowledge_wildcards(self.role, parts.role_wildcards("the router's repository"))
