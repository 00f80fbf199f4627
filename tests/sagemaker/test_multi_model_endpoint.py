"""MultiModelEndpoint: a farm pool on one SageMaker multi-model endpoint. The template is checked against the
service's own contract (botocore's sagemaker / sagemaker-runtime models: ContainerDefinition.Mode, the Url pattern,
ModelCacheSetting, ProductionVariantInstanceType, TargetModel), cfn-lint and cdk-nag; the props refuse what
SageMaker refuses with one line naming the fix; the template does not grow with the number of models."""

from __future__ import annotations

import dataclasses
import json
import re
import time
from typing import Any

import aws_cdk as cdk
import botocore.session
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns

from cpu_inference._internal.nag import flatten
from cpu_inference.artifacts import ModelBucket
from cpu_inference.images import LlamaCppImage
from cpu_inference.sagemaker import EngineImage, MultiModelEndpoint, MultiModelEndpointProps, TargetModel
from tests.support.cdk import apply_nag, cfn_lint_errors, nag_errors, synth, template_json

ENV = cdk.Environment(account="123456789012", region="us-east-1")
DIGEST = "sha256:" + "cd" * 32
GIB = 1024**3
_SESSION = botocore.session.get_session()
SAGEMAKER = _SESSION.get_service_model("sagemaker")
RUNTIME = _SESSION.get_service_model("sagemaker-runtime")


def farm(n: int) -> dict[str, str]:
    """n models in the catalog's layout: `<name>/<idhash16>-<engine sha8>.tar.gz` under farm/."""
    return {f"m-{i:04d}": f"m-{i:04d}/{i:016x}-0a1b2c3d.tar.gz" for i in range(n)}


def resources(template: dict[str, Any], type_: str) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in template["Resources"].items() if v["Type"] == type_}


def one(template: dict[str, Any], type_: str) -> dict[str, Any]:
    (found,) = resources(template, type_).values()
    return found["Properties"]


def pool_stack(n: int, **overrides: Any) -> tuple[cdk.Stack, MultiModelEndpoint, dict[str, Any]]:
    """A stack with a model bucket and one pool of n models on an EngineImage (no image build), cdk-nag on."""
    app = cdk.App()
    apply_nag(app)
    stack = cdk.Stack(app, "Farm", env=ENV)
    bucket = ModelBucket(stack, "Models")
    image = EngineImage(ecr.Repository.from_repository_name(stack, "Repo", "llama-server"), digest=DIGEST)
    props = MultiModelEndpointProps(
        name="default", image=image, model_bucket=bucket, target_models=farm(n), **overrides
    )
    ep = MultiModelEndpoint(stack, "PoolDefault", props=props)
    synth(app)
    return stack, ep, template_json(stack)


@pytest.fixture(scope="module")
def pool() -> tuple[cdk.Stack, MultiModelEndpoint, dict[str, Any]]:
    return pool_stack(20, memory_budget_bytes=12 * GIB, max_capacity=4)


@pytest.fixture(scope="module")
def built() -> tuple[cdk.Stack, MultiModelEndpoint, dict[str, Any], iam.Role]:
    """The shipped image (LlamaCppImage), a VPC, an alarm topic, a caller granted two models; cdk-nag on."""
    app = cdk.App()
    apply_nag(app)
    stack = cdk.Stack(app, "FarmVpc", env=ENV)
    bucket = ModelBucket(stack, "Models")
    image = LlamaCppImage(stack, "Engine")
    vpc = ec2.Vpc(
        stack,
        "Vpc",
        max_azs=2,
        nat_gateways=0,
        flow_logs={"all": ec2.FlowLogOptions()},
        subnet_configuration=[ec2.SubnetConfiguration(name="isolated", subnet_type=ec2.SubnetType.PRIVATE_ISOLATED)],
    )
    topic = sns.Topic(
        stack, "Alarms", enforce_ssl=True, master_key=kms.Alias.from_alias_name(stack, "SnsKey", "alias/aws/sns")
    )
    copy = cdk.CfnWaitConditionHandle(stack, "CatalogCopy")  # stands for the catalog's copy resource
    ep = MultiModelEndpoint(
        stack,
        "PoolSmall",
        props=MultiModelEndpointProps(
            name="small",
            image=image,
            model_bucket=bucket,
            target_models=farm(5),
            depends_on=(copy,),
            instance_type="ml.c8g.2xlarge",
            max_capacity=3,
            vpc=vpc,
            alarm_topic=topic,
            volume_size_gb=100,
        ),
    )
    caller = iam.Role(stack, "Gateway", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
    ep.grant_invoke(caller, models=["m-0001", "m-0003"])
    synth(app)
    return stack, ep, template_json(stack), caller


# -- the Model: multi-model mode on the prefix, checked against botocore ------------------------------------


def test_model_is_multi_model_on_the_prefix(pool) -> None:
    stack, ep, t = pool
    container = one(t, "AWS::SageMaker::Model")["PrimaryContainer"]
    assert container["Mode"] == "MultiModel"
    assert container["Mode"] in SAGEMAKER.shape_for("ContainerMode").enum
    assert (
        flatten(container["ModelDataUrl"])
        == f"s3://<{stack.get_logical_id(ep.props.model_bucket.bucket.node.default_child)}>/farm/"
    )
    # botocore: ModelDataSource cannot be used with multi-model endpoints.
    assert "ModelDataSource" not in container
    assert container["MultiModelConfig"] == {"ModelCacheSetting": "Enabled"}
    assert "Enabled" in SAGEMAKER.shape_for("ModelCacheSetting").enum
    assert container["Environment"] == {
        "LLAMA_THREADS": "2",
        "MME_MEMORY_BUDGET_BYTES": str(12 * GIB),
        "ADAPTER_GENERATION_BUDGET_SECONDS": "20",
    }
    assert flatten(container["Image"]).endswith("/llama-server@" + DIGEST)


def test_model_data_url_fits_botocores_url_shape(pool) -> None:
    _, ep, t = pool
    shape = SAGEMAKER.shape_for("ContainerDefinition").members["ModelDataUrl"]
    longest_bucket = "b" * 63  # what the bucket Ref can resolve to at most
    url = flatten(one(t, "AWS::SageMaker::Model")["PrimaryContainer"]["ModelDataUrl"])
    resolved = re.sub(r"<[^>]+>", longest_bucket, url)
    assert re.fullmatch(shape.metadata["pattern"], resolved) and len(resolved) <= shape.metadata["max"]


def test_target_models_are_valid_target_model_headers(pool) -> None:
    _, ep, _ = pool
    header = RUNTIME.operation_model("InvokeEndpoint").input_shape.members["TargetModel"]
    assert header.serialization["name"] == "X-Amzn-SageMaker-Target-Model"
    pattern = header.metadata["pattern"].replace(r"\A", "^").replace(r"\z", "$").replace(r"\p{Print}", r"\x20-\x7e")
    assert len(ep.target_models) == 20
    for name, target in ep.target_models.items():
        assert target == TargetModel(name=name, path=farm(20)[name], key=f"farm/{farm(20)[name]}")
        assert (
            re.fullmatch(pattern, target.path) and header.metadata["min"] <= len(target.path) <= header.metadata["max"]
        )


def test_the_shipped_image_and_its_build_order(built) -> None:
    stack, ep, t, _ = built
    model_id = stack.get_logical_id(ep.model)
    model = t["Resources"][model_id]
    # ml.c8g is arm64: its own image, not the manifest list (no source says CreateModel takes a list).
    assert flatten(model["Properties"]["PrimaryContainer"]["Image"]).endswith("@<EngineBuild6A1C3F93.Digest-arm64>")
    # No memory_budget_bytes: the memory alarm's 85% of ml.c8g.2xlarge's 16 GiB (507 → SageMaker unloads), not the
    # adapter's own default of all of it.
    assert model["Properties"]["PrimaryContainer"]["Environment"] == {
        "LLAMA_THREADS": "2",
        "MME_MEMORY_BUDGET_BYTES": str(int(16 * GIB * 0.85)),
        "ADAPTER_GENERATION_BUDGET_SECONDS": "20",
    }
    assert {"CatalogCopy", stack.get_logical_id(ep.role.node.default_child)} <= set(model["DependsOn"])


# -- placement, scaling ---------------------------------------------------------------------------------------


def test_variant_on_a_graviton_instance_botocore_hosts(pool, built) -> None:
    hosted = SAGEMAKER.shape_for("ProductionVariantInstanceType").enum
    for _, ep, t, *_ in (pool, built):
        (variant,) = one(t, "AWS::SageMaker::EndpointConfig")["ProductionVariants"]
        assert variant["InstanceType"] == ep.props.instance_type and variant["InstanceType"] in hosted
        assert ep.instance.arch == "arm64"
    assert MultiModelEndpointProps.__dataclass_fields__["instance_type"].default == "ml.m8g.xlarge"
    (variant,) = one(built[2], "AWS::SageMaker::EndpointConfig")["ProductionVariants"]
    assert variant["VolumeSizeInGB"] == 100


@pytest.mark.parametrize(
    ("instance_type", "threads", "slots", "target"),
    [("ml.m8g.xlarge", 2, 2, 1.0), ("ml.m8g.4xlarge", 2, 8, 6.0), ("ml.c8g.2xlarge", 1, 8, 6.0)],
)
def test_autoscaling_targets_three_quarters_of_the_slots(
    instance_type: str, threads: int, slots: int, target: float
) -> None:
    # Models that each admit 16 (parallel 8 + queue 8): the instance's slots are the tighter bound.
    _, ep, t = pool_stack(
        3, instance_type=instance_type, threads_per_model=threads, min_capacity=1, max_capacity=5, model_parallel=8
    )
    assert (ep.slots, ep.target_concurrency) == (slots, target)
    scalable = one(t, "AWS::ApplicationAutoScaling::ScalableTarget")
    assert (scalable["MinCapacity"], scalable["MaxCapacity"]) == (1, 5)
    assert scalable["ScalableDimension"] == "sagemaker:variant:DesiredInstanceCount"
    policy = one(t, "AWS::ApplicationAutoScaling::ScalingPolicy")["TargetTrackingScalingPolicyConfiguration"]
    assert policy["TargetValue"] == target
    assert (
        policy["PredefinedMetricSpecification"]["PredefinedMetricType"]
        == "SageMakerVariantConcurrentRequestsPerModelHighResolution"
    )


def test_fixed_size_pool_has_no_scaling() -> None:
    _, ep, t = pool_stack(3, min_capacity=2, max_capacity=2)
    assert ep.scalable_target is None and not resources(t, "AWS::ApplicationAutoScaling::ScalableTarget")
    (variant,) = one(t, "AWS::SageMaker::EndpointConfig")["ProductionVariants"]
    assert variant["InitialInstanceCount"] == 2


# -- IAM ------------------------------------------------------------------------------------------------------


def _statements(t: dict[str, Any], role_logical_id: str) -> list[dict[str, Any]]:
    return [
        s
        for p in resources(t, "AWS::IAM::Policy").values()
        if {"Ref": role_logical_id} in p["Properties"]["Roles"]
        for s in p["Properties"]["PolicyDocument"]["Statement"]
    ]


def test_role_reads_only_the_catalog_prefix(pool) -> None:
    stack, ep, t = pool
    bucket = stack.get_logical_id(ep.props.model_bucket.bucket.node.default_child)
    s3 = [
        s
        for s in _statements(t, stack.get_logical_id(ep.role.node.default_child))
        if any(a.startswith("s3:") for a in _actions(s))
    ]
    assert [(_actions(s), flatten(s["Resource"])) for s in s3] == [
        (["s3:GetObject"], f"<{bucket}.Arn>/farm/*"),
        (["s3:ListBucket"], f"<{bucket}.Arn>"),
    ]
    assert s3[1]["Condition"] == {"StringLike": {"s3:prefix": ["farm/*"]}}


def test_role_has_nothing_else(pool) -> None:
    stack, ep, t = pool
    actions = sorted({a for s in _statements(t, stack.get_logical_id(ep.role.node.default_child)) for a in _actions(s)})
    assert actions == sorted(
        [
            "s3:GetObject",
            "s3:ListBucket",
            "kms:Decrypt",
            "ecr:BatchCheckLayerAvailability",
            "ecr:GetDownloadUrlForLayer",
            "ecr:BatchGetImage",
            "ecr:GetAuthorizationToken",
            "logs:CreateLogStream",
            "logs:PutLogEvents",
            "logs:CreateLogGroup",
            "logs:DescribeLogStreams",
            "cloudwatch:PutMetricData",
            "kms:CreateGrant",
            "kms:DescribeKey",
        ]
    )


def _actions(statement: dict[str, Any]) -> list[str]:
    a = statement["Action"]
    return a if isinstance(a, list) else [a]


def test_grant_invoke_is_invoke_endpoint_only_and_scoped_to_target_models(built) -> None:
    stack, ep, t, caller = built
    # botocore: InvokeEndpointWithResponseStream has no TargetModel, so it cannot address a model on an MME.
    assert "TargetModel" not in RUNTIME.operation_model("InvokeEndpointWithResponseStream").input_shape.members
    (statement,) = _statements(t, stack.get_logical_id(caller.node.default_child))
    assert statement["Action"] == "sagemaker:InvokeEndpoint"
    assert flatten(statement["Resource"]) == f"<{stack.get_logical_id(ep.endpoint)}>"
    assert statement["Condition"] == {"StringEquals": {"sagemaker:TargetModel": [farm(5)["m-0001"], farm(5)["m-0003"]]}}
    with pytest.raises(ValueError, match="unknown models \\['m-9999'\\]"):
        ep.grant_invoke(caller, models=["m-9999"])


# -- alarms and dashboard -------------------------------------------------------------------------------------


def test_alarms_include_cold_loads_and_cache_thrashing(pool) -> None:
    _, ep, t = pool
    assert set(ep.alarms) == {"latency_p95", "errors_4xx", "errors_5xx", "cpu", "memory", "cold_load_max", "cache_hit"}
    alarms = list(resources(t, "AWS::CloudWatch::Alarm").values())
    assert len(alarms) == 7
    by_metric = {a["Properties"].get("MetricName"): a["Properties"] for a in alarms if "MetricName" in a["Properties"]}
    cold = by_metric["ModelLoadingWaitTime"]
    # Maximum: SageMaker lists no percentiles for ModelLoadingWaitTime (an alarm on p95 would never leave OK).
    assert (cold["Namespace"], cold["Statistic"], cold["Threshold"]) == ("AWS/SageMaker", "Maximum", 30_000_000)  # µs
    assert "ExtendedStatistic" not in cold
    assert cold["ComparisonOperator"] == "GreaterThanThreshold"
    hit = by_metric["ModelCacheHit"]
    assert (hit["Namespace"], hit["Statistic"], hit["Threshold"], hit["ComparisonOperator"]) == (
        "AWS/SageMaker",
        "Average",
        0.5,
        "LessThanThreshold",
    )
    for props in (cold, hit):
        assert {d["Name"]: d["Value"] for d in props["Dimensions"]} == {
            "EndpointName": ep.endpoint_name,
            "VariantName": "AllTraffic",
        }
    latency = by_metric["ModelLatency"]
    # SLO + 256 tokens x 100 ms = 27.6 s is beyond the 20 s at which an MME answer is cut: 90% of that instead (µs).
    assert latency["Threshold"] == 18_000_000
    assert (
        "2000 ms first-token SLO + 256 output tokens x 100 ms = 27600 ms, capped at 90% of the 20 s"
        in latency["AlarmDescription"]
    )


def test_dashboard_shows_the_model_cache(pool) -> None:
    _, ep, t = pool
    body = json.dumps(one(t, "AWS::CloudWatch::Dashboard")["DashboardBody"])
    for metric in (
        "LoadedModelCount",
        "ModelCacheHit",
        "ModelLoadingWaitTime",
        "ModelDownloadingTime",
        "ModelLoadingTime",
        "ModelUnloadingTime",
    ):
        assert metric in body
    assert '\\"/aws/sagemaker/Endpoints\\",\\"LoadedModelCount\\"' in body  # an instance metric, not AWS/SageMaker


def test_alarm_topic_notified_for_the_cache_alarms_too(built) -> None:
    _, ep, t, _ = built
    for alarm in resources(t, "AWS::CloudWatch::Alarm").values():
        assert alarm["Properties"]["AlarmActions"] and alarm["Properties"]["OKActions"]
    assert len(ep.alarms) == 7


# -- network, encryption --------------------------------------------------------------------------------------


def test_isolated_encrypted_and_in_the_vpc(built) -> None:
    stack, ep, t, _ = built
    model = one(t, "AWS::SageMaker::Model")
    assert model["EnableNetworkIsolation"] is True
    assert len(model["VpcConfig"]["Subnets"]) == 2 and len(model["VpcConfig"]["SecurityGroupIds"]) == 1
    assert (
        flatten(one(t, "AWS::SageMaker::EndpointConfig")["KmsKeyId"])
        == f"<{stack.get_logical_id(ep.key.node.default_child)}.Arn>"
    )
    (sg,) = resources(t, "AWS::EC2::SecurityGroup").values()
    assert "SecurityGroupIngress" not in sg["Properties"]
    assert [(r["FromPort"], r["ToPort"]) for r in sg["Properties"]["SecurityGroupEgress"]] == [(443, 443)]


def test_cdk_nag_and_cfn_lint_clean(pool, built) -> None:
    for stack, _, t, *_ in (pool, built):
        assert nag_errors(stack) == []
        assert cfn_lint_errors(t) == []


# -- O(1) in the number of models -----------------------------------------------------------------------------


def test_template_does_not_grow_with_the_number_of_models() -> None:
    timings, templates = {}, {}
    for n in (10, 1000):
        start = time.perf_counter()
        _, ep, t = pool_stack(n)
        timings[n] = time.perf_counter() - start
        templates[n] = json.dumps(t, sort_keys=True)
        assert len(ep.target_models) == n
    assert templates[10] == templates[1000]  # byte for byte: the model list is not in the template
    assert "m-0007" not in templates[1000] and ".tar.gz" not in templates[1000]
    print(
        f"\nMME pool synth: 10 models {timings[10]:.2f} s, 1000 models {timings[1000]:.2f} s; template {len(templates[1000])} bytes"
    )


# -- time, memory and scaling of a pool (review findings F5, F6, F9, F11, F12) ------------------------------------


def test_a_cold_load_and_the_answer_fit_in_invoke_endpoints_60_seconds() -> None:
    # F5: the adapter gives a request the whole budget from the moment /models/<n>/invoke arrives; a request that first
    # waited on a load (up to cold_load_alarm) must still answer inside InvokeEndpoint's 60 s: 60 - load - 10 s margin.
    invoke = RUNTIME.operation_model("InvokeEndpoint").documentation
    assert "must respond to requests within 60 seconds" in invoke
    for cold_s, budget in ((30, "20"), (10, "40"), (45, "5")):
        _, ep, t = pool_stack(2, cold_load_alarm=cdk.Duration.seconds(cold_s))
        env = one(t, "AWS::SageMaker::Model")["PrimaryContainer"]["Environment"]
        assert env["ADAPTER_GENERATION_BUDGET_SECONDS"] == budget
        assert cold_s + float(budget) + 10 == 60


def test_memory_budget_defaults_to_the_memory_alarms_share_of_the_instance() -> None:
    # F6: the adapter's own default is all of the cgroup limit / MemTotal; the construct always renders the memory
    # alarm's threshold (utilization_alarm_percent) of the instance type's memory instead — one figure for both.
    for instance_type, gib, percent in (
        ("ml.m8g.xlarge", 16, 85.0),
        ("ml.r8g.2xlarge", 64, 85.0),
        ("ml.c8g.xlarge", 8, 70.0),
    ):
        _, ep, t = pool_stack(2, instance_type=instance_type, utilization_alarm_percent=percent)
        env = one(t, "AWS::SageMaker::Model")["PrimaryContainer"]["Environment"]
        assert int(env["MME_MEMORY_BUDGET_BYTES"]) == int(gib * GIB * percent / 100) < gib * GIB
        memory_alarm = _resource_of(t, ep, ep.alarms["memory"])
        assert memory_alarm["Threshold"] == percent  # the same fraction the budget is cut at


def _resource_of(t: dict[str, Any], ep: MultiModelEndpoint, construct: Any) -> dict[str, Any]:
    return t["Resources"][cdk.Stack.of(ep).get_logical_id(construct.node.default_child)]["Properties"]


def test_every_alarm_uses_a_statistic_sagemaker_publishes(pool, built) -> None:
    # F9: ModelLoadingWaitTime has no percentiles ("Valid statistics: Average, Sum, Min, Max, Sample Count");
    # ModelLatency has (the current page lists "Percentiles" for it), so the latency alarm keeps p95.
    from cpu_inference.sagemaker.monitoring import PERCENTILES, VALID_STATISTICS, check_statistic

    for _, _ep, t, *_ in (pool, built):
        for alarm in resources(t, "AWS::CloudWatch::Alarm").values():
            props = alarm["Properties"]
            queries = [q["MetricStat"] for q in props.get("Metrics", []) if "MetricStat" in q]
            stats = (
                [(props["MetricName"], props.get("Statistic") or props["ExtendedStatistic"])]
                if "MetricName" in props
                else [(q["Metric"]["MetricName"], q["Stat"]) for q in queries]
            )
            for metric, stat in stats:
                check_statistic(metric, stat)
        body = json.dumps(one(t, "AWS::CloudWatch::Dashboard")["DashboardBody"])
        for metric in ("ModelLoadingWaitTime", "ModelDownloadingTime", "ModelLoadingTime"):
            assert re.search(rf'{metric}\\",[^\]]*\\"stat\\":\\"p\d', body) is None, metric
    assert (
        PERCENTILES in VALID_STATISTICS["ModelLatency"] and PERCENTILES not in VALID_STATISTICS["ModelLoadingWaitTime"]
    )
    with pytest.raises(ValueError, match=r"ModelLoadingWaitTime has no p95 statistic in CloudWatch"):
        check_statistic("ModelLoadingWaitTime", "p95")


def test_instance_storage_pool_gets_no_volume_kms_key() -> None:
    # F11: botocore CreateEndpointConfig.KmsKeyId: on instances with local storage "the KmsKeyId parameter does not
    # encrypt instance local storage" (older models: the call fails). The key still encrypts the log group.
    doc = SAGEMAKER.operation_model("CreateEndpointConfig").input_shape.members["KmsKeyId"].documentation
    assert "does not encrypt instance local storage" in doc
    stack, ep, t = pool_stack(2, instance_type="ml.r7gd.2xlarge")
    assert ep.instance.instance_store
    config = one(t, "AWS::SageMaker::EndpointConfig")
    assert "KmsKeyId" not in config
    (log_group,) = resources(t, "AWS::Logs::LogGroup").values()
    assert flatten(log_group["Properties"]["KmsKeyId"]) == f"<{stack.get_logical_id(ep.key.node.default_child)}.Arn>"
    # An EBS-backed type keeps the volume key.
    assert "KmsKeyId" in one(pool_stack(2)[2], "AWS::SageMaker::EndpointConfig")


def hot_model_pool(parameters_billions: float, instance_type: str) -> MultiModelEndpoint:
    """A catalog pool of one chat model sized as the farm sizes it (pool_sizing.model_slots: its `parallel`)."""
    from cpu_inference import sizing
    from cpu_inference.artifacts import ModelCatalog, ModelCatalogProps
    from cpu_inference.sizing import pools as pool_sizing
    from model_download.catalog import CatalogEntry

    slots = pool_sizing.model_slots(
        sizing.ModelSpec(parameters_billions=parameters_billions, quantization="Q4_K_M", context_window=4096)
    )
    app = cdk.App()
    stack = cdk.Stack(app, "HotPool", env=ENV)
    entry = CatalogEntry(
        name="big",
        hf_repo="acme/big-GGUF",
        file="big-Q4_K_M.gguf",
        engine_args={"ctx-size": str(slots.ctx_size), "parallel": str(slots.parallel), "threads": "2"},
    )
    catalog = ModelCatalog(
        stack,
        "Catalog",
        props=ModelCatalogProps(model_bucket=ModelBucket(stack, "Models"), entries=(entry,), layouts=("mme",)),
    )
    image = EngineImage(ecr.Repository.from_repository_name(stack, "Repo", "llama-server"), digest=DIGEST)
    return MultiModelEndpoint(
        stack,
        "Pool",
        props=MultiModelEndpointProps.for_catalog(
            catalog, name="hot", image=image, instance_type=instance_type, max_capacity=4
        ),
    )


def test_a_single_hot_2b_model_can_scale_the_pool_out() -> None:
    # F12: admission is per loaded model (parallel + queue, queue = parallel: mme_adapter.py), the scaling target per
    # instance. A 3B model gets parallel 1 (pool_sizing.FARM_SLOTS) so it admits 2 and answers 429 beyond; on
    # ml.m8g.4xlarge (8 slots) a target of 6 would never be reached by it — the pool would never scale out.
    from cpu_inference.sizing import pools as pool_sizing

    ep = hot_model_pool(3, "ml.m8g.4xlarge")
    assert pool_sizing.FARM_SLOTS == 1 and ep.props.model_parallel == 1 and ep.props.model_admission == 2
    assert ep.slots == 8
    assert ep.target_concurrency == 1.0 < ep.props.model_admission  # one hot model's excess shows above the target
    # Small models (parallel 2: admit 4) cap it at 3; the instance's slots stay the bound when they are tighter.
    small = hot_model_pool(1, "ml.m8g.4xlarge")
    assert (small.props.model_admission, small.target_concurrency) == (4, 3.0)
    assert hot_model_pool(1, "ml.m8g.xlarge").target_concurrency == 1.0  # 2 slots
    # A queue set in the environment counts too.
    _, queued, _ = pool_stack(
        2, instance_type="ml.m8g.4xlarge", model_parallel=1, environment={"LLAMA_QUEUE_DEPTH": "7"}
    )
    assert (queued.props.model_admission, queued.target_concurrency) == (8, 6.0)


# -- the props refuse what SageMaker refuses -------------------------------------------------------------------


BAD: list[tuple[dict[str, Any], str]] = [
    ({"instance_type": "ml.g5.xlarge"}, r"instance_type 'ml.g5.xlarge' is not a SageMaker CPU instance in the catalog"),
    ({"instance_type": "ml.m7g.xlarge"}, r"not a SageMaker hosting instance type .* use ml.m8g.xlarge"),
    ({"instance_type": "m8g.xlarge"}, r"instance_type must be a SageMaker instance type such as ml.m8g.xlarge"),
    ({"prefix": "farm"}, r"prefix must be a key prefix ending in '/'.* e.g. 'farm/'"),
    ({"prefix": "/farm/"}, r"prefix must be a key prefix ending in '/', without a leading '/'"),
    ({"prefix": "farm/*/"}, r"prefix must be a key prefix"),
    ({"prefix": "f/" * 500}, r"ModelDataUrl 1\d{3} characters; SageMaker allows 1024 — shorten the prefix"),
    ({"target_models": {"m-1": "m-1/abc.gguf"}}, r"target_models\['m-1'\] must be a .tar.gz artifact"),
    (
        {"target_models": {"m-1": "farm/m-1/abc.tar.gz"}},
        r"must be relative to the prefix 'farm/'.* drop the leading 'farm/'",
    ),
    ({"target_models": {"m-1": "m-1/\tx.tar.gz"}}, r"printable ASCII characters \(InvokeEndpoint TargetModel\)"),
    ({"target_models": {"M_1": "m-1/x.tar.gz"}}, r"target_models key 'M_1' must be a DNS label"),
    (
        {"instance_type": "ml.r7gd.2xlarge", "volume_size_gb": 100},
        r"local NVMe instance storage .* drop volume_size_gb",
    ),
    ({"volume_size_gb": 600}, r"volume_size_gb must be 1..512"),
    ({"threads_per_model": 8}, r"threads_per_model must be 1..4 \(the vCPUs of ml.m8g.xlarge\)"),
    (
        {"memory_budget_bytes": 0},
        r"memory_budget_bytes must be in 1..17179869184 \(the 16 GiB of ml.m8g.xlarge\).* or leave it out",
    ),
    ({"memory_budget_bytes": 17 * GIB}, r"memory_budget_bytes must be in 1..17179869184"),
    (
        {"environment": {"LLAMA_THREADS": "3"}},
        r"environment may not set LLAMA_THREADS: set threads_per_model / memory_budget_bytes / cold_load_alarm instead",
    ),
    (
        {"environment": {"ADAPTER_GENERATION_BUDGET_SECONDS": "50"}},
        r"environment may not set ADAPTER_GENERATION_BUDGET_SECONDS: .* cold_load_alarm instead",
    ),
    ({"model_parallel": 0}, r"model_parallel must be >= 1"),
    ({"environment": {f"K{i}": "v" for i in range(100)}}, r"SageMaker allows 100 in all"),
    ({"environment": {"K": "v" * 1025}}, r"exceed SageMaker's 1024 bytes per value"),
    ({"min_capacity": 0}, r"min_capacity must be >= 1 \(SageMaker real-time endpoints cannot scale to zero\)"),
    ({"startup_health_check_timeout": cdk.Duration.seconds(30)}, r"startup_health_check_timeout must be 60..3600"),
    (
        {"cold_load_alarm": cdk.Duration.seconds(90)},
        r"cold_load_alarm must be between 0 and 50 s \(InvokeEndpoint's 60 s less 10 s for the answer",
    ),
    # 50 s of load would leave no time to answer inside InvokeEndpoint's 60 s.
    ({"cold_load_alarm": cdk.Duration.seconds(50)}, r"cold_load_alarm must be between 0 and 50 s"),
    ({"cache_hit_alarm_percent": 0}, r"cache_hit_alarm_percent must be in \(0, 100\]"),
    ({"name": "Pool_1"}, r"name must be a DNS label"),
    ({"variant_name": "all traffic"}, r"variant_name must be letters, digits and '-'"),
]


def _props(stack: cdk.Stack, bucket: ModelBucket, image: EngineImage, **overrides: Any) -> MultiModelEndpointProps:
    return MultiModelEndpointProps(
        image=image, model_bucket=bucket, **{"name": "default", "target_models": farm(2), **overrides}
    )


@pytest.fixture(scope="module")
def parts() -> tuple[cdk.Stack, ModelBucket, EngineImage]:
    stack = cdk.Stack(cdk.App(), "Bad", env=ENV)
    image = EngineImage(ecr.Repository.from_repository_name(stack, "Repo", "llama-server"), digest=DIGEST)
    return stack, ModelBucket(stack, "Models"), image


@pytest.mark.parametrize(("overrides", "message"), BAD, ids=[next(iter(o)) + f"-{i}" for i, (o, _) in enumerate(BAD)])
def test_props_refuse_what_sagemaker_refuses(parts, overrides: dict[str, Any], message: str) -> None:
    stack, bucket, image = parts
    props = _props(stack, bucket, image, **overrides)
    with pytest.raises(ValueError, match=message) as info:
        props.validate()
    assert "\n" not in str(info.value) and str(info.value).startswith("MultiModelEndpointProps.")


def test_props_refuse_an_image_without_the_instances_architecture(parts) -> None:
    stack, bucket, _ = parts
    amd64_only = EngineImage(
        ecr.Repository.from_repository_name(stack, "Amd", "x86-engine"), tag="v1", architectures=("amd64",)
    )
    with pytest.raises(ValueError, match=r"image has no arm64 build \(amd64\) but ml.m8g.xlarge is arm64"):
        _props(stack, bucket, amd64_only).validate()
    _props(stack, bucket, amd64_only, instance_type="ml.m7i.xlarge").validate()  # x86 for comparison is fine


def test_refusals_match_botocores_limits() -> None:
    """The limits the props encode are botocore's (a change upstream fails here, not at deploy)."""
    from cpu_inference.sagemaker import multi_model_props as mp

    assert SAGEMAKER.shape_for("Url").metadata["max"] == mp.MODEL_DATA_URL_MAX
    assert SAGEMAKER.shape_for("EnvironmentMap").metadata["max"] == mp.ENV_MAX_ENTRIES
    assert SAGEMAKER.shape_for("EnvironmentValue").metadata["max"] == mp.ENV_VALUE_MAX
    assert (
        RUNTIME.operation_model("InvokeEndpoint").input_shape.members["TargetModel"].metadata["max"]
        == mp.TARGET_MODEL_MAX
    )
    volume = SAGEMAKER.shape_for("ProductionVariant").members["VolumeSizeInGB"].metadata
    assert (volume["min"], volume["max"]) == (1, 512)
    assert (
        "multi-model endpoints" in SAGEMAKER.shape_for("ContainerDefinition").members["ModelDataSource"].documentation
    )


def test_a_valid_pool_of_1000_models_validates_quickly(parts) -> None:
    stack, bucket, image = parts
    props = dataclasses.replace(_props(stack, bucket, image), target_models=farm(1000))
    start = time.perf_counter()
    props.validate()
    assert time.perf_counter() - start < 0.5


# -- from the ModelCatalog (the one copy workflow) -------------------------------------------------------------


def catalog_pool(
    count: int, models: list[str] | None = None
) -> tuple[cdk.Stack, Any, MultiModelEndpoint, dict[str, Any]]:
    from cpu_inference.artifacts import ModelCatalog, ModelCatalogProps
    from model_download.catalog import CatalogEntry

    app = cdk.App()
    apply_nag(app)
    stack = cdk.Stack(app, "FarmCatalog", env=ENV)
    entries = tuple(
        CatalogEntry(
            name=f"m-{i:04d}",
            hf_repo=f"acme/classifier-{i:04d}-GGUF",
            file=f"classifier-{i:04d}-Q4_K_M.gguf",
            engine_args={"ctx-size": "2048", "parallel": "1", "threads": "2"},
        )
        for i in range(count)
    )
    catalog = ModelCatalog(
        stack,
        "Catalog",
        props=ModelCatalogProps(model_bucket=ModelBucket(stack, "Models"), entries=entries, layouts=("gguf", "mme")),
    )
    image = EngineImage(ecr.Repository.from_repository_name(stack, "Repo", "llama-server"), digest=DIGEST)
    ep = MultiModelEndpoint(
        stack,
        "PoolDefault",
        props=MultiModelEndpointProps.for_catalog(catalog, name="default", image=image, models=models),
    )
    synth(app)
    return stack, catalog, ep, template_json(stack)


def test_for_catalog_serves_the_catalogs_artifacts_after_the_copy() -> None:
    stack, catalog, ep, t = catalog_pool(3, models=["m-0000", "m-0002"])
    assert {n: m.path for n, m in ep.target_models.items()} == {
        n: catalog.mme_target_model(n) for n in ("m-0000", "m-0002")
    }
    assert all(m.key == catalog.mme_key(n) for n, m in ep.target_models.items())  # farm/<name>/<idhash>-<sha8>.tar.gz
    model = t["Resources"][stack.get_logical_id(ep.model)]
    assert stack.get_logical_id(catalog.resource.node.default_child) in model["DependsOn"]
    assert flatten(model["Properties"]["PrimaryContainer"]["ModelDataUrl"]).endswith(f">/{catalog.prefix}")
    assert nag_errors(stack) == [] and cfn_lint_errors(t) == []
    # Every model of the catalog by default.
    assert MultiModelEndpointProps.for_catalog(catalog, name="all", image=ep.props.image).target_models.keys() == {
        "m-0000",
        "m-0001",
        "m-0002",
    }


def test_endpoint_resources_are_the_same_for_10_and_1000_catalog_models() -> None:
    def endpoint_part(n: int) -> str:
        stack, _, ep, t = catalog_pool(n)
        assert len(ep.target_models) == n
        prefix = "PoolDefault"
        return json.dumps({k: v for k, v in t["Resources"].items() if k.startswith(prefix)}, sort_keys=True)

    assert endpoint_part(10) == endpoint_part(1000)


def test_readme_example_runs_unchanged() -> None:
    from aws_cdk.assertions import Template

    from tests.sagemaker.readme import examples

    ns: dict[str, Any] = {}
    exec(compile(examples()["multi-model"], "README.md#multi-model", "exec"), ns)
    pool, catalog = ns["pool"], ns["catalog"]
    assert ns["target"] == catalog.mme_target_model("clf-007") and len(pool.target_models) == 300
    t = Template.from_stack(ns["stack"]).to_json()["Resources"]
    (model,) = [r for r in t.values() if r["Type"] == "AWS::SageMaker::Model"]
    assert model["Properties"]["PrimaryContainer"]["Mode"] == "MultiModel"
    (config,) = [r for r in t.values() if r["Type"] == "AWS::SageMaker::EndpointConfig"]
    assert config["Properties"]["ProductionVariants"][0]["InstanceType"] == "ml.m8g.2xlarge"
