"""GravitonEndpointProps.validate(): every user error names the key and the fix (no synth needed)."""

from __future__ import annotations

import dataclasses
import re

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ecr as ecr

from cpu_inference import sizing
from cpu_inference.sagemaker import EngineImage, GravitonEndpointProps
from cpu_inference.sagemaker._naming import placement_slug
from cpu_inference.sagemaker.endpoint_props import default_target_concurrency

DIGEST = "sha256:" + "cd" * 32
SPEC = sizing.ModelSpec(parameters_billions=8, quantization="Q4_K_M", context_window=4096)


@pytest.fixture(scope="module")
def repo() -> ecr.IRepository:
    return ecr.Repository.from_repository_name(cdk.Stack(cdk.App(), "Props"), "Repo", "llama-server")


@pytest.fixture
def props(repo: ecr.IRepository) -> GravitonEndpointProps:
    return GravitonEndpointProps(
        name="llama-8b",
        model="s3://my-models/models/llama-8b/main/",
        spec=SPEC,
        image=EngineImage(repo, digest=DIGEST),
        instance_type="ml.c7g.8xlarge",
    )


def test_valid_props_pass(props: GravitonEndpointProps) -> None:
    props.validate()
    assert props.scales and props.initial_count == 1


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"name": "Llama_8B"}, r"name must be a DNS label"),
        ({"instance_type": "c7g.8xlarge"}, r"instance_type must be a SageMaker instance type such as ml\.c7g\.8xlarge"),
        (
            {"instance_type": "ml.g5.xlarge"},
            r"'ml\.g5\.xlarge' is not a SageMaker CPU instance in the catalog \(families: ml\.c7g",
        ),
        (
            {"instance_type": "ml.c7g.large"},
            r"\(8B Q4_K_M, 1 slot\(s\) x 4096 context\) needs 6\.8 GiB but ml\.c7g\.large has 3\.0 GiB usable — use a larger instance such as ml\.r7gd\.medium",
        ),
        (
            {"model": "s3://my-models/models/llama-8b/main/llama.Q4_K_M.gguf"},
            r"not the file: use model='s3://my-models/models/llama-8b/main/', model_file='llama\.Q4_K_M\.gguf'",
        ),
        ({"model": "s3://my-models/models/llama-8b"}, r"model must be an S3 prefix URI ending in '/'"),
        ({"model_file": "../x.gguf"}, r"model_file must be a \.gguf path relative to the model prefix"),
        ({"min_capacity": 0}, r"min_capacity must be >= 1 \(SageMaker real-time endpoints cannot scale to zero\)"),
        ({"min_capacity": 3, "max_capacity": 2}, r"max_capacity \(2\) must be >= min_capacity \(3\)"),
        (
            {"initial_instance_count": 5},
            r"initial_instance_count \(5\) must be within min_capacity\.\.max_capacity \(1\.\.2\)",
        ),
        ({"target_concurrency": 0}, r"target_concurrency must be > 0"),
        ({"queue_depth": -1}, r"queue_depth must be >= 0"),
        ({"environment": {"LLAMA_PARALLEL": "2"}}, r"environment may not set LLAMA_PARALLEL: .*spec\.parallel_slots"),
        ({"environment": {"bad key": "1"}}, r"environment keys must be environment variable names"),
        ({"model_download_timeout": cdk.Duration.hours(2)}, r"model_download_timeout must be 60\.\.3600 seconds"),
        (
            {"startup_health_check_timeout": cdk.Duration.seconds(30)},
            r"startup_health_check_timeout must be 60\.\.3600 seconds",
        ),
        (
            {"volume_size_gb": 0},
            r"volume_size_gb must be 11\.\.512 \(the 4\.5 GiB model file \+ image and scratch; SageMaker's maximum\), got 0 — or leave it out \(default: 11\)",
        ),
        ({"volume_size_gb": 513}, r"volume_size_gb must be 11\.\.512"),
        (
            {"instance_type": "ml.r7gd.2xlarge", "volume_size_gb": 50},
            r"volume_size_gb: ml\.r7gd\.2xlarge has local NVMe instance storage .* — drop volume_size_gb",
        ),
        (
            {"spec": sizing.ModelSpec(parameters_billions=405, quantization="F16"), "instance_type": "ml.r8g.48xlarge"},
            r"model: a 754\.4 GiB model file needs a \d+ GB ML storage volume, more than SageMaker's 512 GB",
        ),
        (
            {"instance_type": "ml.m7g.2xlarge"},
            r"instance_type 'ml\.m7g\.2xlarge' is not a SageMaker hosting instance type \(not in ProductionVariantInstanceType\) — use ml\.m8g\.2xlarge",
        ),
        ({"data_capture_percent": 101}, r"data_capture_percent must be 0\.\.100"),
        ({"data_capture_prefix": "a/../b"}, r"data_capture_prefix must be an S3 key prefix"),
        ({"error_rate_5xx_percent": 0}, r"error_rate_5xx_percent must be in \(0, 100\]"),
        ({"latency_slo": cdk.Duration.millis(0)}, r"latency_slo must be positive"),
        ({"endpoint_name_prefix": "x" * 55}, r"endpoint_name_prefix must be letters, digits and '-'.*at most 54"),
        ({"variant_name": "all traffic"}, r"variant_name must be letters, digits and '-'"),
    ],
)
def test_errors_name_the_key_and_the_fix(props: GravitonEndpointProps, change: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message) as err:
        dataclasses.replace(props, **change).validate()
    assert str(err.value).startswith("GravitonEndpointProps.")


def test_image_must_have_the_instance_architecture(props: GravitonEndpointProps, repo: ecr.IRepository) -> None:
    arm_only = EngineImage(repo, tag="v1", architectures=("arm64",))
    dataclasses.replace(props, image=arm_only).validate()
    with pytest.raises(ValueError, match=r"image has no amd64 build \(arm64\) but ml\.c7i\.8xlarge is amd64"):
        dataclasses.replace(props, image=arm_only, instance_type="ml.c7i.8xlarge").validate()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, r"give exactly one of tag or digest"),
        ({"tag": "v1", "digest": DIGEST}, r"give exactly one of tag or digest"),
        ({"digest": "sha256:abc"}, r"digest must be sha256:<64 lowercase hex>"),
        ({"tag": "bad tag"}, r"tag must be a Docker tag"),
        ({"tag": "v1", "architectures": ("riscv64",)}, r"architectures must name arm64 and/or amd64"),
        ({"tag": "v1", "engine": "vLLM"}, r"EngineImage\.engine must be one of llama\.cpp, vllm, got 'vLLM'"),
    ],
)
def test_engine_image_errors(repo: ecr.IRepository, kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        EngineImage(repo, **kwargs).validate()


def test_security_groups_need_a_vpc(props: GravitonEndpointProps) -> None:
    from aws_cdk import aws_ec2 as ec2

    stack = cdk.Stack(cdk.App(), "Net")
    sg = ec2.SecurityGroup.from_security_group_id(stack, "Sg", "sg-12345678")
    with pytest.raises(ValueError, match=r"security_groups need a vpc"):
        dataclasses.replace(props, security_groups=(sg,)).validate()


def test_x86_families_for_comparison_and_graviton4(props: GravitonEndpointProps) -> None:
    for it in (
        "ml.c7i.8xlarge",
        "ml.m7i.8xlarge",
        "ml.c8g.8xlarge",
        "ml.m8g.8xlarge",
        "ml.r7gd.4xlarge",
        "ml.r8g.4xlarge",
    ):
        dataclasses.replace(props, instance_type=it).validate()


def test_helpers() -> None:
    assert placement_slug("ml.c7g.8xlarge") == "MlC7g8xlarge"
    assert [default_target_concurrency(n) for n in (1, 2, 4, 8, 16)] == [1, 1, 3, 6, 12]
    assert re.fullmatch(r"[A-Za-z0-9]+", placement_slug("ml.r8g.48xlarge"))
