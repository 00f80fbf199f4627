"""GravitonEndpointProps (frozen, validated at synth) and EngineImage (any ECR image by tag or digest)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sns as sns

from .. import sizing
from ..artifacts import ModelArtifact
from ..images import LlamaCppImage
from .endpoint_parts import (
    SAGEMAKER_FAMILIES as SAGEMAKER_FAMILIES,  # re-exported: the catalog families SageMaker offers
)
from .endpoint_parts import EndpointPropsBase
from .engine_settings import COMPUTED_KEYS, VOLUME_MAX_GB, required_volume_gb

if TYPE_CHECKING:
    from ..patterns.served_model import ServedModel

_S3_PREFIX = re.compile(r"^s3://(?P<bucket>[a-z0-9][a-z0-9.-]{1,61}[a-z0-9])/(?P<prefix>[^*]+/)$")
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,1023}$")


@dataclass(frozen=True)
class EngineImage:
    """An engine image in any ECR repository, by `tag` or (reproducible) `digest` (`sha256:<64 hex>`).
    The image must serve SageMaker's contract with `serve` as its argument (containers/llama-server does);
    `architectures` says which CPU architectures it has, checked against the instance type."""

    repository: ecr.IRepository
    tag: str | None = None
    digest: str | None = None
    architectures: tuple[str, ...] = ("arm64", "amd64")

    def validate(self) -> None:
        if (self.tag is None) == (self.digest is None):
            raise ValueError("EngineImage: give exactly one of tag or digest (a digest is reproducible)")
        if self.digest is not None and not cdk.Token.is_unresolved(self.digest) and not _DIGEST.match(self.digest):
            raise ValueError(f"EngineImage.digest must be sha256:<64 lowercase hex>, got {self.digest!r}")
        if self.tag is not None and not cdk.Token.is_unresolved(self.tag) and not _TAG.match(self.tag):
            raise ValueError(f"EngineImage.tag must be a Docker tag ([A-Za-z0-9_.-], at most 128), got {self.tag!r}")
        unknown = [a for a in self.architectures if a not in ("arm64", "amd64")]
        if not self.architectures or unknown:
            raise ValueError(f"EngineImage.architectures must name arm64 and/or amd64, got {self.architectures!r}")

    @property
    def image_uri(self) -> str:
        if self.digest is not None:
            return self.repository.repository_uri_for_digest(self.digest)
        assert self.tag is not None
        return self.repository.repository_uri_for_tag(self.tag)

    def grant_pull(self, grantee: iam.IGrantable) -> iam.Grant:
        return self.repository.grant_pull(grantee)


def image_architectures(image: LlamaCppImage | EngineImage) -> tuple[str, ...]:
    if isinstance(image, LlamaCppImage):
        return tuple(image.props.platforms)
    return image.architectures


# Output tokens the latency alarm budgets per request, by task: routing/classification answers are a label
# (AWS guidance: 2-3 output tokens), embeddings/rerank generate none, generations are budgeted at 256 tokens.
ALARM_OUTPUT_TOKENS = {"classification": 8, "routing": 8, "embedding": 0, "rerank": 0, "extraction": 256, "chat": 256, "batch": 256}


@dataclass(frozen=True)
class GravitonEndpointProps(EndpointPropsBase):
    """One llama.cpp model on a SageMaker real-time endpoint. Required: name, model, spec, image.

    name: DNS label for the model (response `model` field, tags, names' prefix), e.g. "zephyr-7b".
    model: a ModelArtifact (its commit-pinned prefix `models/<name>/<commit>/` is downloaded; the role may read
        only `models/<name>/`), or an S3 prefix URI `s3://bucket/prefix/` holding the GGUF (SageMaker S3Prefix data:
        every object under it lands in /opt/ml/model).
    spec: the sizing input (parameters, quantization, context, task, optional shape / slots).
    image: a LlamaCppImage (built into ECR by digest) or an EngineImage (any ECR repository + tag/digest).
    instance_type: a SageMaker CPU instance from `sizing`'s catalog (default ml.c7g.2xlarge): Graviton
        ml.c7g/ml.c8g/ml.m8g/ml.r7gd/ml.r8g, or x86 ml.c7i/ml.m7i/ml.r7i for comparison (no ml.m7g/ml.r7g).
    min_capacity / max_capacity: instance bounds for autoscaling (default 1..2; min >= 1: real-time
        endpoints do not scale to zero). initial_instance_count: default min_capacity.
    autoscaling: target tracking on ConcurrentRequestsPerModel (default True when max > min);
        target_concurrency: in-flight requests per instance to hold (default 75% of the slots, >= 1);
        scale_out_cooldown (default 120 s) / scale_in_cooldown (default 600 s).
    model_file: the GGUF's path under an S3-URI prefix (sets MODEL_PATH; default: the entrypoint finds the
        single .gguf). Ignored for a ModelArtifact (its file is known). model_key: the KMS key of an
        S3-URI model's bucket, if SSE-KMS (the role gets kms:Decrypt on it).
    queue_depth: requests admitted per instance beyond the slots before 429 (default: = slots).
    environment: extra container environment (e.g. LLAMA_FLASH_ATTN); may not set the computed keys.
    model_download_timeout / startup_health_check_timeout: default sized to the model file (see
        engine_settings); 60..3600 s. volume_size_gb: ML storage volume in GB (default: the model file + 10% + 6 GiB for
        the image and scratch; at most 512); not allowed on instance-storage types (ml.r7gd), which get no EBS volume.
    vpc / vpc_subnets / security_groups: run the model in your VPC (default: no VPC). With a VPC and no
        security groups, one is created with no inbound rules and HTTPS-only egress (S3, ECR endpoints).
    network_isolation: no outbound network from the container (default True; the engine runs --offline).
    encryption_key: KMS key for the ML storage volume, the container log group and captured data
        (default: a new key with rotation). log_retention: container logs (default 3 months).
    data_capture_percent: share of requests captured to S3 (0 = off). data_capture_bucket: where (default:
        a new KMS-encrypted, access-logged bucket); data_capture_prefix (default "data-capture/<name>");
        data_capture_retention_days: expiry of captured objects in a created bucket (default 90).
    existing_role: an execution role to use instead of a new one (grants are added to it).
    latency_slo: p95 target for the first token, the part of an answer that does not grow with its length
        (default 2 s). The latency alarm watches ModelLatency, the whole generation, so its threshold is
        latency_slo + alarm_output_tokens x time_per_output_token (`latency_alarm`).
    alarm_output_tokens: output tokens per request the alarm budgets for (p95 of your answers' length; default
        by spec.task, ALARM_OUTPUT_TOKENS: 256 for chat/extraction/batch, 8 for classification/routing; an SLM
        that also answers uses the chat figure). time_per_output_token: decode budget per output token and
        stream (default 100 ms = 10 tok/s; AWS guidance: a 7B Q4 decodes 10-20 tok/s on 32 cores, 5-10 on 16).
    error_rate_4xx_percent / error_rate_5xx_percent: alarm thresholds (default 5 / 1).
    utilization_alarm_percent: CPU and memory alarm threshold (default 85).
    alarm_topic: SNS topic notified on alarm and OK (default none). dashboard: create one (default True).
    endpoint_name_prefix: prefix of the generated endpoint name (default `<stack>-<name>`, at most 54
        characters); the name always ends in a hash of the placement, so it changes with the instance type.
    variant_name: production variant (default AllTraffic).
    removal_policy: for the created key and capture bucket (default RETAIN).
    """

    name: str
    model: ModelArtifact | str
    spec: sizing.ModelSpec
    image: LlamaCppImage | EngineImage
    instance_type: str = "ml.c7g.2xlarge"
    min_capacity: int = 1
    max_capacity: int = 2
    initial_instance_count: int | None = None
    autoscaling: bool = True
    target_concurrency: float | None = None
    scale_out_cooldown: cdk.Duration = field(default_factory=lambda: cdk.Duration.seconds(120))
    scale_in_cooldown: cdk.Duration = field(default_factory=lambda: cdk.Duration.seconds(600))
    model_file: str | None = None
    model_key: kms.IKey | None = None
    queue_depth: int | None = None
    environment: Mapping[str, str] = field(default_factory=dict)
    model_download_timeout: cdk.Duration | None = None
    startup_health_check_timeout: cdk.Duration | None = None
    volume_size_gb: int | None = None
    vpc: ec2.IVpc | None = None
    vpc_subnets: ec2.SubnetSelection | None = None
    security_groups: tuple[ec2.ISecurityGroup, ...] = ()
    network_isolation: bool = True
    encryption_key: kms.IKey | None = None
    log_retention: logs.RetentionDays = logs.RetentionDays.THREE_MONTHS
    data_capture_percent: int = 0
    data_capture_bucket: s3.IBucket | None = None
    data_capture_prefix: str | None = None
    data_capture_retention_days: int = 90
    existing_role: iam.IRole | None = None
    latency_slo: cdk.Duration = field(default_factory=lambda: cdk.Duration.seconds(2))
    alarm_output_tokens: int | None = None
    time_per_output_token: cdk.Duration = field(default_factory=lambda: cdk.Duration.millis(100))
    error_rate_4xx_percent: float = 5.0
    error_rate_5xx_percent: float = 1.0
    utilization_alarm_percent: float = 85.0
    alarm_topic: sns.ITopic | None = None
    dashboard: bool = True
    endpoint_name_prefix: str | None = None
    variant_name: str = "AllTraffic"
    removal_policy: cdk.RemovalPolicy = cdk.RemovalPolicy.RETAIN

    # -- derived ----------------------------------------------------------------------------------

    # instance, scales, initial_count: EndpointPropsBase

    @property
    def model_bytes(self) -> int:
        """The model file's size: the spec's file size, else parameters x bits per weight."""
        return sizing.weights_bytes(self.spec)

    @property
    def output_tokens_budget(self) -> int:
        if self.alarm_output_tokens is not None:
            return self.alarm_output_tokens
        return ALARM_OUTPUT_TOKENS.get(self.spec.task, ALARM_OUTPUT_TOKENS["chat"])

    @property
    def latency_alarm(self) -> cdk.Duration:
        """The p95 ModelLatency the alarm allows: the first-token SLO plus the decode budget of the answer."""
        ms = self.latency_slo.to_milliseconds() + self.output_tokens_budget * self.time_per_output_token.to_milliseconds()
        return cdk.Duration.millis(ms)

    @property
    def latency_alarm_basis(self) -> str:
        return (f"{self.latency_slo.to_milliseconds():g} ms first-token SLO + {self.output_tokens_budget} output tokens x "
                f"{self.time_per_output_token.to_milliseconds():g} ms")

    @property
    def capture_prefix(self) -> str:
        return (self.data_capture_prefix or f"data-capture/{self.name}").strip("/")

    def s3_location(self) -> tuple[str, str] | None:
        """(bucket, prefix) of an S3-URI model; None for a ModelArtifact."""
        if isinstance(self.model, ModelArtifact):
            return None
        m = _S3_PREFIX.match(self.model)
        assert m is not None, "validate() first"
        return m["bucket"], m["prefix"]

    # -- validation -------------------------------------------------------------------------------

    def validate(self) -> None:
        p = "GravitonEndpointProps"
        self._check_name(p)
        self._validate_model(p)
        self._validate_instance(p)
        if isinstance(self.image, EngineImage):
            self.image.validate()
        elif not isinstance(self.image, LlamaCppImage):
            raise ValueError(f"{p}.image must be a LlamaCppImage or an EngineImage, got {type(self.image).__name__}")
        self._check_image_arch(p, self.instance.arch, image_architectures(self.image), "the image")
        self._validate_capacity(p)
        self._validate_environment(p)
        self._check_timeout(p, "model_download_timeout")
        self._check_timeout(p, "startup_health_check_timeout")
        self._validate_volume(p)
        self._check_network(p)
        if not 0 <= self.data_capture_percent <= 100:
            raise ValueError(f"{p}.data_capture_percent must be 0..100 (0 = off), got {self.data_capture_percent}")
        if self.data_capture_bucket is not None and self.data_capture_percent == 0:
            raise ValueError(f"{p}.data_capture_bucket is set but data_capture_percent is 0 — set a percent to capture, or drop the bucket")
        if self.data_capture_retention_days < 1:
            raise ValueError(f"{p}.data_capture_retention_days must be >= 1, got {self.data_capture_retention_days}")
        if self.data_capture_prefix is not None and (not self.capture_prefix or "*" in self.capture_prefix or ".." in self.capture_prefix.split("/")):
            raise ValueError(f"{p}.data_capture_prefix must be an S3 key prefix without '*' or '..', got {self.data_capture_prefix!r}")
        self._check_alarms(p)
        if self.alarm_output_tokens is not None and self.alarm_output_tokens < 0:
            raise ValueError(f"{p}.alarm_output_tokens must be >= 0 (the answers' p95 length in tokens), got {self.alarm_output_tokens}")
        if self.time_per_output_token.to_milliseconds() <= 0:
            raise ValueError(f"{p}.time_per_output_token must be positive (e.g. cdk.Duration.millis(100) = 10 tok/s)")
        self._check_naming(p)

    def _validate_model(self, p: str) -> None:
        if isinstance(self.model, ModelArtifact):
            if self.model_file is not None or self.model_key is not None:
                raise ValueError(f"{p}.model_file and model_key apply to an S3 URI model; a ModelArtifact knows its file and key")
            return
        if not isinstance(self.model, str):
            raise ValueError(f"{p}.model must be a ModelArtifact or an s3://bucket/prefix/ URI, got {type(self.model).__name__}")
        if self.model.endswith(".gguf"):
            folder = self.model.rsplit("/", 1)[0] + "/"
            file = self.model.rsplit("/", 1)[1]
            raise ValueError(
                f"{p}.model must be the S3 prefix holding the model (SageMaker S3Prefix data), not the file: "
                f"use model={folder!r}, model_file={file!r}"
            )
        if not _S3_PREFIX.match(self.model):
            raise ValueError(f"{p}.model must be an S3 prefix URI ending in '/' (s3://bucket/models/x/), got {self.model!r}")
        if self.model_file is not None and (self.model_file.startswith("/") or ".." in self.model_file.split("/") or not self.model_file.endswith(".gguf")):
            raise ValueError(f"{p}.model_file must be a .gguf path relative to the model prefix, got {self.model_file!r}")

    def _validate_instance(self, p: str) -> None:
        it = self._check_instance_type(p, "ml.c7g.8xlarge")
        s = sizing.size(self.spec, it, target="sagemaker")
        if not s.fits:
            same_arch = [i for i in sizing.CATALOG.values() if i.sagemaker and i.arch == it.arch]
            better = sizing.smallest_fitting(self.spec, same_arch, target="sagemaker")
            hint = f"use a larger instance such as {better.instance.sagemaker_name}" if better else "no SageMaker CPU instance of this architecture fits it"
            raise ValueError(
                f"{p}.instance_type: {self.name} ({self.spec.parameters_billions:g}B {self.spec.quantization}, {s.slots} slot(s) x "
                f"{s.ctx_per_slot} context) needs {s.memory_needed_bytes / sizing.GIB:.1f} GiB but {self.instance_type} has "
                f"{s.memory_available_bytes / sizing.GIB:.1f} GiB usable — {hint}"
            )

    def _validate_volume(self, p: str) -> None:
        """The ML storage volume holds the model: it must fit, within SageMaker's range, on types that take one."""
        it = self.instance
        need = required_volume_gb(self.model_bytes)
        if it.instance_store:
            if self.volume_size_gb is not None:
                raise ValueError(
                    f"{p}.volume_size_gb: {self.instance_type} has local NVMe instance storage and SageMaker attaches no "
                    "ML storage volume to it (VolumeSizeInGB is refused) — drop volume_size_gb"
                )
            return
        if need > VOLUME_MAX_GB:
            raise ValueError(
                f"{p}.model: a {self.model_bytes / sizing.GIB:.1f} GiB model file needs a {need} GB ML storage volume, more "
                f"than SageMaker's {VOLUME_MAX_GB} GB — use a smaller quantization or an instance type with instance storage (ml.r7gd)"
            )
        if self.volume_size_gb is not None and not need <= self.volume_size_gb <= VOLUME_MAX_GB:
            raise ValueError(
                f"{p}.volume_size_gb must be {need}..{VOLUME_MAX_GB} (the {self.model_bytes / sizing.GIB:.1f} GiB model file "
                f"+ image and scratch; SageMaker's maximum), got {self.volume_size_gb} — or leave it out (default: {need})"
            )

    def _validate_capacity(self, p: str) -> None:
        self._check_capacity_bounds(p)
        if self.target_concurrency is not None and self.target_concurrency <= 0:
            raise ValueError(f"{p}.target_concurrency must be > 0, got {self.target_concurrency}")
        if self.queue_depth is not None and self.queue_depth < 0:
            raise ValueError(f"{p}.queue_depth must be >= 0, got {self.queue_depth}")

    def _validate_environment(self, p: str) -> None:
        clash = sorted(set(self.environment) & COMPUTED_KEYS)
        if clash:
            raise ValueError(
                f"{p}.environment may not set {', '.join(clash)}: they are computed from the spec and instance "
                "(change spec.parallel_slots / spec.context_per_slot, queue_depth or model_file instead)"
            )
        bad = [k for k in self.environment if not _ENV_KEY.match(k)]
        if bad:
            raise ValueError(f"{p}.environment keys must be environment variable names, got {bad}")

    # -- from the patterns ------------------------------------------------------------------------

    @classmethod
    def for_served_model(
        cls,
        served: ServedModel,
        *,
        model: ModelArtifact | str,
        image: LlamaCppImage | EngineImage,
        latency_slo_ms: int | None = None,
        network_isolation: bool = True,
        data_capture_percent: int = 0,
        **overrides: Any,
    ) -> GravitonEndpointProps:
        """Props for a pattern's ServedModel (config.yaml → served_models): name, spec, instance type and
        replicas come from it; the config's slo.p95_latency_ms, sagemaker.network_isolation and
        sagemaker.data_capture_percent map to the keyword arguments; anything else via `overrides`."""
        if not served.instance_type:
            raise ValueError(f"ServedModel {served.name}: instance_type is required for a SageMaker endpoint (set models[].instance_type or sagemaker.instance_type)")
        if served.replicas_min < 1:
            raise ValueError(
                f"ServedModel {served.name}: replicas.min is {served.replicas_min}, but SageMaker real-time endpoints "
                "keep at least one instance — set replicas.min: 1"
            )
        kwargs: dict[str, Any] = dict(
            name=served.name, model=model, spec=served.spec, image=image, instance_type=served.instance_type,
            min_capacity=served.replicas_min, max_capacity=served.replicas_max,
            network_isolation=network_isolation, data_capture_percent=data_capture_percent,
        )
        if latency_slo_ms is not None:
            kwargs["latency_slo"] = cdk.Duration.millis(latency_slo_ms)
        if served.role == "slm":  # the router's SLM also answers (simple requests), not only classifies
            kwargs["alarm_output_tokens"] = max(ALARM_OUTPUT_TOKENS.get(served.spec.task, 0), ALARM_OUTPUT_TOKENS["chat"])
        kwargs.update(overrides)
        return cls(**kwargs)
