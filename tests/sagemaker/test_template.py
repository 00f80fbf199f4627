"""The synthesized SageMaker serving stack: endpoints per model, the engine environment, model data, autoscaling,
alarms, least-privilege roles, cdk-nag and cfn-lint."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import botocore.session
import pytest

from cpu_inference import sizing
from cpu_inference._internal.nag import flatten
from cpu_inference.sagemaker.engine_settings import (
    engine_settings,
    model_download_timeout_seconds,
    startup_health_check_timeout_seconds,
    volume_size_gb,
)
from cpu_inference.sizing.slm_context import slm_context_per_slot
from tests.sagemaker.conftest import LLAMA_8B, Serving, placement
from tests.support.cdk import cfn_lint_errors, nag_errors

ENGINE_DIR = Path(__file__).resolve().parents[2] / "containers" / "llama-server"


def _resource(s: Serving, construct: Any) -> dict[str, Any]:
    return s.template["Resources"][s.logical_id(construct)]


def _variant(s: Serving, name: str) -> dict[str, Any]:
    (variant,) = _resource(s, s.endpoints[name].endpoint_config)["Properties"]["ProductionVariants"]
    return variant


def _env(s: Serving, name: str) -> dict[str, str]:
    return _resource(s, s.endpoints[name].model)["Properties"]["PrimaryContainer"]["Environment"]


def _statements(s: Serving, name: str) -> list[dict[str, Any]]:
    role_id = s.logical_id(s.endpoints[name].role.node.default_child)
    out: list[dict[str, Any]] = []
    for res in s.resources("AWS::IAM::Policy").values():
        if {"Ref": role_id} in res["Properties"]["Roles"]:
            out += res["Properties"]["PolicyDocument"]["Statement"]
    assert out, f"no policy attached to {name}'s execution role"
    return out


def _as_list(v: Any) -> list[Any]:
    return v if isinstance(v, list) else [v]


# -- endpoints per model ------------------------------------------------------------------------------


def test_one_endpoint_per_configured_model_on_its_instance_type(serving: Serving) -> None:
    configured = {m.name: m.instance_type or serving.config.sagemaker.instance_type for m in serving.config.models}
    assert configured == {"smollm2-1-7b": "ml.c7g.2xlarge", "zephyr-7b": "ml.c7g.8xlarge"}
    endpoints = serving.resources("AWS::SageMaker::Endpoint")
    assert len(endpoints) == len(configured) + 1  # + the 8B model of the VPC / data-capture case
    for name, instance_type in configured.items():
        ep = serving.endpoints[name]
        endpoint = _resource(serving, ep.endpoint)["Properties"]
        assert endpoint["EndpointConfigName"] == {
            "Fn::GetAtt": [serving.logical_id(ep.endpoint_config), "EndpointConfigName"]
        }
        assert _variant(serving, name)["InstanceType"] == instance_type
        assert _variant(serving, name)["InitialInstanceCount"] == next(
            m.replicas.min for m in serving.config.models if m.name == name
        )


def test_names_are_generated_except_the_placement_keyed_endpoint_name(serving: Serving) -> None:
    for res in serving.resources("AWS::SageMaker::Model").values():
        assert "ModelName" not in res["Properties"]
    for res in serving.resources("AWS::SageMaker::EndpointConfig").values():
        assert "EndpointConfigName" not in res["Properties"]
    names = [res["Properties"]["EndpointName"] for res in serving.resources("AWS::SageMaker::Endpoint").values()]
    assert len(set(names)) == len(names)
    for name in names:
        assert len(name) <= 63 and name == name.lower() and name[-9] == "-", name
    assert serving.endpoints["zephyr-7b"].endpoint_name.startswith("prefiltersm-zephyr-7b-")


# -- the model reaches every instance through SageMaker's own download -----------------------------------


def test_model_data_is_the_artifact_prefix_downloaded_uncompressed(serving: Serving) -> None:
    for name, ep in serving.endpoints.items():
        artifact = serving.artifacts[name]
        model = _resource(serving, ep.model)
        container = model["Properties"]["PrimaryContainer"]
        assert "ModelDataUrl" not in container  # no tarball, no create-time invocation
        source = container["ModelDataSource"]["S3DataSource"]
        assert source["S3DataType"] == "S3Prefix" and source["CompressionType"] == "None"
        bucket = serving.logical_id(artifact.bucket.node.default_child)
        # The commit the copy pinned (its attribute), never the branch: scaled-out instances load the same bytes.
        assert (
            flatten(source["S3Uri"])
            == f"s3://<{bucket}>/models/{name}/<{serving.logical_id(artifact.resource)}.Commit>/"
        )
        assert container["Environment"]["MODEL_PATH"] == f"/opt/ml/model/{artifact.props.file}"
        assert container["Mode"] == "SingleModel"
        # Created only after the copy finished and the role can read it.
        assert serving.logical_id(artifact.resource.node.default_child) in model["DependsOn"]
        assert serving.logical_id(ep.role.node.find_child("DefaultPolicy").node.default_child) in model["DependsOn"]


def test_zephyr_reference_config_synthesizes_with_sized_settings(serving: Serving) -> None:
    ep = serving.endpoints["zephyr-7b"]
    copy = _resource(serving, serving.artifacts["zephyr-7b"].resource.node.default_child)["Properties"]
    assert (copy["HfRepo"], copy["File"]) == ("TheBloke/zephyr-7B-beta-GGUF", "zephyr-7b-beta.Q4_K_M.gguf")
    env = _env(serving, "zephyr-7b")
    print(
        f"\nZephyr-7B-beta Q4_K_M on ml.c7g.8xlarge: threads {env['LLAMA_THREADS']}, slots {env['LLAMA_PARALLEL']}, "
        f"ctx/slot {env['LLAMA_CTX_PER_SLOT']}, queue {env['LLAMA_QUEUE_DEPTH']}, prompt cache {env['LLAMA_CACHE_RAM_MIB']} MiB, "
        f"download timeout {_variant(serving, 'zephyr-7b')['ModelDataDownloadTimeoutInSeconds']} s, "
        f"health-check timeout {_variant(serving, 'zephyr-7b')['ContainerStartupHealthCheckTimeoutInSeconds']} s"
    )
    # The sample gave 8 slots 256 tokens each; here every slot gets the configured 4k context.
    assert (env["LLAMA_THREADS"], env["LLAMA_PARALLEL"], env["LLAMA_CTX_PER_SLOT"]) == ("32", "8", "4096")
    size = serving.config.models[1].source.size_bytes
    assert size == 4368438944
    assert (
        _variant(serving, "zephyr-7b")["ModelDataDownloadTimeoutInSeconds"]
        == model_download_timeout_seconds(size)
        == 300
    )
    assert (
        _variant(serving, "zephyr-7b")["ContainerStartupHealthCheckTimeoutInSeconds"]
        == startup_health_check_timeout_seconds(size)
        == 270
    )
    assert ep.endpoint_name in flatten(_resource(serving, ep.endpoint)["Properties"]["EndpointName"])


# -- engine environment ---------------------------------------------------------------------------------


def test_engine_environment_for_8b_q4_k_m_4k_on_c7g_8xlarge(serving: Serving, tmp_path: Path) -> None:
    env = _env(serving, "llama-8b")
    s = sizing.size(LLAMA_8B, sizing.instance("ml.c7g.8xlarge"), target="sagemaker")
    print(
        f"\n8B Q4_K_M, 4k context, ml.c7g.8xlarge ({s.instance.vcpus} vCPU, {s.instance.memory_gib:g} GiB): "
        f"threads {s.threads}, slots {s.slots}, ctx/slot {s.ctx_per_slot} (--ctx-size {s.ctx_total}), "
        f"queue {env['LLAMA_QUEUE_DEPTH']}, prompt cache {env['LLAMA_CACHE_RAM_MIB']} MiB, "
        f"memory {s.memory_needed_bytes / sizing.GIB:.2f} of {s.memory_available_bytes / sizing.GIB:.2f} GiB "
        f"(weights {s.weights_bytes / 1e9:.2f} GB, KV {s.kv_cache_bytes / sizing.GIB:.2f} GiB)"
    )
    assert (s.threads, s.slots, s.ctx_per_slot, s.ctx_total) == (32, 8, 4096, 32768)
    expected = {
        "LLAMA_THREADS": "32",
        "LLAMA_PARALLEL": "8",
        "LLAMA_CTX_PER_SLOT": "4096",
        "OMP_NUM_THREADS": "32",
        "MKL_NUM_THREADS": "32",
        "OPENBLAS_NUM_THREADS": "32",
        "INTRA_OP_NUM_THREADS": "32",
        "NUM_INTER_THREADS": "1",
        "LLAMA_QUEUE_DEPTH": "8",
        "LLAMA_CACHE_RAM_MIB": "8192",
        "LLAMA_MODEL_ALIAS": "llama-8b",
        "MODEL_PATH": "/opt/ml/model/Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf",
    }
    assert env == expected
    assert (
        env
        == engine_settings(
            LLAMA_8B, "ml.c7g.8xlarge", alias="llama-8b", model_file="Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf"
        ).environment()
    )

    # The container's own flag code turns exactly this environment into the llama-server command line.
    sys.path.insert(0, str(ENGINE_DIR))
    try:
        from inference_runtime import engine_flags
    finally:
        sys.path.remove(str(ENGINE_DIR))
    model = tmp_path / "Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf"
    model.write_bytes(b"GGUF")
    args = engine_flags.llama_server_args(
        engine_flags.config_from_env({**env, "MODEL_PATH": str(model)}, cpus=32, memory_limit=64 * sizing.GIB)
    )
    value = {
        flag: args[args.index(flag) + 1]
        for flag in ("--threads", "--threads-batch", "--parallel", "--ctx-size", "--cache-ram", "--alias")
    }
    assert value == {
        "--threads": "32",
        "--threads-batch": "32",
        "--parallel": "8",
        "--ctx-size": "32768",
        "--cache-ram": "8192",
        "--alias": "llama-8b",
    }


def test_smaller_instance_gets_its_own_threads_and_slots(serving: Serving) -> None:
    env = _env(serving, "smollm2-1-7b")
    s = serving.endpoints["smollm2-1-7b"].sizing
    assert env["LLAMA_THREADS"] == "8" == str(sizing.instance("ml.c7g.2xlarge").vcpus)
    # The router's SLM: each slot holds the router's classification prompt and an answer
    # (cpu_inference.sizing.slm_context),
    # not the classification task's 512 (tests/k8s/test_prefilter_fidelity.py runs this environment).
    assert (env["LLAMA_PARALLEL"], env["LLAMA_CTX_PER_SLOT"]) == (str(s.slots), str(slm_context_per_slot({})))
    assert s.fits


def test_timeouts_grow_with_the_model_file(serving: Serving) -> None:
    small = _variant(serving, "smollm2-1-7b")
    large = _variant(serving, "zephyr-7b")
    assert small["ModelDataDownloadTimeoutInSeconds"] < large["ModelDataDownloadTimeoutInSeconds"]
    assert small["ContainerStartupHealthCheckTimeoutInSeconds"] < large["ContainerStartupHealthCheckTimeoutInSeconds"]
    huge = sizing.weights_bytes(sizing.ModelSpec(parameters_billions=70, quantization="Q4_K_M"))
    assert (model_download_timeout_seconds(huge), startup_health_check_timeout_seconds(huge)) == (1740, 840)
    assert (
        model_download_timeout_seconds(10**12) == 3600
        and startup_health_check_timeout_seconds(0) == 180
        and startup_health_check_timeout_seconds(1) == 210
    )


# The ML storage volume's range from SageMaker's API model (shape ProductionVariantVolumeSizeInGB), not from our code.
_VOLUME = (
    botocore.session.get_session()
    .get_service_model("sagemaker")
    .shape_for("ProductionVariant")
    .members["VolumeSizeInGB"]
    .metadata
)


@pytest.mark.parametrize("name", ["smollm2-1-7b", "zephyr-7b", "llama-8b"])
def test_ml_storage_volume_holds_the_model_within_sagemakers_range(serving: Serving, name: str) -> None:
    ep = serving.endpoints[name]
    volume = _variant(serving, name)["VolumeSizeInGB"]
    assert _VOLUME["min"] <= volume <= _VOLUME["max"]
    # The model file is downloaded onto it (plus the image allowance and /tmp): more than the file, never the default.
    assert volume * sizing.GIB >= ep.props.model_bytes * 1.1 + 6 * sizing.GIB
    assert volume == ep.volume_size_gb


def test_ml_storage_volume_grows_with_the_model_and_stops_at_sagemakers_maximum() -> None:
    seventy = sizing.weights_bytes(sizing.ModelSpec(parameters_billions=70, quantization="Q4_K_M"))
    on_c = sizing.instance("ml.c7g.16xlarge")
    assert volume_size_gb(seventy, on_c) == math.ceil((seventy * 1.1 + 6 * sizing.GIB) / sizing.GIB) > 40
    assert volume_size_gb(10**13, on_c) == _VOLUME["max"]  # props refuse such a model: test_props
    assert volume_size_gb(1, on_c) >= _VOLUME["min"]


def test_instance_storage_types_get_no_volume_size() -> None:
    # SageMaker attaches no EBS volume to "d" types and refuses VolumeSizeInGB there (SageMaker Python SDK's
    # volume_size_supported); r7gd is the Graviton3 memory-optimized hosting type.
    assert (
        "ml.r7gd.2xlarge"
        in botocore.session.get_session().get_service_model("sagemaker").shape_for("ProductionVariantInstanceType").enum
    )
    variant = _variant_of(placement("ml.r7gd.2xlarge"))
    assert "VolumeSizeInGB" not in variant and variant["InstanceType"] == "ml.r7gd.2xlarge"
    assert _variant_of(placement("ml.c7g.8xlarge"))["VolumeSizeInGB"] >= 11


def _variant_of(p) -> dict[str, Any]:
    (config,) = p.of_type("AWS::SageMaker::EndpointConfig").values()
    (variant,) = config["Properties"]["ProductionVariants"]
    return variant


# -- autoscaling ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["smollm2-1-7b", "zephyr-7b", "llama-8b"])
def test_autoscaling_target_and_policy(serving: Serving, name: str) -> None:
    ep = serving.endpoints[name]
    target = _resource(serving, ep.scalable_target)["Properties"]
    assert (target["MinCapacity"], target["MaxCapacity"]) == (ep.props.min_capacity, ep.props.max_capacity)
    assert (
        target["ServiceNamespace"] == "sagemaker"
        and target["ScalableDimension"] == "sagemaker:variant:DesiredInstanceCount"
    )
    assert (
        flatten(target["ResourceId"]) == f"endpoint/<{serving.logical_id(ep.endpoint)}.EndpointName>/variant/AllTraffic"
    )
    assert flatten(target["RoleARN"]).endswith(
        ":role/aws-service-role/sagemaker.application-autoscaling.amazonaws.com/AWSServiceRoleForApplicationAutoScaling_SageMakerEndpoint"
    )
    policy = _resource(serving, ep.scaling_policy)["Properties"]
    assert policy["PolicyType"] == "TargetTrackingScaling"
    tracking = policy["TargetTrackingScalingPolicyConfiguration"]
    assert (
        tracking["PredefinedMetricSpecification"]["PredefinedMetricType"]
        == "SageMakerVariantConcurrentRequestsPerModelHighResolution"
    )
    assert tracking["TargetValue"] == math.floor(0.75 * ep.sizing.slots) >= 1
    assert (tracking["ScaleOutCooldown"], tracking["ScaleInCooldown"]) == (120, 600)
    assert _resource(serving, ep.endpoint)["Properties"]["RetainAllVariantProperties"] is True


def test_replicas_from_config(serving: Serving) -> None:
    for m in serving.config.models:
        target = _resource(serving, serving.endpoints[m.name].scalable_target)["Properties"]
        assert (target["MinCapacity"], target["MaxCapacity"]) == (m.replicas.min, m.replicas.max)


# -- alarms and dashboard ------------------------------------------------------------------------------------


def _alarm(s: Serving, name: str, key: str) -> dict[str, Any]:
    return _resource(s, s.endpoints[name].alarms[key])["Properties"]


def _metrics(alarm: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """id -> MetricStat.Metric of a metric-math alarm."""
    return {q["Id"]: q["MetricStat"]["Metric"] for q in alarm["Metrics"] if "MetricStat" in q}


@pytest.mark.parametrize("name", ["smollm2-1-7b", "zephyr-7b", "llama-8b"])
def test_alarms(serving: Serving, name: str) -> None:
    ep = serving.endpoints[name]
    dims = [{"Name": "EndpointName", "Value": ep.endpoint_name}, {"Name": "VariantName", "Value": "AllTraffic"}]
    slo_ms = serving.config.slo.p95_latency_ms
    assert ep.alarms.keys() == {"latency_p95", "errors_4xx", "errors_5xx", "cpu", "memory"}

    latency = _alarm(serving, name, "latency_p95")
    assert (latency["Namespace"], latency["MetricName"], latency["ExtendedStatistic"]) == (
        "AWS/SageMaker",
        "ModelLatency",
        "p95",
    )
    # ModelLatency is the whole generation: the SLO (first token) + the answer's decode budget, in microseconds.
    budget_ms = slo_ms + {"smollm2-1-7b": 256, "zephyr-7b": 256, "llama-8b": 256}[name] * 100
    assert latency["Threshold"] == budget_ms * 1000 and latency["Dimensions"] == dims
    assert (
        f"above {budget_ms:g} ms ({slo_ms:g} ms first-token SLO + 256 output tokens x 100 ms)"
        in latency["AlarmDescription"]
    )

    for key, metric, threshold in (("errors_4xx", "Invocation4XXErrors", 5), ("errors_5xx", "Invocation5XXErrors", 1)):
        alarm = _alarm(serving, name, key)
        assert alarm["Threshold"] == threshold
        m = _metrics(alarm)
        assert (m["err"]["MetricName"], m["inv"]["MetricName"]) == (metric, "Invocations")
        assert m["err"]["Dimensions"] == dims
        (expr,) = [q["Expression"] for q in alarm["Metrics"] if "Expression" in q]
        assert expr == "IF(FILL(inv, 0) > 0, 100 * FILL(err, 0) / FILL(inv, 0), 0)"

    cpu = _alarm(serving, name, "cpu")
    assert cpu["Threshold"] == 85
    assert _metrics(cpu)["cpu"]["Namespace"] == "/aws/sagemaker/Endpoints"
    assert [q["Expression"] for q in cpu["Metrics"] if "Expression" in q] == [f"cpu / {ep.sizing.instance.vcpus}"]
    memory = _alarm(serving, name, "memory")
    assert (memory["Namespace"], memory["MetricName"], memory["Threshold"]) == (
        "/aws/sagemaker/Endpoints",
        "MemoryUtilization",
        85,
    )


def test_latency_alarm_is_quiet_under_normal_traffic_and_fires_when_decode_degrades(serving: Serving) -> None:
    # FIELD-NOTES reference (AWS's llama.cpp sample): Zephyr-7B Q4 on ml.c7g.8xlarge, prompt 55 tok/s, generation
    # ~36 tok/s (128 tokens in 3.57 s). ModelLatency of such an answer with a 100-token prompt, in microseconds:
    def model_latency_us(prompt_tokens: int, output_tokens: int, decode_tok_s: float) -> float:
        return (prompt_tokens / 55 + output_tokens / decode_tok_s) * 1e6

    threshold = _alarm(serving, "zephyr-7b", "latency_p95")["Threshold"]
    slo_us = serving.config.slo.p95_latency_ms * 1000  # the old threshold: the request SLO alone
    normal = model_latency_us(100, 128, 36)
    assert normal > slo_us  # the old alarm was in ALARM for every normal 128-token answer
    assert normal < threshold and model_latency_us(100, 256, 36) < threshold  # the budget is not crossed
    assert model_latency_us(100, 256, 8) > threshold  # decode at 8 tok/s (a saturated instance) fires it


def test_alarm_topic_and_dashboard(serving: Serving) -> None:
    topic = serving.logical_id(serving.endpoints["llama-8b"].props.alarm_topic.node.default_child)
    for alarm in serving.endpoints["llama-8b"].alarms.values():
        props = _resource(serving, alarm)["Properties"]
        assert props["AlarmActions"] == [{"Ref": topic}] == props["OKActions"]
    assert "AlarmActions" not in _alarm(serving, "zephyr-7b", "cpu")
    dashboards = serving.resources("AWS::CloudWatch::Dashboard")
    assert len(dashboards) == 3
    body = flatten(
        _resource(serving, serving.endpoints["zephyr-7b"].dashboard.node.default_child)["Properties"]["DashboardBody"]
    )
    for needle in (
        "ModelLatency",
        "Invocation5XXErrors",
        "ConcurrentRequestsPerModel",
        "CPUUtilization",
        "MemoryUtilization",
        f"p95 alarm {serving.config.slo.p95_latency_ms + 256 * 100} ms",
        "scaling target 6",
        "429 above 16",
    ):
        assert needle in body, needle
    assert all("DashboardName" not in d["Properties"] for d in dashboards.values())


# -- least privilege ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["smollm2-1-7b", "zephyr-7b", "llama-8b"])
def test_role_reads_only_its_model_prefix(serving: Serving, name: str) -> None:
    bucket = serving.logical_id(serving.artifacts[name].bucket.node.default_child)
    s3 = [st for st in _statements(serving, name) if any(a.startswith("s3:") for a in _as_list(st["Action"]))]
    reads = [st for st in s3 if _as_list(st["Action"]) == ["s3:GetObject"]]
    lists = [st for st in s3 if _as_list(st["Action"]) == ["s3:ListBucket"]]
    assert [flatten(r) for st in reads for r in _as_list(st["Resource"])] == [f"<{bucket}.Arn>/models/{name}/*"]
    assert [st["Condition"] for st in lists] == [{"StringLike": {"s3:prefix": [f"models/{name}/*"]}}]
    others = {n for n in serving.endpoints if n != name}
    text = str(s3)
    assert not any(f"models/{o}/" in text for o in others)
    writes = [st for st in s3 if st not in reads and st not in lists]
    # Only the data-capture endpoint may write, and only under its capture prefix (not the model bucket).
    for st in writes:
        assert _as_list(st["Action"]) == ["s3:PutObject"] and flatten(st["Resource"]).endswith(
            f"/data-capture/{name}/*"
        )
        assert bucket not in flatten(st["Resource"])
    assert bool(writes) == (name == "llama-8b")


@pytest.mark.parametrize("name", ["smollm2-1-7b", "zephyr-7b", "llama-8b"])
def test_role_pulls_only_its_image(serving: Serving, name: str) -> None:
    repo = serving.logical_id(serving.image.repository.node.default_child)
    ecr = [st for st in _statements(serving, name) if any(a.startswith("ecr:") for a in _as_list(st["Action"]))]
    pulls = [st for st in ecr if "ecr:GetAuthorizationToken" not in _as_list(st["Action"])]
    assert [flatten(st["Resource"]) for st in pulls] == [f"<{repo}.Arn>"]
    assert set(_as_list(pulls[0]["Action"])) == {
        "ecr:BatchCheckLayerAvailability",
        "ecr:GetDownloadUrlForLayer",
        "ecr:BatchGetImage",
    }
    token = [st for st in ecr if st not in pulls]
    assert [(_as_list(st["Action"]), st["Resource"]) for st in token] == [(["ecr:GetAuthorizationToken"], "*")]
    image = _resource(serving, serving.endpoints[name].model)["Properties"]["PrimaryContainer"]["Image"]
    # The Graviton instance's own arm64 image, not the manifest list (ImageDigest), which EKS pulls.
    assert serving.endpoints[name].instance.arch == "arm64"
    assert flatten(image).endswith(f"@<{serving.logical_id(serving.image.build.node.default_child)}.Digest-arm64>")


@pytest.mark.parametrize("name", ["smollm2-1-7b", "zephyr-7b", "llama-8b"])
def test_role_has_nothing_else(serving: Serving, name: str) -> None:
    ep = serving.endpoints[name]
    allowed = {
        "s3:GetObject",
        "s3:ListBucket",
        "ecr:BatchCheckLayerAvailability",
        "ecr:GetDownloadUrlForLayer",
        "ecr:BatchGetImage",
        "ecr:GetAuthorizationToken",
        "kms:Decrypt",
        "logs:CreateLogStream",
        "logs:PutLogEvents",
        "logs:CreateLogGroup",
        "logs:DescribeLogStreams",
        "cloudwatch:PutMetricData",
        "kms:CreateGrant",
        "kms:DescribeKey",
    }
    if name == "llama-8b":  # VPC + data capture
        allowed |= {
            "s3:PutObject",
            "kms:GenerateDataKey",
            "ec2:DescribeVpcs",
            "ec2:DescribeDhcpOptions",
            "ec2:DescribeSubnets",
            "ec2:DescribeSecurityGroups",
            "ec2:DescribeNetworkInterfaces",
            "ec2:CreateNetworkInterface",
            "ec2:CreateNetworkInterfacePermission",
            "ec2:DeleteNetworkInterface",
            "ec2:DeleteNetworkInterfacePermission",
        }
    statements = _statements(serving, name)
    actions = {a for st in statements for a in _as_list(st["Action"])}
    assert actions <= allowed, actions - allowed
    assert all(st["Effect"] == "Allow" for st in statements)
    for st in statements:
        resources = [flatten(r) for r in _as_list(st["Resource"])]
        if "*" in resources:
            acts = set(_as_list(st["Action"]))
            assert acts <= {"ecr:GetAuthorizationToken", "cloudwatch:PutMetricData"} or all(
                a.startswith("ec2:") for a in acts
            ), st
            if acts & {"cloudwatch:PutMetricData"}:
                assert st["Condition"] == {"StringLike": {"cloudwatch:namespace": "/aws/sagemaker/*"}}
            if acts & {"ec2:CreateNetworkInterface"}:
                assert list(st["Condition"]["ArnEquals"]) == ["ec2:Vpc"]
        if "kms:CreateGrant" in _as_list(st["Action"]):
            assert resources == [f"<{serving.logical_id(ep.key)}.Arn>"]
            assert st["Condition"] == {"Bool": {"kms:GrantIsForAWSResource": "true"}}
        logs = [r for r in resources if "log" in r.lower() and st["Action"] != "s3:PutObject"]
        for r in logs:
            assert r == f"<{serving.logical_id(ep.log_group.node.default_child)}.Arn>"
    trust = _resource(serving, ep.role.node.default_child)["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert [st["Principal"] for st in trust] == [{"Service": "sagemaker.amazonaws.com"}]


def test_grant_invoke_is_scoped_to_one_endpoint(serving: Serving) -> None:
    router = serving.logical_id(serving.router.node.default_child)
    (policy,) = [
        p for p in serving.resources("AWS::IAM::Policy").values() if {"Ref": router} in p["Properties"]["Roles"]
    ]
    (st,) = policy["Properties"]["PolicyDocument"]["Statement"]
    assert set(st["Action"]) == {"sagemaker:InvokeEndpoint", "sagemaker:InvokeEndpointWithResponseStream"}
    assert st["Resource"] == {"Ref": serving.logical_id(serving.endpoints["zephyr-7b"].endpoint)}


# -- encryption, network, data capture --------------------------------------------------------------------------


def test_encryption_isolation_vpc_and_capture(serving: Serving) -> None:
    for name, ep in serving.endpoints.items():
        model = _resource(serving, ep.model)["Properties"]
        assert model["EnableNetworkIsolation"] is True
        config = _resource(serving, ep.endpoint_config)["Properties"]
        assert config["KmsKeyId"] == {"Fn::GetAtt": [serving.logical_id(ep.key.node.default_child), "Arn"]}
        logs = _resource(serving, ep.log_group)["Properties"]
        assert logs["LogGroupName"] == f"/aws/sagemaker/Endpoints/{ep.endpoint_name}" and logs["RetentionInDays"] == 90
        assert "KmsKeyId" in logs
        assert ("VpcConfig" in model) == (name == "llama-8b")
        assert ("DataCaptureConfig" in config) == (name == "llama-8b")
    ep = serving.endpoints["llama-8b"]
    vpc = _resource(serving, ep.model)["Properties"]["VpcConfig"]
    assert len(vpc["Subnets"]) == 2
    (sg,) = ep.security_groups
    group = _resource(serving, sg)["Properties"]
    assert "SecurityGroupIngress" not in group
    assert [(e["IpProtocol"], e["FromPort"], e["ToPort"]) for e in group["SecurityGroupEgress"]] == [("tcp", 443, 443)]
    capture = _resource(serving, ep.endpoint_config)["Properties"]["DataCaptureConfig"]
    assert capture["InitialSamplingPercentage"] == 20 and capture["EnableCapture"] is True
    assert (
        flatten(capture["DestinationS3Uri"])
        == f"s3://<{serving.logical_id(ep.capture_bucket.node.default_child)}>/data-capture/llama-8b"
    )
    assert {o["CaptureMode"] for o in capture["CaptureOptions"]} == {"Input", "Output"}
    bucket = _resource(serving, ep.capture_bucket)["Properties"]
    (rule,) = bucket["BucketEncryption"]["ServerSideEncryptionConfiguration"]
    assert rule["ServerSideEncryptionByDefault"]["SSEAlgorithm"] == "aws:kms"
    assert bucket["LoggingConfiguration"]["LogFilePrefix"] == "data-capture/"


# -- checkers ---------------------------------------------------------------------------------------------------


def test_cdk_nag_clean(serving: Serving) -> None:
    assert nag_errors(serving.stack) == []


def test_cfn_lint_clean(serving: Serving) -> None:
    assert cfn_lint_errors(serving.template) == []
