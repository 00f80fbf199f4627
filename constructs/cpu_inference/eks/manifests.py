"""Add many Kubernetes objects as several KubernetesManifest resources, each under a size bound.

Every KubernetesManifest travels to the kubectl Lambda inside one CloudFormation custom-resource
request (Lambda's synchronous payload limit is ~256 KB and CloudFormation caps a resource's properties
too), so large object sets are split into bounded chunks.
"""

from __future__ import annotations

import json
from typing import Any, Iterable, Sequence

from aws_cdk import aws_eks_v2 as eks
from constructs import Construct, IDependable

DEFAULT_MAX_BYTES = 200_000
# Room for the prune label CDK adds to every object and for tokens that render longer than they read.
_PER_OBJECT_OVERHEAD = 160


def object_size(obj: dict[str, Any]) -> int:
    return len(json.dumps(obj, separators=(",", ":")).encode()) + _PER_OBJECT_OVERHEAD


def chunk(objs: Sequence[dict[str, Any]], max_bytes: int = DEFAULT_MAX_BYTES) -> list[list[dict[str, Any]]]:
    """Greedy, order-preserving split into lists whose estimated JSON size stays under max_bytes."""
    chunks: list[list[dict[str, Any]]] = []
    current: list[dict[str, Any]] = []
    size = 2  # the enclosing []
    for obj in objs:
        n = object_size(obj)
        if n + 2 > max_bytes:
            name = obj.get("metadata", {}).get("name")
            raise ValueError(f"{obj.get('kind')}/{name} alone is {n} bytes, over the {max_bytes}-byte manifest bound — split the object")
        if current and size + n + 1 > max_bytes:
            chunks.append(current)
            current, size = [], 2
        current.append(obj)
        size += n + 1
    if current:
        chunks.append(current)
    return chunks


def add_bounded_manifests(
    cluster: eks.ICluster,
    id: str,
    objs: Sequence[dict[str, Any]],
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
    scope: Construct | None = None,
    depends_on: Iterable[IDependable] = (),
) -> list[eks.KubernetesManifest]:
    """One KubernetesManifest per chunk (ids `{id}0`, `{id}1`, ...), each depending on `depends_on`.
    `scope` defaults to the cluster (pass your construct to keep cross-stack references out)."""
    deps = list(depends_on)
    out: list[eks.KubernetesManifest] = []
    for i, part in enumerate(chunk(objs, max_bytes)):
        m = eks.KubernetesManifest(scope or cluster, f"{id}{i}", cluster=cluster, manifest=part, overwrite=True)
        for d in deps:
            m.node.add_dependency(d)
        out.append(m)
    return out
