"""Typed Karpenter v1 objects: frozen dataclasses rendered to `karpenter.sh/v1` NodePool and
`karpenter.k8s.aws/v1` EC2NodeClass dicts, and the default pool policy. One concern per module, all importable
from here:

- karpenter_rules.py: API names, well-known label keys, the CRDs' CEL rules on names/keys, EC2 family parsing.
- karpenter_node_pool.py: Requirement, Taint, Budget, Disruption, NodePoolSpec.
- karpenter_node_class.py: BlockDevice, MetadataOptions, EC2NodeClassSpec.
- default_node_pools.py: default_node_pools() and POOL_LABEL / MEMORY_POOL / MEMORY_TAINT.

Plain Python (no aws_cdk): the same specs feed CDK manifests, cdk8s charts and the offline validators.
`validate()` repeats the CRDs' CEL rules that a JSON-schema check cannot see, so mistakes fail at synth
with a precise message instead of at `kubectl apply`.
"""

from .default_node_pools import (
    DEFAULT_CATEGORIES,
    DEFAULT_MIN_GENERATION,
    MEMORY_POOL,
    MEMORY_TAINT,
    POOL_LABEL,
    default_node_pools,
)
from .karpenter_node_class import BlockDevice, EC2NodeClassSpec, MetadataOptions
from .karpenter_node_pool import Budget, Disruption, NodePoolSpec, Requirement, Taint
from .karpenter_rules import (
    ARCH,
    ARCHITECTURES,
    CAPACITY_TYPE,
    CAPACITY_TYPES,
    CONSOLIDATION_POLICIES,
    EFFECTS,
    INSTANCE_CATEGORY,
    INSTANCE_FAMILY,
    INSTANCE_GENERATION,
    INSTANCE_TYPE,
    NODECLASS_API,
    NODECLASS_GROUP,
    NODEPOOL_API,
    OPERATORS,
    OS,
    family_architecture,
    family_parts,
)

__all__ = [
    "ARCH", "ARCHITECTURES", "CAPACITY_TYPE", "CAPACITY_TYPES", "CONSOLIDATION_POLICIES", "DEFAULT_CATEGORIES",
    "DEFAULT_MIN_GENERATION", "EFFECTS", "INSTANCE_CATEGORY", "INSTANCE_FAMILY", "INSTANCE_GENERATION", "INSTANCE_TYPE",
    "MEMORY_POOL", "MEMORY_TAINT", "NODECLASS_API", "NODECLASS_GROUP", "NODEPOOL_API", "OPERATORS", "OS", "POOL_LABEL",
    "BlockDevice", "Budget", "Disruption", "EC2NodeClassSpec", "MetadataOptions", "NodePoolSpec", "Requirement", "Taint",
    "default_node_pools", "family_architecture", "family_parts",
]
