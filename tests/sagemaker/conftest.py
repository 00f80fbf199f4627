"""Synthesize once per session: the SageMaker SLM pre-filter example (SmolLM2-1.7B on ml.c7g.2xlarge, the AWS
sample's Zephyr-7B-beta Q4_K_M on ml.c7g.8xlarge) built from examples/slm-prefilter-sagemaker.yaml through the
patterns' ServedModel, plus an 8B Q4_K_M 4k-context model on ml.c7g.8xlarge in a VPC with data capture and an
alarm topic — one stack, one image, cdk-nag applied. Small stacks for the placement (replacement) tests are
built on demand and cached."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns

from cpu_inference import sizing
from cpu_inference.artifacts import ModelArtifact, ModelArtifactProps, ModelBucket
from cpu_inference.config import Config, load
from cpu_inference.images import LlamaCppImage
from cpu_inference.patterns.from_config import served_models
from cpu_inference.patterns.sagemaker_endpoints import graviton_endpoint_props
from cpu_inference.sagemaker import EngineImage, GravitonEndpoint, GravitonEndpointProps
from tests.support.cdk import apply_nag, synth, template_json

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "slm-prefilter-sagemaker.yaml"
ENV = cdk.Environment(account="123456789012", region="us-east-1")
LLAMA_8B = sizing.ModelSpec(parameters_billions=8, quantization="Q4_K_M", context_window=4096, task="chat")
DIGEST = "sha256:" + "ab" * 32


@dataclass
class Serving:
    app: cdk.App
    stack: cdk.Stack
    config: Config
    endpoints: dict[str, GravitonEndpoint]
    artifacts: dict[str, ModelArtifact]
    image: LlamaCppImage
    router: iam.Role
    template: dict[str, Any]

    def resources(self, type_: str) -> dict[str, dict[str, Any]]:
        return {k: v for k, v in self.template["Resources"].items() if v["Type"] == type_}

    def logical_id(self, construct: Any) -> str:
        """Logical ID of an L1, or of an L2's default child."""
        element = construct if isinstance(construct, cdk.CfnElement) else construct.node.default_child
        return self.stack.get_logical_id(element)


def build_serving() -> Serving:
    app = cdk.App()
    apply_nag(app)
    stack = cdk.Stack(app, "PrefilterSm", env=ENV)
    config = load(EXAMPLE)
    bucket = ModelBucket(stack, "Models")
    image = LlamaCppImage(stack, "Engine")
    endpoints: dict[str, GravitonEndpoint] = {}
    artifacts: dict[str, ModelArtifact] = {}
    for served in served_models(config):
        artifacts[served.name] = ModelArtifact(
            stack,
            f"{served.name}-artifact",
            props=ModelArtifactProps(
                model_bucket=bucket,
                name=served.name,
                hf_repo=served.hf_repo,
                file=served.file,
                revision=served.revision,
            ),
        )
        endpoints[served.name] = GravitonEndpoint(
            stack,
            served.name,
            props=graviton_endpoint_props(
                served,
                model=artifacts[served.name],
                image=image,
                latency_slo_ms=config.slo.p95_latency_ms,
                network_isolation=config.sagemaker.network_isolation,
                data_capture_percent=config.sagemaker.data_capture_percent,
            ),
        )

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
    artifacts["llama-8b"] = ModelArtifact(
        stack,
        "llama-8b-artifact",
        props=ModelArtifactProps(
            model_bucket=bucket,
            name="llama-8b",
            hf_repo="bartowski/Meta-Llama-3.1-8B-Instruct-GGUF",
            file="Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf",
        ),
    )
    endpoints["llama-8b"] = GravitonEndpoint(
        stack,
        "llama-8b",
        props=GravitonEndpointProps(
            name="llama-8b",
            model=artifacts["llama-8b"],
            spec=LLAMA_8B,
            image=image,
            instance_type="ml.c7g.8xlarge",
            min_capacity=1,
            max_capacity=4,
            vpc=vpc,
            data_capture_percent=20,
            alarm_topic=topic,
            latency_slo=cdk.Duration.millis(config.slo.p95_latency_ms),
        ),
    )
    # A caller of the LLM (what the SLM router's role gets): invoke on that one endpoint.
    router = iam.Role(stack, "Router", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
    endpoints["zephyr-7b"].grant_invoke(router)
    synth(app)
    return Serving(app, stack, config, endpoints, artifacts, image, router, template_json(stack))


@pytest.fixture(scope="session")
def serving() -> Serving:
    return build_serving()


@dataclass(frozen=True)
class Placement:
    stack: cdk.Stack
    endpoint: GravitonEndpoint
    template: dict[str, Any]

    def of_type(self, type_: str) -> dict[str, dict[str, Any]]:
        return {k: v for k, v in self.template["Resources"].items() if v["Type"] == type_}


@functools.cache
def placement(instance_type: str, context_window: int = 4096) -> Placement:
    """The same endpoint (8B Q4_K_M, any ECR image by digest, an S3-URI model) on `instance_type`."""
    app = cdk.App()
    stack = cdk.Stack(app, "Llm", env=ENV)
    repo = ecr.Repository.from_repository_name(stack, "Repo", "llama-server")
    spec = sizing.ModelSpec(parameters_billions=8, quantization="Q4_K_M", context_window=context_window, task="chat")
    ep = GravitonEndpoint(
        stack,
        "Llm",
        props=GravitonEndpointProps(
            name="llama-8b",
            model="s3://my-models/models/llama-8b/main/",
            model_file="Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf",
            spec=spec,
            image=EngineImage(repo, digest=DIGEST),
            instance_type=instance_type,
            max_capacity=3,
        ),
    )
    app.synth()
    return Placement(stack, ep, template_json(stack))
