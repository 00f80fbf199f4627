"""The patterns README's minimal example runs as written: one SLM on EKS, escalating to one Bedrock model."""

from __future__ import annotations

import json
from pathlib import Path

import aws_cdk as cdk
from aws_cdk.assertions import Template

from tests.support.readme import run_only_python_block

README = Path(__file__).resolve().parents[2] / "constructs" / "cpu_inference" / "patterns" / "README.md"


def test_minimal_example_synthesizes_a_whole_prefilter() -> None:
    stack = run_only_python_block(README)["stack"]
    assert isinstance(stack, cdk.Stack)
    template = Template.from_stack(stack)
    template.resource_count_is("AWS::EKS::Cluster", 1)
    template.resource_count_is("Custom::ModelArtifact", 1)
    manifests = json.dumps(template.find_resources("Custom::AWSCDK-EKS-KubernetesResource"))
    assert "smollm2-1-7b.slm-prefilter.svc.cluster.local" in manifests  # the router talks to the one SLM
    assert "anthropic.claude-3-5-haiku-20241022-v1:0" in manifests
