"""Dedicated models at scale (issue 25): a generated farm of 300 dedicated + 1,000 pooled models synthesizes within
CloudFormation's per-template quotas (500 resources, 1 MB — deployment.CFN_MAX_RESOURCES / CFN_MAX_TEMPLATE_BYTES),
its dedicated models spread over nested stacks by a stable hash of their names; growing from 280 to 300 dedicated
models deletes and replaces nothing (the deploy rehearsal, nested templates compared as CloudFormation updates them).

Synthesized through the app as `cdk synth` builds it (cpu_inference.app.build_app over a generated config.yaml), one
synth per size and target, shared by the tests of this module.

Every dedicated GGUF model is copied by the farm's catalog (farm.dedicated_copy, default `catalog`): no per-model
copy resource is left in the parent stack; the deploy waits for their keys through ONE Custom::DedicatedModelsReady."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import aws_cdk as cdk
import pytest

from cpu_inference.app import build_app
from cpu_inference.config import load
from cpu_inference.eks.inference_workloads import SHARED_SERVICE_ACCOUNT
from cpu_inference.patterns.deployment import (
    CFN_MAX_RESOURCES,
    CFN_MAX_TEMPLATE_BYTES,
    DEDICATED_STACKS_KEY,
    dedicated_stack_id,
    dedicated_stack_index,
)
from cpu_inference.patterns.model_farm import ModelFarm
from cpu_inference.testing.rehearsal import load_assembly, plan
from tests.support.farm_config import thousand_model_farm

POOLED = 1000
BEFORE, AFTER = 280, 300
STACKS = 16  # farm.dedicated_stacks of the generated farm (0, the default, keeps them in the farm's stack)
# SageMaker: per dedicated endpoint in its nested stack — Model, EndpointConfig, Endpoint (the floor), ScalableTarget
# + ScalingPolicy, 5 alarms, the log group SageMaker writes to, a KMS key, the execution role + its policy. Its copy
# is a catalog entry (no resource).
SAGEMAKER_PER_ENDPOINT = 14
# EKS: a dedicated model is Kubernetes objects in its nested stack's hash-bucketed manifests (eks/manifests.py), its
# ScaledObject beside them; its identity is the namespace's one (role, association, ServiceAccount), its copy a
# catalog entry. The target: at most 1 CloudFormation resource per dedicated model.
EKS_PER_MODEL_MAX = 1.0


@dataclass
class Farm:
    out: Path
    dedicated: tuple[str, ...]
    parent: str
    seconds: float

    def templates(self) -> dict[str, dict]:
        """File name → template, the parent and every nested one."""
        return {f.name: json.loads(f.read_text()) for f in sorted(self.out.glob("*.json")) if "template" in f.name}


def _synth(
    tmp: Path, target: str, hot: int, extra: str = f"  dedicated_stacks: {STACKS}\n", pooled: int = POOLED
) -> Farm:
    tmp.mkdir(parents=True, exist_ok=True)
    cfg = thousand_model_farm(tmp / f"{target}-{hot}.yaml", target, total=hot + pooled, hot=hot)
    text = cfg.read_text().replace("farm:\n", "farm:\n" + extra, 1)
    cfg.write_text(text)
    config = load(cfg)
    began = time.monotonic()
    app, stack = build_app(config, app=cdk.App(outdir=str(tmp / f"out-{target}-{hot}")))
    app.synth()
    seconds = time.monotonic() - began
    farm = stack.node.find_child("ModelFarm")
    assert isinstance(farm, ModelFarm)
    dedicated = tuple(m.name for m in farm.props.dedicated)
    assert len(dedicated) == hot
    return Farm(tmp / f"out-{target}-{hot}", dedicated, f"{stack.artifact_id}.template.json", seconds)


@pytest.fixture(scope="module")
def sagemaker(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Farm]:
    tmp = tmp_path_factory.mktemp("dedicated-sagemaker")
    return {n: _synth(tmp, "sagemaker", n) for n in (BEFORE, AFTER)}


@pytest.fixture(scope="module")
def eks(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Farm]:
    tmp = tmp_path_factory.mktemp("dedicated-eks")
    return {n: _synth(tmp, "eks", n) for n in (BEFORE, AFTER)}


def _measure(farm: Farm) -> dict[str, tuple[int, int]]:
    """File name → (resources, bytes)."""
    return {
        name: (len(template["Resources"]), (farm.out / name).stat().st_size)
        for name, template in farm.templates().items()
    }


def _table(farm: Farm) -> str:
    return "\n".join(f"{n}: {r} resources, {b:,} bytes" for n, (r, b) in _measure(farm).items()) + (
        f"\nsynth {farm.seconds:.0f} s"
    )


def _types(template: dict) -> list[str]:
    return [r["Type"] for r in template["Resources"].values()]


def test_300_dedicated_and_1000_pooled_fit_cloudformation_on_sagemaker(sagemaker: dict[int, Farm]) -> None:
    farm = sagemaker[AFTER]
    sizes = _measure(farm)
    table = _table(farm)
    print(table)
    assert all(r <= CFN_MAX_RESOURCES and b <= CFN_MAX_TEMPLATE_BYTES for r, b in sizes.values()), table
    templates = farm.templates()
    nested = {n: t for n, t in templates.items() if n != farm.parent}
    endpoints = sum(
        1 for t in nested.values() for r in t["Resources"].values() if r["Type"] == "AWS::SageMaker::Endpoint"
    )
    assert endpoints == AFTER  # every dedicated endpoint is in a nested stack ...
    parent = templates[farm.parent]["Resources"]
    assert not [r for r in parent.values() if r["Type"] == "AWS::SageMaker::Endpoint" and "Pool" not in str(r)]
    # ... in the one its name hashes to, and the nested stacks hold nothing else
    per_model = sum(len(t["Resources"]) for t in nested.values()) / AFTER
    assert per_model == SAGEMAKER_PER_ENDPOINT, table
    stacks = {dedicated_stack_index(n, STACKS) for n in farm.dedicated}
    assert len(nested) == len(stacks)
    assert all(any(dedicated_stack_id(i) in n for n in nested) for i in stacks)
    # The copies moved out of the parent: no ModelArtifact (custom resource + CodeBuild project each) is left; ONE
    # wait for every dedicated model's catalog key, and every nested stack waits for it.
    parent_types = _types(templates[farm.parent])
    assert "Custom::ModelArtifact" not in parent_types and parent_types.count("Custom::DedicatedModelsReady") == 1
    ready = next(lid for lid, r in parent.items() if r["Type"] == "Custom::DedicatedModelsReady")
    stacks_in_parent = [r for r in parent.values() if r["Type"] == "AWS::CloudFormation::Stack"]
    assert stacks_in_parent and all(ready in r.get("DependsOn", []) for r in stacks_in_parent)


def test_300_dedicated_and_1000_pooled_fit_cloudformation_on_eks(eks: dict[int, Farm]) -> None:
    farm = eks[AFTER]
    sizes = _measure(farm)
    table = _table(farm)
    print(table)
    assert all(r <= CFN_MAX_RESOURCES and b <= CFN_MAX_TEMPLATE_BYTES for r, b in sizes.values()), table
    templates = farm.templates()
    parent = templates[farm.parent]
    types = _types(parent)
    # One identity for every dedicated model (role, Pod Identity association), one wait for their copies, no
    # per-model copy resource.
    assert "Custom::ModelArtifact" not in types and types.count("Custom::DedicatedModelsReady") == 1
    assert types.count("AWS::EKS::PodIdentityAssociation") < 6
    deployments = [
        o
        for st in load_assembly(farm.out).stacks.values()
        for m in st.manifests.values()
        for o in m.objects
        if o.get("kind") == "Deployment" and o["metadata"]["name"] in farm.dedicated
    ]
    assert len(deployments) == AFTER
    assert {d["spec"]["template"]["spec"]["serviceAccountName"] for d in deployments} == {SHARED_SERVICE_ACCOUNT}
    # Resources per dedicated model, counted over the growth from 280 to 300.
    before = sum(r for r, _ in _measure(eks[BEFORE]).values())
    after = sum(r for r, _ in sizes.values())
    assert (after - before) / (AFTER - BEFORE) <= EKS_PER_MODEL_MAX, f"{before} -> {after}\n{table}"


@pytest.mark.parametrize("target", ["sagemaker", "eks"])
def test_growing_from_280_to_300_dedicated_deletes_and_replaces_nothing(
    target: str, sagemaker: dict[int, Farm], eks: dict[int, Farm]
) -> None:
    farms = sagemaker if target == "sagemaker" else eks
    before, after = load_assembly(farms[BEFORE].out), load_assembly(farms[AFTER].out)
    assert len(before.stacks) > 1  # the nested stacks are rehearsed too
    p = plan(before, after)
    assert p.hazards == [] and p.replaced == [], p.text()
    assert not [c for c in p.objects if c.action == "delete"], p.text()
    # Every deployed endpoint keeps its stack and logical id: its nested stack is updated, never re-created.
    for name, st in before.stacks.items():
        assert name in after.stacks
        for lid, res in st.resources.items():
            assert after.stacks[name].resources.get(lid, {}).get("Type") == res["Type"], f"{name}/{lid} moved"


def test_a_dedicated_models_stack_depends_on_its_name_only() -> None:
    names = [f"model-{i:04d}" for i in range(400)]
    first = {n: dedicated_stack_index(n, 16) for n in names[:280]}
    assert {n: dedicated_stack_index(n, 16) for n in names[:280]} == first  # order and neighbours do not matter
    assert {dedicated_stack_index(n, 16) for n in names} == set(range(16))  # spread over every stack
    # sha256 of the name, modulo the stack count: pinned, since a deployed farm depends on it.
    assert (
        dedicated_stack_index("qwen3-0-6b", 16)
        == int(__import__("hashlib").sha256(b"qwen3-0-6b").hexdigest()[:16], 16) % 16
    )


def test_a_dedicated_stack_over_500_resources_is_refused_naming_the_key(tmp_path: Path) -> None:
    cfg = thousand_model_farm(tmp_path / "c.yaml", "sagemaker", total=40, hot=38)
    text = cfg.read_text().replace("farm:\n", "farm:\n  dedicated_stacks: 1\n", 1)
    assert "dedicated_stacks: 1" in text
    cfg.write_text(text)
    with pytest.raises(ValueError) as err:
        build_app(load(cfg), app=cdk.App(outdir=str(tmp_path / "out")))
    assert DEDICATED_STACKS_KEY in str(err.value) and "limit 500" in str(err.value)


def test_by_default_dedicated_endpoints_stay_in_the_farms_stack(tmp_path: Path) -> None:
    # 0 (the default): a farm deployed before nested stacks existed keeps every endpoint where it is on upgrade.
    cfg = thousand_model_farm(tmp_path / "s.yaml", "sagemaker", total=6, hot=2)
    app, stack = build_app(load(cfg), app=cdk.App(outdir=str(tmp_path / "s")))
    assert not [c for c in stack.node.find_all() if isinstance(c, cdk.NestedStack)]
    farm = stack.node.find_child("ModelFarm")
    assert isinstance(farm, ModelFarm) and farm.dedicated_stacks is None
    assert all(cdk.Stack.of(e) is stack for e in farm.endpoints.values()) and len(farm.endpoints) == 2


@pytest.mark.parametrize("target", ["sagemaker", "eks"])
def test_a_farm_deployed_with_one_artifact_per_dedicated_model_migrates_to_the_catalog(
    target: str, tmp_path: Path
) -> None:
    """HEAD's shape (one ModelArtifact per dedicated model: farm.dedicated_copy artifact) → the catalog. The consumers
    move to the catalog's keys after the one wait; the ModelArtifacts leave in the cleanup (their objects stay); the
    rehearsal finds no hazard — nothing the new template declares is deleted, no Kubernetes object moves."""
    old = _synth(tmp_path / "old", target, 4, extra="  dedicated_copy: artifact\n", pooled=8)
    new = _synth(tmp_path / "new", target, 4, extra="", pooled=8)
    old_types, new_types = (_types(f.templates()[f.parent]) for f in (old, new))
    assert old_types.count("Custom::ModelArtifact") == 4 and "Custom::DedicatedModelsReady" not in old_types
    assert "Custom::ModelArtifact" not in new_types and new_types.count("Custom::DedicatedModelsReady") == 1
    p = plan(load_assembly(old.out), load_assembly(new.out))
    assert p.hazards == [], p.text()
    assert not [c for c in p.objects if c.action == "delete" and "ServiceAccount" not in c.key], p.text()
