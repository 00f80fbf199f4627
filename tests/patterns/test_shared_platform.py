"""Several patterns on one EksPlatform (review eks.md F3, the part beyond the Mountpoint add-on): two ModelFarms, or a
farm and an SlmPrefilter, on one `existing_platform` — in the platform's stack or in stacks of their own — synthesize,
create in every order CloudFormation may choose (cpu_inference.testing.rehearsal.create_order), share the one
Mountpoint add-on, and keep their Kubernetes objects apart (one namespace each). A pattern that builds its own
platform keeps today's logical ids (its ScaledObject manifests stay in the platform's Keda construct): a changed
KubernetesManifest id deletes its objects in CloudFormation's cleanup (eks/manifests.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
from constructs import Construct

from cpu_inference import sizing
from cpu_inference.eks.mountpoint import ADDON_NAME, MountpointSettings
from cpu_inference.patterns import (
    DeploymentProps,
    EksPlatform,
    EksPlatformProps,
    EscalationTarget,
    ModelFarm,
    ModelFarmProps,
    ServedModel,
    SlmPrefilter,
    SlmPrefilterProps,
)
from cpu_inference.patterns.eks_platform import NodePoolSettings
from cpu_inference.testing.rehearsal import Assembly, assembly_from_templates, create_order, load_assembly, plan
from tests.support.cdk import template_json
from tests.support.k8s import objects

ENV = cdk.Environment(account="123456789012", region="us-east-1")
ESCALATION = EscalationTarget(kind="bedrock", model_id="anthropic.claude-3-5-haiku-20241022-v1:0")


def farm_models(prefix: str) -> tuple[ServedModel, ...]:
    spec = sizing.ModelSpec(parameters_billions=0.135, quantization="Q4_K_M", context_window=2048, task="chat")
    return tuple(
        ServedModel(
            name=f"{prefix}-{i}",
            hf_repo=f"acme/{prefix}-{i}-GGUF",
            file="model-Q4_K_M.gguf",
            spec=spec,
            role="farm",
            pool="default",
        )
        for i in range(2)
    )


def farm(scope: Construct, id: str, platform: EksPlatform | None, **props: Any) -> ModelFarm:
    return ModelFarm(
        scope,
        id,
        props=ModelFarmProps(
            deployment=DeploymentProps(models=farm_models(id.lower()), target="eks", existing_platform=platform),
            **props,
        ),
    )


def prefilter(scope: Construct, id: str, platform: EksPlatform | None, **props: Any) -> SlmPrefilter:
    slm = ServedModel(
        name="smollm2-135m",
        hf_repo="bartowski/SmolLM2-135M-Instruct-GGUF",
        file="SmolLM2-135M-Instruct-Q4_K_M.gguf",
        spec=sizing.ModelSpec(
            parameters_billions=0.135, quantization="Q4_K_M", context_window=4096, task="classification"
        ),
        role="slm",
    )
    return SlmPrefilter(
        scope,
        id,
        props=SlmPrefilterProps(
            deployment=DeploymentProps(models=(slm,), target="eks", existing_platform=platform),
            escalation=ESCALATION,
            **props,
        ),
    )


def shared_platform(stack: cdk.Stack) -> EksPlatform:
    return EksPlatform(stack, "Platform", props=EksPlatformProps(mountpoint=MountpointSettings()))


def mountpoint_addons(templates: dict[str, dict[str, Any]]) -> list[str]:
    return [
        f"{name}/{lid}"
        for name, t in templates.items()
        for lid, r in t["Resources"].items()
        if r["Type"] == "AWS::EKS::Addon" and r["Properties"]["AddonName"] == ADDON_NAME
    ]


def namespaces_of(t: dict[str, Any], parts: str) -> set[str]:
    """The namespaces of the objects whose `app.kubernetes.io/part-of` label is `parts`."""
    return {
        o["metadata"]["namespace"]
        for o in objects(t)
        if o["metadata"].get("labels", {}).get("app.kubernetes.io/part-of") == parts and "namespace" in o["metadata"]
    }


def scaled_object_namespaces(t: dict[str, Any]) -> list[str]:
    return sorted(o["metadata"]["namespace"] for o in objects(t) if o["kind"] == "ScaledObject")


def scaling_paths(c: Construct) -> list[str]:
    """Construct paths of the KubernetesManifests holding ScaledObjects that pattern `c` rendered."""
    assert isinstance(c, (ModelFarm, SlmPrefilter)) and c.workloads is not None
    return sorted(m.node.path for m in c.workloads.scaled_object_manifests)


def test_two_farms_and_a_prefilter_in_the_platform_stack() -> None:
    app = cdk.App()
    stack = cdk.Stack(app, "Serving", env=ENV)
    platform = shared_platform(stack)
    a = farm(stack, "FarmA", platform)
    b = farm(stack, "FarmB", platform, namespace="farm-b")
    p = prefilter(stack, "Prefilter", platform)
    t = template_json(stack)

    assert create_order(assembly_from_templates({"Serving": t})) == []
    assert len(mountpoint_addons({"Serving": t})) == 1
    # One namespace per pattern: nothing of one lands in another's.
    assert a.workloads is not None and b.workloads is not None and p.workloads is not None
    assert (a.workloads.policy.namespace, b.workloads.policy.namespace, p.workloads.policy.namespace) == (
        "model-farm",
        "farm-b",
        "slm-prefilter",
    )
    assert {o["metadata"]["namespace"] for o in objects(t) if o["kind"] == "StatefulSet"} == {"model-farm", "farm-b"}
    assert scaled_object_namespaces(t).count("farm-b") == scaled_object_namespaces(t).count("model-farm") > 0
    # Grafana's sidecar writes every dashboard ConfigMap's data keys into one folder (kiwigrid/k8s-sidecar#72) and
    # a title twice in a folder stops provisioning (grafana/grafana#43530): both unique; a pattern in its default
    # namespace keeps today's `<pattern>.json` / "CPU inference — <pattern>".
    boards = {
        (o["metadata"]["namespace"], key): json.loads(text)["title"]
        for o in objects(t)
        if o["kind"] == "ConfigMap" and o["metadata"].get("labels", {}).get("grafana_dashboard") == "1"
        for key, text in o["data"].items()
    }
    assert boards == {
        ("model-farm", "model-farm.json"): "CPU inference — model-farm",
        ("farm-b", "model-farm-farm-b.json"): "CPU inference — model-farm-farm-b",
        ("slm-prefilter", "slm-prefilter.json"): "CPU inference — slm-prefilter",
    }
    # In the platform's stack the ScaledObject manifests stay in its Keda construct: the first pattern under today's
    # ids, each later one under its namespace.
    assert scaling_paths(a) and all(
        path.startswith("Serving/Platform/Keda/WorkloadsScaling") for path in scaling_paths(a)
    )
    assert scaling_paths(b) and all(
        path.startswith("Serving/Platform/Keda/WorkloadsScaling-farm-b-") for path in scaling_paths(b)
    )
    assert scaling_paths(p) and all(
        path.startswith("Serving/Platform/Keda/WorkloadsScaling-slm-prefilter-") for path in scaling_paths(p)
    )


def test_a_platform_stack_and_a_stack_per_pattern(tmp_path: Path) -> None:
    """cdk deploys the platform stack first (the patterns reference its cluster); nothing of the platform may
    depend on a pattern's stack (a cycle: `DependencyCycle: 'Platform' depends on 'FarmA'`)."""
    app = cdk.App(outdir=str(tmp_path))
    platform = shared_platform(cdk.Stack(app, "Platform", env=ENV))
    farm(cdk.Stack(app, "FarmA", env=ENV), "Farm", platform)
    farm(cdk.Stack(app, "FarmB", env=ENV), "Farm", platform, namespace="farm-b")
    prefilter(cdk.Stack(app, "Prefilter", env=ENV), "Prefilter", platform)
    app.synth()
    asm: Assembly = load_assembly(tmp_path)

    assert {name: sorted(s.depends_on_stacks) for name, s in asm.stacks.items()} == {
        "Platform": [],
        "FarmA": ["Platform"],
        "FarmB": ["Platform"],
        "Prefilter": ["Platform"],
    }
    assert create_order(asm) == []
    templates = {name: s.template for name, s in asm.stacks.items()}
    assert mountpoint_addons(templates) == [a for a in mountpoint_addons(templates) if a.startswith("Platform/")] != []
    assert len(mountpoint_addons(templates)) == 1
    assert scaled_object_namespaces(templates["Platform"]) == []  # each pattern's ScaledObjects are in its own stack
    assert set(scaled_object_namespaces(templates["FarmA"])) == {"model-farm"}
    assert set(scaled_object_namespaces(templates["FarmB"])) == {"farm-b"}
    assert set(scaled_object_namespaces(templates["Prefilter"])) == {"slm-prefilter"}


def test_a_pattern_that_builds_its_platform_keeps_its_scaling_ids() -> None:
    """Today's single-farm / single-prefilter stacks: the ScaledObject manifests stay `Platform/Keda/WorkloadsScaling*`
    (CloudFormation logical ids from those paths; the shipped configs' snapshots pin the whole templates)."""
    app = cdk.App()
    a = farm(cdk.Stack(app, "Farm", env=ENV), "ModelFarm", None)
    p = prefilter(cdk.Stack(app, "Prefilter", env=ENV), "SlmPrefilter", None)
    assert scaling_paths(a) and all(
        path.startswith("Farm/ModelFarm/Platform/Keda/WorkloadsScaling") for path in scaling_paths(a)
    )
    assert scaling_paths(p) and all(
        path.startswith("Prefilter/SlmPrefilter/Platform/Keda/WorkloadsScaling") for path in scaling_paths(p)
    )


def test_a_pattern_beside_its_existing_platform_keeps_its_scaling_ids_when_a_second_joins() -> None:
    """A stack deployed with the platform and ONE pattern on it (existing_platform) keeps that pattern's ScaledObject
    manifests, unchanged, when a second pattern is added after it: moving them to new logical ids would delete the
    ScaledObjects (rehearsal: `deleted-while-declared`)."""

    def synth(with_second: bool) -> dict[str, Any]:
        app = cdk.App()
        stack = cdk.Stack(app, "Serving", env=ENV)
        platform = shared_platform(stack)
        farm(stack, "Farm", platform)
        if with_second:
            farm(stack, "Second", platform, namespace="second")
        return template_json(stack)

    before, after = synth(False), synth(True)
    assembly = {
        "before": assembly_from_templates({"Serving": before}),
        "after": assembly_from_templates({"Serving": after}),
    }
    change = plan(assembly["before"], assembly["after"])
    assert change.hazards == []
    assert [c for c in change.objects if c.action != "create"] == []
    # Only the second farm's objects are new: in its namespace, or cluster-scoped ones named after it (Namespace, PV).
    keys = [c.key.split("/") for c in change.objects]
    assert keys and all(ns == "second" or (ns == "" and name.startswith("second")) for _, _, ns, name in keys), keys
    assert create_order(assembly["after"]) == []


@pytest.mark.parametrize("second", ["farm", "prefilter"])
def test_one_namespace_twice_on_one_platform_is_one_clear_error(second: str) -> None:
    app = cdk.App()
    stack = cdk.Stack(app, "Serving", env=ENV)
    platform = shared_platform(stack)
    farm(stack, "FarmA", platform)
    with pytest.raises(
        ValueError,
        match=r"^ModelFarmProps\.namespace 'model-farm' is already used on this platform by Serving/FarmA .*set a different namespace",
    ):
        farm(cdk.Stack(app, "Other", env=ENV), "FarmB", platform)
    if second == "prefilter":
        prefilter(stack, "Prefilter", platform)
        with pytest.raises(
            ValueError,
            match=r"^SlmPrefilterProps\.namespace 'slm-prefilter' is already used on this platform by Serving/Prefilter",
        ):
            prefilter(stack, "Prefilter2", platform)
        with pytest.raises(
            ValueError,
            match=r"^SlmPrefilterProps\.namespace 'model-farm' is already used on this platform by Serving/FarmA",
        ):
            prefilter(stack, "Prefilter3", platform, namespace="model-farm")


def test_a_namespace_must_be_a_dns_label() -> None:
    with pytest.raises(ValueError, match=r"ModelFarmProps\.namespace 'Farm_B' must be a DNS label"):
        ModelFarmProps(deployment=DeploymentProps(models=farm_models("x")), namespace="Farm_B").validate()
    with pytest.raises(ValueError, match=r"SlmPrefilterProps\.namespace 'a\.b' must be a DNS label"):
        prefilter(cdk.Stack(cdk.App(), "S", env=ENV), "P", None, namespace="a.b")


def test_the_serving_policy_follows_the_existing_platform() -> None:
    """A pattern schedules onto its platform's node pools, not the defaults of its own (unused) `platform` props."""
    app = cdk.App()
    stack = cdk.Stack(app, "Serving", env=ENV)
    platform = EksPlatform(
        stack,
        "Platform",
        props=EksPlatformProps(
            mountpoint=MountpointSettings(),
            node_pools=NodePoolSettings(architectures=("arm64",), instance_families=("c7g", "m7g"), memory_pool=False),
        ),
    )
    a = farm(stack, "Farm", platform)
    p = prefilter(stack, "Prefilter", platform)
    for pattern in (a, p):
        assert pattern.workloads is not None
        policy = pattern.workloads.policy
        assert (policy.architectures, policy.node_families, policy.tolerations, policy.preferred_pools) == (
            ("arm64",),
            ("c7g", "m7g"),
            (),
            (),
        )
        assert pattern.workloads.router_chart is not None and pattern.workloads.router_chart.props.architectures == (
            "arm64",
        )
    t = template_json(stack)
    arches = {
        term["values"][0]
        for o in objects(t)
        if o["kind"] in ("Deployment", "StatefulSet")
        for term in _node_terms(o)
        if term["key"] == "kubernetes.io/arch"
    }
    assert arches == {"arm64"}


def _node_terms(obj: dict[str, Any]) -> Iterator[dict[str, Any]]:
    affinity = obj["spec"]["template"]["spec"].get("affinity", {}).get("nodeAffinity", {})
    for term in affinity.get("requiredDuringSchedulingIgnoredDuringExecution", {}).get("nodeSelectorTerms", []):
        yield from term.get("matchExpressions", [])
    for sel_key, sel_value in obj["spec"]["template"]["spec"].get("nodeSelector", {}).items():
        yield {"key": sel_key, "values": [sel_value]}
