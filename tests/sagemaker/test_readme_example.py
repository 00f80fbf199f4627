"""The README's minimal construct example runs unchanged and builds what it says."""

from __future__ import annotations

from aws_cdk.assertions import Template

from cpu_inference._internal.nag import flatten
from tests.sagemaker.readme import examples


def test_minimal_example_synthesizes() -> None:
    ns: dict = {}
    exec(compile(examples()["construct"], "README.md#construct", "exec"), ns)
    endpoint, stack = ns["endpoint"], ns["stack"]
    t = Template.from_stack(stack).to_json()["Resources"]
    (model,) = [r for r in t.values() if r["Type"] == "AWS::SageMaker::Model"]
    (config,) = [r for r in t.values() if r["Type"] == "AWS::SageMaker::EndpointConfig"]
    source = model["Properties"]["PrimaryContainer"]["ModelDataSource"]["S3DataSource"]
    assert "/models/zephyr-7b/<" in flatten(source["S3Uri"]) and flatten(source["S3Uri"]).endswith(
        ".Commit>/"
    )  # the pinned commit
    assert (
        model["Properties"]["PrimaryContainer"]["Environment"]["MODEL_PATH"]
        == "/opt/ml/model/zephyr-7b-beta.Q4_K_M.gguf"
    )
    (variant,) = config["Properties"]["ProductionVariants"]
    assert variant["InstanceType"] == "ml.c7g.8xlarge"
    assert (variant["ModelDataDownloadTimeoutInSeconds"], variant["ContainerStartupHealthCheckTimeoutInSeconds"]) == (
        300,
        270,
    )
    (target,) = [r for r in t.values() if r["Type"] == "AWS::ApplicationAutoScaling::ScalableTarget"]
    assert (target["Properties"]["MinCapacity"], target["Properties"]["MaxCapacity"]) == (1, 3)
    outputs = Template.from_stack(stack).to_json()["Outputs"]
    assert outputs["EndpointName"]["Value"] == endpoint.endpoint_name
    assert endpoint.endpoint_name.startswith("zephyr-zephyr-7b-")


def test_vllm_example_synthesizes_a_vllm_endpoint() -> None:
    """The README's vLLM example: the vLLM image, the snapshot's prefix uncompressed, the vLLM env, 420 s start-up."""
    ns: dict = {}
    exec(compile(examples()["vllm"], "README.md#vllm", "exec"), ns)
    llama, stack = ns["llama"], ns["stack"]
    t = Template.from_stack(stack).to_json()["Resources"]
    (model,) = [r for r in t.values() if r["Type"] == "AWS::SageMaker::Model"]
    container = model["Properties"]["PrimaryContainer"]
    source = container["ModelDataSource"]["S3DataSource"]
    assert (source["S3DataType"], source["CompressionType"]) == ("S3Prefix", "None")
    assert flatten(source["S3Uri"]).endswith(".Commit>/") and "/models/llama-3-2-1b/<" in flatten(source["S3Uri"])
    env = container["Environment"]
    assert env == {
        **llama.sizing.engine_env(exclusive_cpus=True),
        "SERVE_MODEL_NAME": "llama-3-2-1b",
        "SERVE_QUEUE_DEPTH": str(llama.sizing.slots),
        "MODEL_PATH": "/opt/ml/model",
    }
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == "auto" and env["SERVE_DTYPE"] == "bfloat16"
    assert "VllmImage" in flatten(container["Image"])
    (config,) = [r for r in t.values() if r["Type"] == "AWS::SageMaker::EndpointConfig"]
    (variant,) = config["Properties"]["ProductionVariants"]
    assert variant["InstanceType"] == "ml.c7i.2xlarge" and variant["ContainerStartupHealthCheckTimeoutInSeconds"] == 420
