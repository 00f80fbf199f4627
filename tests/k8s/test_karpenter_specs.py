"""Karpenter specs: defaults render to objects the upstream v1.14.1 CRDs accept, and mistakes the CRDs'
CEL rules would reject at `kubectl apply` fail at synth with a precise message."""

from __future__ import annotations

import pytest

from cpu_inference.config.schema import Eks
from cpu_inference.k8s.specs.default_node_pools import MEMORY_TAINT, default_node_pools
from cpu_inference.k8s.specs.karpenter_node_class import BlockDevice, EC2NodeClassSpec
from cpu_inference.k8s.specs.karpenter_node_pool import Budget, Disruption, NodePoolSpec, Requirement, Taint
from cpu_inference.k8s.specs.karpenter_rules import family_architecture
from tests.support.k8s import validate_custom


def node_class(**kw: object) -> EC2NodeClassSpec:
    base: dict[str, object] = {
        "name": "al2023",
        "role": "KarpenterNodeRole-demo",
        "ami_selector_terms": ({"alias": "al2023@v20250101"},),
        "subnet_selector_terms": ({"tags": {"karpenter.sh/discovery": "demo"}},),
        "security_group_selector_terms": ({"id": "sg-0123456789abcdef0"},),
    }
    base.update(kw)
    return EC2NodeClassSpec(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("family", "arch"),
    [
        ("c7g", "arm64"),
        ("c7gn", "arm64"),
        ("r8gd", "arm64"),
        ("m7g", "arm64"),
        ("c7a", "amd64"),
        ("m7i", "amd64"),
        ("m7i-flex", "amd64"),
        ("r7iz", "amd64"),
    ],
)
def test_family_architecture(family: str, arch: str) -> None:
    assert family_architecture(family) == arch


def test_family_architecture_rejects_non_families() -> None:
    with pytest.raises(ValueError, match="not an EC2 instance family"):
        family_architecture("c7g.large")


def test_default_pools_follow_the_config_eks_section() -> None:
    cfg = Eks()
    pools = default_node_pools(
        "bottlerocket-soci",
        architectures=cfg.architectures,
        capacity_types=cfg.capacity_types,
        instance_families=cfg.instance_families,
        max_node_cpu=cfg.max_node_cpu,
        consolidation_budget=cfg.consolidation_budget,
    )
    by_name = {p.name: p for p in pools}
    assert set(by_name) == {"cpu-arm64", "cpu-amd64", "memory-optimized"}
    arm = by_name["cpu-arm64"]
    assert set(arm.instance_families) == {f for f in cfg.instance_families if family_architecture(f) == "arm64"}
    assert set(by_name["cpu-amd64"].instance_families) == {
        f for f in cfg.instance_families if family_architecture(f) == "amd64"
    }
    assert (
        arm.weight is not None and by_name["cpu-amd64"].weight is not None and arm.weight > by_name["cpu-amd64"].weight
    )
    d = arm.to_dict()
    reqs = {r["key"]: r for r in d["spec"]["template"]["spec"]["requirements"]}
    # One pool listing both capacity types = Spot preferred, On-Demand fallback (Karpenter v1).
    assert reqs["karpenter.sh/capacity-type"]["values"] == ["spot", "on-demand"]
    assert reqs["karpenter.k8s.aws/instance-category"]["values"] == ["c", "m", "r"]
    assert reqs["karpenter.k8s.aws/instance-generation"]["operator"] == "Gt"
    assert reqs["karpenter.k8s.aws/instance-generation"]["values"] == ["6"]
    assert d["spec"]["limits"] == {"cpu": "256"}
    assert d["spec"]["disruption"]["budgets"] == [{"nodes": "20%"}]
    assert d["spec"]["template"]["spec"]["expireAfter"] == "720h"
    memory = by_name["memory-optimized"].to_dict()
    assert memory["spec"]["template"]["spec"]["taints"] == [MEMORY_TAINT.to_dict()]
    mem_reqs = {r["key"]: r for r in memory["spec"]["template"]["spec"]["requirements"]}
    assert mem_reqs["karpenter.k8s.aws/instance-category"]["values"] == ["r"]


def test_default_pools_single_architecture_and_on_demand_only() -> None:
    (pool, memory) = default_node_pools(
        "nc", architectures=["arm64"], capacity_types=["on-demand"], instance_families=["c8g", "r8g"]
    )
    assert pool.name == "cpu-arm64" and pool.weight is None and pool.capacity_types == ("on-demand",)
    assert memory.instance_families == ("r8g",)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"architectures": ["arm64"], "instance_families": ["c7g", "c7a"]},
            "c7a is amd64 but architectures lists only",
        ),
        (
            {"architectures": ["arm64", "amd64"], "instance_families": ["c7g"]},
            r"no instance family for architecture\(s\) \['amd64'\]",
        ),
        ({"instance_families": ["c6g", "c7a"]}, "c6g is outside the CPU-inference pools"),
        ({"instance_families": ["t4g", "c7a"]}, "t4g is outside"),
        (
            {"instance_families": ["c7g", "c7a"], "instance_types": ["m7g.large"]},
            "m7g.large is not in instance_families",
        ),
        ({"instance_families": ["c7g", "c7a"], "consolidation_budget": "120%"}, "disruption budget nodes '120%'"),
    ],
)
def test_default_pools_reject_inconsistent_inputs(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        for p in default_node_pools("nc", **kwargs):  # type: ignore[arg-type]
            p.to_dict()


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (NodePoolSpec("Bad_Name", "nc"), "not a DNS subdomain"),
        (NodePoolSpec("p", "nc", architectures=("x86",)), "architectures"),
        (NodePoolSpec("p", "nc", capacity_types=("cheap",)), "capacity_types"),
        (NodePoolSpec("p", "nc", architectures=("amd64",), instance_families=("c7g",)), "c7g is arm64"),
        (
            NodePoolSpec("p", "nc", extra_requirements=(Requirement("karpenter.sh/nodepool", "In", ("x",)),)),
            "reserved by Karpenter",
        ),
        (
            NodePoolSpec("p", "nc", extra_requirements=(Requirement("karpenter.k8s.aws/secret", "Exists"),)),
            "restricted karpenter.k8s.aws",
        ),
        (
            NodePoolSpec("p", "nc", extra_requirements=(Requirement("team", "In"),)),
            "operator In needs at least one value",
        ),
        (
            NodePoolSpec("p", "nc", extra_requirements=(Requirement("karpenter.k8s.aws/instance-cpu", "Gt", ("a",)),)),
            "non-negative integer",
        ),
        (NodePoolSpec("p", "nc", labels={"karpenter.sh/custom": "x"}), "karpenter.sh domain"),
        (NodePoolSpec("p", "nc", taints=(Taint("k", "v", "Sometimes"),)), "effect 'Sometimes'"),
        (NodePoolSpec("p", "nc", disruption=Disruption(consolidation_policy="Always")), "consolidationPolicy"),
        (NodePoolSpec("p", "nc", disruption=Disruption(consolidate_after="1 minute")), "consolidateAfter"),
        (
            NodePoolSpec("p", "nc", disruption=Disruption(budgets=(Budget("10%", schedule="@daily"),))),
            "schedule and duration",
        ),
        (NodePoolSpec("p", "nc", expire_after="30d"), "expireAfter"),
        (NodePoolSpec("p", "nc", weight=101), "weight 101"),
    ],
)
def test_node_pool_rejects_what_the_crd_would(spec: NodePoolSpec, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        spec.to_dict()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"role": ""}, "role cannot be empty"),
        ({"ami_selector_terms": ({"alias": "bottlerocket@v1.64.0"}, {"id": "ami-123"})}, "only term"),
        ({"ami_selector_terms": ({"alias": "ubuntu@22.04"},)}, "family@version"),
        ({"ami_selector_terms": ({"tags": {"team": "x"}},)}, "set ami_family"),
        ({"subnet_selector_terms": ()}, "subnetSelectorTerms cannot be empty"),
        ({"security_group_selector_terms": ({"owner": "me"},)}, "securityGroupSelectorTerms entry needs"),
        ({"subnet_selector_terms": ({"tags": {"k": ""}},)}, "non-empty keys and values"),
        ({"tags": {"kubernetes.io/cluster/demo": "owned"}}, "reserved by Karpenter"),
        ({"block_device_mappings": (BlockDevice("/dev/xvda", volume_size="10G"),)}, "whole GiB"),
        ({"block_device_mappings": (BlockDevice("/dev/xvda", iops=1000),)}, "iops 1000"),
        (
            {"block_device_mappings": (BlockDevice("/dev/xvda", volume_type="io2", throughput=500),)},
            "only configurable on gp3",
        ),
        ({"block_device_mappings": (BlockDevice("/dev/xvda", volume_size=None),)}, "set volume_size or snapshot_id"),
        (
            {
                "block_device_mappings": (
                    BlockDevice("/dev/xvda", root_volume=True),
                    BlockDevice("/dev/xvdb", root_volume=True),
                )
            },
            "only one block device",
        ),
    ],
)
def test_node_class_rejects_what_the_crd_would(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        node_class(**kwargs).to_dict()


def test_rendered_objects_validate_against_upstream_crds() -> None:
    objs = [p.to_dict() for p in default_node_pools("nc")]
    objs.append(
        NodePoolSpec(
            "everything",
            "nc",
            architectures=("arm64", "amd64"),
            instance_types=("c7g.xlarge", "c7a.xlarge"),
            extra_requirements=(
                Requirement("karpenter.k8s.aws/instance-cpu", "Lte", ("16",)),
                Requirement("topology.kubernetes.io/zone", "NotIn", ("us-east-1e",)),
            ),
            labels={"team": "ml"},
            taints=(Taint("dedicated", "llm"),),
            startup_taints=(Taint("warming", None, "NoExecute"),),
            disruption=Disruption("WhenEmpty", "5m", (Budget("2"), Budget("0", ("Drifted",), "0 9 * * mon-fri", "8h"))),
            limit_cpu=64,
            limit_memory="256Gi",
            weight=50,
            expire_after="Never",
            termination_grace_period="1h",
        ).to_dict()
    )
    objs.append(
        node_class(
            block_device_mappings=(
                BlockDevice(
                    "/dev/xvda",
                    volume_size="50Gi",
                    root_volume=True,
                    kms_key_id="arn:aws:kms:us-east-1:123456789012:key/abc",
                ),
            ),
            tags={"team": "ml"},
            kubelet={"maxPods": 110},
            detailed_monitoring=True,
        ).to_dict()
    )
    assert [p for o in objs for p in validate_custom(o)] == []


def test_the_crd_check_is_not_vacuous() -> None:
    """A hand-broken object must fail the same validation the specs pass."""
    broken = NodePoolSpec("p", "nc").to_dict()
    broken["spec"]["disruption"]["consolidationPolicy"] = "Always"
    del broken["spec"]["template"]["spec"]["nodeClassRef"]
    problems = validate_custom(broken)
    assert any("consolidationPolicy" in p for p in problems) and any("nodeClassRef" in p for p in problems)
