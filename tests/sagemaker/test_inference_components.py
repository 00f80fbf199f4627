"""Dedicated farm models as SageMaker inference components (sagemaker/inference_components.py): what the template says
is checked against the service's own definitions (botocore's sagemaker model: CreateEndpointConfig and
CreateInferenceComponent members, enums, name patterns and lengths; the CloudFormation registry schema cfn-lint ships),
the container environment is exactly what the model's GravitonEndpoint gets (and at most 16 entries), and the real
llama-server image entrypoint serves the catalog's real mme tarball with exactly that environment."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import boto3
import botocore.session
import cfnlint
import httpx
import jsonschema
import pytest
from aws_cdk import aws_ecr as ecr
from moto import mock_aws

from cpu_inference import sizing
from cpu_inference.artifacts import ModelBucket
from cpu_inference.sagemaker import EngineImage, GravitonEndpoint, GravitonEndpointProps
from cpu_inference.sagemaker.engine_settings import SAGEMAKER_MODEL_DIR
from cpu_inference.sagemaker.inference_components import (
    MAX_ENVIRONMENT,
    ComponentModel,
    InferenceComponents,
    InferenceComponentsProps,
    component_environment,
)
from model_download.catalog import Catalog, CatalogEntry, engine_json, gguf_key, mme_key
from model_download.tarball import S3Object, write_mme_tarball
from tests.support.cdk import template_json
from tests.support.engine import free_port, wait_healthy

ENGINE_DIR = Path(__file__).resolve().parents[2] / "containers" / "llama-server"
SM = botocore.session.get_session().get_service_model("sagemaker")
SPEC = sizing.ModelSpec(parameters_billions=0.135, quantization="Q4_1", task="chat", context_window=2048)


def _stack(models: tuple[ComponentModel, ...], **kw: Any) -> tuple[cdk.Stack, InferenceComponents]:
    stack = cdk.Stack(cdk.App(), "Farm", env=cdk.Environment(account="123456789012", region="us-east-1"))
    image = EngineImage(
        ecr.Repository.from_repository_name(stack, "Repo", "llama-server"), digest="sha256:" + "cd" * 32
    )
    ics = InferenceComponents(
        stack,
        "Dedicated",
        props=InferenceComponentsProps(models=models, image=image, model_bucket=ModelBucket(stack, "Models"), **kw),
    )
    return stack, ics


def _model(name: str = "qwen3-0-6b", instance_type: str = "ml.c7g.xlarge", **kw: Any) -> ComponentModel:
    args: dict[str, Any] = dict(
        name=name,
        spec=SPEC,
        instance_type=instance_type,
        artifact_url=f"s3://bucket/farm/{name}/0123456789abcdef-89abcdef.tar.gz",
        model_file="model.gguf",
        min_copies=1,
        max_copies=3,
    )
    args.update(kw)
    return ComponentModel(**args)


def _resources(stack: cdk.Stack, kind: str) -> list[dict[str, Any]]:
    return [r for r in template_json(stack)["Resources"].values() if r["Type"] == kind]


def _check_shape(shape_name: str, value: Any, where: str) -> None:
    """`value` (template JSON, tokens resolved to CloudFormation intrinsics) against a botocore shape: members exist,
    enums, min/max, string patterns and lengths (intrinsics are skipped: they resolve at deploy)."""
    shape = SM.shape_for(shape_name) if isinstance(shape_name, str) else shape_name
    if isinstance(value, dict) and len(value) == 1 and next(iter(value)).startswith(("Fn::", "Ref")):
        return
    if shape.type_name == "structure":
        assert isinstance(value, dict), where
        unknown = set(value) - set(shape.members)
        assert not unknown, f"{where}: {unknown} not in botocore {shape.name}"
        for k in shape.required_members:
            assert k in value, f"{where}: {k} is required by {shape.name}"
        for k, v in value.items():
            _check_shape(shape.members[k], v, f"{where}.{k}")
    elif shape.type_name == "list":
        for i, v in enumerate(value):
            _check_shape(shape.member, v, f"{where}[{i}]")
    elif shape.type_name == "map":
        assert len(value) <= shape.metadata.get("max", 10**9), where
    elif shape.type_name == "string":
        assert isinstance(value, str), where
        meta = shape.metadata
        if "enum" in meta:
            assert value in meta["enum"], f"{where}: {value!r} not in {shape.name}"
        assert meta.get("min", 0) <= len(value) <= meta.get("max", 10**9), f"{where}: length of {value!r}"
        if "pattern" in meta:
            assert re.fullmatch(meta["pattern"], value), f"{where}: {value!r} !~ {meta['pattern']}"
    elif shape.type_name in ("integer", "float", "double", "long"):
        meta = shape.metadata
        assert meta.get("min", -(10**12)) <= value <= meta.get("max", 10**12), f"{where}: {value} out of range"


def _cfn_schema(resource_type: str) -> dict[str, Any]:
    root = Path(cfnlint.__file__).parent / "data" / "schemas"
    index = json.loads((root / "providers" / "us-east-1.json").read_text())
    return json.loads((root / "resources" / f"{index[resource_type]}.json").read_text())


def _literal(value: Any) -> Any:
    """The template value with every intrinsic replaced by a placeholder string (the schema checks the shape)."""
    if isinstance(value, dict):
        if len(value) == 1 and next(iter(value)).startswith(("Fn::", "Ref")):
            return "arn:aws:iam::123456789012:role/placeholder"  # an ARN that matches the role ARN pattern too
        return {k: _literal(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_literal(v) for v in value]
    return value


def test_the_template_is_what_sagemaker_and_cloudformation_accept() -> None:
    stack, ics = _stack((_model(), _model("bge-large", "ml.c7g.xlarge"), _model("phi-mini", "ml.c8g.2xlarge")))
    components = _resources(stack, "AWS::SageMaker::InferenceComponent")
    assert len(components) == 3
    schema = _cfn_schema("AWS::SageMaker::InferenceComponent")
    for c in components:
        p = c["Properties"]
        _check_shape("CreateInferenceComponentInput", {k: v for k, v in p.items() if k != "Tags"}, "InferenceComponent")
        # Draft7Validator(...).validate: the schema's Tag patterns use \p{L} (not Python's re), and Tags are not ours.
        jsonschema.Draft7Validator(schema).validate(_literal({k: v for k, v in p.items() if k != "Tags"}))
        spec = p["Specification"]
        assert spec["Container"]["ArtifactUrl"].endswith(".tar.gz") and "ModelName" not in spec
        assert p["RuntimeConfig"]["CopyCount"] == 1
        assert len(p["InferenceComponentName"]) <= 63
    # One endpoint per instance type, each a config whose one variant has NO ModelName (components need that).
    configs = _resources(stack, "AWS::SageMaker::EndpointConfig")
    assert len(configs) == 2 == len(_resources(stack, "AWS::SageMaker::Endpoint"))
    ep_schema = _cfn_schema("AWS::SageMaker::EndpointConfig")
    for cfg in configs:
        p = cfg["Properties"]
        # EndpointConfigName: CloudFormation generates it (as for every endpoint config of this library).
        named = {"EndpointConfigName": "generated", **{k: v for k, v in p.items() if k != "Tags"}}
        _check_shape("CreateEndpointConfigInput", named, "EndpointConfig")
        jsonschema.Draft7Validator(ep_schema).validate(_literal({k: v for k, v in p.items() if k != "Tags"}))
        (variant,) = p["ProductionVariants"]
        assert "ModelName" not in variant and "ExecutionRoleArn" in p
        assert variant["ManagedInstanceScaling"] == {"Status": "ENABLED", "MinInstanceCount": 1, "MaxInstanceCount": 16}
        assert variant["RoutingConfig"] == {"RoutingStrategy": "LEAST_OUTSTANDING_REQUESTS"}
        assert variant["InitialInstanceCount"] == 1
    # Names unique, deterministic, matching botocore's patterns.
    names = [h.component_name for h in ics.components.values()]
    assert len(set(names)) == 3
    assert names == [
        h.component_name
        for h in _stack((_model(), _model("bge-large"), _model("phi-mini", "ml.c8g.2xlarge")))[1].components.values()
    ]


def test_the_environment_is_the_graviton_endpoints_and_the_reservation_its_sizing() -> None:
    m = _model(model_file="Qwen3-0.6B-Q4_K_M.gguf")
    stack, ics = _stack((m,))
    (component,) = _resources(stack, "AWS::SageMaker::InferenceComponent")
    # The GravitonEndpoint of the same model, from the same catalog prefix and file.
    other = cdk.Stack(cdk.App(), "One", env=cdk.Environment(account="123456789012", region="us-east-1"))
    image = EngineImage(
        ecr.Repository.from_repository_name(other, "Repo", "llama-server"), digest="sha256:" + "cd" * 32
    )
    ep = GravitonEndpoint(
        other,
        "Ep",
        props=GravitonEndpointProps(
            name=m.name,
            model="s3://bucket/farm/qwen3-0-6b/0123456789abcdef/",
            model_file=m.model_file,
            spec=SPEC,
            image=image,
            instance_type=m.instance_type,
        ),
    )
    env = component["Properties"]["Specification"]["Container"]["Environment"]
    assert env == ep.environment == ics.components[m.name].environment
    assert env["MODEL_PATH"] == f"{SAGEMAKER_MODEL_DIR}/{m.model_file}"
    req = component["Properties"]["Specification"]["ComputeResourceRequirements"]
    s = ep.settings
    assert req == {
        "NumberOfCpuCoresRequired": s.sizing.threads,
        "MinMemoryRequiredInMb": s.sizing.memory_request_mib + s.cache_ram_mib,
    }
    startup = component["Properties"]["Specification"]["StartupParameters"]
    assert startup == {
        "ModelDataDownloadTimeoutInSeconds": ep.model_download_timeout_seconds,
        "ContainerStartupHealthCheckTimeoutInSeconds": ep.startup_health_check_timeout_seconds,
    }


def test_more_than_16_environment_entries_are_refused_citing_the_schema(monkeypatch: pytest.MonkeyPatch) -> None:
    schema = _cfn_schema("AWS::SageMaker::InferenceComponent")
    assert schema["definitions"]["EnvironmentMap"]["maxProperties"] == MAX_ENVIRONMENT == 16
    m = _model()
    env = component_environment(m)
    assert len(env) <= MAX_ENVIRONMENT
    from cpu_inference.sagemaker import engine_settings

    big = {**env, **{f"EXTRA_{i}": "1" for i in range(MAX_ENVIRONMENT + 1 - len(env))}}
    monkeypatch.setattr(engine_settings.EngineSettings, "environment", lambda self: big)
    with pytest.raises(ValueError, match=r"at most 16 \(CloudFormation schema maxProperties 16\)"):
        component_environment(m)
    with pytest.raises(ValueError, match="maxProperties 16"):
        _stack((m,))


def test_refusals_name_the_fix() -> None:
    with pytest.raises(ValueError, match="network_isolation"):
        _stack((_model(),), network_isolation=True)
    with pytest.raises(ValueError, match="min_copies"):
        _stack((_model(min_copies=0),))
    with pytest.raises(ValueError, match=r"farm.shared_endpoints.instances.max to 3"):
        _stack((_model(min_copies=2, max_copies=2), _model("b", min_copies=1)), max_instances=2)


def test_scaling_is_one_resource_for_the_models_that_scale_and_invoke_is_on_the_shared_endpoints() -> None:
    from aws_cdk import aws_iam as iam

    stack, ics = _stack((_model(), _model("fixed", min_copies=2, max_copies=2), _model("c", "ml.c8g.2xlarge")))
    assert ics.scaling is not None
    role = iam.Role(stack, "Caller", assumed_by=iam.AccountRootPrincipal())
    ics.grant_invoke(role)
    resources = template_json(stack)["Resources"]
    (scaling,) = [r for r in resources.values() if r["Type"] == "Custom::InferenceComponentScaling"]
    names = [c["Name"] for c in scaling["Properties"]["Components"]]
    assert names == [ics.components["qwen3-0-6b"].component_name, ics.components["c"].component_name]
    policies = [r for r in resources.values() if r["Type"] == "AWS::IAM::Policy"]
    statement = next(
        s
        for p in policies
        for s in p["Properties"]["PolicyDocument"]["Statement"]
        if "sagemaker:InvokeEndpoint" in s["Action"]
    )
    assert statement["Action"] == ["sagemaker:InvokeEndpoint", "sagemaker:InvokeEndpointWithResponseStream"]
    assert len(statement["Resource"]) == 2  # the two shared endpoints, not one per model


@pytest.mark.engine
def test_the_real_container_serves_the_catalogs_tarball_with_exactly_the_synthesized_environment(
    llama_server_bin: Path, smollm2_gguf: Path, tmp_path: Path
) -> None:
    # The catalog's mme tarball of the model, written by the real catalog code (tarball.write_mme_tarball from the GGUF
    # already at its gguf key) into moto's S3, then read back and extracted where SageMaker puts a model.
    entry = CatalogEntry(name="smollm2", hf_repo="acme/SmolLM2-GGUF", file=smollm2_gguf.name)
    catalog = Catalog((entry,), ("mme",))
    data = smollm2_gguf.read_bytes()
    sha = hashlib.sha256(data).hexdigest()
    with mock_aws():
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket="models")
        s3.put_object(Bucket="models", Key=gguf_key(entry), Body=data)
        source = S3Object(s3, "models", gguf_key(entry), s3.head_object(Bucket="models", Key=gguf_key(entry)))
        key = catalog.keys(entry)["mme"]
        assert key == mme_key(entry)
        write_mme_tarball(
            s3,
            bucket="models",
            key=key,
            source=source,
            member=entry.basename,
            engine_json=engine_json(entry),
            expected_sha256=sha,
            hf_source="acme/SmolLM2-GGUF/x@0",
            concurrency=2,
        )
        archive = tmp_path / "model.tar.gz"
        archive.write_bytes(s3.get_object(Bucket="models", Key=key)["Body"].read())
    model_dir = tmp_path / "opt-ml-model"
    model_dir.mkdir()
    with tarfile.open(archive) as tar:
        tar.extractall(model_dir, filter="data")

    m = _model(
        "smollm2",
        "ml.c8g.medium",
        artifact_url=f"s3://models/{key}",
        model_file=entry.basename,
        spec=sizing.ModelSpec(
            parameters_billions=0.135, quantization="Q4_1", task="chat", context_window=2048, file_size_bytes=len(data)
        ),
    )
    stack, _ = _stack((m,))
    (component,) = _resources(stack, "AWS::SageMaker::InferenceComponent")
    environment = component["Properties"]["Specification"]["Container"]["Environment"]
    assert component["Properties"]["Specification"]["Container"]["ArtifactUrl"] == f"s3://models/{key}"
    # MODEL_PATH names the tarball's GGUF member under SageMaker's model directory; here that directory is model_dir.
    assert environment["MODEL_PATH"] == f"{SAGEMAKER_MODEL_DIR}/{entry.basename}"
    assert (model_dir / entry.basename).is_file()
    port = free_port()
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("LLAMA_", "SAGEMAKER_", "ADAPTER_", "MME_", "MODEL_", "SM_"))
    }
    env.update(environment)
    env.update(
        MODEL_PATH=str(model_dir / entry.basename),  # the only path remapped: /opt/ml/model is model_dir here
        # Local plumbing only: the built engine, a free port on loopback, this user instead of the image's 65532.
        LLAMA_SERVER_BIN=str(llama_server_bin),
        SAGEMAKER_BIND_TO_PORT=str(port),
        ADAPTER_HOST="127.0.0.1",
        LLAMA_RUN_AS=f"{os.getuid()}:{os.getgid()}",
    )
    log = tmp_path / "ic.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, str(ENGINE_DIR / "entrypoint.py"), "serve"], env=env, stdout=out, stderr=subprocess.STDOUT
        )
    url = f"http://127.0.0.1:{port}"
    try:
        try:
            wait_healthy(url, proc, timeout=120, path="/ping")
        except (RuntimeError, TimeoutError) as e:
            raise AssertionError(f"{e}\n{log.read_text()}") from None
        assert httpx.get(f"{url}/ping", timeout=10).status_code == 200
        body = {"messages": [{"role": "user", "content": "What is 2+2?"}], "max_tokens": 4, "temperature": 0}
        r = httpx.post(f"{url}/invocations", json=body, timeout=60)
        assert r.status_code == 200, r.text + log.read_text()
        assert r.json()["choices"][0]["message"]["content"]
        assert r.json()["model"] == "smollm2"  # LLAMA_MODEL_ALIAS reached the engine
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=40)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
