"""GravitonEndpoint: one model on a SageMaker real-time endpoint — a GGUF served by the llama-server image, or
(spec.engine "vllm") a Hugging Face safetensors checkpoint served by the vLLM CPU image.

Model → container: SageMaker itself downloads the model prefix into /opt/ml/model (ModelDataSource,
S3Prefix, CompressionType None) on every instance before the container starts — the first, scaled-out
and replaced ones alike — and `serve` answers /ping 200 only once the engine has loaded it. The engine
settings are the Model's environment (computed by `sizing`), so changing them creates a new Model and
EndpointConfig and CloudFormation rolls the endpoint (blue/green); nothing configures it after creation.

Names and the order of the resources: SageMakerEndpointBase (endpoint_base.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sagemaker as sagemaker
from constructs import Construct, IDependable

from cpu_inference._internal import nag
from cpu_inference.artifacts import ModelArtifact
from cpu_inference.sagemaker.endpoint_base import Descriptions, SageMakerEndpointBase
from cpu_inference.sagemaker.endpoint_props import default_target_concurrency
from cpu_inference.sagemaker.engine_settings import (
    EngineSettings,
    engine_settings,
    model_download_timeout_seconds,
    startup_health_check_timeout_seconds,
    volume_size_gb,
)
from cpu_inference.sagemaker.props import GravitonEndpointProps

__all__ = ["GravitonEndpoint"]


class GravitonEndpoint(SageMakerEndpointBase):
    """Attributes: SageMakerEndpointBase's, and settings (EngineSettings: sizing, queue depth, cache), sizing,
    model_data_uri, capture_bucket (or None), volume_size_gb (ML storage volume, GB; None on instance-storage
    types)."""

    TAG = "cpu-inference:model"
    props: GravitonEndpointProps

    def __init__(self, scope: Construct, id: str, *, props: GravitonEndpointProps) -> None:
        super().__init__(scope, id, props=props)

    # -- derived values ---------------------------------------------------------------------------

    def _derive(self) -> None:
        props = self.props
        self.capture_bucket: s3.IBucket | None = None  # set by _data_capture
        self._artifact = props.model if isinstance(props.model, ModelArtifact) else None
        # A GGUF artifact's file becomes MODEL_PATH; a vLLM snapshot is the whole directory /opt/ml/model.
        artifact_file = (
            self._artifact.props.file if self._artifact is not None and not self._artifact.is_snapshot else None
        )
        self.settings: EngineSettings = engine_settings(
            props.spec,
            props.instance_type,
            alias=props.name,
            model_file=artifact_file if self._artifact is not None else props.model_file,
            queue_depth=props.queue_depth,
            lora_manifest=props.lora_manifest,
        )
        self.sizing = self.settings.sizing
        self.model_data_uri = self._artifact.s3_prefix_uri if self._artifact is not None else str(props.model)
        # The model lands on the ML storage volume: sized from it (None on instance-storage types, which refuse it).
        self.volume_size_gb: int | None = (
            props.volume_size_gb
            if props.volume_size_gb is not None
            else volume_size_gb(props.model_bytes, self.sizing.instance, props.engine)
        )

    def _environment(self) -> dict[str, str]:
        return {**self.settings.environment(), **self.props.environment}

    def _default_target_concurrency(self) -> float:
        return default_target_concurrency(self.sizing.slots)

    def _max_in_flight(self) -> int:
        return self.settings.max_in_flight

    @property
    def model_download_timeout_seconds(self) -> int:
        t = self.props.model_download_timeout
        return int(t.to_seconds()) if t is not None else model_download_timeout_seconds(self.props.model_bytes)

    @property
    def startup_health_check_timeout_seconds(self) -> int:
        t = self.props.startup_health_check_timeout
        return (
            int(t.to_seconds())
            if t is not None
            else startup_health_check_timeout_seconds(self.props.model_bytes, self.props.engine)
        )

    # -- resources --------------------------------------------------------------------------------

    def _descriptions(self) -> Descriptions:
        name = self.props.name
        return Descriptions(
            key=f"{name} endpoint: ML storage volume, container logs, captured data",
            role=f"SageMaker execution role of {name}: reads its model prefix, pulls its image, writes its logs",
            security_group=f"SageMaker endpoint {name}: no inbound; HTTPS out for the model download and image pull",
        )

    def _network_isolation(self) -> bool:
        return self.props.network_isolation

    def _container(self) -> sagemaker.CfnModel.ContainerDefinitionProperty:
        return sagemaker.CfnModel.ContainerDefinitionProperty(
            image=self.image_uri,
            mode="SingleModel",
            model_data_source=sagemaker.CfnModel.ModelDataSourceProperty(
                s3_data_source=sagemaker.CfnModel.S3DataSourceProperty(
                    s3_uri=self.model_data_uri,
                    s3_data_type="S3Prefix",
                    compression_type="None",
                )
            ),
            environment=self.environment,
        )

    def _model_dependencies(self) -> Iterable[IDependable]:
        # The model object must have been copied before CreateModel checks it.
        return (self._artifact.resource,) if self._artifact is not None else ()

    def _variant_settings(self) -> dict[str, Any]:
        return dict(
            model_data_download_timeout_in_seconds=self.model_download_timeout_seconds,
            container_startup_health_check_timeout_in_seconds=self.startup_health_check_timeout_seconds,
            volume_size_in_gb=self.volume_size_gb,
        )

    def _grant_model_data(self) -> None:
        if self._artifact is not None:
            self._artifact.grant_read(
                self.role
            )  # GetObject + ListBucket on its prefix only, kms:Decrypt on the bucket key
            return
        location = self.props.s3_location()
        assert location is not None
        bucket, prefix = location
        stack = cdk.Stack.of(self)
        self.role.add_to_principal_policy(
            iam.PolicyStatement(
                sid="ReadModelPrefix",
                actions=["s3:GetObject"],
                resources=[f"arn:{stack.partition}:s3:::{bucket}/{prefix}*"],
            )
        )
        self.role.add_to_principal_policy(
            iam.PolicyStatement(
                sid="ListModelPrefix",
                actions=["s3:ListBucket"],
                resources=[f"arn:{stack.partition}:s3:::{bucket}"],
                conditions={"StringLike": {"s3:prefix": [f"{prefix}*"]}},
            )
        )
        if self.props.model_key is not None:
            self.props.model_key.grant_decrypt(self.role)

    def _data_capture(self) -> sagemaker.CfnEndpointConfig.DataCaptureConfigProperty | None:
        """Request/response capture to S3 (off at 0 %), encrypted with the endpoint's key."""
        p = self.props
        if not p.data_capture_percent:
            return None
        bucket = p.data_capture_bucket or self._capture_bucket()
        self.role.add_to_principal_policy(
            iam.PolicyStatement(
                sid="WriteDataCapture",
                actions=["s3:PutObject"],
                resources=[bucket.arn_for_objects(f"{p.capture_prefix}/*")],
            )
        )
        # Captured objects are encrypted with the endpoint's key (DataCaptureConfig.KmsKeyId).
        self.key.grant(self.role, "kms:GenerateDataKey", "kms:Decrypt")
        self.capture_bucket = bucket
        cap = sagemaker.CfnEndpointConfig
        return cap.DataCaptureConfigProperty(
            enable_capture=True,
            initial_sampling_percentage=p.data_capture_percent,
            destination_s3_uri=f"s3://{bucket.bucket_name}/{p.capture_prefix}",
            kms_key_id=self.key.key_arn,
            capture_options=[
                cap.CaptureOptionProperty(capture_mode="Input"),
                cap.CaptureOptionProperty(capture_mode="Output"),
            ],
            capture_content_type_header=cap.CaptureContentTypeHeaderProperty(json_content_types=["application/json"]),
        )

    def _capture_bucket(self) -> s3.Bucket:
        p = self.props
        log_bucket = s3.Bucket(
            self,
            "CaptureAccessLogs",
            encryption=s3.BucketEncryption.S3_MANAGED,  # S3 delivers access logs only into SSE-S3 buckets
            enforce_ssl=True,
            minimum_tls_version=1.2,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            lifecycle_rules=[s3.LifecycleRule(id="expire-access-logs", expiration=cdk.Duration.days(365))],
            removal_policy=p.removal_policy,
        )
        nag.acknowledge(
            log_bucket,
            "AwsSolutions-S1",
            "This is the access-log bucket of the data-capture bucket; logging it into itself would loop and another log bucket only moves the question",
        )
        bucket = s3.Bucket(
            self,
            "CaptureBucket",
            encryption=s3.BucketEncryption.KMS,
            encryption_key=self.key,
            bucket_key_enabled=True,
            enforce_ssl=True,
            minimum_tls_version=1.2,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            lifecycle_rules=[
                s3.LifecycleRule(id="expire-captured-data", expiration=cdk.Duration.days(p.data_capture_retention_days))
            ],
            removal_policy=p.removal_policy,
        )
        # Bucket-policy log delivery, set explicitly so it does not hinge on the app's S3 feature flags.
        cfn = bucket.node.default_child
        assert isinstance(cfn, s3.CfnBucket)
        cfn.logging_configuration = s3.CfnBucket.LoggingConfigurationProperty(
            destination_bucket_name=log_bucket.bucket_name, log_file_prefix="data-capture/"
        )
        log_bucket.add_to_resource_policy(
            iam.PolicyStatement(
                principals=[iam.ServicePrincipal("logging.s3.amazonaws.com")],
                actions=["s3:PutObject"],
                resources=[log_bucket.arn_for_objects("data-capture/*")],
                conditions={
                    "ArnLike": {"aws:SourceArn": bucket.bucket_arn},
                    "StringEquals": {"aws:SourceAccount": cdk.Stack.of(self).account},
                },
            )
        )
        return bucket

    # -- cdk-nag ----------------------------------------------------------------------------------

    def _nag_wildcards(self) -> list[nag.Wildcard]:
        rules = [
            nag.Wildcard(
                rf"Resource::(<[^>]+\.Arn>|arn:[^*]+)/{re.escape(self.props.capture_prefix)}/\*",
                "Data capture writes objects named by SageMaker at run time under this endpoint's capture prefix only",
            ),
        ]
        location = self.props.s3_location()
        if location is not None:
            # A bucket of this app (a token, e.g. the farm's catalog bucket) appears as its resolved reference,
            # which cdk-nag prints as `<LogicalId>`; a literal bucket name as itself.
            bucket = r"<[^>]+>" if cdk.Token.is_unresolved(location[0]) else re.escape(location[0])
            rules.append(
                nag.Wildcard(
                    rf"Resource::arn:<AWS::Partition>:s3:::{bucket}/{re.escape(location[1])}\*",
                    "Read of one model's prefix only: SageMaker downloads every object under it into /opt/ml/model",
                )
            )
        return rules
