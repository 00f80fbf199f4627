"""vLLM models on SageMaker, synthesized for the template tests and the real-container test: Llama-3.2-1B-Instruct
(a safetensors snapshot ModelArtifact) on Intel ml.c7i.2xlarge and SmolLM2-135M-Instruct (an S3 prefix URI) on
Graviton4 ml.c8g.xlarge, both on the vLLM image (VLLM_IMAGE), cdk-nag applied; and one small stack with any ECR
image by digest for the real-container test."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_ecr as ecr

from cpu_inference import sizing
from cpu_inference.artifacts import ModelArtifact, ModelArtifactProps, ModelBucket
from cpu_inference.images import VLLM_IMAGE, LlamaCppImage
from cpu_inference.sagemaker import EngineImage, GravitonEndpoint, GravitonEndpointProps
from tests.support.cdk import apply_nag, synth, template_json

ENV = cdk.Environment(account="123456789012", region="us-east-1")
DIGEST = "sha256:" + "ef" * 32
# Shapes from the checkpoints' config.json: Llama-3.2-1B (16 layers, 8 KV heads, head_dim 64, 1.24B parameters);
# SmolLM2-135M (30 layers, 3 KV heads, head_dim 64) — the checkpoint the vLLM tests run.
LLAMA_1B = sizing.ModelSpec(
    parameters_billions=1.24,
    engine="vllm",
    dtype="bfloat16",
    context_window=8192,
    task="chat",
    layers=16,
    kv_heads=8,
    head_dim=64,
)
SMOLLM2 = sizing.ModelSpec(
    parameters_billions=0.135,
    engine="vllm",
    dtype="bfloat16",
    context_window=2048,
    task="chat",
    layers=30,
    kv_heads=3,
    head_dim=64,
)
SMOLLM2_PREFIX = "s3://my-models/models/smollm2-135m/0123456789abcdef0123456789abcdef01234567/"
LLAMA_1B_COMMIT = "9213176726f574b556790deb65791e0c5aa438b6"


@dataclass
class VllmServing:
    app: cdk.App
    stack: cdk.Stack
    image: LlamaCppImage
    artifact: ModelArtifact
    endpoints: dict[str, GravitonEndpoint]
    template: dict[str, Any]

    def resource(self, construct: Any) -> dict[str, Any]:
        element = construct if isinstance(construct, cdk.CfnElement) else construct.node.default_child
        return self.template["Resources"][self.stack.get_logical_id(element)]

    def container(self, name: str) -> dict[str, Any]:
        return self.resource(self.endpoints[name].model)["Properties"]["PrimaryContainer"]

    def variant(self, name: str) -> dict[str, Any]:
        (variant,) = self.resource(self.endpoints[name].endpoint_config)["Properties"]["ProductionVariants"]
        return variant


def build_vllm_serving() -> VllmServing:
    app = cdk.App()
    apply_nag(app)
    stack = cdk.Stack(app, "VllmSm", env=ENV)
    bucket = ModelBucket(stack, "Models")
    image = LlamaCppImage(stack, "VllmImage", props=VLLM_IMAGE)
    artifact = ModelArtifact(
        stack,
        "llama-1b-artifact",
        props=ModelArtifactProps(
            model_bucket=bucket,
            name="llama-3-2-1b",
            hf_repo="meta-llama/Llama-3.2-1B-Instruct",
            snapshot=True,
            revision=LLAMA_1B_COMMIT,
        ),
    )
    endpoints = {
        "llama-3-2-1b": GravitonEndpoint(
            stack,
            "llama-1b",
            props=GravitonEndpointProps(
                name="llama-3-2-1b",
                model=artifact,
                spec=LLAMA_1B,
                image=image,
                instance_type="ml.c7i.2xlarge",
                min_capacity=1,
                max_capacity=3,
            ),
        ),
        "smollm2-vllm": GravitonEndpoint(
            stack,
            "smollm2",
            props=GravitonEndpointProps(
                name="smollm2-vllm",
                model=SMOLLM2_PREFIX,
                spec=SMOLLM2,
                image=image,
                instance_type="ml.c8g.xlarge",
            ),
        ),
    }
    synth(app)
    return VllmServing(app, stack, image, artifact, endpoints, template_json(stack))


@functools.cache
def small_vllm_endpoint(instance_type: str = "ml.c7i.xlarge") -> tuple[GravitonEndpoint, dict[str, Any]]:
    """SmolLM2-135M on `instance_type` from any ECR image by digest; (endpoint, its template)."""
    app = cdk.App()
    stack = cdk.Stack(app, "VllmSmall", env=ENV)
    repo = ecr.Repository.from_repository_name(stack, "Repo", "vllm-cpu")
    ep = GravitonEndpoint(
        stack,
        "Smol",
        props=GravitonEndpointProps(
            name="smollm2-vllm",
            model=SMOLLM2_PREFIX,
            spec=SMOLLM2,
            instance_type=instance_type,
            image=EngineImage(repo, digest=DIGEST, engine="vllm"),
        ),
    )
    app.synth()
    return ep, template_json(stack)
