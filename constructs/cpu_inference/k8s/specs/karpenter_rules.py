"""The Karpenter v1 API names, well-known label keys and the CRDs' CEL rules on names and keys that a JSON-schema
check cannot see (karpenter.sh/v1 NodePool, karpenter.k8s.aws/v1 EC2NodeClass; /work/shared/crds/), plus the
EC2 instance-family parsing the pools use to match families to architectures."""

from __future__ import annotations

import re

from cpu_inference._internal.k8s_object import is_dns_subdomain

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
DURATION = re.compile(r"^(([0-9]+(s|m|h))+|Never)$")
_FAMILY = re.compile(r"^([a-z]+)([0-9]+)([a-z-]*)$")
RESTRICTED_TAG_PREFIXES = ("kubernetes.io/cluster",)
RESTRICTED_TAGS = (
    "eks:eks-cluster-name",
    "karpenter.sh/nodepool",
    "karpenter.sh/nodeclaim",
    "karpenter.k8s.aws/ec2nodeclass",
)


def check_name(kind: str, name: str) -> None:
    if not is_dns_subdomain(name):
        raise ValueError(f"{kind} name {name!r} is not a DNS subdomain (lowercase letters, digits, '-', '.')")


def check_key(where: str, key: str) -> None:
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
