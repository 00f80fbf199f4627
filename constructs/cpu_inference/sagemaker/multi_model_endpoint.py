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
ModelDownloadingTime, ModelLoadingTime, ModelUnloadingTime (µs), ModelCacheHit (Average = share of requests whose
model was loaded), and /aws/sagemaker/Endpoints LoadedModelCount (per instance), all by EndpointName + VariantName.
Per-model metrics are not published.

Order and names follow GravitonEndpoint: key → logs → role → grants → security groups → Model → EndpointConfig →
Endpoint → scaling → monitoring; the endpoint name hashes the construct path and the placement.
"""

from __future__ import annotations

from collections.abc import Iterable

import aws_cdk as cdk
from aws_cdk import aws_applicationautoscaling as appscaling
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sagemaker as sagemaker
from constructs import Construct

from .. import nag
from . import endpoint_parts as parts
from .endpoint_parts import placement_slug
from .monitoring import EndpointMonitoring
from .multi_model_props import MEMORY_BUDGET_ENV, THREADS_ENV, MultiModelEndpointProps, TargetModel

# InvokeEndpointWithResponseStream takes no TargetModel (botocore sagemaker-runtime): an MME is invoked with
# InvokeEndpoint only.
MME_INVOKE_ACTIONS = ["sagemaker:InvokeEndpoint"]
TARGET_MODEL_CONDITION = "sagemaker:TargetModel"  # IAM condition key (docs multi-model-endpoint-security)


class MultiModelEndpoint(Construct):
    """Attributes: props, environment (the container's), image_uri, model_data_url (`s3://<bucket>/<prefix>`),
    target_models (name → TargetModel: what callers pass as InvokeEndpoint TargetModel), key, role
    (= grant_principal), log_group, security_groups, model (CfnModel), endpoint_config, endpoint, endpoint_name,
    endpoint_arn, variant_name, instance (sizing.InstanceType), slots, target_concurrency, scalable_target /
    scaling_policy (or None), monitoring (EndpointMonitoring), alarms (latency_p95, errors_4xx, errors_5xx, cpu,
    memory, cold_load_p95, cache_hit), dashboard."""

    def __init__(self, scope: Construct, id: str, *, props: MultiModelEndpointProps) -> None:
        super().__init__(scope, id)
        props.validate()
        self.props = props
        self.instance = props.instance
        self.variant_name = props.variant_name
        self.slots = props.slots
        slug = placement_slug(props.instance_type)
        self.endpoint_name = parts.endpoint_name(
            self, name=props.name, instance_type=props.instance_type, variant_name=props.variant_name, prefix=props.endpoint_name_prefix,
        )
        self.target_concurrency = (props.target_concurrency or props.default_target_concurrency) if props.scales else None
        self.target_models: dict[str, TargetModel] = {name: props.target(name) for name in props.target_models}
        self.environment: dict[str, str] = {**props.environment, THREADS_ENV: str(props.threads_per_model)}
        if props.memory_budget_bytes is not None:
            self.environment[MEMORY_BUDGET_ENV] = str(props.memory_budget_bytes)

        self.key: kms.IKey = props.encryption_key or parts.create_key(
            self, description=f"{props.name} multi-model endpoint: ML storage volume (model cache) and container logs",
            removal_policy=props.removal_policy, endpoint=self.endpoint_name,
        )
        self.log_group = parts.endpoint_log_group(
            self, slug, endpoint=self.endpoint_name, retention=props.log_retention, key=self.key, own_key=props.encryption_key is None,
        )
        self.role: iam.IRole = parts.execution_role(
            self, props.existing_role,
            f"SageMaker execution role of the {props.name} multi-model pool: reads {props.prefix}, pulls its image, writes its logs",
        )
        self.grant_principal = self.role
        bucket = props.model_bucket
        self.model_data_url = f"s3://{bucket.bucket.bucket_name}/{props.prefix}"
        bucket.grant_read(self.role, props.prefix)  # GetObject + prefix-scoped ListBucket + kms:Decrypt, nothing else
        self.image_uri: str = props.image.image_uri
        parts.grant_basics(self.role, image=props.image, log_group=self.log_group, key=self.key)
        self.security_groups: list[ec2.ISecurityGroup] = parts.security_groups(
            self, self.role, vpc=props.vpc, given=props.security_groups,
            description=f"SageMaker multi-model endpoint {props.name}: no inbound; HTTPS out for model downloads and the image pull",
            egress=lambda: [(443, "S3 and ECR (VPC endpoints or NAT)")],
        )

        self.model = sagemaker.CfnModel(
            self, "Model",
            execution_role_arn=self.role.role_arn,
            enable_network_isolation=props.network_isolation,
            primary_container=sagemaker.CfnModel.ContainerDefinitionProperty(
                image=self.image_uri,
                mode="MultiModel",
                model_data_url=self.model_data_url,
                multi_model_config=sagemaker.CfnModel.MultiModelConfigProperty(
                    model_cache_setting="Enabled" if props.model_cache else "Disabled",
                ),
                environment=self.environment,
            ),
            vpc_config=parts.vpc_config(props.vpc, props.vpc_subnets, self.security_groups),
        )
        # CreateModel checks the image and the model data with the role: its policy must exist first, and so
        # must the artifacts (the catalog's copy).
        self.model.node.add_dependency(self.role)
        for dependency in props.depends_on:
            self.model.node.add_dependency(dependency)

        self.endpoint_config = parts.endpoint_config(
            self, slug, props, model=self.model, key=self.key,
            container_startup_health_check_timeout_in_seconds=(
                int(props.startup_health_check_timeout.to_seconds()) if props.startup_health_check_timeout else None
            ),
            volume_size_in_gb=props.volume_size_gb,
        )
        self.endpoint = parts.create_endpoint(
            self, slug, name=self.endpoint_name, config=self.endpoint_config, scales=props.scales, log_group=self.log_group,
        )
        self.endpoint_arn: str = self.endpoint.ref

        self.scalable_target: appscaling.ScalableTarget | None
        self.scaling_policy: appscaling.TargetTrackingScalingPolicy | None
        self.scalable_target, self.scaling_policy = parts.autoscaling(self, slug, props, endpoint=self.endpoint, target=self.target_concurrency)

        self.monitoring: EndpointMonitoring = parts.monitoring(
            self, props, endpoint=self.endpoint_name, vcpus=self.instance.vcpus,
            target_concurrency=self.target_concurrency, max_in_flight=self.slots,
            latency_alarm=props.latency_alarm, latency_alarm_basis=props.latency_alarm_basis,
        )
        self.alarms: dict[str, cw.Alarm] = {**self.monitoring.alarms, **self._model_cache_alarms()}
        self.dashboard = self.monitoring.dashboard
        if self.dashboard is not None:
            self._model_cache_widgets(self.dashboard)
        cdk.Tags.of(self).add("cpu-inference:pool", props.name)
        self._acknowledge()

    # -- monitoring -------------------------------------------------------------------------------

    def _model_cache_alarms(self) -> dict[str, cw.Alarm]:
        """Cold loads that eat InvokeEndpoint's 60 s, and a cache hit share that says models thrash."""
        m, p = self.monitoring, self.props
        where = f"endpoint {self.endpoint_name} variant {self.variant_name}"
        cold_s = p.cold_load_alarm.to_seconds()
        alarms = {
            "cold_load_p95": m.metric("ModelLoadingWaitTime", "p95").create_alarm(
                m, "ColdLoadP95",
                alarm_description=(
                    f"p95 ModelLoadingWaitTime above {cold_s:g} s on {where}: requests for unloaded models wait on the download "
                    "and load — a larger instance (more models stay loaded), more instances, or smaller models"
                ),
                threshold=cold_s * 1_000_000,  # microseconds
                comparison_operator=cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
                evaluation_periods=5, datapoints_to_alarm=3, treat_missing_data=cw.TreatMissingData.NOT_BREACHING,
            ),
            "cache_hit": m.metric("ModelCacheHit", "Average", period=cdk.Duration.minutes(5)).create_alarm(
                m, "CacheHitLow",
                alarm_description=(
                    f"Below {p.cache_hit_alarm_percent:g}% of requests found their model loaded for 15 minutes on {where}: models are "
                    "unloaded and loaded again (thrashing) — more memory per instance (instance_type) or more instances (min_capacity)"
                ),
                threshold=p.cache_hit_alarm_percent / 100,  # the Average of ModelCacheHit is a ratio
                comparison_operator=cw.ComparisonOperator.LESS_THAN_THRESHOLD,
                evaluation_periods=3, datapoints_to_alarm=3, treat_missing_data=cw.TreatMissingData.NOT_BREACHING,
            ),
        }
        if p.alarm_topic is not None:
            action = cw_actions.SnsAction(p.alarm_topic)
            for alarm in alarms.values():
                alarm.add_alarm_action(action)
                alarm.add_ok_action(action)
        return alarms

    def _model_cache_widgets(self, dashboard: cw.Dashboard) -> None:
        m = self.monitoring

        def ms(metric: str, statistic: str) -> cw.MathExpression:
            key = metric[0].lower() + metric[1:] + statistic
            return cw.MathExpression(
                expression=f"{key} / 1000", using_metrics={key: m.metric(metric, statistic)},
                label=f"{metric} {statistic} (ms)", period=cdk.Duration.minutes(1),
            )

        hit_percent = cw.MathExpression(
            expression="100 * hit", using_metrics={"hit": m.metric("ModelCacheHit", "Average")}, label="requests with the model loaded (%)",
            period=cdk.Duration.minutes(1),
        )
        dashboard.add_widgets(
            cw.GraphWidget(
                title="Model cache", width=12,
                left=[hit_percent], left_y_axis=cw.YAxisProps(min=0, max=100, label="%", show_units=False),
                right=[m.instance_metric("LoadedModelCount", period=cdk.Duration.minutes(1)).with_(label="models loaded per instance")],
                left_annotations=[cw.HorizontalAnnotation(value=self.props.cache_hit_alarm_percent, label="alarm", color=cw.Color.RED)],
            ),
            cw.GraphWidget(
                title="Cold loads (ms)", width=12,
                left=[ms("ModelLoadingWaitTime", "p50"), ms("ModelLoadingWaitTime", "p95"), ms("ModelDownloadingTime", "p95"), ms("ModelLoadingTime", "p95")],
                right=[m.metric("ModelUnloadingTime", "SampleCount", label="unloads per minute")],
                left_annotations=[cw.HorizontalAnnotation(
                    value=self.props.cold_load_alarm.to_milliseconds(), label="p95 wait alarm", color=cw.Color.RED,
                )],
            ),
        )
        dashboard.add_widgets(cw.AlarmStatusWidget(
            title="Model cache alarms", width=24, alarms=[self.alarms["cold_load_p95"], self.alarms["cache_hit"]],
        ))

    # -- public API -------------------------------------------------------------------------------

    def grant_invoke(self, grantee: iam.IGrantable, models: Iterable[str] | None = None) -> iam.Grant:
        """InvokeEndpoint on this endpoint; with `models`, only for their TargetModel paths (condition
        sagemaker:TargetModel, docs multi-model-endpoint-security) — the policy then grows with the list."""
        if models is None:
            return iam.Grant.add_to_principal(grantee=grantee, actions=MME_INVOKE_ACTIONS, resource_arns=[self.endpoint_arn])
        names = list(models)
        unknown = sorted(set(names) - set(self.target_models))
        if unknown:
            raise ValueError(f"MultiModelEndpoint {self.props.name}: grant_invoke for unknown models {unknown}; known: {len(self.target_models)} in target_models")
        return iam.Grant.add_to_principal(
            grantee=grantee, actions=MME_INVOKE_ACTIONS, resource_arns=[self.endpoint_arn],
            conditions={"StringEquals": {TARGET_MODEL_CONDITION: [self.target_models[n].path for n in names]}},
        )

    # -- cdk-nag ----------------------------------------------------------------------------------

    def _acknowledge(self) -> None:
        if isinstance(self.role, Construct):
            nag.acknowledge_wildcards(self.role, parts.role_wildcards("the one repository"))
