"""Add many Kubernetes objects as several KubernetesManifest resources, each under a size bound, with
membership that never changes.

Why a bound: a manifest travels inside the CloudFormation template (1 MB per template — CloudFormation quotas) and
inside the custom-resource event CloudFormation sends the kubectl provider asynchronously (Lambda's asynchronous
payload limit is 1 MB — botocore lambda Invoke: "For asynchronous invocations, the maximum payload size is 1 MB";
an Update event carries the old and the new manifest); every object also gets client-side apply's
last-applied-configuration annotation, and an object's annotations total at most 256 KiB (kubernetes
apimachinery ValidateAnnotationsSize). 200,000 bytes per manifest keeps an Update event under 1 MB.

Why membership must never change: the aws-eks-v2 kubectl handler (aws-cdk-lib 2.275
custom-resource-handlers/dist/aws-eks-v2/kubectl-handler/apply/__init__.py) runs `kubectl delete -f` on a
manifest resource's objects when CloudFormation deletes that resource — in the update's cleanup phase, after the
new resources applied them, and in a failed update's rollback for resources the update created — and
`kubectl apply --prune -l aws.cdk.eks/prune-<construct addr>` on update. An object that moves from one resource
to another is deleted by one of those (cpu_inference.testing.rehearsal reports each case). So objects are
grouped by a stable key (by default the object's identity; callers pass e.g. the model name) and each group
lands in the bucket named by the first hex digit of sha256(key), forever: adding or removing a group changes only
its own bucket's contents. A bucket over the bound is a synth error naming its groups, never a split (a split
renamed resources and deleted the moved objects — review finding F2).

Removal: a group removed from a bucket that survives is pruned only if its kinds are on kubectl's default prune
allowlist (k8s_object.PRUNED_KINDS); a ServiceAccount, PodDisruptionBudget, NetworkPolicy or ScaledObject stays
behind, inert (it selects or serves nothing). `cpu-inference plan` lists those with the `kubectl delete` command
that removes them.

Order: a bucket whose objects need a Namespace, ServiceAccount, ConfigMap or Secret that another bucket of the
same set creates depends on that bucket (k8s_object.needs/provides), so CloudFormation never applies them in
parallel (review finding F1: a NetworkPolicy applied before its Namespace fails the stack).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from aws_cdk import aws_eks_v2 as eks
from constructs import Construct, IDependable

from cpu_inference._internal.k8s_object import needs, object_key, provides

__all__ = [
    "BUCKET_DIGITS",
    "DEFAULT_MAX_BYTES",
    "Bucket",
    "ManifestBoundError",
    "add_bounded_manifests",
    "bucketize",
    "chunk",
    "object_key",
    "object_size",
]

DEFAULT_MAX_BYTES = 200_000
# Room for the prune label CDK adds to every object and for tokens that render longer than they read.
_PER_OBJECT_OVERHEAD = 160
# The bucket name's width in hex digits: 16 buckets per set. Fixed forever — a different width renames every
# bucket of every deployed stack (see the module docstring).
BUCKET_DIGITS = 1


def object_size(obj: dict[str, Any]) -> int:
    return len(json.dumps(obj, separators=(",", ":")).encode()) + _PER_OBJECT_OVERHEAD


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


@dataclass(frozen=True)
class Bucket:
    prefix: str  # hex prefix of sha256(group key); names the manifest resource
    objects: list[dict[str, Any]]


class ManifestBoundError(ValueError):
    """Objects that do not fit the manifest bound; the message names them and the fix."""


def bucketize(
    objs: Sequence[dict[str, Any]],
    max_bytes: int = DEFAULT_MAX_BYTES,
    key: Callable[[dict[str, Any]], str] = object_key,
) -> list[Bucket]:
    """Group objects by `key`, then place each group in the bucket named by the first BUCKET_DIGITS hex digits of
    sha256(key). Within a bucket, groups are sorted by key and keep their objects' order. A group's bucket depends
    on its key only; a bucket over max_bytes raises ManifestBoundError."""
    groups: dict[str, list[dict[str, Any]]] = {}
    sizes: dict[str, int] = {}  # a group's bytes as a JSON list on its own: "[" + objects + "," between + "]"
    for obj in objs:
        n = object_size(obj)
        if n + 2 > max_bytes:
            name = obj.get("metadata", {}).get("name")
            raise ManifestBoundError(
                f"{obj.get('kind')}/{name} alone is {n} bytes, over the {max_bytes}-byte manifest bound — split the object"
            )
        k = key(obj)
        groups.setdefault(k, []).append(obj)
        sizes[k] = sizes.get(k, 2) + n + 1
    by_prefix: dict[str, list[str]] = {}
    for k in groups:
        by_prefix.setdefault(_digest(k)[:BUCKET_DIGITS], []).append(k)
    out: list[Bucket] = []
    for prefix in sorted(by_prefix):
        members = sorted(by_prefix[prefix])
        total = sum(sizes[k] for k in members) - 2 * (len(members) - 1)
        if total > max_bytes:
            largest = sorted(members, key=lambda k: -sizes[k])[:5]
            raise ManifestBoundError(
                f"manifest bucket {prefix!r} would hold {total} bytes of Kubernetes objects, over the {max_bytes}-byte bound "
                f"({len(members)} groups, largest: {', '.join(f'{k} ({sizes[k]} B)' for k in largest)}). Buckets never split "
                "(a split would move deployed objects to a new resource, and the old one's delete removes them): serve some "
                "of these models from a pool (about 100 bytes per model) or from a second stack"
            )
        out.append(Bucket(prefix, [o for k in members for o in groups[k]]))
    return out


def chunk(
    objs: Sequence[dict[str, Any]],
    max_bytes: int = DEFAULT_MAX_BYTES,
    key: Callable[[dict[str, Any]], str] = object_key,
) -> list[list[dict[str, Any]]]:
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
    buckets = bucketize(objs, max_bytes, key)
    out: list[eks.KubernetesManifest] = []
    for bucket in buckets:
        # The ignore: jsii types ICluster as an IConstruct, not a Construct; every cluster is a Construct.
        m = eks.KubernetesManifest(
            scope or cluster,  # type: ignore[arg-type]
            f"{id}{bucket.prefix}",
            cluster=cluster,
            manifest=bucket.objects,
            overwrite=True,
        )
        for d in deps:
            m.node.add_dependency(d)
        out.append(m)
    for i, j in _order(buckets):
        out[i].node.add_dependency(out[j])
    return out


def _order(buckets: Sequence[Bucket]) -> list[tuple[int, int]]:
    """(i, j) pairs: bucket i applies objects that need what bucket j creates (a Namespace, ServiceAccount,
    ConfigMap, Secret), so i must wait for j. Raises on a cycle (CloudFormation would reject the template)."""
    made = {n: j for j, b in enumerate(buckets) for o in b.objects for n in provides(o)}
    edges = sorted(
        {(i, made[n]) for i, b in enumerate(buckets) for o in b.objects for n in needs(o) if made.get(n, i) != i}
    )
    after: dict[int, set[int]] = {}
    for i, j in edges:
        after.setdefault(i, set()).add(j)

    def reaches(start: int, goal: int) -> bool:
        seen, todo = set(), [start]
        while todo:
            n = todo.pop()
            if n == goal:
                return True
            if n not in seen:
                seen.add(n)
                todo.extend(after.get(n, ()))
        return False

    for i, j in edges:
        if reaches(j, i):
            raise ManifestBoundError(
                f"manifest buckets {buckets[i].prefix!r} and {buckets[j].prefix!r} need each other's objects; "
                "key those objects together so one kubectl apply creates them in order"
            )
    return edges
