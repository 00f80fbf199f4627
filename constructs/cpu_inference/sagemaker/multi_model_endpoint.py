"""MultiModelEndpoint: one pool of farm models on one SageMaker multi-model endpoint (MME), served by the
llama-server image's multi-model adapter.

Why a multi-model endpoint and not inference components (decided against the API and the docs):
- MMEs run on CPU: "Multi-model endpoints support all of the CPU instance types"
  (docs.aws.amazon.com/sagemaker/latest/dg/multi-model-support.html); a bring-your-own container qualifies by
  implementing the load/list/get/unload/invoke contract (…/dg/mms-container-apis.html), which
  containers/llama-server's `serve` does when SageMaker injects SAGEMAKER_MULTI_MODEL=true
  (…/dg/build-multi-model-build-container.html).
- SageMaker loads a model on its first InvokeEndpoint(TargetModel=…) and unloads unused ones when memory runs out
  (the container answers 507) (…/dg/multi-model-endpoints.html, "How multi-model endpoints work"): the model list
  is the S3 prefix, so nothing per model is in the template — 1,000 models cost what 10 do.
- Inference components are one model each ("each inference component contains one model", API
  CreateInferenceComponent) and one AWS::SageMaker::InferenceComponent resource each: 1,000 models would be 1,000
  resources (CloudFormation allows 500 per stack), and every copy keeps its MinMemoryRequiredInMb reserved — no
  load-on-demand / LRU, which is the point of a farm of mostly idle models. They stay the choice for a few hot
  models (the farm's `serving: dedicated` models get their own GravitonEndpoint).

What an MME does not take, and this construct therefore does not offer (sources):
- ModelDataSource (uncompressed S3Prefix): botocore ContainerDefinition.ModelDataSource "you cannot use
  ModelDataSource in conjunction with … SageMaker multi-model endpoints" — so ModelDataUrl = the S3 prefix, and
  every model is a `.tar.gz` under it.
- Serverless: features "not supported for Serverless Inference, including … Multi-Model Endpoints" (…/dg/
  serverless-endpoints.html, "Feature exclusions").
- Data capture for Model Monitor: "Model Monitor currently supports only endpoints that host a single model and does
  not support monitoring multi-model endpoints" (…/dg/model-monitor.html).
- Response streaming per model: botocore sagemaker-runtime InvokeEndpointWithResponseStream has no TargetModel, so
  `grant_invoke` grants InvokeEndpoint only.
- GPU: MMEs on GPU only with the Triton container (…/dg/multi-model-support.html); the catalog is CPU-only.

Metrics (…/dg/monitoring-cloudwatch.html, "multi-model endpoint metrics"): AWS/SageMaker ModelLoadingWaitTime,
ModelDownloadingTime, ModelLoadingTime, ModelUnloadingTime (µs; valid statistics Average, Sum, Min, Max, Sample Count
— no percentiles, so the cold-load alarm watches the Maximum), ModelCacheHit (Average = share of requests whose
model was loaded), and /aws/sagemaker/Endpoints LoadedModelCount (per instance), all by EndpointName + VariantName.
Per-model metrics are not published.

Order and names: SageMakerEndpointBase (endpoint_base.py), as for GravitonEndpoint.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_iam as iam
from aws_cdk import aws_sagemaker as sagemaker
from constructs import Construct, IDependable

from cpu_inference.sagemaker.endpoint_base import Descriptions, SageMakerEndpointBase
from cpu_inference.sagemaker.engine_settings import GENERATION_BUDGET_ENV
from cpu_inference.sagemaker.monitoring import notify
from cpu_inference.sagemaker.multi_model_props import (
    MEMORY_BUDGET_ENV,
    MultiModelEndpointProps,
    TargetModel,
)
from inference_runtime.llama_flags import THREADS

# InvokeEndpointWithResponseStream takes no TargetModel (botocore sagemaker-runtime): an MME is invoked with
# InvokeEndpoint only.
MME_INVOKE_ACTIONS = ["sagemaker:InvokeEndpoint"]
TARGET_MODEL_CONDITION = "sagemaker:TargetModel"  # IAM condition key (docs multi-model-endpoint-security)


class MultiModelEndpoint(SageMakerEndpointBase):
    """Attributes: SageMakerEndpointBase's, and model_data_url (`s3://<bucket>/<prefix>`), target_models (name →
    TargetModel: what callers pass as InvokeEndpoint TargetModel), slots; alarms add cold_load_max and cache_hit."""

    TAG = "cpu-inference:pool"
    props: MultiModelEndpointProps

    def __init__(self, scope: Construct, id: str, *, props: MultiModelEndpointProps) -> None:
        super().__init__(scope, id, props=props)

    # -- derived values ---------------------------------------------------------------------------

    def _derive(self) -> None:
        props = self.props
        self.slots = props.slots
        self.target_models: dict[str, TargetModel] = {name: props.target(name) for name in props.target_models}
        self.model_data_url = f"s3://{props.model_bucket.bucket.bucket_name}/{props.prefix}"

    def _environment(self) -> dict[str, str]:
        props = self.props
        return {
            **props.environment,
            THREADS.image_env: str(props.threads_per_model),
            MEMORY_BUDGET_ENV: str(props.memory_budget),
            GENERATION_BUDGET_ENV: f"{props.generation_budget_seconds:g}",
        }

    def _default_target_concurrency(self) -> float:
        return self.props.default_target_concurrency

    def _max_in_flight(self) -> int:
        return self.slots

    # -- resources --------------------------------------------------------------------------------

    def _descriptions(self) -> Descriptions:
        p = self.props
        return Descriptions(
            key=f"{p.name} multi-model endpoint: ML storage volume (model cache) and container logs",
            role=f"SageMaker execution role of the {p.name} multi-model pool: reads {p.prefix}, pulls its image, writes its logs",
            security_group=f"SageMaker multi-model endpoint {p.name}: no inbound; HTTPS out for model downloads and the image pull",
        )

    def _grant_model_data(self) -> None:
        # GetObject + prefix-scoped ListBucket + kms:Decrypt, nothing else
        self.props.model_bucket.grant_read(self.role, self.props.prefix)

    def _network_isolation(self) -> bool:
        return self.props.network_isolation

    def _container(self) -> sagemaker.CfnModel.ContainerDefinitionProperty:
        return sagemaker.CfnModel.ContainerDefinitionProperty(
            image=self.image_uri,
            mode="MultiModel",
            model_data_url=self.model_data_url,
            multi_model_config=sagemaker.CfnModel.MultiModelConfigProperty(
                model_cache_setting="Enabled" if self.props.model_cache else "Disabled",
            ),
            environment=self.environment,
        )

    def _model_dependencies(self) -> Iterable[IDependable]:
        return self.props.depends_on  # the artifacts (the catalog's copy)

    def _variant_settings(self) -> dict[str, Any]:
        return {**super()._variant_settings(), "volume_size_in_gb": self.props.volume_size_gb}

    # -- monitoring -------------------------------------------------------------------------------

    def _more_alarms(self) -> dict[str, cw.Alarm]:
        """Cold loads that eat InvokeEndpoint's 60 s, and a cache hit share that says models thrash."""
        m, p = self.monitoring, self.props
        where = f"endpoint {self.endpoint_name} variant {self.variant_name}"
        cold_s = p.cold_load_alarm.to_seconds()
        alarms = {
            # Maximum: SageMaker publishes no percentiles of ModelLoadingWaitTime (monitoring.VALID_STATISTICS).
            "cold_load_max": m.metric("ModelLoadingWaitTime", "Maximum").create_alarm(
                m,
                "ColdLoadMax",
                alarm_description=(
                    f"ModelLoadingWaitTime above {cold_s:g} s (Maximum per minute) on {where}: requests for unloaded models wait on "
                    "the download and load, and their answers are planned for at most that wait — a larger instance (more "
                    "models stay loaded), more instances, or smaller models"
                ),
                threshold=cold_s * 1_000_000,  # microseconds
                comparison_operator=cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
                evaluation_periods=5,
                datapoints_to_alarm=3,
                treat_missing_data=cw.TreatMissingData.NOT_BREACHING,
            ),
            "cache_hit": m.metric("ModelCacheHit", "Average", period=cdk.Duration.minutes(5)).create_alarm(
                m,
                "CacheHitLow",
                alarm_description=(
                    f"Below {p.cache_hit_alarm_percent:g}% of requests found their model loaded for 15 minutes on {where}: models are "
                    "unloaded and loaded again (thrashing) — more memory per instance (instance_type) or more instances (min_capacity)"
                ),
                threshold=p.cache_hit_alarm_percent / 100,  # the Average of ModelCacheHit is a ratio
                comparison_operator=cw.ComparisonOperator.LESS_THAN_THRESHOLD,
                evaluation_periods=3,
                datapoints_to_alarm=3,
                treat_missing_data=cw.TreatMissingData.NOT_BREACHING,
            ),
        }
        notify(alarms.values(), p.alarm_topic)
        return alarms

    def _add_widgets(self, dashboard: cw.Dashboard) -> None:
        m = self.monitoring

        def ms(metric: str, statistic: str) -> cw.MathExpression:
            key = metric[0].lower() + metric[1:] + statistic
            return cw.MathExpression(
                expression=f"{key} / 1000",
                using_metrics={key: m.metric(metric, statistic)},
                label=f"{metric} {statistic} (ms)",
                period=cdk.Duration.minutes(1),
            )

        hit_percent = cw.MathExpression(
            expression="100 * hit",
            using_metrics={"hit": m.metric("ModelCacheHit", "Average")},
            label="requests with the model loaded (%)",
            period=cdk.Duration.minutes(1),
        )
        dashboard.add_widgets(
            cw.GraphWidget(
                title="Model cache",
                width=12,
                left=[hit_percent],
                left_y_axis=cw.YAxisProps(min=0, max=100, label="%", show_units=False),
                right=[
                    m.instance_metric("LoadedModelCount", period=cdk.Duration.minutes(1)).with_(
                        label="models loaded per instance"
                    )
                ],
                left_annotations=[
                    cw.HorizontalAnnotation(value=self.props.cache_hit_alarm_percent, label="alarm", color=cw.Color.RED)
                ],
            ),
            cw.GraphWidget(
                title="Cold loads (ms)",
                width=12,
                left=[
                    ms("ModelLoadingWaitTime", "Average"),
                    ms("ModelLoadingWaitTime", "Maximum"),
                    ms("ModelDownloadingTime", "Maximum"),
                    ms("ModelLoadingTime", "Maximum"),
                ],
                right=[m.metric("ModelUnloadingTime", "SampleCount", label="unloads per minute")],
                left_annotations=[
                    cw.HorizontalAnnotation(
                        value=self.props.cold_load_alarm.to_milliseconds(),
                        label="maximum wait alarm",
                        color=cw.Color.RED,
                    )
                ],
            ),
        )
        dashboard.add_widgets(
            cw.AlarmStatusWidget(
                title="Model cache alarms",
                width=24,
                alarms=[self.alarms["cold_load_max"], self.alarms["cache_hit"]],
            )
        )

    # -- public API -------------------------------------------------------------------------------

    def grant_invoke(self, grantee: iam.IGrantable, models: Iterable[str] | None = None) -> iam.Grant:
        """InvokeEndpoint on this endpoint; with `models`, only for their TargetModel paths (condition
        sagemaker:TargetModel, docs multi-model-endpoint-security) — the policy then grows with the list."""
        if models is None:
            return iam.Grant.add_to_principal(
                grantee=grantee, actions=MME_INVOKE_ACTIONS, resource_arns=[self.endpoint_arn]
            )
        names = list(models)
        unknown = sorted(set(names) - set(self.target_models))
        if unknown:
            raise ValueError(
                f"MultiModelEndpoint {self.props.name}: grant_invoke for unknown models {unknown}; known: {len(self.target_models)} in target_models"
            )
        return iam.Grant.add_to_principal(
            grantee=grantee,
            actions=MME_INVOKE_ACTIONS,
            resource_arns=[self.endpoint_arn],
            conditions={"StringEquals": {TARGET_MODEL_CONDITION: [self.target_models[n].path for n in names]}},
        )
