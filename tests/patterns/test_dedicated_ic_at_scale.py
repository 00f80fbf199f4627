"""Dedicated models at scale as inference components (issue 25, farm.dedicated_hosting: inference_components): 300
dedicated + 1,000 pooled models on SageMaker synthesize in ONE template within CloudFormation's quotas with at most
one resource per dedicated model (its AWS::SageMaker::InferenceComponent), and growing from 280 to 300 adds exactly
20 components and deletes or replaces nothing (the deploy rehearsal). Synthesized through the app, as `cdk synth`."""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

import aws_cdk as cdk
import pytest

from cpu_inference.app import build_app
from cpu_inference.config import load
from cpu_inference.patterns.deployment import CFN_MAX_RESOURCES, CFN_MAX_TEMPLATE_BYTES
from cpu_inference.patterns.model_farm import ModelFarm
from cpu_inference.testing.rehearsal import load_assembly, plan
from tests.patterns.test_dedicated_at_scale import AFTER, BEFORE, POOLED, Farm, _measure, _table
from tests.support.farm_config import thousand_model_farm

IC = "AWS::SageMaker::InferenceComponent"
# The shared endpoints hold every copy (replicas.min 1 each, one instance per copy): max instances above 300.
EXTRA = "  dedicated_hosting: inference_components\n  shared_endpoints: {instances: {min: 1, max: 400}}\n"


ISOLATION_OFF = "target: sagemaker\nsagemaker:\n  network_isolation: false\n"


def _config(path: Path, hot: int, pooled: int) -> Path:
    """The generated SageMaker farm in this mode: components need sagemaker.network_isolation false."""
    cfg = thousand_model_farm(path, "sagemaker", total=hot + pooled, hot=hot)
    text = cfg.read_text().replace("farm:\n", "farm:\n" + EXTRA, 1).replace("target: sagemaker\n", ISOLATION_OFF, 1)
    assert "network_isolation: false" in text and "dedicated_hosting" in text
    cfg.write_text(text)
    return cfg


def _ic_synth(tmp: Path, hot: int, pooled: int = POOLED) -> Farm:
    tmp.mkdir(parents=True, exist_ok=True)
    config = load(_config(tmp / f"ic-{hot}.yaml", hot, pooled))
    began = time.monotonic()
    app, stack = build_app(config, app=cdk.App(outdir=str(tmp / f"out-ic-{hot}")))
    app.synth()
    seconds = time.monotonic() - began
    farm = stack.node.find_child("ModelFarm")
    assert isinstance(farm, ModelFarm)
    dedicated = tuple(m.name for m in farm.props.dedicated)
    assert len(dedicated) == hot
    return Farm(tmp / f"out-ic-{hot}", dedicated, f"{stack.artifact_id}.template.json", seconds)


@pytest.fixture(scope="module")
def farms(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Farm]:
    tmp = tmp_path_factory.mktemp("dedicated-ic")
    return {n: _ic_synth(tmp, n) for n in (BEFORE, AFTER)}


def test_300_dedicated_and_1000_pooled_as_components_fit_one_template(farms: dict[int, Farm]) -> None:
    farm = farms[AFTER]
    sizes = _measure(farm)
    table = _table(farm)
    templates = farm.templates()
    assert list(templates) == [farm.parent]  # no nested stack needed
    resources, size = sizes[farm.parent]
    types = Counter(r["Type"] for r in templates[farm.parent]["Resources"].values())
    rest = resources - types[IC]
    print(f"{table}\n{types[IC]} inference components + {rest} other resources; {size / AFTER:.0f} bytes per model")
    assert resources <= CFN_MAX_RESOURCES and size <= CFN_MAX_TEMPLATE_BYTES, table
    assert types[IC] == AFTER
    assert types["AWS::SageMaker::Endpoint"] == 1 + 2  # one shared endpoint (one instance type) + the two pools
    assert "Custom::ModelArtifact" not in types and types["Custom::DedicatedModelsReady"] == 1
    assert types["Custom::InferenceComponentScaling"] == 1  # every model's autoscaling: one resource
    before = sum(r for r, _ in _measure(farms[BEFORE]).values())
    assert (resources - before) / (AFTER - BEFORE) <= 1.0, f"{before} -> {resources}"
    # Every component reads its model's catalog tarball, which the one wait awaits.
    ready = next(
        lid for lid, r in templates[farm.parent]["Resources"].items() if r["Type"] == "Custom::DedicatedModelsReady"
    )
    for r in templates[farm.parent]["Resources"].values():
        if r["Type"] == IC:
            assert ready in r["DependsOn"]
            assert r["Properties"]["Specification"]["Container"]["ArtifactUrl"]["Fn::Join"][1][-1].endswith(".tar.gz")


def test_growing_from_280_to_300_adds_20_components_and_deletes_nothing(farms: dict[int, Farm]) -> None:
    before, after = load_assembly(farms[BEFORE].out), load_assembly(farms[AFTER].out)
    p = plan(before, after)
    assert p.hazards == [] and p.replaced == [], p.text()
    assert not [c for c in p.objects if c.action == "delete"], p.text()
    (name,) = before.stacks
    old, new = before.stacks[name].resources, after.stacks[name].resources
    added = set(new) - set(old)
    assert not set(old) - set(new)
    assert {new[lid]["Type"] for lid in added} == {IC} and len(added) == AFTER - BEFORE
    # The shared endpoint does not depend on the list of models: its config and endpoint are unchanged.
    for lid, res in old.items():
        if res["Type"] in ("AWS::SageMaker::EndpointConfig", "AWS::SageMaker::Endpoint", IC):
            assert json.dumps(new[lid], sort_keys=True) == json.dumps(res, sort_keys=True), lid


def test_the_catalog_copies_dedicated_models_as_tarballs_and_the_wait_reads_those_keys(tmp_path: Path) -> None:
    _, stack = build_app(load(_config(tmp_path / "c.yaml", 2, 6)), app=cdk.App(outdir=str(tmp_path / "out")))
    farm = stack.node.find_child("ModelFarm")
    assert isinstance(farm, ModelFarm) and farm.catalog is not None and not farm.endpoints
    catalog = farm.catalog.catalog
    for m in farm.props.dedicated:
        entry = catalog.entry(m.name)
        assert catalog.keys(entry) == {"mme": farm.catalog.mme_key(m.name)}
        assert farm.components[m.name].component_name
    assert [e.name for e in catalog.entries[: farm.catalog.props.awaited]] == [m.name for m in farm.props.dedicated]


def test_eks_and_network_isolation_are_refused_naming_the_key(tmp_path: Path) -> None:
    cfg = thousand_model_farm(tmp_path / "e.yaml", "eks", total=6, hot=2)
    cfg.write_text(cfg.read_text().replace("farm:\n", "farm:\n  dedicated_hosting: inference_components\n", 1))
    with pytest.raises(Exception, match=r"farm.dedicated_hosting: inference_components is for target sagemaker"):
        load(cfg)
    cfg = thousand_model_farm(tmp_path / "s.yaml", "sagemaker", total=6, hot=2)
    cfg.write_text(cfg.read_text().replace("farm:\n", "farm:\n  dedicated_hosting: inference_components\n", 1))
    with pytest.raises(Exception, match=r"sagemaker.network_isolation: false"):
        load(cfg)
