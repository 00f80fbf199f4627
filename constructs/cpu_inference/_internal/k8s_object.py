"""Facts about Kubernetes objects that both the manifest layout (eks/manifests.py) and the deploy rehearsal
(testing/rehearsal.py) rely on: an object's identity as kubectl matches it, and which kinds `kubectl apply --prune`
deletes. Stdlib only."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

# kubectl's default prune allowlist, used when `--prune` is given without `--prune-allowlist` (the aws-eks-v2 kubectl
# handler passes only `--prune -l <label>`). Source: kubernetes/kubectl pkg/util/prune/prune.go
# (defaultNamespacedPruneResources / defaultNonNamespacedPruneResources), as (API group, kind).
PRUNED_KINDS: frozenset[tuple[str, str]] = frozenset(
    {
        ("", "ConfigMap"),
        ("", "Endpoints"),
        ("", "PersistentVolumeClaim"),
        ("", "Pod"),
        ("", "ReplicationController"),
        ("", "Secret"),
        ("", "Service"),
        ("batch", "Job"),
        ("batch", "CronJob"),
        ("networking.k8s.io", "Ingress"),
        ("apps", "DaemonSet"),
        ("apps", "Deployment"),
        ("apps", "ReplicaSet"),
        ("apps", "StatefulSet"),
        ("", "Namespace"),
        ("", "PersistentVolume"),
    }
)

# Kinds without a namespace (all others in this project's manifests are namespaced).
CLUSTER_SCOPED_KINDS: frozenset[str] = frozenset(
    {
        "Namespace",
        "PersistentVolume",
        "StorageClass",
        "CustomResourceDefinition",
        "ClusterRole",
        "ClusterRoleBinding",
        "PriorityClass",
        "CSIDriver",
        "NodePool",
        "EC2NodeClass",
        "NodeClaim",
        "ClusterTriggerAuthentication",
        "ValidatingWebhookConfiguration",
        "MutatingWebhookConfiguration",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "RuntimeClass",
        "IngressClass",
        "VolumeAttachment",
        "Node",
    }
)

# Namespaces every EKS cluster has (kube-apiserver creates them: pkg/controlplane/controller/systemnamespaces).
BUILTIN_NAMESPACES = frozenset({"default", "kube-system", "kube-public", "kube-node-lease"})
# API groups served by the API server itself (no CRD needed).
BUILTIN_GROUPS = frozenset(
    {
        "",
        "apps",
        "batch",
        "policy",
        "autoscaling",
        "networking.k8s.io",
        "rbac.authorization.k8s.io",
        "storage.k8s.io",
        "scheduling.k8s.io",
        "apiextensions.k8s.io",
        "admissionregistration.k8s.io",
        "coordination.k8s.io",
        "discovery.k8s.io",
        "node.k8s.io",
        "certificates.k8s.io",
        "events.k8s.io",
        "flowcontrol.apiserver.k8s.io",
    }
)


# Names, from Kubernetes "Object Names and IDs" (https://kubernetes.io/docs/concepts/overview/working-with-objects/names/)
# and apimachinery pkg/util/validation (IsDNS1123Label, IsDNS1123Subdomain). A DNS label (RFC 1123) — Namespaces,
# Services, most names this library sets — is at most 63 characters of lowercase alphanumerics or '-', starting and
# ending with an alphanumeric. A DNS subdomain — e.g. a NodePool's or EC2NodeClass's name — is such parts joined by
# '.', at most 253 characters in all (apimachinery bounds only the whole, not each part). Checked with fullmatch:
# `re.match` with `$` would let a trailing newline through.
DNS_LABEL_MAX = 63
DNS_LABEL = re.compile(rf"[a-z0-9]([-a-z0-9]{{0,{DNS_LABEL_MAX - 2}}}[a-z0-9])?")
DNS_SUBDOMAIN_MAX = 253
DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def is_dns_label(value: str) -> bool:
    return DNS_LABEL.fullmatch(value) is not None


def is_dns_subdomain(value: str) -> bool:
    return len(value) <= DNS_SUBDOMAIN_MAX and DNS_SUBDOMAIN.fullmatch(value) is not None


def api_group(obj: dict[str, Any]) -> str:
    return str(obj.get("apiVersion", "")).rpartition("/")[0]


def object_key(obj: dict[str, Any]) -> str:
    """An object's identity: API group, kind, namespace, name (what kubectl apply and delete match on)."""
    meta = obj.get("metadata", {})
    return f"{api_group(obj)}/{obj.get('kind')}/{meta.get('namespace', '')}/{meta.get('name')}"


def is_pruned(obj: dict[str, Any]) -> bool:
    """Whether `kubectl apply --prune -l …` (default allowlist) deletes this object once it leaves the manifest."""
    return (api_group(obj), str(obj.get("kind"))) in PRUNED_KINDS


@dataclass(frozen=True)
class Need:
    """Something that must exist before an object is applied: ("namespace", ns), ("crd", group),
    ("serviceaccount", "ns/name"), ("podidentity", "ns/name"), ("configmap"/"secret", "ns/name"), ("csi", driver)."""

    kind: str
    name: str


_POD_TEMPLATE_KINDS = frozenset({"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"})


def pod_specs(obj: Mapping[str, Any]) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """(pod metadata, pod spec) of a Pod, a workload's template or a CronJob's job template."""
    kind = obj.get("kind")
    if kind == "Pod":
        yield obj.get("metadata", {}), obj.get("spec", {})
    elif kind in _POD_TEMPLATE_KINDS:
        t = obj.get("spec", {}).get("template", {})
        yield t.get("metadata", {}), t.get("spec", {})
    elif kind == "CronJob":
        t = obj.get("spec", {}).get("jobTemplate", {}).get("spec", {}).get("template", {})
        yield t.get("metadata", {}), t.get("spec", {})


def needs(obj: dict[str, Any]) -> list[Need]:
    out: list[Need] = []
    kind = str(obj.get("kind"))
    ns = obj.get("metadata", {}).get("namespace")
    if kind not in CLUSTER_SCOPED_KINDS:
        out.append(Need("namespace", ns or "default"))
    group = api_group(obj)
    if group not in BUILTIN_GROUPS:
        out.append(Need("crd", group))
    if kind == "PersistentVolume" and obj.get("spec", {}).get("csi"):
        out.append(Need("csi", obj["spec"]["csi"].get("driver", "")))
    for _, pod in pod_specs(obj):
        ns = ns or "default"
        sa = pod.get("serviceAccountName") or pod.get("serviceAccount") or "default"
        if sa != "default":
            out.append(Need("serviceaccount", f"{ns}/{sa}"))
        out.append(Need("podidentity", f"{ns}/{sa}"))
        for v in pod.get("volumes", []):
            if "configMap" in v and not v["configMap"].get("optional"):
                out.append(Need("configmap", f"{ns}/{v['configMap']['name']}"))
            if "secret" in v and not v["secret"].get("optional"):
                out.append(Need("secret", f"{ns}/{v['secret']['secretName']}"))
            for src in v.get("projected", {}).get("sources", []):
                if "configMap" in src and not src["configMap"].get("optional"):
                    out.append(Need("configmap", f"{ns}/{src['configMap']['name']}"))
                if "secret" in src and not src["secret"].get("optional"):
                    out.append(Need("secret", f"{ns}/{src['secret']['name']}"))
        for c in [*pod.get("initContainers", []), *pod.get("containers", [])]:
            for ef in c.get("envFrom", []):
                for k in ("configMapRef", "secretRef"):
                    if k in ef and not ef[k].get("optional"):
                        out.append(Need(k.removesuffix("Ref").lower(), f"{ns}/{ef[k]['name']}"))
            for e in c.get("env", []):
                for k in ("configMapKeyRef", "secretKeyRef"):
                    ref = e.get("valueFrom", {}).get(k)
                    if ref and not ref.get("optional"):
                        out.append(Need(k.removesuffix("KeyRef").lower(), f"{ns}/{ref['name']}"))
    return out


def provides(obj: dict[str, Any]) -> list[Need]:
    kind = obj.get("kind")
    meta = obj.get("metadata", {})
    ns = meta.get("namespace") or "default"
    name = meta.get("name", "")
    if kind == "Namespace":
        return [Need("namespace", name)]
    if kind == "CustomResourceDefinition":
        return [Need("crd", obj.get("spec", {}).get("group", ""))]
    if kind == "ServiceAccount":
        return [Need("serviceaccount", f"{ns}/{name}")]
    if kind == "ConfigMap":
        return [Need("configmap", f"{ns}/{name}")]
    if kind == "Secret":
        return [Need("secret", f"{ns}/{name}")]
    return []
