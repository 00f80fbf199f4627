"""InferenceComponents: a farm's dedicated llama.cpp models as SageMaker inference components — ONE shared endpoint per
instance type (role, KMS key, log group, EndpointConfig, Endpoint, alarms: O(1) in the number of models) and exactly
ONE AWS::SageMaker::InferenceComponent per model, so a dedicated model costs one CloudFormation resource instead of a
GravitonEndpoint's 14.

What each component runs is what that model's GravitonEndpoint would run: the same container environment
(engine_settings.engine_settings on the model's instance type: threads = its vCPUs, slots, context, queue, prompt
cache, MODEL_PATH), the same start-up timeouts (engine_settings), and as its compute reservation the sizing's CPUs and
memory (weights + KV + runtime + the prompt cache the environment allows), so one copy takes one instance as the
endpoint did. The artifact is the farm catalog's `mme` tarball of the model (GGUF + engine.json, a .tar.gz as
InferenceComponentContainerSpecification.ArtifactUrl requires, botocore); SageMaker extracts it to /opt/ml/model
(the generic container contract, docs "your-algorithms-inference-code" — [NC] not stated for inference components).

Not confirmed by an AWS document ([NC], see README "Dedicated models as inference components"): that inference
components run on Graviton instances (botocore's InferenceComponentSpecification.InstanceType enum lists ml.c7g /
ml.c8g / ml.m8g / ml.r8g / ml.r7gd, and no ml.m7g / ml.r7g at all); whether NumberOfCpuCoresRequired counts vCPUs or
physical cores on SMT (x86) types; whether an InvokeEndpoint grant can be scoped to one component. An inline
component container has no EnableNetworkIsolation (a Model property): the caller must accept that explicitly.

Shared endpoint (per instance type): EndpointConfig with ExecutionRoleArn and ONE variant WITHOUT ModelName
(required for components: pulumi/pulumi-aws#4940), InitialInstanceCount = ManagedInstanceScaling.MinInstanceCount,
MaxInstanceCount, RoutingConfig LEAST_OUTSTANDING_REQUESTS (botocore ProductionVariantRoutingConfig); nothing in it
depends on the list of models, so adding a model adds one component and changes no endpoint."""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sagemaker as sagemaker
from aws_cdk import aws_sns as sns
from constructs import Construct, IDependable

from cpu_inference import sizing
from cpu_inference._internal import nag
from cpu_inference.artifacts import ModelBucket
from cpu_inference.config.schema import (
    FIRST_TOKEN_SLO_MS,
    SHARED_MAX_INSTANCES,
    SHARED_MIN_INSTANCES,
    SHARED_VOLUME_SIZE_GB,
)
from cpu_inference.engines import LLAMA_CPP
from cpu_inference.images import LlamaCppImage
from cpu_inference.monitoring import latency
from cpu_inference.sagemaker import _permissions as permissions
from cpu_inference.sagemaker._naming import endpoint_name, log_group_name, placement_slug
from cpu_inference.sagemaker.endpoint_props import NAME, default_target_concurrency
from cpu_inference.sagemaker.engine_image import EngineImage, sagemaker_image_uri
from cpu_inference.sagemaker.engine_settings import (
    GENERATION_BUDGET_SECONDS,
    EngineSettings,
    engine_settings,
    model_download_timeout_seconds,
    required_volume_gb,
    startup_health_check_timeout_seconds,
)
from cpu_inference.sagemaker.ic_scaling import ComponentScaling, InferenceComponentScaling
from cpu_inference.sagemaker.monitoring import INSTANCE, notify

# AWS::SageMaker::InferenceComponent Container.Environment: "maxProperties": 16 (CloudFormation registry schema, as
# cfn-lint ships it: data/schemas/resources AWS_SageMaker_InferenceComponent EnvironmentMap; botocore's
# InferenceComponentContainerSpecification.Environment doc: "We support up to 16 entries in the map").
MAX_ENVIRONMENT = 16
# botocore sagemaker InferenceComponentName: max 63, pattern [a-zA-Z0-9]([\-a-zA-Z0-9]*[a-zA-Z0-9])?
COMPONENT_NAME = re.compile(r"^[a-zA-Z0-9]([\-a-zA-Z0-9]*[a-zA-Z0-9])?$")
COMPONENT_NAME_MAX = 63
# botocore sagemaker InferenceComponentComputeResourceRequirements: NumberOfCpuCoresRequired min 0.25,
# MinMemoryRequiredInMb min 128.
MIN_CPU_CORES = 0.25
MIN_MEMORY_MB = 128
# botocore sagemaker ProductionVariantRoutingConfig.RoutingStrategy: a request goes to the copy with the fewest
# requests in flight — what a llama-server with a fixed number of slots wants.
ROUTING_STRATEGY = "LEAST_OUTSTANDING_REQUESTS"
VARIANT = "AllTraffic"
# Where SageMaker writes a component's container logs ([C-ish]: AWS sample notebooks query this group; no AWS doc row).
COMPONENT_LOG_GROUP_PREFIX = "/aws/sagemaker/InferenceComponents/"
DEFAULT_MIN_INSTANCES = SHARED_MIN_INSTANCES  # config.yaml farm.shared_endpoints (config.schema owns the defaults)
DEFAULT_MAX_INSTANCES = SHARED_MAX_INSTANCES
DEFAULT_VOLUME_SIZE_GB = SHARED_VOLUME_SIZE_GB
VOLUME_MAX_GB = 512  # botocore sagemaker ProductionVariantVolumeSizeInGB max
# The tag on every resource of this mode, the components included wherever model_scope puts them.
HOSTING_TAG, HOSTING_TAG_VALUE = "cpu-inference:dedicated-hosting", "inference-components"


@dataclass(frozen=True, kw_only=True)
class ComponentModel:
    """One dedicated llama.cpp model: name (DNS label), spec (sizing input), instance_type (the shared endpoint it goes
    to), artifact_url (s3://…/<name>/<idhash>-<flags>.tar.gz: the catalog's mme tarball), model_file (the GGUF's name
    inside it: MODEL_PATH=/opt/ml/model/<model_file>), min_copies (RuntimeConfig.CopyCount, >= 1) / max_copies
    (autoscaled when above min_copies), queue_depth (as GravitonEndpointProps.queue_depth)."""

    name: str
    spec: sizing.ModelSpec
    instance_type: str
    artifact_url: str
    model_file: str
    min_copies: int = 1
    max_copies: int = 1
    queue_depth: int | None = None

    @property
    def settings(self) -> EngineSettings:
        """What a GravitonEndpoint of this model on instance_type computes (one owner: engine_settings)."""
        return engine_settings(self.spec, self.instance_type, alias=self.name, model_file=self.model_file)

    @property
    def model_bytes(self) -> int:
        return sizing.weights_bytes(self.spec)


def component_environment(m: ComponentModel) -> dict[str, str]:
    """Container.Environment: exactly a GravitonEndpoint's for the model (GravitonEndpoint._environment with no extra
    environment); refused above MAX_ENVIRONMENT entries."""
    env = m.settings.environment()
    if len(env) > MAX_ENVIRONMENT:
        raise ValueError(
            f"inference component {m.name}: its container environment has {len(env)} entries ({', '.join(sorted(env))}), "
            f"but AWS::SageMaker::InferenceComponent Container.Environment takes at most {MAX_ENVIRONMENT} (CloudFormation "
            "schema maxProperties 16) — serve this model with farm.dedicated_hosting: endpoints"
        )
    return env


def compute_requirements(m: ComponentModel) -> tuple[float, int]:
    """(NumberOfCpuCoresRequired, MinMemoryRequiredInMb): the sizing's engine threads, and what the engine may hold —
    weights + KV + runtime (sizing.memory_needed) plus the prompt cache its environment allows (engine_settings)."""
    s = m.settings
    return float(max(MIN_CPU_CORES, s.sizing.threads)), max(
        MIN_MEMORY_MB, s.sizing.memory_request_mib + s.cache_ram_mib
    )


def invocations_per_copy(m: ComponentModel, latency_slo_ms: int) -> int:
    """The target of SageMakerInferenceComponentInvocationsPerCopy (invocations per minute per copy): the copy's
    target concurrency (default_target_concurrency: 3/4 of the slots, as a GravitonEndpoint holds) over one request's
    time (the latency alarm's budget: the SLO + the task's answer at the engine's decode rate, monitoring/latency.py)
    — Little's law, per minute."""
    s = m.settings
    budget_ms = latency.latency_alarm(
        latency_slo_ms,
        output_tokens=latency.alarm_output_tokens((m.spec.task,)),
        time_per_output_token_ms=latency.time_per_output_token_ms(LLAMA_CPP),
        generation_budget_seconds=GENERATION_BUDGET_SECONDS,
    ).threshold_ms
    return max(1, math.floor(default_target_concurrency(s.sizing.slots) * 60_000 / budget_ms))


def component_name(scope: Construct, model: str, instance_type: str) -> str:
    """`<stack>-<model>`, cut to 54, + `-<8 hex>` of (construct path, model, instance type): deterministic, at most 63
    characters, unique per farm (and per stack in the account), and new when the model moves to another instance type
    (UpdateInferenceComponent cannot move a component: the logical id changes with it, so it is replaced)."""
    digest = hashlib.sha256(f"{scope.node.path}|{model}|{instance_type}".encode()).hexdigest()[:8]
    stack = cdk.Stack.of(scope)
    base = stack.stack_name if not cdk.Token.is_unresolved(stack.stack_name) else stack.node.id
    prefix = re.sub(r"-+", "-", re.sub(r"[^a-z0-9-]", "-", f"{base}-{model}".lower()))[:54].strip("-") or model[:54]
    name = f"{prefix}-{digest}"
    assert len(name) <= COMPONENT_NAME_MAX and COMPONENT_NAME.match(name), name
    return name


@dataclass(frozen=True, kw_only=True)
class InferenceComponentsProps:
    """models: the dedicated models (ComponentModel; llama.cpp GGUF only). image: the llama-server image. model_bucket
    + read_prefix: the role reads this prefix (the farm catalog's `farm/`). min_instances / max_instances: each
    shared endpoint's ManagedInstanceScaling bounds (InitialInstanceCount = min_instances; default 1 / 16): a copy
    reserves its model's whole sizing, so max_instances must hold the copies of that instance type's models.
    volume_size_gb: the ML storage volume of each instance (default 64; left out on instance-storage types such as
    ml.r7gd) — fixed, not computed from the models, so adding one never changes an endpoint. latency_slo_ms: the
    first-token SLO behind each model's autoscaling target. network_isolation: must be False — an inline component
    container has no EnableNetworkIsolation (only a Model has; botocore InferenceComponentContainerSpecification), so
    the caller says it accepts that. model_scope: where each model's component goes (default this construct; e.g. a
    nested stack by name). depends_on: what every component waits for (e.g. the catalog's DedicatedModelsReady)."""

    models: tuple[ComponentModel, ...]
    image: LlamaCppImage | EngineImage
    model_bucket: ModelBucket
    read_prefix: str = "farm/"
    min_instances: int = DEFAULT_MIN_INSTANCES
    max_instances: int = DEFAULT_MAX_INSTANCES
    volume_size_gb: int = DEFAULT_VOLUME_SIZE_GB
    latency_slo_ms: int = FIRST_TOKEN_SLO_MS
    network_isolation: bool = False
    utilization_alarm_percent: float = 85.0
    alarm_topic: sns.ITopic | None = None
    log_retention: logs.RetentionDays = logs.RetentionDays.THREE_MONTHS
    removal_policy: cdk.RemovalPolicy = cdk.RemovalPolicy.RETAIN
    model_scope: Callable[[str], Construct] | None = None
    depends_on: tuple[IDependable, ...] = field(default=())

    def validate(self) -> None:
        p = "InferenceComponentsProps"
        if not self.models:
            raise ValueError(f"{p}.models: give at least one model")
        if self.network_isolation:
            raise ValueError(
                f"{p}.network_isolation: an inference component's inline container has no network isolation (only a "
                "SageMaker Model has EnableNetworkIsolation) — set sagemaker.network_isolation: false to accept that, "
                "or keep farm.dedicated_hosting: endpoints"
            )
        if not 1 <= self.min_instances <= self.max_instances:
            raise ValueError(
                f"{p}: need 1 <= min_instances ({self.min_instances}) <= max_instances ({self.max_instances}) "
                "(farm.shared_endpoints.instances)"
            )
        if not 1 <= self.volume_size_gb <= VOLUME_MAX_GB:
            raise ValueError(f"{p}.volume_size_gb must be 1..{VOLUME_MAX_GB}, got {self.volume_size_gb}")
        names = [m.name for m in self.models]
        if len(set(names)) != len(names):
            raise ValueError(f"{p}.models: names must be unique, got {names}")
        copies: dict[str, int] = {}
        for m in self.models:
            where = f"{p}.models[{m.name}]"
            if not NAME.match(m.name):
                raise ValueError(f"{where}: name must be a DNS label")
            if m.spec.engine != LLAMA_CPP:
                raise ValueError(
                    f"{where}: engine {m.spec.engine} — inference components here serve llama.cpp GGUF models from the "
                    "catalog; serve it with farm.dedicated_hosting: endpoints"
                )
            if not 1 <= m.min_copies <= m.max_copies:
                raise ValueError(
                    f"{where}: need 1 <= min_copies ({m.min_copies}) <= max_copies ({m.max_copies}) — replicas.min 0 "
                    "(scale to zero) is not supported for inference components here"
                )
            if not m.artifact_url.startswith("s3://") or not m.artifact_url.endswith(".tar.gz"):
                raise ValueError(
                    f"{where}: artifact_url must be an s3:// .tar.gz (ArtifactUrl), got {m.artifact_url!r}"
                )
            it = sizing.instance(m.instance_type)
            s = m.settings.sizing
            if not s.fits:
                raise ValueError(
                    f"{where}: needs {s.memory_needed_bytes / sizing.GIB:.1f} GiB, {m.instance_type} has "
                    f"{s.memory_available_bytes / sizing.GIB:.1f} GiB usable — a larger instance_type"
                )
            need = required_volume_gb(m.model_bytes)
            if not it.instance_store and need > self.volume_size_gb:
                raise ValueError(
                    f"{where}: its model needs a {need} GB ML storage volume, more than volume_size_gb "
                    f"{self.volume_size_gb} (farm.shared_endpoints.volume_size_gb) — raise it"
                )
            component_environment(m)  # the 16-entry limit, at validate time
            copies[m.instance_type] = copies.get(m.instance_type, 0) + m.min_copies
        for it_name, n in copies.items():
            # One copy reserves its model's whole sizing (all of the instance's vCPUs): one copy per instance.
            if n > self.max_instances:
                raise ValueError(
                    f"{p}: the models on {it_name} keep {n} copies (replicas.min), one instance each, but max_instances "
                    f"is {self.max_instances} — raise farm.shared_endpoints.instances.max to {n} or more"
                )


@dataclass(frozen=True)
class SharedEndpoint:
    """One endpoint of the dedicated components: instance_type, endpoint_name, endpoint_arn, endpoint (CfnEndpoint),
    endpoint_config, log_group, alarms (name → Alarm)."""

    instance_type: str
    endpoint_name: str
    endpoint_arn: str
    endpoint: sagemaker.CfnEndpoint
    endpoint_config: sagemaker.CfnEndpointConfig
    log_group: logs.LogGroup
    alarms: dict[str, cw.Alarm]


@dataclass(frozen=True)
class ComponentHandle:
    """What a caller needs to reach one model: its endpoint_name (InvokeEndpoint's EndpointName) and component_name
    (InvokeEndpoint's InferenceComponentName, header X-Amzn-SageMaker-Inference-Component), the resource, and the
    container environment it was given."""

    model: str
    endpoint_name: str
    component_name: str
    endpoint_arn: str
    resource: sagemaker.CfnInferenceComponent
    environment: dict[str, str]


class InferenceComponents(Construct):
    """Attributes: props, key (kms.Key: the volumes and the endpoint log groups), role (the one execution role),
    endpoints (instance type → SharedEndpoint), components (model name → ComponentHandle), scaling
    (InferenceComponentScaling, or None when no model scales). grant_invoke(grantee)."""

    def __init__(self, scope: Construct, id: str, *, props: InferenceComponentsProps) -> None:
        super().__init__(scope, id)
        props.validate()
        self.props = props
        stack = cdk.Stack.of(self)
        instance_types = list(dict.fromkeys(m.instance_type for m in props.models))
        names = {
            it: endpoint_name(self, name="dedicated", instance_type=it, variant_name=VARIANT, prefix=None)
            for it in instance_types
        }

        self.key = kms.Key(
            self,
            "Key",
            description="Dedicated-model inference components: ML storage volumes and the shared endpoints' log groups",
            enable_key_rotation=True,
            removal_policy=props.removal_policy,
        )
        self.key.add_to_resource_policy(
            iam.PolicyStatement(
                sid="SharedEndpointLogGroups",
                principals=[iam.ServicePrincipal(f"logs.{stack.region}.amazonaws.com")],
                actions=["kms:Encrypt*", "kms:Decrypt*", "kms:ReEncrypt*", "kms:GenerateDataKey*", "kms:Describe*"],
                resources=["*"],
                conditions={
                    "ArnLike": {
                        "kms:EncryptionContext:aws:logs:arn": [
                            f"arn:{stack.partition}:logs:{stack.region}:{stack.account}:log-group:{log_group_name(n)}"
                            for n in names.values()
                        ]
                    }
                },
            )
        )
        self.role = iam.Role(
            self,
            "ExecutionRole",
            assumed_by=iam.ServicePrincipal("sagemaker.amazonaws.com"),
            description="SageMaker execution role of the dedicated inference components: reads the farm prefix, pulls the engine image, writes logs",
        )
        # GetObject + ListBucket limited to the prefix, kms:Decrypt on the bucket key.
        props.model_bucket.grant_read(self.role, props.read_prefix)
        self.endpoints: dict[str, SharedEndpoint] = {}
        for it in instance_types:
            self.endpoints[it] = self._endpoint(it, names[it])
        # SageMaker creates and writes each component's own group (/aws/sagemaker/InferenceComponents/<name>).
        self.role.add_to_principal_policy(
            iam.PolicyStatement(
                sid="ComponentLogs",
                actions=["logs:CreateLogGroup", "logs:CreateLogStream", "logs:PutLogEvents", "logs:DescribeLogStreams"],
                resources=[
                    f"arn:{stack.partition}:logs:{stack.region}:{stack.account}:log-group:{COMPONENT_LOG_GROUP_PREFIX}{self._name_prefix()}*"
                ],
            )
        )

        self.components: dict[str, ComponentHandle] = {}
        for m in props.models:
            self.components[m.name] = self._component(m)

        scaled = [m for m in props.models if m.max_copies > m.min_copies]
        self.scaling: InferenceComponentScaling | None = None
        if scaled:
            self.scaling = InferenceComponentScaling(
                self,
                "Scaling",
                components=[
                    ComponentScaling(
                        name=self.components[m.name].component_name,
                        min_copies=m.min_copies,
                        max_copies=m.max_copies,
                        invocations_per_copy=invocations_per_copy(m, props.latency_slo_ms),
                    )
                    for m in scaled
                ],
            )
            for m in scaled:  # registered once the component exists (interface: the caller adds the dependency)
                self.scaling.resource.node.add_dependency(self.components[m.name].resource)
        cdk.Tags.of(self).add(HOSTING_TAG, HOSTING_TAG_VALUE)
        nag.acknowledge_wildcards(
            self.role,
            [
                *permissions.role_wildcards("the one repository"),
                nag.Wildcard(
                    r"Resource::arn:<AWS::Partition>:s3:::<[^>]+>/" + re.escape(props.read_prefix) + r"\*",
                    "Read of the farm's catalog prefix: every dedicated model's tarball lives under it, keyed by identity",
                ),
                nag.Wildcard(
                    r"Resource::arn:<AWS::Partition>:logs:<AWS::Region>:<AWS::AccountId>:log-group:"
                    + re.escape(COMPONENT_LOG_GROUP_PREFIX)
                    + r".*\*",
                    "SageMaker creates one log group per inference component, named after it; limited to this farm's name prefix",
                ),
            ],
        )

    def _name_prefix(self) -> str:
        """What every component name of this construct starts with (the stack name part), for the logs grant."""
        stack = cdk.Stack.of(self)
        base = stack.stack_name if not cdk.Token.is_unresolved(stack.stack_name) else stack.node.id
        return re.sub(r"-+", "-", re.sub(r"[^a-z0-9-]", "-", base.lower()))[:54].strip("-")

    def _endpoint(self, instance_type: str, name: str) -> SharedEndpoint:
        props = self.props
        slug = placement_slug(instance_type)
        it = sizing.instance(instance_type)
        log_group = logs.LogGroup(
            self,
            f"Logs{slug}",
            log_group_name=log_group_name(name),
            retention=props.log_retention,
            encryption_key=self.key,
            removal_policy=cdk.RemovalPolicy.DESTROY,
        )
        if not self.endpoints:  # the first: image pull, metrics, the volume key's grant, and its log group
            permissions.grant_basics(self.role, image=props.image, log_group=log_group, key=self.key)
        else:
            log_group.grant_write(self.role)
            log_group.grant(self.role, "logs:CreateLogGroup", "logs:DescribeLogStreams")
        config = sagemaker.CfnEndpointConfig(
            self,
            f"Config{slug}",
            execution_role_arn=self.role.role_arn,
            production_variants=[
                sagemaker.CfnEndpointConfig.ProductionVariantProperty(
                    variant_name=VARIANT,
                    instance_type=instance_type,
                    initial_instance_count=props.min_instances,
                    managed_instance_scaling=sagemaker.CfnEndpointConfig.ManagedInstanceScalingProperty(
                        status="ENABLED", min_instance_count=props.min_instances, max_instance_count=props.max_instances
                    ),
                    routing_config=sagemaker.CfnEndpointConfig.RoutingConfigProperty(routing_strategy=ROUTING_STRATEGY),
                    volume_size_in_gb=None if it.instance_store else props.volume_size_gb,
                )
            ],
            # As GravitonEndpoint: the key encrypts the ML storage volume; instance-store types have none.
            kms_key_id=None if it.instance_store else self.key.key_arn,
        )
        config.node.add_dependency(self.role)  # CreateEndpointConfig passes the role: its policy first
        endpoint = sagemaker.CfnEndpoint(
            self, f"Endpoint{slug}", endpoint_name=name, endpoint_config_name=config.attr_endpoint_config_name
        )
        endpoint.node.add_dependency(log_group)
        alarms = self._alarms(slug, name, it.vcpus)
        return SharedEndpoint(instance_type, name, endpoint.ref, endpoint, config, log_group, alarms)

    def _alarms(self, slug: str, name: str, vcpus: int) -> dict[str, cw.Alarm]:
        """Endpoint-level alarms (no per-model resource): /aws/sagemaker/Endpoints CPUUtilizationNormalized ("provided
        only for endpoints that host active inference components", 0..100) and MemoryUtilization, by EndpointName +
        VariantName (docs.aws.amazon.com/sagemaker/latest/dg/monitoring-cloudwatch.html). Per-model invocation and
        latency metrics carry the InferenceComponentName dimension: read them in CloudWatch, not one alarm each."""
        p = self.props
        dims = {"EndpointName": name, "VariantName": VARIANT}
        where = f"shared endpoint {name} ({vcpus} vCPUs)"

        def metric(metric_name: str) -> cw.Metric:
            return cw.Metric(
                namespace=INSTANCE,
                metric_name=metric_name,
                dimensions_map=dims,
                statistic="Average",
                period=cdk.Duration.minutes(5),
            )

        alarms = {
            "cpu": metric("CPUUtilizationNormalized").create_alarm(
                self,
                f"Cpu{slug}",
                alarm_description=f"CPU above {p.utilization_alarm_percent:g}% for 15 minutes on {where}: the copies are saturated — raise the models' replicas.max or farm.shared_endpoints.instances.max",
                threshold=p.utilization_alarm_percent,
                comparison_operator=cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
                evaluation_periods=3,
                datapoints_to_alarm=3,
                treat_missing_data=cw.TreatMissingData.MISSING,
            ),
            "memory": metric("MemoryUtilization").create_alarm(
                self,
                f"Memory{slug}",
                alarm_description=f"Memory above {p.utilization_alarm_percent:g}% on {where}: an engine is near OOM — fewer slots, less context or a larger instance",
                threshold=p.utilization_alarm_percent,
                comparison_operator=cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
                evaluation_periods=3,
                datapoints_to_alarm=2,
                treat_missing_data=cw.TreatMissingData.MISSING,
            ),
        }
        notify(alarms.values(), p.alarm_topic)
        return alarms

    def _component(self, m: ComponentModel) -> ComponentHandle:
        props = self.props
        shared = self.endpoints[m.instance_type]
        env = component_environment(m)
        cores, memory_mb = compute_requirements(m)
        name = component_name(self, m.name, m.instance_type)
        home = props.model_scope(m.name) if props.model_scope is not None else self
        spec = sagemaker.CfnInferenceComponent
        resource = spec(
            home,
            f"Component{''.join(p.capitalize() for p in m.name.split('-'))}{placement_slug(m.instance_type)}",
            endpoint_name=shared.endpoint_name,
            inference_component_name=name,
            variant_name=VARIANT,
            specification=spec.InferenceComponentSpecificationProperty(
                container=spec.InferenceComponentContainerSpecificationProperty(
                    image=sagemaker_image_uri(props.image, sizing.instance(m.instance_type).arch),
                    artifact_url=m.artifact_url,
                    environment=env,
                ),
                compute_resource_requirements=spec.InferenceComponentComputeResourceRequirementsProperty(
                    number_of_cpu_cores_required=cores, min_memory_required_in_mb=memory_mb
                ),
                # As the model's GravitonEndpoint: download (and here extract) the model, then /ping 200 once loaded.
                startup_parameters=spec.InferenceComponentStartupParametersProperty(
                    model_data_download_timeout_in_seconds=model_download_timeout_seconds(m.model_bytes),
                    container_startup_health_check_timeout_in_seconds=startup_health_check_timeout_seconds(
                        m.model_bytes
                    ),
                ),
            ),
            runtime_config=spec.InferenceComponentRuntimeConfigProperty(copy_count=m.min_copies),
        )
        if home is not self:  # outside this construct (a nested stack): Tags.of(self) does not reach it
            cdk.Tags.of(resource).add(HOSTING_TAG, HOSTING_TAG_VALUE)
        resource.node.add_dependency(shared.endpoint)
        for dependency in props.depends_on:
            resource.node.add_dependency(dependency)
        return ComponentHandle(m.name, shared.endpoint_name, name, shared.endpoint_arn, resource, env)

    def grant_invoke(self, grantee: iam.IGrantable) -> iam.Grant:
        """InvokeEndpoint and InvokeEndpointWithResponseStream on the shared endpoints (every dedicated model): [NC]
        whether a grant can be scoped to one inference component (its ARN or a condition key) is not documented."""
        return iam.Grant.add_to_principal(
            grantee=grantee,
            actions=permissions.INVOKE_ACTIONS,
            resource_arns=[e.endpoint_arn for e in self.endpoints.values()],
        )
