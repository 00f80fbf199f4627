"""The README's minimal construct example runs unchanged and builds what it says."""

from __future__ import annotations

from aws_cdk.assertions import Template

from cpu_inference.nag import flatten
from tests.sagemaker.readme import examples


def test_minimal_example_synthesizes() -> None:
    ns: dict = {}
    exec(compile(examples()["construct"], "README.md#construct", "exec"), ns)
    endpoint, stack = ns["endpoint"], ns["stack"]
    t = Template.from_stack(stack).to_json()["Resources"]
    (model,) = [r for r in t.values() if r["Type"] == "AWS::SageMaker::Model"]
    (config,) = [r for r in t.values() if r["Type"] == "AWS::SageMaker::EndpointConfig"]
    source = model["Properties"]["PrimaryContainer"]["ModelDataSource"]["S3DataSource"]
    assert "/models/zephyr-7b/<" in flatten(source["S3Uri"]) and flatten(source["S3Uri"]).endswith(".Commit>/")  # the pinned commit
    assert model["Properties"]["PrimaryContainer"]["Environment"]["MODEL_PATH"] == "/opt/ml/model/zephyr-7b-beta.Q4_K_M.gguf"
    (variant,) = config["Properties"]["ProductionVariants"]
    assert variant["InstanceType"] == "ml.c7g.8xlarge"
    assert (variant["ModelDataDownloadTimeoutInSeconds"], variant["ContainerStartupHealthCheckTimeoutInSeconds"]) == (300, 270)
    (target,) = [r for r in t.values() if r["Type"] == "AWS::ApplicationAutoScaling::ScalableTarget"]
    assert (target["Properties"]["MinCapacity"], target["Properties"]["MaxCapacity"]) == (1, 3)
    outputs = Template.from_stack(stack).to_json()["Outputs"]
    assert outputs["EndpointName"]["Value"] == endpoint.endpoint_name
    assert endpoint.endpoint_name.startswith("zephyr-zephyr-7b-")
