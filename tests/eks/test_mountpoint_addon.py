"""The Mountpoint for S3 CSI driver belongs to the EKS platform, once per cluster (review eks.md F3, F4, F5, F9):

- F3: two ModelFarms on one platform create ONE `aws-mountpoint-s3-csi-driver` add-on (EKS allows one add-on of a name
  per cluster: CreateAddon → ResourceInUseException); each farm grants its own bucket prefix to the platform's driver
  role. A cluster that already runs the driver: `install_mountpoint_addon=False` + the driver's role ARN; the farms
  grant their prefix to that role (driver-level credentials are cluster-wide: mountpoint-s3-csi-driver
  docs/CONFIGURATION.md "Driver-Level Credentials").
- F4: the add-on is pinned (MOUNTPOINT_VERSION, a v2 build ≥ v2.5.0); older or malformed builds are refused.
- F5: the v2 controller runs on the tainted system nodes: its configurationValues set exactly values the upstream chart
  reads (tests/eks/upstream/mountpoint-s3-csi-driver-v2.7.0, checked in from the tag with ORIGIN.md).
- F9: the NodePools that can host pool pods carry the driver's startup taint `s3.csi.aws.com/agent-not-ready:NoExecute`
  (docs/CONFIGURATION.md "Configure node startup taint") when this platform installs the driver, and validate against
  the upstream Karpenter CRD (schema and CEL rules)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
import yaml
from aws_cdk import aws_eks_v2 as eks

from cpu_inference import sizing
from cpu_inference.artifacts import ModelBucket
from cpu_inference.config import load
from cpu_inference.eks.inference_cluster import MOUNTPOINT_VERSION, SYSTEM_LABEL, SYSTEM_TAINT
from cpu_inference.eks.mountpoint import ADDON_NAME, MountpointSettings
from cpu_inference.patterns import (
    DeploymentProps,
    EksPlatform,
    EksPlatformProps,
    FarmPoolSettings,
    ModelFarm,
    ModelFarmProps,
    ServedModel,
)
from cpu_inference.patterns.from_config import platform_props
from cpu_inference.testing.crd_cel import validate_rules
from tests.support.cdk import apply_nag, cfn_lint_errors, nag_errors, synth, template_json
from tests.support.k8s import crd_schema, manifests, objects, validate_custom

ENV = cdk.Environment(account="123456789012", region="us-east-1")
ROOT = Path(__file__).resolve().parents[2]
UPSTREAM = Path(__file__).resolve().parent / "upstream" / "mountpoint-s3-csi-driver-v2.7.0"
EXISTING_ROLE = "arn:aws:iam::123456789012:role/S3CsiDriver"
STARTUP_TAINT = {"key": "s3.csi.aws.com/agent-not-ready", "effect": "NoExecute"}


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


def farm(stack: cdk.Stack, id: str, platform: EksPlatform | None) -> ModelFarm:
    return ModelFarm(
        stack,
        id,
        props=ModelFarmProps(
            deployment=DeploymentProps(models=farm_models(id.lower()), target="eks", existing_platform=platform),
            pools=(FarmPoolSettings(),),
        ),
    )


def resources(t: dict[str, Any], type_: str) -> dict[str, dict[str, Any]]:
    return {k: r for k, r in t["Resources"].items() if r["Type"] == type_}


def mountpoint_addons(t: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {k: r for k, r in resources(t, "AWS::EKS::Addon").items() if r["Properties"]["AddonName"] == ADDON_NAME}


def policies_of(t: dict[str, Any], role: Any) -> list[dict[str, Any]]:
    return [
        p["Properties"] for p in resources(t, "AWS::IAM::Policy").values() if role in p["Properties"].get("Roles", [])
    ]


def crd_problems(obj: dict[str, Any]) -> list[str]:
    """The upstream Karpenter CRD's schema and CEL rules (../shared/crds)."""
    schema = crd_schema(obj["apiVersion"], obj["kind"])
    assert schema is not None
    return validate_custom(obj) + validate_rules(obj, schema)


def nodepools(t: dict[str, Any]) -> list[dict[str, Any]]:
    return [o for o in objects(t) if o["kind"] == "NodePool"]


@dataclass
class Shared:
    platform: dict[str, Any]  # the stack with the platform and farm A (existing_platform)
    other: dict[str, Any]  # another stack reading its own bucket through the same driver (a second farm's grant)
    farm: ModelFarm
    eks_platform: EksPlatform
    stacks: tuple[cdk.Stack, ...]


@pytest.fixture(scope="module")
def shared() -> Shared:
    """A platform that installs the driver, a ModelFarm on it (existing_platform), and a second farm's grant from
    another stack. (Whole farms side by side on one platform: tests/patterns/test_shared_platform.py.)"""
    app = cdk.App()
    apply_nag(app)
    stack = cdk.Stack(app, "Platform", env=ENV)
    platform = EksPlatform(stack, "Platform", props=EksPlatformProps(mountpoint=MountpointSettings()))
    farm_a = farm(stack, "FarmA", platform)
    other = cdk.Stack(app, "FarmB", env=ENV)
    assert platform.mountpoint is not None
    platform.mountpoint.grant_read(other, ModelBucket(other, "Models"))
    synth(app)
    return Shared(template_json(stack), template_json(other), farm_a, platform, (stack, other))


def test_the_farm_reuses_the_platform_addon_instead_of_creating_one(shared: Shared) -> None:
    assert len(mountpoint_addons(shared.platform)) == 1
    assert mountpoint_addons(shared.other) == {}
    assert shared.farm.mountpoint is shared.eks_platform.mountpoint
    assert [c.node.path for c in shared.farm.node.find_all() if isinstance(c, eks.CfnAddon)] == []


def read_statements(policy: dict[str, Any]) -> list[dict[str, Any]]:
    stmts = policy["PolicyDocument"]["Statement"]
    actions = {a for s in stmts for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])}
    assert actions <= {"s3:GetObject", "s3:ListBucket", "kms:Decrypt"}, actions  # read-only
    return stmts


def test_each_farm_grants_its_own_prefix_to_the_one_driver_role(shared: Shared) -> None:
    t = shared.platform
    (addon,) = mountpoint_addons(t).values()
    (assoc,) = addon["Properties"]["PodIdentityAssociations"]
    role_id = assoc["RoleArn"]["Fn::GetAtt"][0]
    # Farm A (same stack): the statements join the driver role's policy; the pools mount only once it exists.
    ((policy_id, policy),) = [
        (k, p["Properties"])
        for k, p in resources(t, "AWS::IAM::Policy").items()
        if {"Ref": role_id} in p["Properties"].get("Roles", [])
    ]
    (get,) = [s for s in read_statements(policy) if s["Action"] == "s3:GetObject"]
    assert json.dumps(get["Resource"]).endswith('"/farm/*"]]}')
    pool_manifests = [
        lid
        for lid, objs, _ in manifests(t)
        if any(o["kind"] == "StatefulSet" and o["metadata"]["name"].startswith("pool-") for o in objs)
    ]
    assert pool_manifests and all(policy_id in t["Resources"][lid].get("DependsOn", []) for lid in pool_manifests)
    # Farm B (another stack): its own Policy there, attached to the same role by name (an import of the role's ARN),
    # so the platform's stack never refers back to a farm's.
    (other,) = [
        p["Properties"]
        for p in resources(shared.other, "AWS::IAM::Policy").values()
        if role_id in json.dumps(p["Properties"].get("Roles", []))
    ]
    (get,) = [s for s in read_statements(other) if s["Action"] == "s3:GetObject"]
    assert json.dumps(get["Resource"]).endswith('"/farm/*"]]}') and "Fn::GetAtt" in json.dumps(
        get["Resource"]
    )  # FarmB's own bucket
    assert "FarmB" not in json.dumps(t)


def test_cdk_nag_and_cfn_lint_are_clean(shared: Shared) -> None:
    assert [e for st in shared.stacks for e in nag_errors(st)] == []
    assert cfn_lint_errors(shared.platform) == [] and cfn_lint_errors(shared.other) == []


def test_the_addon_is_pinned_to_a_v2_build_with_pod_identity(shared: Shared) -> None:
    (addon,) = mountpoint_addons(shared.platform).values()
    assert addon["Properties"]["AddonVersion"] == MOUNTPOINT_VERSION
    m = re.fullmatch(r"v2\.(\d+)\.(\d+)-eksbuild\.\d+", MOUNTPOINT_VERSION)
    assert m and (int(m[1]), int(m[2])) >= (5, 0)
    assert {
        d for d in addon["DependsOn"] if d in resources(shared.platform, "AWS::EKS::Addon")
    }  # the Pod Identity agent
    assert any(
        d in resources(shared.platform, "AWS::EKS::Nodegroup") for d in addon["DependsOn"]
    )  # the controller's nodes


@pytest.mark.parametrize(
    "version,ok",
    [
        ("v2.7.0-eksbuild.1", True),
        ("v2.5.0-eksbuild.3", True),
        ("v2.10.0-eksbuild.1", True),
        ("v3.0.0-eksbuild.1", False),
        ("v2.4.1-eksbuild.1", False),
        ("v1.15.0-eksbuild.1", False),
        ("2.7.0", False),
        ("v2.7-eksbuild.1", False),
        (None, False),
    ],
)
def test_addon_versions_below_2_5_or_malformed_are_refused(version: str | None, ok: bool) -> None:
    settings = MountpointSettings(addon_version=version)  # type: ignore[arg-type]  # None: what the old prop allowed
    if ok:
        settings.validate()
    else:
        with pytest.raises(ValueError, match=r"mountpoint_version .*v2\.5\.0.*eks\.mountpoint_version"):
            settings.validate()


def chart_reads(template: str) -> set[str]:
    return set(re.findall(r"\.Values\.([A-Za-z0-9_.]+)", template))


def leaf_paths(value: Any, prefix: str = "") -> set[str]:
    """The value paths set by an add-on configuration: dicts are walked, lists and scalars are one value."""
    if isinstance(value, dict):
        return {p for k, v in value.items() for p in leaf_paths(v, f"{prefix}.{k}" if prefix else k)}
    return {prefix}


def test_controller_runs_on_the_tainted_system_nodes_with_keys_the_chart_reads(shared: Shared) -> None:
    (addon,) = mountpoint_addons(shared.platform).values()
    values = json.loads(addon["Properties"]["ConfigurationValues"])
    assert values == {
        "controller": {"tolerations": [SYSTEM_TAINT.toleration()], "nodeSelector": {SYSTEM_LABEL: "system"}}
    }
    # The system node group really carries that label and taint.
    (ng,) = resources(shared.platform, "AWS::EKS::Nodegroup").values()
    assert ng["Properties"]["Labels"] == {SYSTEM_LABEL: "system"}
    assert ng["Properties"]["Taints"] == [
        {"Effect": "NO_SCHEDULE", "Key": SYSTEM_TAINT.key, "Value": SYSTEM_TAINT.value}
    ]
    # Every key is one the upstream chart reads (templates/controller.yaml: `with .Values.controller.nodeSelector`,
    # `with .Values.controller.tolerations`), in a section its values.yaml declares.
    reads = chart_reads((UPSTREAM / "controller.yaml").read_text())
    unread = {p for p in leaf_paths(values) if not any(p == r or p.startswith(r + ".") for r in reads)}
    assert unread == set(), unread  # a map value (nodeSelector) is read whole: its own keys are the user's
    declared = yaml.safe_load((UPSTREAM / "values.yaml").read_text())
    assert {p.split(".")[0] for p in leaf_paths(values)} <= set(declared)
    assert (UPSTREAM / "ORIGIN.md").read_text().count("a2d4b067c1bbe3c171e1431cd063cfb59f672d95") == 1


def test_pool_capable_nodepools_carry_the_driver_startup_taint_and_validate(shared: Shared) -> None:
    pools = nodepools(shared.platform)
    assert {p["metadata"]["name"] for p in pools} == {"cpu-arm64", "cpu-amd64", "memory-optimized"}
    for p in pools:
        assert p["spec"]["template"]["spec"]["startupTaints"] == [STARTUP_TAINT], p["metadata"]["name"]
        assert crd_problems(p) == []


def test_model_farm_config_installs_the_pinned_driver_once_on_its_platform() -> None:
    """examples/model-farm-eks.yaml through the config mapping: the farm's platform installs the driver (with the
    startup taint on every default pool, the memory-optimized one included) and validates against the CRDs."""
    config = load(ROOT / "examples" / "model-farm-eks.yaml")
    props = platform_props(config)
    assert props.mountpoint == MountpointSettings()
    stack = cdk.Stack(cdk.App(), "FarmPlatform", env=ENV)
    EksPlatform(stack, "Platform", props=props)
    t = template_json(stack)
    (addon,) = mountpoint_addons(t).values()
    assert addon["Properties"]["AddonVersion"] == MOUNTPOINT_VERSION
    pools = nodepools(t)
    assert "memory-optimized" in {p["metadata"]["name"] for p in pools}
    for p in pools:
        assert STARTUP_TAINT in p["spec"]["template"]["spec"]["startupTaints"]
        assert crd_problems(p) == []


def test_slm_prefilter_platform_has_no_driver_and_no_startup_taint() -> None:
    props = platform_props(load(ROOT / "config.yaml"))
    assert props.mountpoint is None
    stack = cdk.Stack(cdk.App(), "SlmPlatform", env=ENV)
    EksPlatform(stack, "Platform", props=props)
    t = template_json(stack)
    assert mountpoint_addons(t) == {}
    assert all("startupTaints" not in p["spec"]["template"]["spec"] for p in nodepools(t))


def test_a_cluster_that_already_runs_the_driver_gets_no_addon_and_its_role_is_granted() -> None:
    app = cdk.App()
    apply_nag(app)
    stack = cdk.Stack(app, "Existing", env=ENV)
    platform = EksPlatform(
        stack,
        "Platform",
        props=EksPlatformProps(
            mountpoint=MountpointSettings(install_mountpoint_addon=False, driver_role_arn=EXISTING_ROLE)
        ),
    )
    f = farm(stack, "Farm", platform)
    assert f.mountpoint is platform.mountpoint and platform.mountpoint is not None and platform.mountpoint.addon is None
    synth(app)
    assert nag_errors(stack) == []
    t = template_json(stack)
    assert mountpoint_addons(t) == {}
    # No startup taint: a driver we did not install may predate v2.1.0, which removes it (and then nothing would).
    assert all("startupTaints" not in p["spec"]["template"]["spec"] for p in nodepools(t))
    (pol,) = policies_of(t, "S3CsiDriver")
    assert {s["Action"] for s in pol["PolicyDocument"]["Statement"] if isinstance(s["Action"], str)} >= {
        "s3:GetObject",
        "s3:ListBucket",
    }


def test_mistakes_fail_with_the_fix() -> None:
    with pytest.raises(
        ValueError, match=r"install_mountpoint_addon=False needs driver_role_arn.*eks\.mountpoint_driver_role_arn"
    ):
        MountpointSettings(install_mountpoint_addon=False).validate()
    with pytest.raises(ValueError, match=r"driver_role_arn .* only with install_mountpoint_addon=False"):
        MountpointSettings(driver_role_arn=EXISTING_ROLE).validate()
    with pytest.raises(ValueError, match="IAM role ARN"):
        MountpointSettings(install_mountpoint_addon=False, driver_role_arn="S3CsiDriver").validate()
    with pytest.raises(ValueError, match="mountpoint_version"):
        EksPlatformProps(mountpoint=MountpointSettings(addon_version="v2.3.0-eksbuild.1")).validate()
    stack = cdk.Stack(cdk.App(), "NoDriver", env=ENV)
    bare = EksPlatform(stack, "Platform")  # built for an SLM pre-filter: no Mountpoint
    with pytest.raises(
        ValueError, match=r"existing_platform has no Mountpoint .*EksPlatformProps\(mountpoint=MountpointSettings\(\)\)"
    ):
        farm(stack, "Farm", bare)
