"""The upstream CRDs' CEL rules (`x-kubernetes-validations`, ../shared/crds) evaluated on what the project renders,
as the API server would evaluate them (cpu_inference.testing.crd_cel, cel-expr-python):

(a) every NodePool, EC2NodeClass, ScaledObject and TriggerAuthentication the project deploys — from the EKS
    platform construct for each shipped config, from every shipped EKS config's whole app (built, not
    synthesized: the objects are resolved from the KubernetesManifest resources), and from the spec helpers
    directly — passes every rule;
(b) objects that break a specific upstream rule are rejected with that rule's own message from the CRD file;
(c) every rule in the four CRDs compiles and is evaluated at least once (rendered objects + fixtures).
"""

from __future__ import annotations

import copy
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
import yaml
from aws_cdk import aws_eks_v2 as eks

from cpu_inference.config import load
from cpu_inference.k8s import AwsTriggerAuthentication, BottlerocketNodeClass, llama_queue_scaled_object
from cpu_inference.k8s.specs.default_node_pools import default_node_pools
from cpu_inference.testing.crd_cel import Rule, RuleChecker, schema_rules, validate_rules
from cpu_inference.testing.crd_validation import MANIFEST_TYPE, load_schemas, template_objects, validate
from tests.support.k8s import SHARED_CRDS

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = [ROOT / "config.yaml", *sorted((ROOT / "examples").glob("*.yaml"))]
KINDS = {
    ("karpenter.sh/v1", "NodePool"),
    ("karpenter.k8s.aws/v1", "EC2NodeClass"),
    ("keda.sh/v1alpha1", "ScaledObject"),
    ("keda.sh/v1alpha1", "TriggerAuthentication"),
}
ENV = cdk.Environment(account="123456789012", region="us-east-1")


@pytest.fixture(scope="module")
def schemas() -> dict[tuple[str, str], dict[str, Any]]:
    out = load_schemas([SHARED_CRDS])
    assert set(out) >= KINDS, sorted(out)
    return out


def key(obj: dict[str, Any]) -> tuple[str, str]:
    return obj["apiVersion"], obj["kind"]


def ours(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for o in objs if key(o) in KINDS]


# --- what the project renders -----------------------------------------------------------------------------


def manifest_objects(root: cdk.App | cdk.Stack) -> list[dict[str, Any]]:
    """Every object of every KubernetesManifest under `root`, resolved as CloudFormation would receive it."""
    resources = {}
    for c in root.node.find_all():
        if isinstance(c, eks.KubernetesManifest):
            (cfn,) = [x for x in c.node.find_all() if isinstance(x, cdk.CfnResource)]
            resources[c.node.path] = {
                "Type": MANIFEST_TYPE,
                "Properties": cdk.Stack.of(cfn).resolve(cfn._cfn_properties),
            }
    return template_objects({"Resources": resources})


def eks_configs() -> list[Path]:
    return [p for p in CONFIGS if load(p).target == "eks"]


def platform_objects(config_path: Path) -> list[dict[str, Any]]:
    from cpu_inference.patterns import EksPlatform
    from cpu_inference.patterns.from_config import platform_props

    stack = cdk.Stack(cdk.App(), "Platform", env=ENV)
    EksPlatform(stack, "Platform", props=platform_props(load(config_path)))
    return ours(manifest_objects(stack))


def app_objects(config_path: Path) -> list[dict[str, Any]]:
    from cpu_inference.app import build_app

    app, _ = build_app(load(config_path), app=cdk.App())
    return ours(manifest_objects(app))


def node_class(**overrides: Any) -> BottlerocketNodeClass:
    kwargs: dict[str, Any] = dict(
        name="bottlerocket-soci",
        role="KarpenterNodeRole-demo",
        subnet_selector_terms=({"tags": {"karpenter.sh/discovery": "demo"}},),
        security_group_selector_terms=({"tags": {"aws:eks:cluster-name": "demo"}},),
    )
    kwargs.update(overrides)
    return BottlerocketNodeClass(**kwargs)


def spec_objects() -> dict[str, dict[str, Any]]:
    """The spec helpers' objects directly, in the variants the constructs use."""
    out: dict[str, dict[str, Any]] = {
        "ec2nodeclass": node_class().to_dict(),
        "ec2nodeclass-kms": node_class(kms_key_id="arn:aws:kms:us-east-1:123456789012:key/abc").to_dict(),
        "triggerauthentication": AwsTriggerAuthentication(name="amp-sigv4", namespace="inference").to_dict(),
        "scaledobject": llama_queue_scaled_object(
            "m",
            "inference",
            "m",
            server_address="http://prometheus-server.monitoring.svc",
            series_labels={"app": "m"},
            slots=15,
        ).to_dict(),
        "scaledobject-amp": llama_queue_scaled_object(
            "m",
            "inference",
            "m",
            server_address="https://aps-workspaces.us-east-1.amazonaws.com/workspaces/ws-1",
            series_labels={"app": "m"},
            aws_region="us-east-1",
            authentication_ref="amp-sigv4",
            slots=15,
        ).to_dict(),
    }
    variants = {
        "default": {},
        "no-memory-pool": {"memory_pool": False},
        "amd64-on-demand": {
            "architectures": ("amd64",),
            "capacity_types": ("on-demand",),
            "instance_families": ("c7a", "m7i"),
        },
        "instance-types": {"instance_types": ("c7g.4xlarge", "m7g.2xlarge")},
    }
    for label, kw in variants.items():
        for pool in default_node_pools("bottlerocket-soci", **kw):
            out[f"nodepool-{label}-{pool.name}"] = pool.to_dict()
    return out


@pytest.fixture(scope="module")
def base(schemas) -> dict[str, dict[str, Any]]:
    """A valid object of each kind (checked here) to mutate."""
    objs = spec_objects()
    out = {
        "NodePool": objs["nodepool-default-cpu-arm64"],
        "EC2NodeClass": objs["ec2nodeclass"],
        "ScaledObject": objs["scaledobject"],
        "TriggerAuthentication": objs["triggerauthentication"],
    }
    for obj in out.values():
        assert validate(obj, schemas) == []
    return out


def assert_all_pass(objs: list[dict[str, Any]], schemas: dict[tuple[str, str], dict[str, Any]]) -> None:
    problems = [p for o in objs for p in validate(o, schemas)]
    assert problems == [], "\n".join(problems)


def test_spec_helper_objects_pass_every_rule(schemas) -> None:
    objs = list(spec_objects().values())
    assert {key(o) for o in objs} == KINDS
    assert_all_pass(objs, schemas)


@pytest.mark.parametrize("config", eks_configs(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_platform_construct_objects_pass_every_rule(config: Path, schemas) -> None:
    """The EksPlatform construct for each shipped config: its EC2NodeClass and NodePools as deployed."""
    objs = platform_objects(config)
    assert {k for _, k in map(key, objs)} == {"EC2NodeClass", "NodePool"}
    assert_all_pass(objs, schemas)


@pytest.mark.parametrize("config", eks_configs(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_shipped_config_app_objects_pass_every_rule(config: Path, schemas) -> None:
    """The whole app for each shipped EKS config (built, not synthesized): platform + workloads' ScaledObjects
    and TriggerAuthentications."""
    objs = app_objects(config)
    kinds = {k for _, k in map(key, objs)}
    assert {"EC2NodeClass", "NodePool", "ScaledObject"} <= kinds, kinds
    if load(config).eks.prometheus == "amp":  # KEDA signs AMP queries with a TriggerAuthentication
        assert "TriggerAuthentication" in kinds, kinds
    assert_all_pass(objs, schemas)


# --- (b) one object per upstream rule it breaks -----------------------------------------------------------

Mutation = Callable[[dict[str, Any]], None]


def requirement(key_: str, operator: str = "In", values: tuple[str, ...] = ("x",), **extra: Any) -> Mutation:
    def mutate(o: dict[str, Any]) -> None:
        o["spec"]["template"]["spec"]["requirements"].append(
            {"key": key_, "operator": operator, "values": list(values), **extra}
        )

    return mutate


def template_label(name: str) -> Mutation:
    def mutate(o: dict[str, Any]) -> None:
        o["spec"]["template"].setdefault("metadata", {}).setdefault("labels", {})[name] = "x"

    return mutate


def spec_set(**fields: Any) -> Mutation:
    def mutate(o: dict[str, Any]) -> None:
        o["spec"].update(copy.deepcopy(fields))

    return mutate


def spec_del(*names: str) -> Mutation:
    def mutate(o: dict[str, Any]) -> None:
        for n in names:
            del o["spec"][n]

    return mutate


def both(*mutations: Mutation) -> Mutation:
    def mutate(o: dict[str, Any]) -> None:
        for m in mutations:
            m(o)

    return mutate


def budget(**b: Any) -> Mutation:
    def mutate(o: dict[str, Any]) -> None:
        o["spec"]["disruption"]["budgets"].append(b)

    return mutate


def node_class_ref(**ref: str) -> Mutation:
    def mutate(o: dict[str, Any]) -> None:
        o["spec"]["template"]["spec"]["nodeClassRef"].update(ref)

    return mutate


def root_volume(count: int) -> Mutation:
    def mutate(o: dict[str, Any]) -> None:
        for bdm in o["spec"]["blockDeviceMappings"][:count]:
            bdm["rootVolume"] = True

    return mutate


def ebs(**fields: Any) -> Mutation:
    def mutate(o: dict[str, Any]) -> None:
        o["spec"]["blockDeviceMappings"][0]["ebs"] = dict(fields)

    return mutate


# (id, kind, mutation, schema location of the rule, a distinctive fragment of that rule's text)
VIOLATIONS: list[tuple[str, str, Mutation, str, str]] = [
    (
        "requirement-nodepool-label",
        "NodePool",
        requirement("karpenter.sh/nodepool"),
        "spec.template.spec.requirements[*].key",
        'self != "karpenter.sh/nodepool"',
    ),
    (
        "requirement-hostname",
        "NodePool",
        requirement("kubernetes.io/hostname"),
        "spec.template.spec.requirements[*].key",
        'self != "kubernetes.io/hostname"',
    ),
    (
        "requirement-karpenter-sh-domain",
        "NodePool",
        requirement("team.karpenter.sh/x"),
        "spec.template.spec.requirements[*].key",
        'endsWith("karpenter.sh")',
    ),
    (
        "requirement-karpenter-k8s-aws-domain",
        "NodePool",
        requirement("karpenter.k8s.aws/made-up"),
        "spec.template.spec.requirements[*].key",
        'endsWith("karpenter.k8s.aws")',
    ),
    (
        "requirement-in-without-values",
        "NodePool",
        requirement("example.com/x", values=()),
        "spec.template.spec.requirements",
        "x.values.size() != 0",
    ),
    (
        "requirement-gt-two-values",
        "NodePool",
        requirement("example.com/x", "Gt", ("1", "2")),
        "spec.template.spec.requirements",
        "int(x.values[0]) >= 0",
    ),
    (
        "requirement-min-values",
        "NodePool",
        requirement("example.com/x", values=("a",), minValues=2),
        "spec.template.spec.requirements",
        "x.values.size() >= x.minValues",
    ),
    (
        "template-label-nodepool",
        "NodePool",
        template_label("karpenter.sh/nodepool"),
        "spec.template.metadata.labels",
        'x != "karpenter.sh/nodepool"',
    ),
    (
        "template-label-hostname",
        "NodePool",
        template_label("kubernetes.io/hostname"),
        "spec.template.metadata.labels",
        'x != "kubernetes.io/hostname"',
    ),
    (
        "template-label-karpenter-sh-domain",
        "NodePool",
        template_label("karpenter.sh/made-up"),
        "spec.template.metadata.labels",
        'endsWith("karpenter.sh")',
    ),
    (
        "template-label-karpenter-k8s-aws-domain",
        "NodePool",
        template_label("karpenter.k8s.aws/made-up"),
        "spec.template.metadata.labels",
        'endsWith("karpenter.k8s.aws")',
    ),
    (
        "budget-schedule-without-duration",
        "NodePool",
        budget(nodes="0", schedule="0 9 * * mon-fri"),
        "spec.disruption.budgets",
        "has(x.schedule) == has(x.duration)",
    ),
    (
        "budget-duration-without-schedule",
        "NodePool",
        budget(nodes="0", duration="8h"),
        "spec.disruption.budgets",
        "has(x.schedule) == has(x.duration)",
    ),
    (
        "static-pool-with-cpu-limit",
        "NodePool",
        both(spec_set(replicas=2), spec_del("weight")),
        "spec",
        "'nodes' in self.limits",
    ),
    (
        "static-pool-with-weight",
        "NodePool",
        both(spec_set(replicas=2, limits={"nodes": 2})),
        "spec",
        "!has(self.weight)",
    ),
    (
        "empty-node-class-name",
        "NodePool",
        node_class_ref(name=""),
        "spec.template.spec.nodeClassRef.name",
        "self != ''",
    ),
    (
        "empty-node-class-kind",
        "NodePool",
        node_class_ref(kind=""),
        "spec.template.spec.nodeClassRef.kind",
        "self != ''",
    ),
    (
        "empty-node-class-group",
        "NodePool",
        node_class_ref(group=""),
        "spec.template.spec.nodeClassRef.group",
        "self != ''",
    ),
    (
        "role-and-instance-profile",
        "EC2NodeClass",
        spec_set(instanceProfile="KarpenterNodeInstanceProfile"),
        "spec",
        "has(self.role) && !has(self.instanceProfile)",
    ),
    (
        "neither-role-nor-instance-profile",
        "EC2NodeClass",
        spec_del("role"),
        "spec",
        "has(self.role) && !has(self.instanceProfile)",
    ),
    ("empty-role", "EC2NodeClass", spec_set(role=""), "spec.role", "self != ''"),
    (
        "empty-instance-profile",
        "EC2NodeClass",
        both(spec_del("role"), spec_set(instanceProfile="")),
        "spec.instanceProfile",
        "self != ''",
    ),
    (
        "alias-and-id-in-one-term",
        "EC2NodeClass",
        spec_set(amiSelectorTerms=[{"alias": "bottlerocket@latest", "id": "ami-0123456789abcdef0"}]),
        "spec.amiSelectorTerms",
        "!self.exists(x, has(x.id) && ",
    ),
    (
        "alias-with-tags-in-one-term",
        "EC2NodeClass",
        spec_set(amiSelectorTerms=[{"alias": "bottlerocket@latest", "tags": {"a": "b"}}]),
        "spec.amiSelectorTerms",
        "!self.exists(x, has(x.alias) && ",
    ),
    (
        "alias-with-a-second-term",
        "EC2NodeClass",
        spec_set(amiSelectorTerms=[{"alias": "bottlerocket@latest"}, {"id": "ami-0123456789abcdef0"}]),
        "spec.amiSelectorTerms",
        "self.size() != 1",
    ),
    (
        "empty-ami-term",
        "EC2NodeClass",
        spec_set(amiSelectorTerms=[{"owner": "self"}]),
        "spec.amiSelectorTerms",
        "has(x.ssmParameter)",
    ),
    (
        "alias-without-version",
        "EC2NodeClass",
        spec_set(amiSelectorTerms=[{"alias": "bottlerocket"}]),
        "spec.amiSelectorTerms[*].alias",
        "self.matches(",
    ),
    (
        "alias-unknown-family",
        "EC2NodeClass",
        spec_set(amiSelectorTerms=[{"alias": "ubuntu@latest"}]),
        "spec.amiSelectorTerms[*].alias",
        "self.split('@')[0] in ['al2',",
    ),
    (
        "alias-windows-pinned",
        "EC2NodeClass",
        spec_set(amiSelectorTerms=[{"alias": "windows2022@v20240101"}]),
        "spec.amiSelectorTerms[*].alias",
        "self.split('@')[1] == 'latest'",
    ),
    (
        "ami-term-empty-tag",
        "EC2NodeClass",
        spec_set(amiSelectorTerms=[{"tags": {"team": ""}}], amiFamily="Bottlerocket"),
        "spec.amiSelectorTerms[*].tags",
        "self[k] != ''",
    ),
    (
        "ami-id-without-family",
        "EC2NodeClass",
        spec_set(amiSelectorTerms=[{"id": "ami-0123456789abcdef0"}]),
        "spec",
        "? true : has(self.amiFamily)",
    ),
    ("family-al2-with-bottlerocket-alias", "EC2NodeClass", spec_set(amiFamily="AL2"), "spec", "== 'bottlerocket') ?"),
    (
        "family-bottlerocket-with-al2-alias",
        "EC2NodeClass",
        spec_set(amiFamily="Bottlerocket", amiSelectorTerms=[{"alias": "al2@latest"}]),
        "spec",
        "== 'al2') ?",
    ),
    (
        "family-bottlerocket-with-al2023-alias",
        "EC2NodeClass",
        spec_set(amiFamily="Bottlerocket", amiSelectorTerms=[{"alias": "al2023@latest"}]),
        "spec",
        "== 'al2023') ?",
    ),
    (
        "family-bottlerocket-with-windows2019-alias",
        "EC2NodeClass",
        spec_set(amiFamily="Bottlerocket", amiSelectorTerms=[{"alias": "windows2019@latest"}]),
        "spec",
        "== 'windows2019') ?",
    ),
    (
        "family-bottlerocket-with-windows2022-alias",
        "EC2NodeClass",
        spec_set(amiFamily="Bottlerocket", amiSelectorTerms=[{"alias": "windows2022@latest"}]),
        "spec",
        "== 'windows2022') ?",
    ),
    (
        "family-bottlerocket-with-windows2025-alias",
        "EC2NodeClass",
        spec_set(amiFamily="Bottlerocket", amiSelectorTerms=[{"alias": "windows2025@latest"}]),
        "spec",
        "== 'windows2025') ?",
    ),
    (
        "no-subnet-terms",
        "EC2NodeClass",
        spec_set(subnetSelectorTerms=[]),
        "spec.subnetSelectorTerms",
        "self.size() != 0",
    ),
    (
        "empty-subnet-term",
        "EC2NodeClass",
        spec_set(subnetSelectorTerms=[{}]),
        "spec.subnetSelectorTerms",
        "has(x.tags) || has(x.id))",
    ),
    (
        "subnet-id-and-tags",
        "EC2NodeClass",
        spec_set(subnetSelectorTerms=[{"id": "subnet-0123", "tags": {"a": "b"}}]),
        "spec.subnetSelectorTerms",
        "has(x.id) && has(x.tags)",
    ),
    (
        "subnet-empty-tag",
        "EC2NodeClass",
        spec_set(subnetSelectorTerms=[{"tags": {"": "x"}}]),
        "spec.subnetSelectorTerms[*].tags",
        "self[k] != ''",
    ),
    (
        "no-security-group-terms",
        "EC2NodeClass",
        spec_set(securityGroupSelectorTerms=[]),
        "spec.securityGroupSelectorTerms",
        "self.size() != 0",
    ),
    (
        "empty-security-group-term",
        "EC2NodeClass",
        spec_set(securityGroupSelectorTerms=[{}]),
        "spec.securityGroupSelectorTerms",
        "has(x.tags) || has(x.id) || has(x.name))",
    ),
    (
        "security-group-id-and-name",
        "EC2NodeClass",
        spec_set(securityGroupSelectorTerms=[{"id": "sg-0123", "name": "web"}]),
        "spec.securityGroupSelectorTerms",
        "has(x.id) && (has(x.tags) || has(x.name))",
    ),
    (
        "security-group-name-and-tags",
        "EC2NodeClass",
        spec_set(securityGroupSelectorTerms=[{"name": "web", "tags": {"a": "b"}}]),
        "spec.securityGroupSelectorTerms",
        "has(x.name) && (has(x.tags) || has(x.id))",
    ),
    (
        "security-group-empty-tag",
        "EC2NodeClass",
        spec_set(securityGroupSelectorTerms=[{"tags": {"a": ""}}]),
        "spec.securityGroupSelectorTerms[*].tags",
        "self[k] != ''",
    ),
    (
        "capacity-reservation-empty-term",
        "EC2NodeClass",
        spec_set(capacityReservationSelectorTerms=[{"ownerID": "123456789012"}]),
        "spec.capacityReservationSelectorTerms",
        "self.all(x, has(x.tags) || has(x.id) || has(x.instanceMatchCriteria))",
    ),
    (
        "capacity-reservation-id-and-owner",
        "EC2NodeClass",
        spec_set(capacityReservationSelectorTerms=[{"id": "cr-0123456789abcdef0", "ownerID": "123456789012"}]),
        "spec.capacityReservationSelectorTerms",
        "!self.all(x, has(x.id) &&",
    ),
    (
        "capacity-reservation-empty-tag",
        "EC2NodeClass",
        spec_set(capacityReservationSelectorTerms=[{"tags": {"a": ""}}]),
        "spec.capacityReservationSelectorTerms[*].tags",
        "self[k] != ''",
    ),
    ("two-root-volumes", "EC2NodeClass", root_volume(2), "spec.blockDeviceMappings", "x.rootVolume==true"),
    (
        "ebs-without-size-or-snapshot",
        "EC2NodeClass",
        ebs(volumeType="gp3"),
        "spec.blockDeviceMappings[*].ebs",
        "has(self.snapshotID) || has(self.volumeSize)",
    ),
    (
        "ebs-init-rate-without-snapshot",
        "EC2NodeClass",
        ebs(volumeSize="20Gi", volumeInitializationRate=200),
        "spec.blockDeviceMappings[*].ebs",
        "has(self.volumeInitializationRate)",
    ),
    (
        "connection-tracking-empty",
        "EC2NodeClass",
        spec_set(associatePublicIPAddress=False, connectionTracking={}),
        "spec.connectionTracking",
        "has(self.tcpEstablishedTimeout)",
    ),
    (
        "no-primary-network-interface",
        "EC2NodeClass",
        spec_set(networkInterfaces=[{"networkCardIndex": 0, "deviceIndex": 1, "interfaceType": "interface"}]),
        "spec.networkInterfaces",
        "x.deviceIndex == 0 && x.networkCardIndex == 0",
    ),
    (
        "duplicate-network-interface",
        "EC2NodeClass",
        spec_set(networkInterfaces=[{"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "interface"}] * 2),
        "spec.networkInterfaces",
        "self.filter(y, x.networkCardIndex == y.networkCardIndex && x.deviceIndex == y.deviceIndex)",
    ),
    (
        "placement-group-empty",
        "EC2NodeClass",
        spec_set(placementGroupSelector={}),
        "spec.placementGroupSelector",
        "has(self.name) || has(self.id)",
    ),
    (
        "placement-group-name-and-id",
        "EC2NodeClass",
        spec_set(placementGroupSelector={"name": "pg", "id": "pg-0123456789abcdef0"}),
        "spec.placementGroupSelector",
        "!(has(self.name) && has(self.id))",
    ),
    ("tag-empty-key", "EC2NodeClass", spec_set(tags={"": "x"}), "spec.tags", "self.all(k, k != '')"),
    (
        "tag-eks-cluster-name",
        "EC2NodeClass",
        spec_set(tags={"eks:eks-cluster-name": "x"}),
        "spec.tags",
        "k !='eks:eks-cluster-name'",
    ),
    (
        "tag-kubernetes-io-cluster",
        "EC2NodeClass",
        spec_set(tags={"kubernetes.io/cluster/demo": "owned"}),
        "spec.tags",
        "startsWith('kubernetes.io/cluster')",
    ),
    (
        "tag-karpenter-nodepool",
        "EC2NodeClass",
        spec_set(tags={"karpenter.sh/nodepool": "x"}),
        "spec.tags",
        "k != 'karpenter.sh/nodepool'",
    ),
    (
        "tag-karpenter-nodeclaim",
        "EC2NodeClass",
        spec_set(tags={"karpenter.sh/nodeclaim": "x"}),
        "spec.tags",
        "k !='karpenter.sh/nodeclaim'",
    ),
    (
        "tag-karpenter-ec2nodeclass",
        "EC2NodeClass",
        spec_set(tags={"karpenter.k8s.aws/ec2nodeclass": "x"}),
        "spec.tags",
        "k !='karpenter.k8s.aws/ec2nodeclass'",
    ),
    (
        "min-above-max-replicas",
        "ScaledObject",
        spec_set(minReplicaCount=5, maxReplicaCount=4),
        "spec",
        "self.minReplicaCount <=",
    ),
    (
        "min-above-default-max",
        "ScaledObject",
        both(spec_set(minReplicaCount=101), spec_del("maxReplicaCount")),
        "spec",
        "self.minReplicaCount <=",
    ),
]


def find_rule(schema: dict[str, Any], location: str, fragment: str) -> Rule:
    (rule,) = [r for r in schema_rules(schema) if r.location == location and fragment in r.rule]
    return rule


@pytest.mark.parametrize(
    ("kind", "mutate", "location", "fragment"), [v[1:] for v in VIOLATIONS], ids=[v[0] for v in VIOLATIONS]
)
def test_an_object_breaking_a_rule_is_rejected_with_the_crds_message(
    kind, mutate, location, fragment, base, schemas
) -> None:
    obj = copy.deepcopy(base[kind])
    mutate(obj)
    schema = schemas[key(obj)]
    rule = find_rule(schema, location, fragment)
    problems = validate_rules(obj, schema)
    assert any(rule.message in p for p in problems), f"expected {rule.message!r} ({rule.rule}), got {problems}"
    # ...through the user-facing validator too, with the same text (no structural error blocks the rules here)
    assert any(rule.message in p for p in validate(obj, schemas))


def test_a_rule_that_errors_is_reported_with_its_message_not_passed(base, schemas) -> None:
    """A Gt requirement whose value is not an integer: int() fails, which the API server reports as an error."""
    obj = copy.deepcopy(base["NodePool"])
    requirement("example.com/x", "Gt", ("many",))(obj)
    rule = find_rule(schemas[key(obj)], "spec.template.spec.requirements", "int(x.values[0]) >= 0")
    (problem,) = validate_rules(obj, schemas[key(obj)])
    assert problem.startswith("spec.template.spec.requirements: Invalid value: ") and problem.endswith(
        f"evaluating rule: {rule.message}"
    )


# Update requests (transition rules, which a create never runs): (id, kind, mutation of the new object, rule fragment)
TRANSITIONS: list[tuple[str, str, Mutation, str]] = [
    ("node-class-kind-changed", "NodePool", node_class_ref(kind="OtherNodeClass"), "self.kind == oldSelf.kind"),
    ("node-class-group-changed", "NodePool", node_class_ref(group="example.com"), "self.group == oldSelf.group"),
    (
        "dynamic-to-static",
        "NodePool",
        both(spec_set(replicas=2, limits={"nodes": 2}), spec_del("weight")),
        "has(self.replicas) == has(oldSelf.replicas)",
    ),
]


@pytest.mark.parametrize(("kind", "mutate", "fragment"), [t[1:] for t in TRANSITIONS], ids=[t[0] for t in TRANSITIONS])
def test_transition_rules_run_on_update_only(kind, mutate, fragment, base, schemas) -> None:
    old = base[kind]
    new = copy.deepcopy(old)
    mutate(new)
    schema = schemas[key(new)]
    (rule,) = [r for r in schema_rules(schema) if fragment in r.rule]
    assert validate_rules(new, schema) == []  # create: oldSelf is absent, the transition rule does not run
    assert any(rule.message in p for p in validate_rules(new, schema, old=old))
    assert validate_rules(old, schema, old=old) == []  # an unchanged update passes


# Valid uses of the optional sections the project does not render: the rules must accept them (no false rejections).
VALID: list[tuple[str, str, Mutation]] = [
    (
        "instance-profile-instead-of-role",
        "EC2NodeClass",
        both(spec_del("role"), spec_set(instanceProfile="KarpenterNodeInstanceProfile")),
    ),
    (
        "al2023-alias-with-its-family",
        "EC2NodeClass",
        spec_set(amiSelectorTerms=[{"alias": "al2023@latest"}], amiFamily="AL2023"),
    ),
    (
        "windows-latest-with-custom-family",
        "EC2NodeClass",
        spec_set(amiSelectorTerms=[{"alias": "windows2022@latest"}], amiFamily="Custom"),
    ),
    (
        "ami-by-id-with-family",
        "EC2NodeClass",
        spec_set(amiSelectorTerms=[{"id": "ami-0123456789abcdef0"}], amiFamily="Bottlerocket"),
    ),
    (
        "capacity-reservation-by-id",
        "EC2NodeClass",
        spec_set(capacityReservationSelectorTerms=[{"id": "cr-0123456789abcdef0"}]),
    ),
    (
        "capacity-reservation-by-tags",
        "EC2NodeClass",
        spec_set(capacityReservationSelectorTerms=[{"tags": {"team": "ml"}}]),
    ),
    (
        "one-root-volume-from-snapshot",
        "EC2NodeClass",
        both(root_volume(1), ebs(snapshotID="snap-0123456789abcdef0", volumeInitializationRate=200)),
    ),
    (
        "connection-tracking",
        "EC2NodeClass",
        spec_set(associatePublicIPAddress=False, connectionTracking={"tcpEstablishedTimeout": 3600}),
    ),
    (
        "primary-interface-and-efa",
        "EC2NodeClass",
        spec_set(
            networkInterfaces=[
                {"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "interface"},
                {"networkCardIndex": 1, "deviceIndex": 0, "interfaceType": "efa-only"},
            ]
        ),
    ),
    ("placement-group-by-name", "EC2NodeClass", spec_set(placementGroupSelector={"name": "pg"})),
    ("tags", "EC2NodeClass", spec_set(tags={"team": "ml", "cost-center": "42"})),
    ("security-group-by-id", "EC2NodeClass", spec_set(securityGroupSelectorTerms=[{"id": "sg-0123"}])),
    ("subnet-by-id", "EC2NodeClass", spec_set(subnetSelectorTerms=[{"id": "subnet-0123"}])),
    ("static-pool-with-node-limit", "NodePool", both(spec_set(replicas=2, limits={"nodes": 3}), spec_del("weight"))),
    ("scheduled-budget", "NodePool", budget(nodes="0", schedule="0 9 * * mon-fri", duration="8h")),
    (
        "allowed-karpenter-labels",
        "NodePool",
        both(
            template_label("karpenter.sh/capacity-type"),
            template_label("karpenter.k8s.aws/instance-family"),
            requirement("karpenter.k8s.aws/instance-cpu", "Lt", ("65",)),
            requirement("node.kubernetes.io/instance-type", "Exists", ()),
        ),
    ),
    ("requirement-min-values-met", "NodePool", requirement("example.com/x", values=("a", "b"), minValues=2)),
    ("min-equal-max", "ScaledObject", spec_set(minReplicaCount=4, maxReplicaCount=4)),
]


@pytest.mark.parametrize(("kind", "mutate"), [v[1:] for v in VALID], ids=[v[0] for v in VALID])
def test_valid_optional_sections_pass(kind, mutate, base, schemas) -> None:
    obj = copy.deepcopy(base[kind])
    mutate(obj)
    assert_all_pass([obj], schemas)


# --- (c) every rule compiles and is exercised ---------------------------------------------------------------


def test_every_rule_compiles_and_is_exercised(base, schemas) -> None:
    checkers = {k: RuleChecker(schemas[k]) for k in sorted(KINDS)}  # fresh: their `evaluated` sets start empty
    for k, c in checkers.items():
        assert c.compile_errors() == {}, k
        assert not [r for r in c.rules if r.optional_old_self or r.message_expression or r.reason or r.field_path], (
            "new rule features: extend the fixtures"
        )

    def run(obj: dict[str, Any], old: dict[str, Any] | None = None) -> list[str]:
        return checkers[key(obj)].validate(obj, old)

    for obj in spec_objects().values():
        assert run(obj) == []
    rendered = {k: len(c.evaluated) for k, c in checkers.items()}
    for _, kind, mutate, _, _ in VIOLATIONS:
        obj = copy.deepcopy(base[kind])
        mutate(obj)
        assert run(obj)
    for _, kind, mutate in VALID:
        obj = copy.deepcopy(base[kind])
        mutate(obj)
        assert run(obj) == []
    for _, kind, mutate, _ in TRANSITIONS:
        new = copy.deepcopy(base[kind])
        mutate(new)
        assert run(new, old=base[kind])

    total = sum(len(c.rules) for c in checkers.values())
    missing = [f"{k[1]} {r.location}: {r.rule}" for k, c in checkers.items() for r in c.rules if r not in c.evaluated]
    print(f"\nCEL rules: {total} total / {total - len(missing)} exercised; by the rendered objects alone: {rendered}")
    assert missing == [], "rules never evaluated:\n" + "\n".join(missing)
    assert (
        total == 65
    )  # 44 EC2NodeClass + 20 NodePool + 1 ScaledObject + 0 TriggerAuthentication at the pinned versions


def test_no_rule_reads_a_value_this_checker_would_type_differently(schemas) -> None:
    """crd_cel passes strings as strings; the API server turns `format: date|date-time|duration|byte` strings
    into timestamps/durations/bytes (cel-expr-python cannot take those nested in a map). No rule names such a
    field of its node (e.g. NodePool `spec` rules read replicas/limits/weight, not taints[].timeAdded), so that
    cannot change a result here; a rule that did would fail with a type error, not pass."""

    def formatted(node: dict[str, Any]) -> set[str]:
        found: set[str] = set()
        for name, sub in (node.get("properties") or {}).items():
            if sub.get("format") in ("date", "date-time", "duration", "byte"):
                found.add(name)
            found |= formatted(sub)
        for part in ("items", "additionalProperties"):
            if isinstance(node.get(part), dict):
                found |= formatted(node[part])
        return found

    def walk(node: dict[str, Any], path: str) -> list[str]:
        names = formatted(node)
        bad = [
            f"{path}: {r['rule']} reads {n}"
            for r in node.get("x-kubernetes-validations") or ()
            for n in names
            if re.search(rf"\b{n}\b", r["rule"])
        ]
        for name, sub in (node.get("properties") or {}).items():
            bad += walk(sub, f"{path}.{name}")
        for part in ("items", "additionalProperties"):
            if isinstance(node.get(part), dict):
                bad += walk(node[part], f"{path}[{part}]")
        return bad

    assert [b for k in KINDS for b in walk(schemas[k], k[1])] == []
    assert "timeAdded" in formatted(
        schemas[("karpenter.sh/v1", "NodePool")]["properties"]["spec"]
    )  # the check sees them


# --- the semantics, on a schema small enough to read ---------------------------------------------------------

TOY = {
    "type": "object",
    "properties": {
        "spec": {
            "type": "object",
            "x-kubernetes-validations": [
                {
                    "rule": "self.mode != 'off' || !has(self.size)",
                    "messageExpression": "'size ' + string(self.size) + ' needs a mode'",
                    "message": "fallback",
                },
                {"rule": "self.size == oldSelf.size", "message": "size is immutable"},
                {
                    "rule": "!oldSelf.hasValue() || self.mode == oldSelf.value().mode",
                    "optionalOldSelf": True,
                    "message": "mode is immutable",
                },
                {
                    "rule": "!has(self.owner)",
                    "reason": "FieldValueForbidden",
                    "fieldPath": ".owner",
                    "message": "owner is set by the controller",
                },
            ],
            "properties": {
                "mode": {"type": "string", "default": "off"},
                "size": {"type": "integer"},
                "owner": {"type": "string"},
                "items": {
                    "type": "array",
                    "x-kubernetes-list-type": "map",
                    "x-kubernetes-list-map-keys": ["name"],
                    "items": {
                        "type": "object",
                        "x-kubernetes-validations": [
                            {"rule": "self.weight <= 10"},
                            {"rule": "self.weight >= oldSelf.weight", "message": "weight may only grow"},
                        ],
                        "properties": {"name": {"type": "string"}, "weight": {"type": "integer", "default": 1}},
                    },
                },
                "labels": {
                    "type": "object",
                    "additionalProperties": {
                        "type": "string",
                        "x-kubernetes-validations": [{"rule": "self.size() <= 3", "message": "label too long"}],
                    },
                },
                "optional": {
                    "type": "object",
                    "x-kubernetes-validations": [{"rule": "false", "message": "never runs when absent"}],
                },
            },
        }
    },
}


def test_semantics_on_a_toy_schema() -> None:
    check = lambda obj, old=None: validate_rules(obj, TOY, old)  # noqa: E731
    # absent and null nodes run no rules; defaults apply first (mode defaults to "off", so size is refused)
    assert check({"spec": {"optional": None}}) == []
    assert check({"spec": {"size": 2}}) == ["spec: Invalid value: size 2 needs a mode"]
    # one evaluation per array item / map value, at that item's path; the default weight (1) is what the rule sees
    assert check(
        {"spec": {"items": [{"name": "a", "weight": 11}, {"name": "b"}], "labels": {"a": "ok", "b": "long"}}}
    ) == [
        "spec.items[0]: Invalid value: failed rule: self.weight <= 10",
        'spec.labels[b]: Invalid value: "long": label too long',
    ]
    # reason + fieldPath
    assert check({"spec": {"owner": "me"}}) == ["spec.owner: Forbidden: owner is set by the controller"]
    # transition rules: skipped on create, run on update; list-map items correlate by key, not position
    old = {"spec": {"mode": "on", "size": 1, "items": [{"name": "a", "weight": 5}, {"name": "b", "weight": 5}]}}
    new = {"spec": {"mode": "on", "size": 2, "items": [{"name": "b", "weight": 4}, {"name": "a", "weight": 6}]}}
    assert check(new) == []
    assert check(new, old) == [
        "spec: Invalid value: size is immutable",
        "spec.items[0]: Invalid value: weight may only grow",
    ]
    # optionalOldSelf: runs on create with oldSelf = none, and on update with the old value
    assert check({"spec": {"mode": "off"}}) == []
    assert check({"spec": {"mode": "on", "size": 1}}, {"spec": {"mode": "off", "size": 1}}) == [
        "spec: Invalid value: mode is immutable"
    ]


def test_a_rule_the_engine_cannot_compile_is_a_problem_with_its_text() -> None:
    schema = {
        "type": "object",
        "x-kubernetes-validations": [{"rule": "self.isSorted()", "message": "m"}],
        "properties": {},
    }
    (problem,) = validate_rules({}, schema)
    assert "rule compile error" in problem and "self.isSorted()" in problem
    assert list(RuleChecker(schema).compile_errors()) == [Rule("", "self.isSorted()", "m")]


def test_defaults_are_applied_before_the_rules(base, schemas) -> None:
    """A NodePool without `disruption`: the API server defaults spec.disruption.budgets, whose rule then runs."""
    obj = copy.deepcopy(base["NodePool"])
    del obj["spec"]["disruption"]
    c = RuleChecker(schemas[key(obj)])
    assert c.validate(obj) == []
    assert find_rule(c.schema, "spec.disruption.budgets", "has(x.schedule) == has(x.duration)") in c.evaluated


def test_structural_errors_that_block_the_rules_leave_them_unevaluated(base, schemas) -> None:
    """As the API server: an enum error (NotSupported) stops CEL; the object is rejected for that error alone."""
    obj = copy.deepcopy(base["EC2NodeClass"])
    obj["spec"]["metadataOptions"]["httpTokens"] = "sometimes"
    obj["spec"]["instanceProfile"] = "also"
    problems = validate(obj, schemas)
    assert len(problems) == 1 and "httpTokens" in problems[0]
    assert validate_rules(obj, schemas[key(obj)])  # the rule it would break once the enum is fixed


def test_the_user_cli_reports_cel_violations(base, tmp_path: Path) -> None:
    """`python -m cpu_inference.testing.crd_validation` — the path users run — now fails on a CEL rule."""
    obj = copy.deepcopy(base["NodePool"])
    requirement("karpenter.sh/nodepool")(obj)
    manifest = tmp_path / "pool.yaml"
    manifest.write_text(yaml.safe_dump_all([base["EC2NodeClass"], obj]))
    out = subprocess.run(
        [sys.executable, "-m", "cpu_inference.testing.crd_validation", "--crds", str(SHARED_CRDS), str(manifest)],
        cwd=ROOT / "constructs",
        capture_output=True,
        text=True,
    )
    assert out.returncode == 1, out.stdout + out.stderr
    assert (
        'NodePool/cpu-arm64: spec.template.spec.requirements[6].key: Invalid value: "karpenter.sh/nodepool": label "karpenter.sh/nodepool" is restricted'
        in out.stdout
    )
    assert out.stdout.strip().endswith(": 1 problems")


def test_the_cli_fails_loudly_without_the_cel_engine(base, tmp_path: Path) -> None:
    """Without cel-expr-python the user path exits 2 naming the fix, instead of passing objects unchecked."""
    manifest = tmp_path / "pool.yaml"
    manifest.write_text(yaml.safe_dump_all([base["NodePool"]]))
    code = "import sys; sys.modules['cel_expr_python'] = None; from cpu_inference.testing.crd_validation import main; sys.exit(main(sys.argv[1:]))"
    out = subprocess.run(
        [sys.executable, "-c", code, "--crds", str(SHARED_CRDS), str(manifest)],
        cwd=ROOT / "constructs",
        capture_output=True,
        text=True,
    )
    assert out.returncode == 2, out.stdout + out.stderr
    assert "cel-expr-python" in out.stderr and "pip install" in out.stderr
