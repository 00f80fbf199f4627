"""GravitonEndpointProps.lora_manifest (issue 26): a llama.cpp base served with its LoRA adapters from an S3-URI prefix
(a farm catalog's `lora` bundle) sets LLAMA_LORA_MANIFEST under /opt/ml/model; a user environment may not set it; a
ModelArtifact, a vLLM model or a path outside the prefix is refused in one line naming the prop."""

from __future__ import annotations

import dataclasses

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ecr as ecr
from aws_cdk.assertions import Template

from cpu_inference import sizing
from cpu_inference.sagemaker import EngineImage, GravitonEndpoint, GravitonEndpointProps
from cpu_inference.sagemaker.engine_settings import SAGEMAKER_MODEL_DIR
from inference_runtime.lora import MANIFEST_ENV

DIGEST = "sha256:" + "0" * 64
SPEC = sizing.ModelSpec(parameters_billions=1.5, quantization="Q4_K_M", context_window=4096, adapter_bytes=20_000_000)


def _props(stack: cdk.Stack, **kw) -> GravitonEndpointProps:
    repo = ecr.Repository.from_repository_name(stack, "Repo", "llama-server")
    base = dict(
        name="tuned",
        model="s3://my-models/farm/tuned/0123456789abcdef-lora-01234567/",
        model_file="base.gguf",
        lora_manifest="lora.json",
        spec=SPEC,
        image=EngineImage(repo, digest=DIGEST),
        instance_type="ml.c7g.xlarge",
    )
    return GravitonEndpointProps(**{**base, **kw})


def test_the_manifest_is_the_containers_llama_lora_manifest() -> None:
    stack = cdk.Stack(cdk.App(), "Lora")
    GravitonEndpoint(stack, "Tuned", props=_props(stack))
    (model,) = Template.from_stack(stack).find_resources("AWS::SageMaker::Model").values()
    env = model["Properties"]["PrimaryContainer"]["Environment"]
    assert env[MANIFEST_ENV] == f"{SAGEMAKER_MODEL_DIR}/lora.json"
    assert env["MODEL_PATH"] == f"{SAGEMAKER_MODEL_DIR}/base.gguf"


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"lora_manifest": "/opt/ml/model/lora.json"}, "lora_manifest must be the adapters' .json manifest relative"),
        ({"lora_manifest": "../lora.json"}, "lora_manifest must be the adapters' .json manifest relative"),
        ({"lora_manifest": "lora.yaml"}, "lora_manifest must be the adapters' .json manifest relative"),
        ({"environment": {MANIFEST_ENV: "/tmp/x.json"}}, f"environment may not set {MANIFEST_ENV}"),
    ],
)
def test_a_wrong_manifest_is_refused_naming_the_prop(change: dict, expected: str) -> None:
    props = _props(cdk.Stack(cdk.App(), "Lora"), **change)
    with pytest.raises(ValueError, match=expected):
        props.validate()


def test_a_vllm_model_takes_no_manifest() -> None:
    props = _props(cdk.Stack(cdk.App(), "Lora"), model_file=None)
    vllm = dataclasses.replace(
        props,
        spec=sizing.ModelSpec(parameters_billions=0.5, engine="vllm", dtype="bfloat16", context_window=2048),
        image=dataclasses.replace(props.image, engine="vllm") if isinstance(props.image, EngineImage) else props.image,
    )
    with pytest.raises(ValueError, match="lora_manifest must be"):
        vllm.validate()
