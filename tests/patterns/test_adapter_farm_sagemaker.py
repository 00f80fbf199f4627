"""LoRA adapters on target sagemaker (issue 26): a DEDICATED base with 500 adapters is one SageMaker real-time endpoint
whose model data is the catalog's `lora` bundle (lambda/model_download/catalog.py lora_prefix: the base GGUF, every
adapter's GGUF and the manifest lora.json under one prefix, which SageMaker downloads whole into /opt/ml/model), with
LLAMA_LORA_MANIFEST pointing the container at the manifest. It synthesizes within CloudFormation's per-template quotas
with exactly the resources of the same farm without adapters (the adapters live in the catalog's S3 asset and the
bundle, not in the template), its Model's Environment within botocore's ContainerDefinition.Environment limits,
cfn-lint clean; the deploy rehearsal of adding 10 adapters and removing 10 replaces the base's Model and
EndpointConfig (SageMaker's blue/green update of the Endpoint) and nothing else, deleting nothing still configured.

A pooled base on sagemaker, and a farm with dedicated_hosting inference_components, are refused in one line
(engines/adapter_hosting.py).

Synthesized through the app as `cdk synth` builds it (cpu_inference.app.build_app over a generated config.yaml)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import botocore.session
import pytest
import yaml

from cpu_inference import sizing
from cpu_inference.app import build_app
from cpu_inference.config import ConfigError, load
from cpu_inference.engines.adapter_hosting import adapter_hosting_problem
from cpu_inference.patterns.deployment import CFN_MAX_RESOURCES, CFN_MAX_TEMPLATE_BYTES
from cpu_inference.patterns.model_farm import ModelFarm
from cpu_inference.sagemaker.engine_settings import (
    SAGEMAKER_MODEL_DIR,
    model_download_timeout_seconds,
    required_volume_gb,
    startup_health_check_timeout_seconds,
)
from cpu_inference.testing.rehearsal import load_assembly, plan
from inference_runtime.lora import MANIFEST_ENV
from model_download.buildspec import PEFT_CONVERT_DIR
from model_download.catalog import LORA_MANIFEST, PEFT_WEIGHTS, Catalog, lora_prefix
from model_download.peft_convert import ENV_DIR_ENV
from tests.support.cdk import cfn_lint_errors
from tests.support.synthesized_farm import SynthesizedFarm, synth_farm

pytestmark = pytest.mark.synth

ADAPTERS = 500
SHIFT = 10  # the rehearsal's change: adapters 10..509 instead of 0..499 (10 removed, 10 added)
ADAPTER_MB = 4  # size_mb of each adapter (a rank-8 adapter of the attention projections)
BASE = "qwen2-5-1-5b"
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def _adapter(i: int) -> dict[str, Any]:
    return {
        "name": f"task-{i:04d}",
        "source": {
            "hf_repo": f"acme-tuned/task-{i:04d}-lora-GGUF",
            "file": f"task-{i:04d}-lora-f16.gguf",
            "revision": COMMIT,
        },
        "size_mb": ADAPTER_MB,
    }


def _config(path: Path, adapters: range, *, serving: str = "dedicated", farm: dict | None = None) -> Path:
    base: dict[str, Any] = {
        "name": BASE,
        "source": {
            "hf_repo": "Qwen/Qwen2.5-1.5B-Instruct-GGUF",
            "file": "qwen2.5-1.5b-instruct-q4_k_m.gguf",
            "revision": COMMIT,
        },
        "parameters_billions": 1.5,
        "task": "chat",
        "adapters": [_adapter(i) for i in adapters],
    }
    if serving == "dedicated":
        base.update(serving="dedicated", instance_type="ml.c7g.2xlarge", replicas={"min": 1, "max": 2})
    else:
        base["pool"] = "tuned"
    doc = {
        "project": {"name": "lora-farm-sm"},
        "target": "sagemaker",
        "pattern": "model-farm",
        "farm": farm or {"pools": [{"name": "tuned", "instance_type": "ml.r7gd.2xlarge"}]},
        "models": [
            base,
            {
                "name": "bge-small-en",
                "source": {"hf_repo": "CompendiumLabs/bge-small-en-v1.5-gguf", "file": "bge-small-en-v1.5-q8_0.gguf"},
                "parameters_billions": 0.033,
                "quantization": "Q8_0",
                "context_window": 512,
                "task": "embedding",
                "pool": "tuned",
            },
        ],
    }
    path.write_text(yaml.safe_dump(doc, sort_keys=False, width=200))
    return path


def base_model(farm: SynthesizedFarm) -> dict:
    """The base's single-model SageMaker Model's properties."""
    (model,) = [
        r
        for r in farm.resources("AWS::SageMaker::Model").values()
        if r["Properties"].get("PrimaryContainer", {}).get("Mode") == "SingleModel"
    ]
    return model["Properties"]


def _synth(tmp: Path, label: str, adapters: range) -> SynthesizedFarm:
    return synth_farm(_config(tmp / f"{label}.yaml", adapters), tmp / f"out-{label}")


@pytest.fixture(scope="module")
def farms(tmp_path_factory: pytest.TempPathFactory) -> dict[str, SynthesizedFarm]:
    tmp = tmp_path_factory.mktemp("adapter-farm-sm")
    return {
        "none": _synth(tmp, "none", range(0)),
        "before": _synth(tmp, "before", range(ADAPTERS)),
        "after": _synth(tmp, "after", range(SHIFT, ADAPTERS + SHIFT)),
    }


def _joined(value: Any) -> str:
    """A synthesized string: Fn::Join's parts with every Ref/GetAtt token written as <token>."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and "Fn::Join" in value:
        sep, parts = value["Fn::Join"]
        return sep.join(_joined(p) for p in parts)
    return "<token>"


def test_500_adapters_fit_cloudformation_with_the_resources_of_the_farm_without_them(
    farms: dict[str, SynthesizedFarm],
) -> None:
    farm, bare = farms["before"], farms["none"]
    sizes, bare_sizes = farm.measure(), bare.measure()
    table = "\n".join(f"{n}: {r} resources, {b:,} bytes" for n, (r, b) in sizes.items())
    print(f"{table}\nsynth {farm.seconds:.0f} s; without adapters: {bare_sizes}")
    assert all(r <= CFN_MAX_RESOURCES and b <= CFN_MAX_TEMPLATE_BYTES for r, b in sizes.values()), table
    assert {n: r for n, (r, _) in sizes.items()} == {n: r for n, (r, _) in bare_sizes.items()}
    kinds = sorted(r["Type"] for t in farm.templates().values() for r in t["Resources"].values())
    assert kinds == sorted(r["Type"] for t in bare.templates().values() for r in t["Resources"].values())
    # No adapter is spelled out in any template: they are in the catalog asset and the bundle's manifest.
    assert all("task-0001" not in (farm.out / n).read_text() for n in sizes)


def test_the_model_environment_is_within_botocores_container_definition_limits(
    farms: dict[str, SynthesizedFarm],
) -> None:
    shape = botocore.session.get_session().get_service_model("sagemaker").shape_for("ContainerDefinition")
    env_shape = shape.members["Environment"]
    key_max = env_shape.key.metadata["max"]
    value_max = env_shape.value.metadata["max"]
    entries_max = env_shape.metadata["max"]
    env = base_model(farms["before"])["PrimaryContainer"]["Environment"]
    assert env[MANIFEST_ENV] == f"{SAGEMAKER_MODEL_DIR}/{LORA_MANIFEST}"
    assert len(env) <= entries_max, (len(env), entries_max)
    assert all(len(k) <= key_max and len(str(v)) <= value_max for k, v in env.items())
    # The farm without adapters carries no manifest (its endpoint serves the GGUF alone, as before).
    assert MANIFEST_ENV not in base_model(farms["none"])["PrimaryContainer"]["Environment"]


def test_the_endpoint_reads_the_bundle_prefix_and_only_it(farms: dict[str, SynthesizedFarm]) -> None:
    farm = farms["before"]
    catalog = farm.farm.catalog
    assert catalog is not None
    entries: Catalog = catalog.catalog
    entry = entries.entry(BASE)
    # One entry for the base and its adapters (no adapter entries of their own), in the `lora` layout only.
    assert entries.layouts_of(entry) == ("lora",)
    assert [a.name for a in entry.adapters or ()] == [f"task-{i:04d}" for i in range(ADAPTERS)]
    assert all(e.base is None for e in entries.entries)
    prefix = lora_prefix(entry)
    container = base_model(farm)["PrimaryContainer"]
    s3 = container["ModelDataSource"]["S3DataSource"]
    assert (s3["S3DataType"], s3["CompressionType"]) == ("S3Prefix", "None")
    assert _joined(s3["S3Uri"]) == f"s3://<token>/{prefix}"
    assert container["Environment"]["MODEL_PATH"] == f"{SAGEMAKER_MODEL_DIR}/{entry.basename}"
    # The execution role reads that prefix (GetObject under it, ListBucket limited to it) and no other model's.
    policies = json.dumps(list(farm.resources("AWS::IAM::Policy").values()))
    assert f"/{prefix}*" in policies
    assert f"/farm/{BASE}/" not in policies.replace(f"/{prefix}", "")
    # The deploy waits for the bundle's seal (catalog.KEY_OF["lora"]) before creating the Model.
    assert catalog.catalog.keys(entry) == {"lora": prefix + LORA_MANIFEST}


def test_sizing_counts_the_adapters_bytes(farms: dict[str, SynthesizedFarm]) -> None:
    """Volume, download and start-up timeouts grow by the adapters' bytes (spec.adapter_bytes, in weights_bytes)."""
    endpoint = farms["before"].farm.endpoints[BASE]
    bare = farms["none"].farm.endpoints[BASE]
    grown = ADAPTERS * int(ADAPTER_MB * 1e6)
    assert endpoint.props.model_bytes == bare.props.model_bytes + grown
    assert sizing.weights_bytes(endpoint.props.spec) == endpoint.props.model_bytes
    # The engine holds them as weights (with sizing's allowance on weights): the instance must fit them too.
    assert endpoint.sizing.memory_needed_bytes >= bare.sizing.memory_needed_bytes + grown
    assert endpoint.sizing.fits
    assert endpoint.volume_size_gb == required_volume_gb(endpoint.props.model_bytes)
    assert endpoint.volume_size_gb is not None and bare.volume_size_gb is not None
    assert endpoint.volume_size_gb > bare.volume_size_gb
    variant = farms["before"].resources("AWS::SageMaker::EndpointConfig")
    (config,) = [
        v
        for r in variant.values()
        for v in r["Properties"]["ProductionVariants"]
        if "ModelDataDownloadTimeoutInSeconds" in v and "VolumeSizeInGB" in v
    ]
    assert config["VolumeSizeInGB"] == endpoint.volume_size_gb
    assert config["ModelDataDownloadTimeoutInSeconds"] == model_download_timeout_seconds(endpoint.props.model_bytes)
    assert config["ContainerStartupHealthCheckTimeoutInSeconds"] == startup_health_check_timeout_seconds(
        endpoint.props.model_bytes
    )


def test_cfn_lint_is_clean(farms: dict[str, SynthesizedFarm]) -> None:
    for name, template in farms["before"].templates().items():
        assert cfn_lint_errors(template) == [], name


def test_adding_10_adapters_and_removing_10_replaces_the_model_and_endpoint_config_only(
    farms: dict[str, SynthesizedFarm],
) -> None:
    before, after = load_assembly(farms["before"].out), load_assembly(farms["after"].out)
    p = plan(before, after)
    print(p.text())
    assert p.hazards == [] and p.objects == [], p.text()
    assert not [r for r in p.replaced if "removed" in r], p.text()  # nothing the new template declares is deleted
    replaced = {r.split(" ")[0] for r in p.replaced}
    updated = {r.split(" ")[0] for r in p.updated}
    # The plan carries CloudFormation's replacement cascade: the Model's generated name changes, so the
    # EndpointConfig (ProductionVariants createOnly) is replaced too.
    kinds = {key: _type(after, key) for key in replaced}
    assert sorted(kinds.values()) == ["AWS::SageMaker::EndpointConfig", "AWS::SageMaker::Model"], kinds
    # The Endpoint moves to the new EndpointConfig in place: SageMaker's blue/green update of its instances.
    cascaded = {r.split(" ")[0] for r in p.updated if "which is replaced" in r}
    assert {_type(after, key) for key in cascaded} == {"AWS::SageMaker::Endpoint"}, p.text()
    # In place besides: the role's read of the new prefix, the catalog's copy (its asset and fingerprint) and waits.
    assert {_type(after, key) for key in updated - cascaded} <= {
        "AWS::IAM::Policy",
        "AWS::CodeBuild::Project",
        "AWS::StepFunctions::StateMachine",
        "Custom::ModelCatalogCopy",
        "Custom::DedicatedModelsReady",
    }, p.text()


def _type(asm: Any, key: str) -> str:
    stack, lid = key.split("/", 1)
    return str(asm.stacks[stack].resources[lid]["Type"])


def test_a_pooled_base_on_sagemaker_is_refused_in_one_line(tmp_path: Path) -> None:
    path = _config(tmp_path / "pooled.yaml", range(3), serving="pool")
    with pytest.raises(ConfigError) as err:
        load(path)
    problem = adapter_hosting_problem("sagemaker", pooled=True, hosting="endpoints", copy="catalog")
    assert str(err.value).splitlines() == [f"{path}: models[0].adapters: {BASE}: {problem}"]


def test_inference_components_hosting_is_refused_in_one_line(tmp_path: Path) -> None:
    farm = {
        "pools": [{"name": "tuned", "instance_type": "ml.r7gd.2xlarge"}],
        "dedicated_hosting": "inference_components",
    }
    path = _config(tmp_path / "ic.yaml", range(3), farm=farm)
    doc = yaml.safe_load(path.read_text())
    doc["sagemaker"] = {"network_isolation": False}  # what inference components need (its own refusal otherwise)
    path.write_text(yaml.safe_dump(doc, sort_keys=False, width=200))
    with pytest.raises(ConfigError) as err:
        load(path)
    problem = adapter_hosting_problem("sagemaker", pooled=False, hosting="inference_components", copy="catalog")
    assert f"{path}: models[0].adapters: {BASE}: {problem}" in str(err.value).splitlines()


def test_a_dedicated_base_copied_as_a_model_artifact_is_refused_naming_dedicated_copy(tmp_path: Path) -> None:
    """Its endpoint reads the catalog's bundle: with farm.dedicated_copy `artifact` it would copy the base alone."""
    farm = {"pools": [{"name": "tuned", "instance_type": "ml.r7gd.2xlarge"}], "dedicated_copy": "artifact"}
    path = _config(tmp_path / "artifact.yaml", range(3), farm=farm)
    with pytest.raises(ConfigError) as err:  # refused by validate, before anything is built
        load(path)
    problem = adapter_hosting_problem("sagemaker", pooled=False, hosting="endpoints", copy="artifact")
    assert problem is not None and "set farm.dedicated_copy: catalog (it is 'artifact')" in problem
    assert f"{path}: models[0].adapters: {BASE}: {problem}" in str(err.value).splitlines()


def _catalog_build_specs(farm: SynthesizedFarm) -> list[str]:
    return [
        json.dumps(r["Properties"]["Source"]["BuildSpec"])
        for r in farm.resources("AWS::CodeBuild::Project").values()
        if "model_download catalog" in json.dumps(r["Properties"]["Source"].get("BuildSpec", ""))
    ]


def test_a_peft_adapter_source_is_a_bundle_member_and_the_copy_job_sets_up_the_converter(
    farms: dict[str, SynthesizedFarm], tmp_path: Path
) -> None:
    """A PEFT source (no source.file) on SageMaker: its file in the bundle entry is the PEFT weights, which the copy
    converts (model_download.peft_convert; tests/runtime/model_download/test_catalog_lora_bundle_peft.py), so the
    catalog's CodeBuild project installs the converter — a farm of GGUF adapters keeps the buildspec it had."""
    path = _config(tmp_path / "peft.yaml", range(2))
    doc = yaml.safe_load(path.read_text())
    doc["models"][0]["adapters"].append(
        {"name": "triage", "source": {"hf_repo": "acme-tuned/triage-lora", "revision": COMMIT}, "size_mb": ADAPTER_MB}
    )
    path.write_text(yaml.safe_dump(doc, sort_keys=False, width=200))
    config = load(path)
    app, stack = build_app(config, app=cdk.App(outdir=str(tmp_path / "out")))
    app.synth()
    farm = stack.node.find_child("ModelFarm")
    assert isinstance(farm, ModelFarm) and farm.catalog is not None
    entry = farm.catalog.catalog.entry(BASE)
    assert [(a.name, a.file, a.peft) for a in entry.adapters or ()][-1] == ("triage", PEFT_WEIGHTS, True)
    (spec,) = _catalog_build_specs(SynthesizedFarm(tmp_path / "out", "", 0, farm))
    assert "python3 -m model_download.peft_convert setup" in spec and ENV_DIR_ENV in spec
    assert PEFT_CONVERT_DIR in spec
    for gguf_only in (farms["before"], farms["none"]):
        (plain,) = _catalog_build_specs(gguf_only)
        assert "peft_convert" not in plain and PEFT_CONVERT_DIR not in plain
