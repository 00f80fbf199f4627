"""EndpointPropsBase: the props every SageMaker endpoint of this library shares (declared once, validated by the
same checks), and EngineEndpointPropsBase: what the two engine endpoints (GravitonEndpoint, MultiModelEndpoint) add.
Each endpoint's props class adds only its own fields and its own defaults. Each `_check_*` raises ValueError naming
`<p>.<key>` and the fix."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sns as sns

from cpu_inference import sizing
from cpu_inference.config.schema import FIRST_TOKEN_SLO_MS
from cpu_inference.engines import LLAMA_CPP, VLLM
from cpu_inference.images import LlamaCppImage
from cpu_inference.monitoring import latency
from cpu_inference.sagemaker.engine_image import EngineImage, image_architectures, image_engine
from cpu_inference.sagemaker.engine_settings import (
    GENERATION_BUDGET_ENV,
    GENERATION_BUDGET_SECONDS,
    INVOKE_TIMEOUT_SECONDS,
    TIMEOUT_MAX_SECONDS,
    TIMEOUT_MIN_SECONDS,
)

# The catalog families with SageMaker hosting sizes (sizing's table, checked against botocore's enum).
SAGEMAKER_FAMILIES = tuple(dict.fromkeys(it.family for it in sizing.CATALOG.values() if it.sagemaker))
NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
ENDPOINT_PREFIX = re.compile(r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,53}$")
VARIANT = re.compile(r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$")
ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,1023}$")
TARGET_SLOT_UTILIZATION = 0.75  # an engine endpoint's default scaling target: 3/4 of the slots busy per instance


def default_target_concurrency(slots: int) -> float:
    return float(max(1, math.floor(slots * TARGET_SLOT_UTILIZATION)))


@dataclass(frozen=True, kw_only=True)
class EndpointPropsBase:
    """What every endpoint takes (keyword arguments; each props class sets its own defaults where noted).

    name: DNS label for names and tags. image: a LlamaCppImage or an EngineImage (any ECR repository + tag/digest);
        its architectures must include the instance type's.
    instance_type: a SageMaker CPU instance from `sizing`'s catalog (default per endpoint).
    min_capacity / max_capacity: instance bounds for autoscaling (min >= 1: real-time endpoints do not scale to
        zero). initial_instance_count: default min_capacity.
    autoscaling: target tracking on ConcurrentRequestsPerModel when max > min (default True); target_concurrency:
        in-flight requests per instance to hold (default per endpoint); scale_out_cooldown / scale_in_cooldown.
    startup_health_check_timeout: time for /ping to answer 200 after start, 60..3600 s (default per endpoint).
    vpc / vpc_subnets / security_groups: run the endpoint in your VPC (default: no VPC). With a VPC and no security
        groups, one is created with no inbound rules and only the endpoint's egress (HTTPS).
    encryption_key: KMS key for the ML storage volume and the created log group (default: a new key with
        rotation). log_retention: container logs (default 3 months). existing_role: the execution role to use
        instead of a new one (grants are added to it).
    latency_slo: the p95 latency target the latency alarm starts from (default: an engine endpoint's first-token
        SLO, config.schema.FIRST_TOKEN_SLO_MS; the router's: monitoring.latency.ROUTED_REQUEST_SLO_MS).
        error_rate_4xx_percent / error_rate_5xx_percent: alarm thresholds (default 5 / 1). utilization_alarm_percent:
        CPU and memory alarm threshold (default 85). alarm_topic: SNS topic notified on alarm and OK (default none).
        dashboard: create one (default True).
    endpoint_name_prefix: prefix of the generated endpoint name (default `<stack>-<name>`, at most 54 characters);
        the name always ends in a hash of the placement, so it changes with the instance type.
    variant_name: production variant (default AllTraffic). removal_policy: for the created key (and capture
        bucket) (default RETAIN).
    """

    name: str
    image: LlamaCppImage | EngineImage
    instance_type: str
    min_capacity: int = 1
    max_capacity: int = 2
    initial_instance_count: int | None = None
    autoscaling: bool = True
    target_concurrency: float | None = None
    scale_out_cooldown: cdk.Duration = field(default_factory=lambda: cdk.Duration.seconds(120))
    scale_in_cooldown: cdk.Duration = field(default_factory=lambda: cdk.Duration.seconds(600))
    startup_health_check_timeout: cdk.Duration | None = None
    vpc: ec2.IVpc | None = None
    vpc_subnets: ec2.SubnetSelection | None = None
    security_groups: tuple[ec2.ISecurityGroup, ...] = ()
    encryption_key: kms.IKey | None = None
    log_retention: logs.RetentionDays = logs.RetentionDays.THREE_MONTHS
    existing_role: iam.IRole | None = None
    latency_slo: cdk.Duration = field(default_factory=lambda: cdk.Duration.millis(FIRST_TOKEN_SLO_MS))
    error_rate_4xx_percent: float = 5.0
    error_rate_5xx_percent: float = 1.0
    utilization_alarm_percent: float = 85.0
    alarm_topic: sns.ITopic | None = None
    dashboard: bool = True
    endpoint_name_prefix: str | None = None
    variant_name: str = "AllTraffic"
    removal_policy: cdk.RemovalPolicy = cdk.RemovalPolicy.RETAIN

    def validate(self) -> None:
        raise NotImplementedError

    # -- derived ----------------------------------------------------------------------------------

    @property
    def instance(self) -> sizing.InstanceType:
        return sizing.instance(self.instance_type)

    @property
    def scales(self) -> bool:
        return self.autoscaling and self.max_capacity > self.min_capacity

    @property
    def initial_count(self) -> int:
        return self.initial_instance_count if self.initial_instance_count is not None else self.min_capacity

    def _latency_alarm(self) -> latency.LatencyAlarm:
        """The latency alarm's rule (monitoring/latency.py): here the SLO alone; an engine endpoint adds its answer."""
        return latency.latency_alarm(self.latency_slo.to_milliseconds())

    @property
    def latency_alarm(self) -> cdk.Duration:
        """The p95 ModelLatency the alarm allows."""
        return cdk.Duration.millis(self._latency_alarm().threshold_ms)

    @property
    def latency_alarm_basis(self) -> str:
        return self._latency_alarm().basis

    # -- checks -----------------------------------------------------------------------------------

    def _check_name(self, p: str) -> None:
        if not NAME.match(self.name):
            raise ValueError(
                f"{p}.name must be a DNS label (lowercase letters, digits, '-'; at most 63), got {self.name!r}"
            )

    def _check_instance_type(self, p: str, example: str) -> sizing.InstanceType:
        """The catalog entry of a SageMaker CPU instance type."""
        if not self.instance_type.startswith("ml."):
            raise ValueError(
                f"{p}.instance_type must be a SageMaker instance type such as {example}, got {self.instance_type!r}"
            )
        try:
            return self.instance
        except sizing.UnknownInstanceType:
            alt = sizing.sagemaker_alternative(self.instance_type)
            if alt is not None:
                raise ValueError(
                    f"{p}.instance_type {self.instance_type!r} is not a SageMaker hosting instance type (not in "
                    f"ProductionVariantInstanceType) — use {alt.sagemaker_name} ({alt.vcpus} vCPUs, {alt.memory_gib:g} GiB)"
                ) from None
            raise ValueError(
                f"{p}.instance_type {self.instance_type!r} is not a SageMaker CPU instance in the catalog "
                f"(families: {', '.join('ml.' + f for f in SAGEMAKER_FAMILIES)}; `cpu-inference size --list`)"
            ) from None

    def _check_image(self, p: str, *, built_from: str = "") -> None:
        """An EngineImage is valid, anything else is a LlamaCppImage; `built_from` names its context in the error."""
        if isinstance(self.image, EngineImage):
            self.image.validate()
        elif not isinstance(self.image, LlamaCppImage):
            raise ValueError(
                f"{p}.image must be a LlamaCppImage{built_from} or an EngineImage, got {type(self.image).__name__}"
            )

    def _check_image_engine(self, p: str, engine: str, *, what: str) -> None:
        """The image must run `engine` (`what` names the model, for the message)."""
        served = image_engine(self.image)
        if served != engine:
            fix = (
                "the vLLM image: LlamaCppImage(scope, id, props=VLLM_IMAGE), or EngineImage(..., engine='vllm')"
                if engine == VLLM
                else "the llama-server image: LlamaCppImage(scope, id), or EngineImage(..., engine='llama.cpp')"
            )
            raise ValueError(f"{p}.image serves {served} but {what} runs on {engine} — use {fix}")

    def _check_image_arch(self, p: str, arch: str, image: str) -> None:
        """`image` names what to build ("the image", "the router image")."""
        architectures: Sequence[str] = image_architectures(self.image)
        if arch not in architectures:
            raise ValueError(
                f"{p}.image has no {arch} build ({', '.join(architectures)}) but {self.instance_type} is {arch} — "
                f"build {image} for {arch} or pick an instance type of its architecture"
            )

    def _check_capacity_bounds(self, p: str) -> None:
        if self.min_capacity < 1:
            raise ValueError(
                f"{p}.min_capacity must be >= 1 (SageMaker real-time endpoints cannot scale to zero), got {self.min_capacity}"
            )
        if self.max_capacity < self.min_capacity:
            raise ValueError(f"{p}.max_capacity ({self.max_capacity}) must be >= min_capacity ({self.min_capacity})")
        if not self.min_capacity <= self.initial_count <= self.max_capacity:
            raise ValueError(
                f"{p}.initial_instance_count ({self.initial_count}) must be within min_capacity..max_capacity ({self.min_capacity}..{self.max_capacity})"
            )

    def _check_timeout(self, p: str, attr: str) -> None:
        value: cdk.Duration | None = getattr(self, attr)
        if value is not None and not TIMEOUT_MIN_SECONDS <= value.to_seconds() <= TIMEOUT_MAX_SECONDS:
            raise ValueError(
                f"{p}.{attr} must be {TIMEOUT_MIN_SECONDS}..{TIMEOUT_MAX_SECONDS} seconds (SageMaker's range), got {value.to_seconds()}"
            )

    def _check_network(self, p: str) -> None:
        if self.security_groups and self.vpc is None:
            raise ValueError(f"{p}.security_groups need a vpc: give vpc too, or drop security_groups")
        if self.vpc_subnets is not None and self.vpc is None:
            raise ValueError(f"{p}.vpc_subnets need a vpc: give vpc too, or drop vpc_subnets")

    def _check_alarms(self, p: str) -> None:
        if self.latency_slo.to_milliseconds() <= 0:
            raise ValueError(f"{p}.latency_slo must be positive")
        for attr in ("error_rate_4xx_percent", "error_rate_5xx_percent", "utilization_alarm_percent"):
            if not 0 < getattr(self, attr) <= 100:
                raise ValueError(f"{p}.{attr} must be in (0, 100], got {getattr(self, attr)}")

    def _check_naming(self, p: str) -> None:
        if self.endpoint_name_prefix is not None and not ENDPOINT_PREFIX.match(self.endpoint_name_prefix):
            raise ValueError(
                f"{p}.endpoint_name_prefix must be letters, digits and '-' (not first or last), at most 54 characters "
                f"(a 9-character placement hash follows), got {self.endpoint_name_prefix!r}"
            )
        if not VARIANT.match(self.variant_name):
            raise ValueError(f"{p}.variant_name must be letters, digits and '-', at most 63, got {self.variant_name!r}")


@dataclass(frozen=True, kw_only=True)
class EngineEndpointPropsBase(EndpointPropsBase):
    """What an endpoint running the llama-server engine (one model, or a multi-model pool) adds.

    environment: extra container environment; may not set the keys the construct computes.
    volume_size_gb: ML storage volume in GB (1..512; default per endpoint); refused on instance-storage types
        (ml.r7gd), which get local NVMe and no EBS volume.
    network_isolation: no outbound network from the container (default True; the engine runs --offline).
    alarm_output_tokens / time_per_output_token: the latency alarm watches ModelLatency, the whole generation, so
        its threshold is latency_slo + output tokens x time_per_output_token, capped below the generation budget
        (the rule and its defaults by engine and task: monitoring/latency.py); the output tokens default per endpoint.
    """

    environment: Mapping[str, str] = field(default_factory=dict)
    volume_size_gb: int | None = None
    network_isolation: bool = True
    alarm_output_tokens: int | None = None
    time_per_output_token: cdk.Duration | None = None

    @property
    def engine(self) -> str:
        """The engine the endpoint's model runs on."""
        return LLAMA_CPP

    @property
    def decode_time_per_token(self) -> cdk.Duration:
        """time_per_output_token, or the engine's default."""
        if self.time_per_output_token is not None:
            return self.time_per_output_token
        return cdk.Duration.millis(latency.time_per_output_token_ms(self.engine))

    @property
    def output_tokens_budget(self) -> int:
        """Output tokens per request the latency alarm budgets for."""
        raise NotImplementedError

    @property
    def generation_budget_seconds(self) -> float:
        """When the container cuts a non-streamed answer (504): ADAPTER_GENERATION_BUDGET_SECONDS from `environment`,
        else the adapter's default (engine_settings.GENERATION_BUDGET_SECONDS)."""
        raw = self.environment.get(GENERATION_BUDGET_ENV)
        if raw is None or cdk.Token.is_unresolved(raw):
            return float(GENERATION_BUDGET_SECONDS)
        return float(raw)

    def _latency_alarm(self) -> latency.LatencyAlarm:
        """The first-token SLO plus the decode budget of the answer, capped below the generation budget
        (monitoring/latency.py owns the rule)."""
        return latency.latency_alarm(
            self.latency_slo.to_milliseconds(),
            output_tokens=self.output_tokens_budget,
            time_per_output_token_ms=self.decode_time_per_token.to_milliseconds(),
            generation_budget_seconds=self.generation_budget_seconds,
        )

    def _check_environment_keys(self, p: str) -> None:
        bad = [k for k in self.environment if not ENV_KEY.match(k)]
        if bad:
            raise ValueError(f"{p}.environment keys must be environment variable names, got {bad}")
        raw = self.environment.get(GENERATION_BUDGET_ENV)
        if raw is not None and not cdk.Token.is_unresolved(raw):
            try:
                ok = 0 < float(raw) <= INVOKE_TIMEOUT_SECONDS
            except ValueError:
                ok = False
            if not ok:
                raise ValueError(
                    f"{p}.environment[{GENERATION_BUDGET_ENV!r}] must be a number of seconds in (0, {INVOKE_TIMEOUT_SECONDS}] "
                    f"(InvokeEndpoint waits 60 s), got {raw!r}"
                )

    def _check_decode_budget(self, p: str) -> None:
        if self.alarm_output_tokens is not None and self.alarm_output_tokens < 0:
            raise ValueError(
                f"{p}.alarm_output_tokens must be >= 0 (the answers' p95 length in tokens), got {self.alarm_output_tokens}"
            )
        if self.time_per_output_token is not None and self.time_per_output_token.to_milliseconds() <= 0:
            raise ValueError(f"{p}.time_per_output_token must be positive (e.g. cdk.Duration.millis(100) = 10 tok/s)")
