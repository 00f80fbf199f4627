"""Typed Karpenter v1 objects: frozen dataclasses rendered to `karpenter.sh/v1` NodePool and
`karpenter.k8s.aws/v1` EC2NodeClass dicts.

Plain Python (no aws_cdk): the same specs feed CDK manifests, cdk8s charts and the offline validators.
`validate()` repeats the CRDs' CEL rules that a JSON-schema check cannot see, so mistakes fail at synth
with a precise message instead of at `kubectl apply`.

Spot preference: in Karpenter v1 a NodePool whose `karpenter.sh/capacity-type` requirement lists both
`spot` and `on-demand` launches Spot when it is available and falls back to On-Demand when it is not
(Karpenter's price-capacity-optimized Spot is tried first). One pool listing both is therefore "Spot
preferred with On-Demand fallback"; no second pool or weight trick is needed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

NODEPOOL_API = "karpenter.sh/v1"
NODECLASS_API = "karpenter.k8s.aws/v1"
NODECLASS_GROUP = "karpenter.k8s.aws"

ARCH = "kubernetes.io/arch"
CAPACITY_TYPE = "karpenter.sh/capacity-type"
INSTANCE_FAMILY = "karpenter.k8s.aws/instance-family"
INSTANCE_CATEGORY = "karpenter.k8s.aws/instance-category"
INSTANCE_GENERATION = "karpenter.k8s.aws/instance-generation"
INSTANCE_TYPE = "node.kubernetes.io/instance-type"
OS = "kubernetes.io/os"

ARCHITECTURES = ("arm64", "amd64")
CAPACITY_TYPES = ("spot", "on-demand", "reserved")
OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt", "Gte", "Lte")
EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
CONSOLIDATION_POLICIES = ("WhenEmpty", "WhenEmptyOrUnderutilized", "Balanced")

# Labels/keys Karpenter reserves for itself (the NodePool CRD's CEL rules).
_ALLOWED_KARPENTER_AWS_KEYS = (
    "karpenter.k8s.aws/instance-tenancy",
    "karpenter.k8s.aws/capacity-reservation-type",
    "karpenter.k8s.aws/capacity-reservation-id",
    "karpenter.k8s.aws/capacity-reservation-interruptible",
    "karpenter.k8s.aws/ec2nodeclass",
    "karpenter.k8s.aws/instance-encryption-in-transit-supported",
    "karpenter.k8s.aws/instance-category",
    "karpenter.k8s.aws/instance-hypervisor",
    "karpenter.k8s.aws/instance-family",
    "karpenter.k8s.aws/instance-generation",
    "karpenter.k8s.aws/instance-local-nvme",
    "karpenter.k8s.aws/instance-size",
    "karpenter.k8s.aws/instance-cpu",
    "karpenter.k8s.aws/instance-cpu-manufacturer",
    "karpenter.k8s.aws/instance-cpu-sustained-clock-speed-mhz",
    "karpenter.k8s.aws/instance-memory",
    "karpenter.k8s.aws/instance-ebs-bandwidth",
    "karpenter.k8s.aws/instance-network-bandwidth",
    "karpenter.k8s.aws/instance-gpu-name",
    "karpenter.k8s.aws/instance-gpu-manufacturer",
    "karpenter.k8s.aws/instance-gpu-count",
    "karpenter.k8s.aws/instance-gpu-memory",
    "karpenter.k8s.aws/instance-accelerator-name",
    "karpenter.k8s.aws/instance-accelerator-manufacturer",
    "karpenter.k8s.aws/instance-accelerator-count",
)
_DURATION = re.compile(r"^(([0-9]+(s|m|h))+|Never)$")
_BUDGET_NODES = re.compile(r"^((100|[0-9]{1,2})%|[0-9]+)$")
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_FAMILY = re.compile(r"^([a-z]+)([0-9]+)([a-z-]*)$")
_RESTRICTED_TAG_PREFIXES = ("kubernetes.io/cluster",)
_RESTRICTED_TAGS = ("eks:eks-cluster-name", "karpenter.sh/nodepool", "karpenter.sh/nodeclaim", "karpenter.k8s.aws/ec2nodeclass")


def _check_name(kind: str, name: str) -> None:
    if not name or len(name) > 253 or not _NAME.match(name):
        raise ValueError(f"{kind} name {name!r} is not a DNS subdomain (lowercase letters, digits, '-', '.')")


def _check_key(where: str, key: str) -> None:
    domain = key.split("/")[0] if "/" in key else ""
    if key in ("karpenter.sh/nodepool", "kubernetes.io/hostname"):
        raise ValueError(f"{where}: key {key!r} is reserved by Karpenter")
    if domain.endswith("karpenter.sh") and key != CAPACITY_TYPE:
        raise ValueError(f"{where}: key {key!r} uses the restricted karpenter.sh domain")
    if domain.endswith("karpenter.k8s.aws") and key not in _ALLOWED_KARPENTER_AWS_KEYS:
        raise ValueError(f"{where}: key {key!r} uses the restricted karpenter.k8s.aws domain")


def family_parts(family: str) -> tuple[str, int, str]:
    """'c7gn' -> ('c', 7, 'gn'); raises ValueError for a string that is not an EC2 family."""
    m = _FAMILY.match(family)
    if not m:
        raise ValueError(f"{family!r} is not an EC2 instance family (e.g. c7g, m7i, r8g)")
    return m.group(1), int(m.group(2)), m.group(3)


def family_architecture(family: str) -> str:
    """arm64 for Graviton families (a 'g' among the attribute letters: c7g, c7gn, r8gd), else amd64."""
    _, _, attrs = family_parts(family)
    return "arm64" if "g" in attrs.split("-")[0] else "amd64"


@dataclass(frozen=True)
class Requirement:
    """One NodeSelectorRequirement (with Karpenter's optional minValues)."""

    key: str
    operator: str
    values: tuple[str, ...] = ()
    min_values: int | None = None

    def validate(self) -> None:
        _check_key("requirement", self.key)
        if self.operator not in OPERATORS:
            raise ValueError(f"requirement {self.key}: operator {self.operator!r} is not one of {OPERATORS}")
        if self.operator == "In" and not self.values:
            raise ValueError(f"requirement {self.key}: operator In needs at least one value")
        if self.operator in ("Gt", "Lt", "Gte", "Lte") and (len(self.values) != 1 or not self.values[0].isdigit()):
            raise ValueError(f"requirement {self.key}: operator {self.operator} needs exactly one non-negative integer value")
        if self.min_values is not None and self.operator == "In" and len(self.values) < self.min_values:
            raise ValueError(f"requirement {self.key}: minValues {self.min_values} exceeds the {len(self.values)} values listed")

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"key": self.key, "operator": self.operator}
        if self.values:
            out["values"] = list(self.values)
        if self.min_values is not None:
            out["minValues"] = self.min_values
        return out


@dataclass(frozen=True)
class Taint:
    key: str
    value: str | None = None
    effect: str = "NoSchedule"

    def validate(self) -> None:
        if self.effect not in EFFECTS:
            raise ValueError(f"taint {self.key}: effect {self.effect!r} is not one of {EFFECTS}")

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"key": self.key, "effect": self.effect}
        if self.value is not None:
            out["value"] = self.value
        return out

    def toleration(self) -> dict[str, Any]:
        """The pod toleration that lets a workload land on nodes with this taint."""
        if self.value is None:
            return {"key": self.key, "operator": "Exists", "effect": self.effect}
        return {"key": self.key, "operator": "Equal", "value": self.value, "effect": self.effect}


@dataclass(frozen=True)
class Budget:
    """At most `nodes` (count or percent) disrupted at once, optionally only for some reasons or in a window."""

    nodes: str = "20%"
    reasons: tuple[str, ...] = ()
    schedule: str | None = None
    duration: str | None = None

    def validate(self) -> None:
        if not _BUDGET_NODES.match(self.nodes):
            raise ValueError(f"disruption budget nodes {self.nodes!r} must be a count (e.g. 2) or a percent (e.g. 20%)")
        if (self.schedule is None) != (self.duration is None):
            raise ValueError("disruption budget: schedule and duration must be set together")
        bad = [r for r in self.reasons if r not in ("Underutilized", "Empty", "Drifted")]
        if bad:
            raise ValueError(f"disruption budget reasons {bad} are not Underutilized, Empty or Drifted")

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"nodes": self.nodes}
        if self.reasons:
            out["reasons"] = list(self.reasons)
        if self.schedule is not None:
            out["schedule"] = self.schedule
            out["duration"] = self.duration
        return out


@dataclass(frozen=True)
class Disruption:
    consolidation_policy: str = "WhenEmptyOrUnderutilized"
    consolidate_after: str = "1m"
    budgets: tuple[Budget, ...] = (Budget("20%"),)

    def validate(self) -> None:
        if self.consolidation_policy not in CONSOLIDATION_POLICIES:
            raise ValueError(f"consolidationPolicy {self.consolidation_policy!r} is not one of {CONSOLIDATION_POLICIES}")
        if not _DURATION.match(self.consolidate_after):
            raise ValueError(f"consolidateAfter {self.consolidate_after!r} must look like 30s, 5m, 1h or Never")
        for b in self.budgets:
            b.validate()

    def to_dict(self) -> dict[str, Any]:
        return {
            "consolidationPolicy": self.consolidation_policy,
            "consolidateAfter": self.consolidate_after,
            "budgets": [b.to_dict() for b in self.budgets],
        }


@dataclass(frozen=True)
class NodePoolSpec:
    """A Karpenter NodePool. Defaults: Spot preferred with On-Demand fallback, consolidation of empty or
    underutilized nodes with at most 20% of nodes disrupted at once, nodes recycled after 30 days."""

    name: str
    node_class: str
    architectures: tuple[str, ...] = ("arm64",)
    capacity_types: tuple[str, ...] = ("spot", "on-demand")
    instance_families: tuple[str, ...] = ()
    instance_categories: tuple[str, ...] = ()
    min_generation: int | None = None  # rendered as instance-generation Gt (min_generation - 1)
    instance_types: tuple[str, ...] = ()
    extra_requirements: tuple[Requirement, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    startup_taints: tuple[Taint, ...] = ()
    disruption: Disruption = Disruption()
    limit_cpu: int | None = 256
    limit_memory: str | None = None
    weight: int | None = None
    expire_after: str = "720h"
    termination_grace_period: str | None = None

    def requirements(self) -> list[Requirement]:
        reqs = [
            Requirement(ARCH, "In", tuple(self.architectures)),
            Requirement(OS, "In", ("linux",)),
            Requirement(CAPACITY_TYPE, "In", tuple(self.capacity_types)),
        ]
        if self.instance_categories:
            reqs.append(Requirement(INSTANCE_CATEGORY, "In", tuple(self.instance_categories)))
        if self.instance_families:
            reqs.append(Requirement(INSTANCE_FAMILY, "In", tuple(self.instance_families)))
        if self.min_generation is not None:
            reqs.append(Requirement(INSTANCE_GENERATION, "Gt", (str(self.min_generation - 1),)))
        if self.instance_types:
            reqs.append(Requirement(INSTANCE_TYPE, "In", tuple(self.instance_types)))
        return reqs + list(self.extra_requirements)

    def validate(self) -> None:
        _check_name("NodePool", self.name)
        _check_name("NodePool nodeClassRef", self.node_class)
        if not self.architectures or any(a not in ARCHITECTURES for a in self.architectures):
            raise ValueError(f"NodePool {self.name}: architectures {self.architectures} must be a non-empty subset of {ARCHITECTURES}")
        if not self.capacity_types or any(c not in CAPACITY_TYPES for c in self.capacity_types):
            raise ValueError(f"NodePool {self.name}: capacity_types {self.capacity_types} must be a non-empty subset of {CAPACITY_TYPES}")
        for fam in self.instance_families:
            arch = family_architecture(fam)
            if arch not in self.architectures:
                raise ValueError(f"NodePool {self.name}: instance family {fam} is {arch} but the pool allows only {list(self.architectures)}")
        if self.min_generation is not None and self.min_generation < 1:
            raise ValueError(f"NodePool {self.name}: min_generation must be ≥ 1")
        if not _DURATION.match(self.expire_after):
            raise ValueError(f"NodePool {self.name}: expireAfter {self.expire_after!r} must look like 720h or Never")
        if self.weight is not None and not 1 <= self.weight <= 100:
            raise ValueError(f"NodePool {self.name}: weight {self.weight} must be between 1 and 100")
        if self.limit_cpu is not None and self.limit_cpu <= 0:
            raise ValueError(f"NodePool {self.name}: limit_cpu must be positive")
        for label in self.labels:
            _check_key(f"NodePool {self.name} label", label)
        for t in self.taints + self.startup_taints:
            t.validate()
        for r in self.requirements():
            r.validate()
        self.disruption.validate()

    def to_dict(self) -> dict[str, Any]:
        self.validate()
        template_spec: dict[str, Any] = {
            "nodeClassRef": {"group": NODECLASS_GROUP, "kind": "EC2NodeClass", "name": self.node_class},
            "requirements": [r.to_dict() for r in self.requirements()],
            "expireAfter": self.expire_after,
        }
        if self.taints:
            template_spec["taints"] = [t.to_dict() for t in self.taints]
        if self.startup_taints:
            template_spec["startupTaints"] = [t.to_dict() for t in self.startup_taints]
        if self.termination_grace_period:
            template_spec["terminationGracePeriod"] = self.termination_grace_period
        template: dict[str, Any] = {"spec": template_spec}
        if self.labels:
            template["metadata"] = {"labels": dict(self.labels)}
        spec: dict[str, Any] = {"template": template, "disruption": self.disruption.to_dict()}
        limits: dict[str, Any] = {}
        if self.limit_cpu is not None:
            limits["cpu"] = str(self.limit_cpu)
        if self.limit_memory is not None:
            limits["memory"] = self.limit_memory
        if limits:
            spec["limits"] = limits
        if self.weight is not None:
            spec["weight"] = self.weight
        return {"apiVersion": NODEPOOL_API, "kind": "NodePool", "metadata": {"name": self.name}, "spec": spec}


@dataclass(frozen=True)
class BlockDevice:
    """One EBS block-device mapping. Encrypted gp3 by default."""

    device_name: str
    volume_size: str | None = "100Gi"
    volume_type: str = "gp3"
    iops: int | None = None
    throughput: int | None = None  # MiB/s, gp3 only
    encrypted: bool = True
    kms_key_id: str | None = None
    snapshot_id: str | None = None
    delete_on_termination: bool = True
    root_volume: bool = False

    def validate(self) -> None:
        if self.volume_size is None and self.snapshot_id is None:
            raise ValueError(f"block device {self.device_name}: set volume_size or snapshot_id")
        if self.volume_size is not None and not re.match(r"^[1-9][0-9]*Gi$", self.volume_size):
            raise ValueError(f"block device {self.device_name}: volume_size {self.volume_size!r} must be whole GiB like 100Gi")
        if self.throughput is not None and self.volume_type != "gp3":
            raise ValueError(f"block device {self.device_name}: throughput is only configurable on gp3")
        if self.volume_type == "gp3":
            if self.iops is not None and not 3000 <= self.iops <= 80000:
                raise ValueError(f"block device {self.device_name}: gp3 iops {self.iops} must be 3000–80000")
            if self.throughput is not None and not 125 <= self.throughput <= 2000:
                raise ValueError(f"block device {self.device_name}: gp3 throughput {self.throughput} MiB/s must be 125–2000")
        if self.kms_key_id is not None and not self.encrypted:
            raise ValueError(f"block device {self.device_name}: a KMS key needs encrypted=True")

    def to_dict(self) -> dict[str, Any]:
        ebs: dict[str, Any] = {"volumeType": self.volume_type, "encrypted": self.encrypted, "deleteOnTermination": self.delete_on_termination}
        if self.volume_size is not None:
            ebs["volumeSize"] = self.volume_size
        if self.iops is not None:
            ebs["iops"] = self.iops
        if self.throughput is not None:
            ebs["throughput"] = self.throughput
        if self.kms_key_id is not None:
            ebs["kmsKeyID"] = self.kms_key_id
        if self.snapshot_id is not None:
            ebs["snapshotID"] = self.snapshot_id
        out: dict[str, Any] = {"deviceName": self.device_name, "ebs": ebs}
        if self.root_volume:
            out["rootVolume"] = True
        return out


@dataclass(frozen=True)
class MetadataOptions:
    """IMDS settings. IMDSv2 only, hop limit 1: pods cannot reach the node role's credentials."""

    http_tokens: str = "required"
    http_put_response_hop_limit: int = 1
    http_endpoint: str = "enabled"
    http_protocol_ipv6: str = "disabled"

    def to_dict(self) -> dict[str, Any]:
        return {
            "httpEndpoint": self.http_endpoint,
            "httpProtocolIPv6": self.http_protocol_ipv6,
            "httpPutResponseHopLimit": self.http_put_response_hop_limit,
            "httpTokens": self.http_tokens,
        }


@dataclass(frozen=True)
class EC2NodeClassSpec:
    """A Karpenter EC2NodeClass. Selector terms are lists of dicts exactly as in the CRD
    (e.g. {"tags": {"karpenter.sh/discovery": "my-cluster"}} or {"id": "subnet-0abc"})."""

    name: str
    role: str
    ami_selector_terms: tuple[Mapping[str, Any], ...]
    subnet_selector_terms: tuple[Mapping[str, Any], ...]
    security_group_selector_terms: tuple[Mapping[str, Any], ...]
    ami_family: str | None = None
    block_device_mappings: tuple[BlockDevice, ...] = ()
    metadata_options: MetadataOptions = MetadataOptions()
    user_data: str | None = None
    tags: Mapping[str, str] = field(default_factory=dict)
    kubelet: Mapping[str, Any] | None = None
    detailed_monitoring: bool | None = None
    associate_public_ip_address: bool | None = False

    def validate(self) -> None:
        _check_name("EC2NodeClass", self.name)
        if not self.role:
            raise ValueError(f"EC2NodeClass {self.name}: role cannot be empty")
        if not self.ami_selector_terms:
            raise ValueError(f"EC2NodeClass {self.name}: amiSelectorTerms cannot be empty")
        aliases = [t["alias"] for t in self.ami_selector_terms if "alias" in t]
        if aliases:
            if len(self.ami_selector_terms) != 1 or len(self.ami_selector_terms[0]) != 1:
                raise ValueError(f"EC2NodeClass {self.name}: an alias amiSelectorTerm must be the only term and have no other fields")
            family = aliases[0].split("@")[0]
            if not re.match(r"^[a-zA-Z0-9]+@.+$", aliases[0]) or family not in ("al2", "al2023", "bottlerocket", "windows2019", "windows2022", "windows2025"):
                raise ValueError(f"EC2NodeClass {self.name}: alias {aliases[0]!r} must be family@version, e.g. bottlerocket@v1.64.0")
        elif self.ami_family is None:
            raise ValueError(f"EC2NodeClass {self.name}: set ami_family when amiSelectorTerms has no alias")
        for kind, terms, keys in (
            ("subnetSelectorTerms", self.subnet_selector_terms, ("tags", "id")),
            ("securityGroupSelectorTerms", self.security_group_selector_terms, ("tags", "id", "name")),
        ):
            if not terms:
                raise ValueError(f"EC2NodeClass {self.name}: {kind} cannot be empty")
            for t in terms:
                if not any(k in t for k in keys):
                    raise ValueError(f"EC2NodeClass {self.name}: each {kind} entry needs one of {keys}")
                if "tags" in t and any(not k or not v for k, v in t["tags"].items()):
                    raise ValueError(f"EC2NodeClass {self.name}: {kind} tags need non-empty keys and values")
        for k in self.tags:
            if not k or k in _RESTRICTED_TAGS or k.startswith(_RESTRICTED_TAG_PREFIXES):
                raise ValueError(f"EC2NodeClass {self.name}: tag {k!r} is reserved by Karpenter")
        if sum(1 for b in self.block_device_mappings if b.root_volume) > 1:
            raise ValueError(f"EC2NodeClass {self.name}: only one block device may be the root volume")
        for b in self.block_device_mappings:
            b.validate()
        if self.metadata_options.http_tokens not in ("required", "optional"):
            raise ValueError(f"EC2NodeClass {self.name}: httpTokens must be required or optional")

    def to_dict(self) -> dict[str, Any]:
        self.validate()
        spec: dict[str, Any] = {
            "role": self.role,
            "amiSelectorTerms": [dict(t) for t in self.ami_selector_terms],
            "subnetSelectorTerms": [dict(t) for t in self.subnet_selector_terms],
            "securityGroupSelectorTerms": [dict(t) for t in self.security_group_selector_terms],
            "metadataOptions": self.metadata_options.to_dict(),
        }
        if self.ami_family is not None:
            spec["amiFamily"] = self.ami_family
        if self.block_device_mappings:
            spec["blockDeviceMappings"] = [b.to_dict() for b in self.block_device_mappings]
        if self.user_data is not None:
            spec["userData"] = self.user_data
        if self.tags:
            spec["tags"] = dict(self.tags)
        if self.kubelet:
            spec["kubelet"] = dict(self.kubelet)
        if self.detailed_monitoring is not None:
            spec["detailedMonitoring"] = self.detailed_monitoring
        if self.associate_public_ip_address is not None:
            spec["associatePublicIPAddress"] = self.associate_public_ip_address
        return {"apiVersion": NODECLASS_API, "kind": "EC2NodeClass", "metadata": {"name": self.name}, "spec": spec}


# Labels/taints shared by the default pools, so workloads can select and tolerate them by name.
POOL_LABEL = "cpu-inference/pool"
MEMORY_TAINT = Taint("cpu-inference/memory-optimized", "true", "NoSchedule")
MEMORY_POOL = "memory-optimized"  # the model farm's pool: its name and its POOL_LABEL value
DEFAULT_CATEGORIES = ("c", "m", "r")
DEFAULT_MIN_GENERATION = 7


def default_node_pools(
    node_class: str,
    *,
    architectures: tuple[str, ...] | list[str] = ("arm64", "amd64"),
    capacity_types: tuple[str, ...] | list[str] = ("spot", "on-demand"),
    instance_families: tuple[str, ...] | list[str] = ("c7g", "c8g", "m7g", "m8g", "r7g", "c7a", "m7a", "c7i", "m7i"),
    instance_types: tuple[str, ...] | list[str] = (),
    max_node_cpu: int = 256,
    consolidation_budget: str = "20%",
    memory_pool: bool = True,
) -> list[NodePoolSpec]:
    """The CPU-inference pools: one per architecture over c/m/r families of generation ≥ 7, Spot preferred
    with On-Demand fallback, plus a tainted memory-optimized (r) pool for the model farm.

    Arguments mirror config.yaml's `eks` section (schema `Eks`). Each family must match one of the
    architectures, and every architecture needs at least one family, so a typo fails here.
    """
    archs = tuple(dict.fromkeys(architectures))
    fams = tuple(dict.fromkeys(instance_families))
    by_arch: dict[str, list[str]] = {a: [] for a in archs}
    for fam in fams:
        arch = family_architecture(fam)
        if arch not in by_arch:
            raise ValueError(f"instance family {fam} is {arch} but architectures lists only {list(archs)} — add {arch} or drop {fam}")
        category, generation, _ = family_parts(fam)
        if category not in DEFAULT_CATEGORIES or generation < DEFAULT_MIN_GENERATION:
            raise ValueError(f"instance family {fam} is outside the CPU-inference pools (c/m/r, generation ≥ {DEFAULT_MIN_GENERATION})")
        by_arch[arch].append(fam)
    empty = [a for a, f in by_arch.items() if not f]
    if empty:
        raise ValueError(f"no instance family for architecture(s) {empty} — add e.g. {'c7g' if 'arm64' in empty else 'c7a'} or drop the architecture")
    types_by_arch: dict[str, list[str]] = {a: [] for a in archs}
    for t in instance_types:
        fam = t.split(".")[0]
        if fam not in fams:
            raise ValueError(f"instance type {t} is not in instance_families {list(fams)}")
        types_by_arch[family_architecture(fam)].append(t)
    disruption = Disruption(budgets=(Budget(consolidation_budget),))
    weights = {"arm64": 20, "amd64": 10}  # Graviton first: better price-performance for llama.cpp decode
    pools = [
        NodePoolSpec(
            name=f"cpu-{arch}",
            node_class=node_class,
            architectures=(arch,),
            capacity_types=tuple(capacity_types),
            instance_families=tuple(by_arch[arch]),
            instance_categories=DEFAULT_CATEGORIES,
            min_generation=DEFAULT_MIN_GENERATION,
            instance_types=tuple(types_by_arch[arch]),
            labels={POOL_LABEL: f"cpu-{arch}"},
            disruption=disruption,
            limit_cpu=max_node_cpu,
            weight=weights[arch] if len(archs) > 1 else None,
        )
        for arch in archs
    ]
    if memory_pool:
        mem_fams = tuple(f for f in fams if family_parts(f)[0] == "r")
        pools.append(
            NodePoolSpec(
                name=MEMORY_POOL,
                node_class=node_class,
                architectures=archs,
                capacity_types=tuple(capacity_types),
                instance_families=mem_fams,
                instance_categories=("r",),
                min_generation=DEFAULT_MIN_GENERATION,
                labels={POOL_LABEL: MEMORY_POOL},
                taints=(MEMORY_TAINT,),
                disruption=disruption,
                limit_cpu=max_node_cpu,
            )
        )
    return pools
