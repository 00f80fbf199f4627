"""Add many Kubernetes objects as several KubernetesManifest resources, each under a size bound, with
stable membership.

Every KubernetesManifest travels to the kubectl Lambda inside one CloudFormation custom-resource
request (Lambda's synchronous payload limit is ~256 KB and CloudFormation caps a resource's properties
too), so large object sets are split into bounded chunks.

Why membership must be stable: the aws-eks-v2 kubectl handler (aws-cdk-lib 2.275
custom-resource-handlers/dist/aws-eks-v2/kubectl-handler/apply/__init__.py) runs `kubectl delete -f` on a
manifest resource's objects when CloudFormation deletes that resource, and `kubectl apply --prune -l
aws.cdk.eks/prune-<construct addr>` on update (KubernetesManifest.injectPruneLabel labels each object with its
own resource's address). Chunks numbered by position (`Models0`, `Models1`) move objects between resources
when a model is added or removed: the moved objects get deleted by the vanished chunk's Delete (which
CloudFormation runs in its cleanup phase, after the new chunk applied them), or pruned by their old chunk
racing the new one. So objects are grouped by a stable key (by default the object's identity; callers pass
e.g. the model name) and each group lands in a hash bucket named by a prefix of sha256(key): adding or
removing a group changes only its own bucket's contents, never which resource holds any other group's
objects. A bucket over the size bound splits into 16 sub-buckets by the next hex digit (a rare event that
only reshuffles that bucket's groups).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from aws_cdk import aws_eks_v2 as eks
from constructs import Construct, IDependable

DEFAULT_MAX_BYTES = 200_000
# Room for the prune label CDK adds to every object and for tokens that render longer than they read.
_PER_OBJECT_OVERHEAD = 160
_MAX_DEPTH = 8  # 16**8 buckets: never reached by any real object set under the bound


def object_size(obj: dict[str, Any]) -> int:
    return len(json.dumps(obj, separators=(",", ":")).encode()) + _PER_OBJECT_OVERHEAD


def object_key(obj: dict[str, Any]) -> str:
    """An object's identity: API group, kind, namespace, name (what kubectl apply matches on)."""
    group = str(obj.get("apiVersion", "")).rpartition("/")[0]
    meta = obj.get("metadata", {})
    return f"{group}/{obj.get('kind')}/{meta.get('namespace', '')}/{meta.get('name')}"


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


@dataclass(frozen=True)
class Bucket:
    prefix: str  # hex prefix of sha256(group key); names the manifest resource
    objects: list[dict[str, Any]]


def bucketize(
    objs: Sequence[dict[str, Any]], max_bytes: int = DEFAULT_MAX_BYTES, key: Callable[[dict[str, Any]], str] = object_key
) -> list[Bucket]:
    """Group objects by `key`, then place each group in the bucket named by the shortest prefix of
    sha256(key) (one hex digit at first) whose bucket stays under max_bytes. Within a bucket, groups are
    sorted by key and keep their objects' order. Deterministic and independent of the other groups except
    for a bucket split."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for obj in objs:
        n = object_size(obj)
        if n + 2 > max_bytes:
            name = obj.get("metadata", {}).get("name")
            raise ValueError(f"{obj.get('kind')}/{name} alone is {n} bytes, over the {max_bytes}-byte manifest bound — split the object")
        groups.setdefault(key(obj), []).append(obj)
    sizes = {k: 2 + sum(object_size(o) + 1 for o in g) for k, g in groups.items()}
    for k, size in sizes.items():
        if size > max_bytes:
            raise ValueError(f"objects keyed {k!r} total {size} bytes, over the {max_bytes}-byte manifest bound — key them more finely")
    out: list[Bucket] = []

    def place(keys: list[str], depth: int) -> None:
        by_prefix: dict[str, list[str]] = {}
        for k in keys:
            by_prefix.setdefault(_digest(k)[:depth], []).append(k)
        for prefix in sorted(by_prefix):
            members = sorted(by_prefix[prefix])
            if sum(sizes[k] for k in members) - 2 * (len(members) - 1) > max_bytes and depth < _MAX_DEPTH and len(members) > 1:
                place(members, depth + 1)
            else:
                out.append(Bucket(prefix, [o for k in members for o in groups[k]]))

    place(list(groups), 1)
    return out


def chunk(objs: Sequence[dict[str, Any]], max_bytes: int = DEFAULT_MAX_BYTES, key: Callable[[dict[str, Any]], str] = object_key) -> list[list[dict[str, Any]]]:
    """The object lists of `bucketize` (each under max_bytes)."""
    return [b.objects for b in bucketize(objs, max_bytes, key)]


def add_bounded_manifests(
    cluster: eks.ICluster,
    id: str,
    objs: Sequence[dict[str, Any]],
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
    scope: Construct | None = None,
    depends_on: Iterable[IDependable] = (),
    key: Callable[[dict[str, Any]], str] = object_key,
) -> list[eks.KubernetesManifest]:
    """One KubernetesManifest per hash bucket (ids `{id}{hex prefix}`, e.g. `Models3`, `Models3a`), each
    depending on `depends_on`. `key` groups objects that must stay together (default: each object alone).
    `scope` defaults to the cluster (pass your construct to keep cross-stack references out)."""
    deps = list(depends_on)
    out: list[eks.KubernetesManifest] = []
    for bucket in bucketize(objs, max_bytes, key):
        # The ignore: jsii types ICluster as an IConstruct, not a Construct; every cluster is a Construct.
        m = eks.KubernetesManifest(scope or cluster, f"{id}{bucket.prefix}", cluster=cluster, manifest=bucket.objects, overwrite=True)  # type: ignore[arg-type]
        for d in deps:
            m.node.add_dependency(d)
        out.append(m)
    return out
