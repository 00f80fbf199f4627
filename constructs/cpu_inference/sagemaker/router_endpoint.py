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

import hashlib
import json
import re
from urllib.parse import urlsplit

import aws_cdk as cdk
from aws_cdk import aws_applicationautoscaling as appscaling
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sagemaker as sagemaker
from constructs import Construct

from .. import nag
from .graviton_endpoint import _VPC_DESCRIBE, _VPC_ENI, INVOKE_ACTIONS, SCALABLE_DIMENSION, GravitonEndpoint, placement_slug
from .monitoring import EndpointMonitoring, MonitoringSettings
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
        self.endpoint_name = self._endpoint_name(stack)
        self.target_concurrency = props.target_in_flight() if props.scales else None

        self.router_config = props.router_config(region=stack.region)
        self.config_json = self._config_json(stack)
        self.environment: dict[str, str] = {"ROUTER_CONFIG_JSON": self.config_json, "ROUTER_PORT": str(ROUTER_PORT)}

        self.key: kms.IKey = props.encryption_key or self._create_key(stack)
        self.log_group = logs.LogGroup(
            self, f"Logs{slug}",
            log_group_name=f"/aws/sagemaker/Endpoints/{self.endpoint_name}",
            retention=props.log_retention,
            encryption_key=self.key if props.encryption_key is None else None,
            removal_policy=cdk.RemovalPolicy.DESTROY,
        )
        self.role: iam.IRole = props.existing_role or iam.Role(
            self, "ExecutionRole",
            assumed_by=iam.ServicePrincipal("sagemaker.amazonaws.com"),
            description=f"SageMaker execution role of the {props.name} router: pulls its image, writes its logs, invokes its SLM and LLM",
        )
        self.grant_principal = self.role
        self.image_uri: str = props.image.image_uri
        props.image.grant_pull(self.role)
        self.log_group.grant_write(self.role)
        self.log_group.grant(self.role, "logs:CreateLogGroup", "logs:DescribeLogStreams")
        self.role.add_to_principal_policy(
            iam.PolicyStatement(
                sid="EndpointMetrics", actions=["cloudwatch:PutMetricData"], resources=["*"],
                conditions={"StringLike": {"cloudwatch:namespace": "/aws/sagemaker/*"}},
            )
        )
        self.role.add_to_principal_policy(
            iam.PolicyStatement(
                sid="VolumeKeyGrant", actions=["kms:CreateGrant", "kms:DescribeKey"], resources=[self.key.key_arn],
                conditions={"Bool": {"kms:GrantIsForAWSResource": "true"}},
            )
        )
        self._grant_upstreams(stack)
        self.security_groups = self._network()

        self.model = sagemaker.CfnModel(
            self, "Model",
            execution_role_arn=self.role.role_arn,
            # Never isolated: the router calls SageMaker Runtime / Bedrock, which an isolated container cannot reach.
            enable_network_isolation=False,
            primary_container=sagemaker.CfnModel.ContainerDefinitionProperty(
                image=self.image_uri, mode="SingleModel", environment=self.environment,
            ),
            vpc_config=self._vpc_config(),
        )
        # CreateModel checks the image with the role: its policy must exist first.
        self.model.node.add_dependency(self.role)

        self.endpoint_config = sagemaker.CfnEndpointConfig(
            self, f"Config{slug}",
            production_variants=[
                sagemaker.CfnEndpointConfig.ProductionVariantProperty(
                    variant_name=props.variant_name,
                    model_name=self.model.attr_model_name,
                    instance_type=props.instance_type,
                    initial_instance_count=props.initial_count,
                    initial_variant_weight=1,
                    container_startup_health_check_timeout_in_seconds=(
                        int(props.startup_health_check_timeout.to_seconds()) if props.startup_health_check_timeout else None
                    ),
                )
            ],
            kms_key_id=self.key.key_arn,
        )
        self.endpoint = sagemaker.CfnEndpoint(
            self, f"Endpoint{slug}",
            endpoint_name=self.endpoint_name,
            endpoint_config_name=self.endpoint_config.attr_endpoint_config_name,
            retain_all_variant_properties=True if props.scales else None,
        )
        self.endpoint.node.add_dependency(self.log_group)
        # Serve only once the models it routes to are InService (the first requests would otherwise fall back).
        for upstream in (props.slm, props.escalation.endpoint):
            if isinstance(upstream, GravitonEndpoint):
                self.endpoint.node.add_dependency(upstream.endpoint)
        self.endpoint_arn: str = self.endpoint.ref

        self.scalable_target: appscaling.ScalableTarget | None = None
        self.scaling_policy: appscaling.TargetTrackingScalingPolicy | None = None
        if self.target_concurrency is not None:
            self._autoscaling(stack, slug, self.target_concurrency)

        self.monitoring = EndpointMonitoring(
            self, "Monitoring",
            settings=MonitoringSettings(
                endpoint_name=self.endpoint_name, variant_name=props.variant_name, vcpus=self.instance.vcpus,
                latency_slo=props.latency_slo, target_concurrency=self.target_concurrency, max_in_flight=props.max_in_flight,
                error_rate_4xx_percent=props.error_rate_4xx_percent, error_rate_5xx_percent=props.error_rate_5xx_percent,
                utilization_percent=props.utilization_alarm_percent, alarm_topic=props.alarm_topic, dashboard=props.dashboard,
            ),
        )
        self.alarms = self.monitoring.alarms
        self.dashboard = self.monitoring.dashboard
        cdk.Tags.of(self).add("cpu-inference:router", props.name)
        self._acknowledge()

    # -- derived values ---------------------------------------------------------------------------

    def _endpoint_name(self, stack: cdk.Stack) -> str:
        """As GravitonEndpoint: `<prefix>-<hash>`, lowercase, at most 63, new for every placement."""
        p = self.props
        digest = hashlib.sha256(f"{self.node.path}|{p.instance_type}|{p.variant_name}".encode()).hexdigest()[:8]
        prefix = p.endpoint_name_prefix
        if prefix is None:
            base = stack.stack_name if not cdk.Token.is_unresolved(stack.stack_name) else stack.node.id
            prefix = f"{base}-{p.name}"
        prefix = re.sub(r"-+", "-", re.sub(r"[^a-z0-9-]", "-", prefix.lower()))[:54].strip("-") or p.name[:54]
        return f"{prefix}-{digest}"

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

    def _create_key(self, stack: cdk.Stack) -> kms.Key:
        key = kms.Key(
            self, "Key",
            description=f"{self.props.name} router endpoint: ML storage volume and container logs",
            enable_key_rotation=True,
            removal_policy=self.props.removal_policy,
        )
        key.add_to_resource_policy(
            iam.PolicyStatement(
                sid="ThisEndpointsLogGroup",
                principals=[iam.ServicePrincipal(f"logs.{stack.region}.amazonaws.com")],
                actions=["kms:Encrypt*", "kms:Decrypt*", "kms:ReEncrypt*", "kms:GenerateDataKey*", "kms:Describe*"],
                resources=["*"],
                conditions={
                    "ArnLike": {
                        "kms:EncryptionContext:aws:logs:arn": (
                            f"arn:{stack.partition}:logs:{stack.region}:{stack.account}:log-group:/aws/sagemaker/Endpoints/{self.endpoint_name}"
                        )
                    }
                },
            )
        )
        return key

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

    def _network(self) -> list[ec2.ISecurityGroup]:
        p = self.props
        if p.vpc is None:
            return []
        groups = list(p.security_groups)
        if not groups:
            sg = ec2.SecurityGroup(
                self, "SecurityGroup", vpc=p.vpc, allow_all_outbound=False,
                description=f"SageMaker router {p.name}: no inbound; HTTPS out to SageMaker Runtime, Bedrock, ECR",
            )
            sg.add_egress_rule(ec2.Peer.any_ipv4(), ec2.Port.tcp(443), "SageMaker Runtime, Bedrock and ECR (VPC endpoints or NAT)")
            port = self._openai_port()
            if port is not None and port != 443:
                sg.add_egress_rule(ec2.Peer.any_ipv4(), ec2.Port.tcp(port), "the OpenAI-compatible escalation URL")
            groups = [sg]
        self.role.add_to_principal_policy(iam.PolicyStatement(sid="DescribeNetwork", actions=_VPC_DESCRIBE, resources=["*"]))
        self.role.add_to_principal_policy(
            iam.PolicyStatement(sid="EndpointNetworkInterfaces", actions=_VPC_ENI, resources=["*"], conditions={"ArnEquals": {"ec2:Vpc": p.vpc.vpc_arn}})
        )
        return groups

    def _openai_port(self) -> int | None:
        e = self.props.escalation
        if e.kind != "openai" or e.url is None or cdk.Token.is_unresolved(e.url):
            return None
        parts = urlsplit(e.url)
        return parts.port or (443 if parts.scheme == "https" else 80)

    def _vpc_config(self) -> sagemaker.CfnModel.VpcConfigProperty | None:
        p = self.props
        if p.vpc is None:
            return None
        sel = p.vpc_subnets
        fields = ("availability_zones", "one_per_az", "subnet_filters", "subnet_group_name", "subnets", "subnet_type")
        chosen = {f: getattr(sel, f) for f in fields if sel is not None and getattr(sel, f) is not None}
        return sagemaker.CfnModel.VpcConfigProperty(
            security_group_ids=[g.security_group_id for g in self.security_groups], subnets=p.vpc.select_subnets(**chosen).subnet_ids,
        )

    def _autoscaling(self, stack: cdk.Stack, slug: str, target: float) -> None:
        p = self.props
        slr = iam.Role.from_role_arn(
            self, "ScalingServiceRole",
            f"arn:{stack.partition}:iam::{stack.account}:role/aws-service-role/sagemaker.application-autoscaling.amazonaws.com/"
            "AWSServiceRoleForApplicationAutoScaling_SageMakerEndpoint",
            mutable=False,
        )
        self.scalable_target = appscaling.ScalableTarget(
            self, f"Scaling{slug}",
            service_namespace=appscaling.ServiceNamespace.SAGEMAKER,
            resource_id=f"endpoint/{self.endpoint.attr_endpoint_name}/variant/{p.variant_name}",
            scalable_dimension=SCALABLE_DIMENSION,
            min_capacity=p.min_capacity,
            max_capacity=p.max_capacity,
            role=slr,
        )
        # In-flight requests per instance: the router is an asyncio relay whose CPU stays low while it waits on
        # the SLM and LLM, and each request in flight holds one of its AWS call threads until the answer ends;
        # max_in_flight (429 beyond it) is the capacity that runs out, not CPU. Request rate would mislead too:
        # an SLM answer and an escalated LLM generation differ 10-100x in duration.
        self.scaling_policy = self.scalable_target.scale_to_track_metric(
            "ConcurrentRequests",
            target_value=target,
            predefined_metric=appscaling.PredefinedMetric.SAGEMAKER_VARIANT_CONCURRENT_REQUESTS_PER_MODEL_HIGH_RESOLUTION,
            scale_out_cooldown=p.scale_out_cooldown,
            scale_in_cooldown=p.scale_in_cooldown,
        )

    # -- public API -------------------------------------------------------------------------------

    def grant_invoke(self, grantee: iam.IGrantable) -> iam.Grant:
        """InvokeEndpoint and InvokeEndpointWithResponseStream on the router endpoint only (its clients)."""
        return iam.Grant.add_to_principal(grantee=grantee, actions=INVOKE_ACTIONS, resource_arns=[self.endpoint_arn])

    # -- cdk-nag ----------------------------------------------------------------------------------

    def _acknowledge(self) -> None:
        if not isinstance(self.role, Construct):
            return
        only = lambda allowed: (lambda actions: bool(actions) and set(actions) <= set(allowed))  # noqa: E731
        nag.acknowledge_wildcards(self.role, [
            nag.Wildcard(
                r"Resource::\*",
                "ecr:GetAuthorizationToken has no resource-level permissions; image pulls are limited to the router's repository",
                only_with=only(["ecr:GetAuthorizationToken"]),
            ),
            nag.Wildcard(
                r"Resource::\*",
                "cloudwatch:PutMetricData has no resource-level permissions; limited to the /aws/sagemaker/ namespaces by condition",
                only_with=only(["cloudwatch:PutMetricData"]),
            ),
            nag.Wildcard(
                r"Resource::\*",
                "EC2 Describe* calls SageMaker makes to place the endpoint's ENIs have no resource-level permissions",
                only_with=only(_VPC_DESCRIBE),
            ),
            nag.Wildcard(
                r"Resource::\*",
                "ENIs SageMaker creates for the endpoint do not exist before it runs; limited to this VPC by the ec2:Vpc condition",
                only_with=only(_VPC_ENI),
            ),
        ])
