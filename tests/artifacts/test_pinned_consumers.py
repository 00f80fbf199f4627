"""Consumers read where the copy landed, not the revision: the SageMaker Model's model data and the pods' fetch
URI and expected sha256 are the copy resource's attributes (GetAtt), so an unchanged stack keeps the commit the
first deploy resolved, however far `main` moved since."""

from __future__ import annotations

import json
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ecr as ecr

from cpu_inference import sizing
from cpu_inference._internal.nag import flatten
from cpu_inference.artifacts import ModelArtifact, ModelArtifactProps, ModelBucket
from cpu_inference.eks.inference_workloads import ModelDeployment
from cpu_inference.sagemaker import EngineImage, GravitonEndpoint, GravitonEndpointProps
from tests.support.cdk import template_json

pytestmark = pytest.mark.synth

ENV = cdk.Environment(account="123456789012", region="us-east-1")
FILE = "SmolLM2-1.7B-Instruct-Q4_K_M.gguf"
SPEC = sizing.ModelSpec(parameters_billions=1.7, quantization="Q4_K_M", context_window=4096, task="chat")
PINNED_SHA = "4f7c7d1cde0e1b2a3f4e5d6c7b8a99887766554433221100ffeeddccbbaa9988"


def _stack(
    revision: str = "main", sha256: str | None = None
) -> tuple[cdk.Stack, ModelArtifact, GravitonEndpoint, dict[str, Any]]:
    app = cdk.App()
    stack = cdk.Stack(app, "Pinned", env=ENV)
    artifact = ModelArtifact(
        stack,
        "Smollm2",
        props=ModelArtifactProps(
            model_bucket=ModelBucket(stack, "Models"),
            name="smollm2",
            hf_repo="bartowski/SmolLM2-1.7B-Instruct-GGUF",
            file=FILE,
            revision=revision,
            sha256=sha256,
        ),
    )
    image = EngineImage(
        ecr.Repository.from_repository_name(stack, "Repo", "llama-server"), digest="sha256:" + "ab" * 32
    )
    endpoint = GravitonEndpoint(
        stack,
        "Endpoint",
        props=GravitonEndpointProps(
            name="smollm2",
            model=artifact,
            spec=SPEC,
            image=image,
            instance_type="ml.c7g.2xlarge",
        ),
    )
    return stack, artifact, endpoint, template_json(stack)


@pytest.fixture(scope="module")
def on_main() -> tuple[cdk.Stack, ModelArtifact, GravitonEndpoint, dict[str, Any]]:
    return _stack()


def _ids(stack: cdk.Stack, artifact: ModelArtifact) -> tuple[str, str]:
    return (
        stack.get_logical_id(artifact.resource.node.default_child),
        stack.get_logical_id(artifact.bucket.node.default_child),
    )


def test_sagemaker_downloads_the_prefix_the_copy_reported(on_main) -> None:  # noqa: ANN001
    stack, artifact, endpoint, template = on_main
    copy, bucket = _ids(stack, artifact)
    (model,) = [r for r in template["Resources"].values() if r["Type"] == "AWS::SageMaker::Model"]
    source = model["Properties"]["PrimaryContainer"]["ModelDataSource"]["S3DataSource"]
    assert source["S3DataType"] == "S3Prefix"
    assert flatten(source["S3Uri"]) == f"s3://<{bucket}>/models/smollm2/<{copy}.Commit>/"
    assert {"Fn::GetAtt": [copy, "Commit"]} in source["S3Uri"]["Fn::Join"][1]
    assert "/main/" not in json.dumps(model)  # the branch name is an input of the copy, never a location
    assert model["Properties"]["PrimaryContainer"]["Environment"]["MODEL_PATH"] == f"/opt/ml/model/{FILE}"
    assert endpoint.model_data_uri == artifact.s3_prefix_uri


def test_pods_fetch_the_key_and_check_the_sha256_the_copy_reported(on_main) -> None:  # noqa: ANN001
    stack, artifact, _, _ = on_main
    copy, bucket = _ids(stack, artifact)
    deployment = ModelDeployment.from_artifact(artifact, image="llama-server@sha256:" + "a" * 64, spec=SPEC)
    workload = deployment.workload
    workload.validate()  # a token sha256 is accepted; the init container gets it as MODEL_SHA256
    assert flatten(stack.resolve(workload.model_uri)) == f"s3://<{bucket}>/models/smollm2/<{copy}.Commit>/{FILE}"
    assert workload.file_name == FILE
    assert stack.resolve(workload.sha256) == {"Fn::GetAtt": [copy, "Sha256"]}


def test_a_pinned_sha256_stays_a_literal_and_a_commit_revision_changes_only_the_copy() -> None:
    commit = "9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b"
    stack, artifact, _, template = _stack(revision=commit, sha256=PINNED_SHA)
    deployment = ModelDeployment.from_artifact(artifact, image="llama-server@sha256:" + "a" * 64, spec=SPEC)
    assert deployment.workload.sha256 == PINNED_SHA

    # Same consumers whatever the revision: they follow the copy's attributes, and a new revision is a property
    # change of the copy (CloudFormation re-runs it; its new Commit gives a new Model → a rolling update).
    _, _, _, main_template = _stack()
    models = [
        next(r for r in t["Resources"].values() if r["Type"] == "AWS::SageMaker::Model")
        for t in (template, main_template)
    ]
    assert (
        models[0]["Properties"]["PrimaryContainer"]["ModelDataSource"]
        == models[1]["Properties"]["PrimaryContainer"]["ModelDataSource"]
    )
    copies = [
        next(r for r in t["Resources"].values() if r["Type"] == "Custom::ModelArtifact")["Properties"]
        for t in (template, main_template)
    ]
    assert (copies[0]["Revision"], copies[1]["Revision"]) == (commit, "main")
