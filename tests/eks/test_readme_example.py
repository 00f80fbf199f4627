"""The README's minimal example runs as written and builds the whole platform."""

from __future__ import annotations

from pathlib import Path

import aws_cdk as cdk
from aws_cdk.assertions import Template

from tests.support.readme import run_only_python_block

README = Path(__file__).resolve().parents[2] / "constructs" / "cpu_inference" / "eks" / "README.md"


def test_minimal_example_synthesizes() -> None:
    stack = run_only_python_block(README)["stack"]
    assert isinstance(stack, cdk.Stack)
    template = Template.from_stack(stack)
    template.resource_count_is("AWS::EKS::Cluster", 1)
    template.resource_count_is("AWS::Events::Rule", 5)
    template.resource_count_is("AWS::APS::Scraper", 1)
    template.resource_count_is("Custom::AWSCDK-EKS-HelmChart", 3)  # karpenter-crd, karpenter, keda
    template.resource_count_is("AWS::EKS::PodIdentityAssociation", 2)
