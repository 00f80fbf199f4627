"""The patterns README's examples run as written: one SLM on EKS escalating to one Bedrock model, and a farm with a
pool and a dedicated hot model."""

from __future__ import annotations

import json
from pathlib import Path

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Template

from tests.support.readme import run_python_blocks

README = Path(__file__).resolve().parents[2] / "constructs" / "cpu_inference" / "patterns" / "README.md"


@pytest.fixture(scope="module")
def blocks() -> list[dict]:
    return run_python_blocks(README)


def test_minimal_example_synthesizes_a_whole_prefilter(blocks) -> None:
    stack = blocks[0]["stack"]
    assert isinstance(stack, cdk.Stack)
    template = Template.from_stack(stack)
    template.resource_count_is("AWS::EKS::Cluster", 1)
    template.resource_count_is("Custom::ModelArtifact", 1)
    manifests = json.dumps(template.find_resources("Custom::AWSCDK-EKS-KubernetesResource"))
    assert "smollm2-1-7b.slm-prefilter.svc.cluster.local" in manifests  # the router talks to the one SLM
    assert "anthropic.claude-3-5-haiku-20241022-v1:0" in manifests


def test_farm_example_pools_its_models_and_keeps_the_hot_one_dedicated(blocks) -> None:
    scope = blocks[1]
    farm, stack = scope["farm"], scope["stack"]
    template = Template.from_stack(stack)
    template.resource_count_is("Custom::ModelCatalogCopy", 1)  # one copy for every model, pooled or dedicated
    template.resource_count_is("Custom::ModelArtifact", 0)  # the dedicated GGUF model copies through the catalog too
    template.resource_count_is("Custom::DedicatedModelsReady", 1)  # which the deploy awaits for it alone
    manifests = json.dumps(template.find_resources("Custom::AWSCDK-EKS-KubernetesResource"))
    assert "pool-embed" in manifests and "qwen3-0-6b.model-farm.svc.cluster.local" in manifests
    assert set(farm.plans) == {"embed"} and farm.plans["embed"].models_max >= 1
