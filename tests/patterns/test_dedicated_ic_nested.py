"""Inference components combined with nested stacks (issue 25): farm.dedicated_hosting: inference_components AND
farm.dedicated_stacks: 4, on a generated SageMaker farm of 40 dedicated + 100 pooled models (44 for the deploy
rehearsal). Each model's ONE AWS::SageMaker::InferenceComponent goes to the nested stack its name hashes to
(deployment.dedicated_stack_index) and nothing else of it exists anywhere; the shared endpoint, its config, the one
execution role, the KMS key, the alarms and the InferenceComponentScaling custom resource stay in the farm's (parent)
stack. A nested template names the shared endpoint by its literal EndpointName (no cross-stack reference: the parent's
AWS::CloudFormation::Stack resource DependsOn the endpoint) and gets the bucket and image through the Parameters CDK
passes it. Synthesized through the app, as `cdk synth`."""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
from constructs import Construct

from cpu_inference.app import build_app
from cpu_inference.config import load
from cpu_inference.patterns.deployment import CFN_MAX_RESOURCES, CFN_MAX_TEMPLATE_BYTES, dedicated_stack_index
from cpu_inference.patterns.model_farm import ModelFarm
from cpu_inference.sagemaker.inference_components import HOSTING_TAG
from cpu_inference.testing.rehearsal import NESTED_STACK, Assembly, _refs, load_assembly, plan
from tests.patterns.test_dedicated_at_scale import Farm, _measure, _table
from tests.patterns.test_dedicated_ic_at_scale import IC, _config
from tests.support.cdk import cfn_lint_errors

STACKS = 4  # farm.dedicated_stacks
HOT, GROWN, POOLED = 40, 44, 100
SCALING = "Custom::InferenceComponentScaling"
ENDPOINT = "AWS::SageMaker::Endpoint"


@dataclass
class Synth:
    farm: Farm
    model_farm: ModelFarm
    stack: cdk.Stack
    nested_lids: dict[int, str]  # dedicated stack index → logical id of its AWS::CloudFormation::Stack in the parent

    @property
    def assembly(self) -> Assembly:
        return load_assembly(self.farm.out)

    def parent(self) -> dict[str, Any]:
        return self.farm.templates()[self.farm.parent]

    def nested(self) -> dict[int, dict[str, Any]]:
        """Dedicated stack index → its nested template (through the parent's TemplateURL, as the rehearsal reads it)."""
        stacks = self.assembly.stacks
        parent = next(n for n, st in stacks.items() if set(self.nested_lids.values()) <= set(st.resources))
        return {i: stacks[f"{parent}/{lid}"].template for i, lid in self.nested_lids.items()}


def _synth(tmp: Path, hot: int, pooled: int = POOLED, stacks: int = STACKS) -> Synth:
    tmp.mkdir(parents=True, exist_ok=True)
    cfg = _config(tmp / f"icn-{hot}.yaml", hot, pooled)
    cfg.write_text(cfg.read_text().replace("farm:\n", f"farm:\n  dedicated_stacks: {stacks}\n", 1))
    config = load(cfg)
    assert config.farm.dedicated_hosting == "inference_components" and config.farm.dedicated_stacks == stacks
    out = tmp / f"out-icn-{hot}"
    began = time.monotonic()
    app, stack = build_app(config, app=cdk.App(outdir=str(out)))
    app.synth()
    seconds = time.monotonic() - began
    farm = stack.node.find_child("ModelFarm")
    assert isinstance(farm, ModelFarm)
    assert len(farm.props.dedicated) == hot
    lids: dict[int, str] = {}
    if farm.dedicated_stacks is not None:
        for i, st in farm.dedicated_stacks.stacks.items():
            assert st.nested_stack_resource is not None
            lids[i] = stack.resolve(stack.get_logical_id(st.nested_stack_resource))
    dedicated = tuple(m.name for m in farm.props.dedicated)
    return Synth(Farm(out, dedicated, f"{stack.artifact_id}.template.json", seconds), farm, stack, lids)


@pytest.fixture(scope="module")
def farms(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Synth]:
    tmp = tmp_path_factory.mktemp("dedicated-ic-nested")
    return {n: _synth(tmp, n) for n in (HOT, GROWN)}


def _of_type(template: dict[str, Any], t: str) -> dict[str, dict[str, Any]]:
    return {lid: r for lid, r in template["Resources"].items() if r["Type"] == t}


def test_each_component_sits_in_the_nested_stack_its_name_hashes_to_and_nothing_else_per_model(
    farms: dict[int, Synth],
) -> None:
    s = farms[HOT]
    table = _table(s.farm)
    nested = s.nested()
    per_stack = {i: len(t["Resources"]) for i, t in sorted(nested.items())}
    print(f"{table}\nresources per nested stack: {per_stack}")
    assert all(r <= CFN_MAX_RESOURCES and b <= CFN_MAX_TEMPLATE_BYTES for r, b in _measure(s.farm).values()), table
    # Every stack the names hash to exists (and no other): a stack is created by its first model.
    assert set(nested) == {dedicated_stack_index(n, STACKS) for n in s.farm.dedicated} == set(range(STACKS))
    # A nested stack holds its models' components and nothing else; the parent holds none.
    for i, t in nested.items():
        assert {r["Type"] for r in t["Resources"].values()} == {IC}, i
        assert not t.get("Outputs"), i  # nothing is exported back to the parent
    parent = s.parent()
    assert not _of_type(parent, IC)
    assert sum(per_stack.values()) == HOT
    # ... each one in the stack DedicatedStacks assigns to its model (sha256(name) mod N).
    where = {r["Properties"]["InferenceComponentName"]: i for i, t in nested.items() for r in t["Resources"].values()}
    for name in s.farm.dedicated:
        handle = s.model_farm.components[name]
        i = dedicated_stack_index(name, STACKS)
        assert where[handle.component_name] == i, name
        assert s.model_farm.dedicated_stacks is not None
        assert cdk.Stack.of(handle.resource) is s.model_farm.dedicated_stacks.stacks[i]
    # The shared pieces stay in the parent: the one endpoint (+ config), execution role, key, log group, alarms and
    # the one scaling custom resource; the nested stacks hold no endpoint, role or custom resource.
    ic = s.model_farm.inference_components
    assert ic is not None and ic.scaling is not None
    shared: list[Construct] = [ic.role, ic.key, ic.scaling, *(e.endpoint for e in ic.endpoints.values())]
    shared += [e.endpoint_config for e in ic.endpoints.values()] + [e.log_group for e in ic.endpoints.values()]
    assert all(cdk.Stack.of(c) is s.stack for c in shared)
    assert len(_of_type(parent, SCALING)) == 1
    assert len(_of_type(parent, ENDPOINT)) == 1 + 2  # one shared endpoint (one instance type) + the two pools


def test_nested_templates_reference_only_what_they_declare_or_are_passed(farms: dict[int, Synth]) -> None:
    s = farms[HOT]
    parent = s.parent()
    p_resources, p_params = set(parent["Resources"]), set(parent.get("Parameters", {}))
    text = json.dumps(parent)
    assert "Fn::ImportValue" not in text  # no export/import between the stacks
    endpoints = {
        r["Properties"]["EndpointName"]: lid
        for lid, r in _of_type(parent, ENDPOINT).items()
        if isinstance(r["Properties"]["EndpointName"], str)
    }
    ready = next(iter(_of_type(parent, "Custom::DedicatedModelsReady")))
    for i, t in s.nested().items():
        lid = s.nested_lids[i]
        res = parent["Resources"][lid]
        assert res["Type"] == NESTED_STACK
        declared = set(t.get("Parameters", {}))
        passed = res["Properties"].get("Parameters", {})
        # Every Ref / GetAtt / Sub in the nested template names one of its own parameters or resources.
        refs: set[str] = set()
        _refs(t["Resources"], refs)
        assert refs <= declared | set(t["Resources"]), (i, refs - declared - set(t["Resources"]))
        assert "Fn::ImportValue" not in json.dumps(t)
        # The parent passes exactly the parameters the nested template declares (none has a Default to fall back
        # on), each from a resource or parameter of the parent itself.
        assert set(passed) == declared and not [p for p in t.get("Parameters", {}).values() if "Default" in p], i
        given: set[str] = set()
        _refs(passed, given)
        assert given <= p_resources | p_params, (i, given - p_resources - p_params)
        # The shared endpoint by its literal name — one of the parent's endpoints, which the nested stack waits for
        # (as it waits for the catalog's copy of the dedicated tarballs).
        for r in t["Resources"].values():
            name = r["Properties"]["EndpointName"]
            assert isinstance(name, str) and name in endpoints, (i, name)
            assert endpoints[name] in res["DependsOn"] and ready in res["DependsOn"], i
    # And the parent itself references only what it declares.
    refs = set()
    _refs(parent["Resources"], refs)
    assert refs <= p_resources | p_params, refs - p_resources - p_params


def test_the_scaling_resource_waits_for_every_component_across_the_stacks(farms: dict[int, Synth]) -> None:
    s = farms[HOT]
    parent = s.parent()
    ((scaling_lid, scaling),) = _of_type(parent, SCALING).items()
    names = {c["Name"] for c in scaling["Properties"]["Components"]}
    ic = s.model_farm.inference_components
    assert ic is not None and ic.scaling is not None
    scaled = {m.name for m in ic.props.models if m.max_copies > m.min_copies}
    assert scaled and names == {s.model_farm.components[n].component_name for n in scaled}
    holding = {s.nested_lids[dedicated_stack_index(n, STACKS)] for n in scaled}
    assert holding <= set(scaling["DependsOn"])
    # As CloudFormation orders it: every stack holding a scaled component completes before the scaling resource.
    (parent_stack,) = [st for st in s.assembly.stacks.values() if scaling_lid in st.resources]
    assert holding <= parent_stack.ancestors(scaling_lid)


def test_cfn_lint_is_clean_on_the_parent_and_every_nested_template(farms: dict[int, Synth]) -> None:
    s = farms[HOT]
    templates = s.farm.templates()
    assert len(templates) == 1 + STACKS
    for name, t in templates.items():
        assert cfn_lint_errors(t) == [], name


def test_nested_components_carry_the_hosting_tag_as_in_the_parent(farms: dict[int, Synth], tmp_path: Path) -> None:
    # Without nested stacks every component is under InferenceComponents and gets its tag; in a nested stack it must
    # get the same (the tag marks what the components cost; Tags is updatable: cfn-lint's registry schema of
    # AWS::SageMaker::InferenceComponent, tagging.tagUpdatable true).
    flat = _synth(tmp_path, 2, pooled=6, stacks=0)
    assert not flat.nested_lids

    def tags(template: dict[str, Any]) -> set[str]:
        return {t["Key"] for r in _of_type(template, IC).values() for t in r["Properties"].get("Tags", [])}

    assert HOSTING_TAG in tags(flat.parent())
    for i, t in farms[HOT].nested().items():
        for lid, r in t["Resources"].items():
            assert HOSTING_TAG in {x["Key"] for x in r["Properties"].get("Tags", [])}, (i, lid)


def test_growing_from_40_to_44_adds_only_the_new_components(farms: dict[int, Synth]) -> None:
    before, after = farms[HOT].assembly, farms[GROWN].assembly
    assert len(before.stacks) == 1 + STACKS  # the nested stacks are rehearsed too
    p = plan(before, after)
    assert p.hazards == [] and p.replaced == [], p.text()
    assert not [c for c in p.objects if c.action == "delete"], p.text()
    assert set(before.stacks) == set(after.stacks)  # no stack added or removed
    added: dict[str, set[str]] = {}
    for name, st in before.stacks.items():
        old, new = st.resources, after.stacks[name].resources
        assert not set(old) - set(new), name  # nothing deleted ...
        for lid, res in old.items():  # ... or moved to another type, and no component or endpoint changed
            assert new[lid]["Type"] == res["Type"], f"{name}/{lid}"
            if res["Type"] in (IC, ENDPOINT, "AWS::SageMaker::EndpointConfig"):
                assert json.dumps(new[lid], sort_keys=True) == json.dumps(res, sort_keys=True), f"{name}/{lid}"
        if set(new) - set(old):
            added[name] = set(new) - set(old)
    types = Counter(after.stacks[n].resources[lid]["Type"] for n, lids in added.items() for lid in lids)
    assert types == Counter({IC: GROWN - HOT}), added
    # Each new component went to its own model's stack.
    grown = farms[GROWN]
    new_models = set(grown.farm.dedicated) - set(farms[HOT].farm.dedicated)
    nested = grown.nested()
    for m in new_models:
        name = grown.model_farm.components[m].component_name
        i = dedicated_stack_index(m, STACKS)
        assert name in {r["Properties"]["InferenceComponentName"] for r in nested[i]["Resources"].values()}, m


def test_inference_components_without_dedicated_models_create_no_shared_endpoint(tmp_path: Path) -> None:
    s = _synth(tmp_path, 0, pooled=12)
    farm = s.model_farm
    assert farm.inference_components is None and not farm.components and not farm.endpoints
    assert not s.nested_lids  # no dedicated model: no nested stack either
    parent = s.parent()
    types = Counter(r["Type"] for r in parent["Resources"].values())
    assert types[IC] == 0 and types[SCALING] == 0 and types["Custom::DedicatedModelsReady"] == 0
    assert types[NESTED_STACK] == 0
    # The only endpoints are the pools' multi-model endpoints.
    assert types[ENDPOINT] == len(farm.pool_endpoints) > 0
    assert list(s.farm.templates()) == [s.farm.parent]
