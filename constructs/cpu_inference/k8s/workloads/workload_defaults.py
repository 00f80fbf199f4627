"""What every workload we render gets (was pod_hardening.py): the Pod Security "restricted" security contexts,
zone/node spread, multi-arch node affinity, tolerations, the preStop sleep, replicas left to KEDA, the
one-pod-at-a-time PodDisruptionBudget, and the JSON patches for fields cdk8s-plus-27 does not model.
(cpu_inference.testing.pod_security is the other side: it checks rendered objects against "restricted".)

cdk8s-plus-27 already renders runAsNonRoot, readOnlyRootFilesystem, allowPrivilegeEscalation: false and
privileged: false by default; "restricted" also needs `capabilities.drop: [ALL]` (its Capability enum has
no ALL) and `seccompProfile: RuntimeDefault` (no prop), which are patched in here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import cdk8s
import cdk8s_plus_27 as kplus
from constructs import Construct

# The numeric user every container runs as (distroless "nonroot"). Set explicitly as runAsUser/runAsGroup:
# the engine image's USER is root (SageMaker starts containers as root; its `serve` mode drops to this same
# uid itself), so runAsNonRoot can only verify the pod through these fields.
NON_ROOT_UID = 65532
ARCH_LABEL = "kubernetes.io/arch"
ZONE_LABEL = "topology.kubernetes.io/zone"
HOST_LABEL = "kubernetes.io/hostname"
ARCHITECTURES = ("arm64", "amd64")


def pod_security_context() -> kplus.PodSecurityContextProps:
    return kplus.PodSecurityContextProps(
        ensure_non_root=True,
        user=NON_ROOT_UID,
        group=NON_ROOT_UID,
        fs_group=NON_ROOT_UID,  # emptyDir volumes writable by the non-root user
        fs_group_change_policy=kplus.FsGroupChangePolicy.ON_ROOT_MISMATCH,
    )


def container_security_context() -> kplus.ContainerSecurityContextProps:
    return kplus.ContainerSecurityContextProps(
        ensure_non_root=True,
        user=NON_ROOT_UID,
        group=NON_ROOT_UID,
        read_only_root_filesystem=True,
        allow_privilege_escalation=False,
        privileged=False,
    )


def restrict(workload: kplus.Deployment, *, containers: int, init_containers: int = 0) -> None:
    """Patch in what cdk8s-plus-27 cannot express: seccomp RuntimeDefault for the pod, drop ALL
    capabilities in every container. Also no service-link env vars (dozens of stale host:port
    variables in a namespace with many models)."""
    obj = cdk8s.ApiObject.of(workload)
    spec = "/spec/template/spec"
    obj.add_json_patch(cdk8s.JsonPatch.add(f"{spec}/securityContext/seccompProfile", {"type": "RuntimeDefault"}))
    obj.add_json_patch(cdk8s.JsonPatch.add(f"{spec}/enableServiceLinks", False))
    for kind, count in (("containers", containers), ("initContainers", init_containers)):
        for i in range(count):
            obj.add_json_patch(
                cdk8s.JsonPatch.add(f"{spec}/{kind}/{i}/securityContext/capabilities", {"drop": ["ALL"]})
            )


def require_architectures(workload: kplus.Deployment, architectures: Sequence[str] = ARCHITECTURES) -> None:
    """Required node affinity on kubernetes.io/arch: the images are multi-arch, so Karpenter may pick
    Graviton or x86 by price and Spot availability."""
    workload.scheduling.attract(kplus.Node.labeled(kplus.NodeLabelQuery.in_(ARCH_LABEL, list(architectures))))


def spread_constraints(selector: Mapping[str, str], *, zone_skew: int = 1, node_skew: int = 1) -> list[dict[str, Any]]:
    """Spread one workload's replicas over zones, then nodes. ScheduleAnyway on both: Karpenter treats a
    preferred spread as required when it launches capacity (and relaxes it only when it cannot satisfy
    it), while the scheduler never leaves a pod Pending because one zone is out of Spot capacity.
    `matchLabelKeys: [pod-template-hash]` keeps a rolling update from counting old and new pods together."""
    return [
        {
            "maxSkew": skew,
            "topologyKey": key,
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": dict(selector)},
            "matchLabelKeys": ["pod-template-hash"],
        }
        for key, skew in ((ZONE_LABEL, zone_skew), (HOST_LABEL, node_skew))
    ]


def add_spread(workload: kplus.Deployment, selector: Mapping[str, str]) -> None:
    cdk8s.ApiObject.of(workload).add_json_patch(
        cdk8s.JsonPatch.add("/spec/template/spec/topologySpreadConstraints", spread_constraints(selector))
    )


def tolerate(workload: kplus.Deployment, tolerations: Sequence[Mapping[str, Any]]) -> None:
    for t in tolerations:
        effect = {
            "NoSchedule": kplus.TaintEffect.NO_SCHEDULE,
            "PreferNoSchedule": kplus.TaintEffect.PREFER_NO_SCHEDULE,
            "NoExecute": kplus.TaintEffect.NO_EXECUTE,
        }.get(t.get("effect", ""))
        if t.get("operator", "Equal") == "Exists":
            query = kplus.NodeTaintQuery.exists(t["key"], effect=effect)
        else:
            query = kplus.NodeTaintQuery.is_(t["key"], t.get("value", ""), effect=effect)
        workload.scheduling.tolerate(kplus.Node.tainted(query))


def prefer_pools(workload: kplus.Deployment, label: str, values: Sequence[str], weight: int = 50) -> None:
    if values:
        workload.scheduling.attract(kplus.Node.labeled(kplus.NodeLabelQuery.in_(label, list(values))), weight=weight)


def pre_stop_sleep(seconds: int) -> kplus.ContainerLifecycle:
    """preStop: keep serving while Services and the router drop the pod from their endpoints, then SIGTERM
    reaches the server. An exec of coreutils `sleep` (in both images): the native `sleep` action is newer
    than the cdk8s-plus-27 schema, whose serializer drops fields it does not know."""
    return kplus.ContainerLifecycle(pre_stop=kplus.Handler.from_command(["sleep", str(seconds)]))


def unmanaged_replicas(workload: kplus.Deployment) -> None:
    """Leave `spec.replicas` out: KEDA/HPA owns it, and re-applying the manifest must not reset it."""
    cdk8s.ApiObject.of(workload).add_json_patch(cdk8s.JsonPatch.remove("/spec/replicas"))


def one_at_a_time_budget(
    scope: Construct, id: str, *, name: str, labels: Mapping[str, str], selector: Mapping[str, str]
) -> kplus.k8s.KubePodDisruptionBudget:
    """One pod at a time may go voluntarily (drains, consolidation). minAvailable would block node drains
    forever for a one-replica workload; AlwaysAllow lets a drain evict a pod stuck loading."""
    k = kplus.k8s
    return k.KubePodDisruptionBudget(
        scope,
        id,
        metadata=k.ObjectMeta(name=name, labels=dict(labels)),
        spec=k.PodDisruptionBudgetSpec(
            max_unavailable=k.IntOrString.from_number(1),
            selector=k.LabelSelector(match_labels=dict(selector)),
            unhealthy_pod_eviction_policy="AlwaysAllow",
        ),
    )
