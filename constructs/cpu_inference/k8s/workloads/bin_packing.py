"""Will the pods fit? First-fit-decreasing packing of pod requests onto one node type, with the node's
allocatable as EKS/Karpenter computes it (`sizing.usable_vcpus` / `usable_memory_bytes`) and its pod limit.

The scheduler and Karpenter place pods by their *requests*, so this is the density a model farm gets when
every model's request is what the chart renders. Pure functions; `cpu-inference`'s users and the tests
print the same table:

    plans = [pack(pods, t) for t in ("m7g.2xlarge", "r7g.2xlarge")]
    print(table(plans))
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from cpu_inference import sizing
from cpu_inference.k8s.workloads.metrics_proxy import SIDECAR_CPU, SIDECAR_MEMORY_BYTES
from cpu_inference.sizing.pools import PoolPlan, replica_memory_bytes

# Pods per node with the VPC CNI in its default mode (no prefix delegation): ENIs x (IPv4 per ENI - 1) + 2,
# the value Karpenter and the EKS AMIs give the kubelet for c/m/r generation 7-8 families; the kubelet's
# reservation in `sizing` assumes at most 110.
ENI_MAX_PODS = {
    "medium": 8,
    "large": 29,
    "xlarge": 58,
    "2xlarge": 58,
    "4xlarge": 234,
    "8xlarge": 234,
    "12xlarge": 234,
    "16xlarge": 737,
    "24xlarge": 737,
    "48xlarge": 737,
}
KUBELET_MAX_PODS = 110
DAEMONSET_PODS = 4  # aws-node, kube-proxy, eks-pod-identity-agent, one log/metrics agent


@dataclass(frozen=True)
class PodRequest:
    name: str
    cpu: float
    memory_bytes: int
    replicas: int = 1


@dataclass(frozen=True)
class NodeLoad:
    pods: tuple[str, ...]
    cpu: float
    memory_bytes: int


@dataclass(frozen=True)
class PackingPlan:
    instance: sizing.InstanceType
    cpu_allocatable: float
    memory_allocatable: int
    max_pods: int
    nodes: tuple[NodeLoad, ...]
    unplaced: tuple[str, ...]  # pods larger than one node

    @property
    def node_count(self) -> int:
        return len(self.nodes)

    @property
    def pod_count(self) -> int:
        return sum(len(n.pods) for n in self.nodes)

    @property
    def pods_per_node(self) -> tuple[int, ...]:
        return tuple(len(n.pods) for n in self.nodes)

    @property
    def cpu_requested(self) -> float:
        return sum(n.cpu for n in self.nodes)

    @property
    def memory_requested(self) -> int:
        return sum(n.memory_bytes for n in self.nodes)

    @property
    def cpu_utilization(self) -> float:
        return self.cpu_requested / (self.cpu_allocatable * self.node_count) if self.nodes else 0.0

    @property
    def memory_utilization(self) -> float:
        return self.memory_requested / (self.memory_allocatable * self.node_count) if self.nodes else 0.0

    @property
    def lower_bound(self) -> int:
        """No packing can use fewer nodes than this (CPU, memory and pod-count bounds)."""
        return max(
            math.ceil(round(self.cpu_requested / self.cpu_allocatable, 9)),
            math.ceil(self.memory_requested / self.memory_allocatable),
            math.ceil(self.pod_count / self.max_pods),
            1 if self.pod_count else 0,
        )

    @property
    def node_vcpus(self) -> int:
        """vCPUs bought: the cost proxy (EC2 prices are linear in size within a family)."""
        return self.node_count * self.instance.vcpus


def max_pods(it: sizing.InstanceType) -> int:
    """Pods a workload may place on a node: the kubelet's limit minus the DaemonSet pods."""
    size = it.name.split(".", 1)[1]
    return min(ENI_MAX_PODS.get(size, KUBELET_MAX_PODS), KUBELET_MAX_PODS) - DAEMONSET_PODS


def expand(pods: Iterable[PodRequest]) -> list[tuple[str, float, int]]:
    return [
        (f"{p.name}#{i}" if p.replicas > 1 else p.name, p.cpu, p.memory_bytes) for p in pods for i in range(p.replicas)
    ]


def pack(pods: Sequence[PodRequest], instance_type: str) -> PackingPlan:
    """First fit decreasing by each pod's dominant share of the node (CPU or memory)."""
    it = sizing.instance(instance_type)
    cpu_cap = sizing.usable_vcpus(it, target="eks")
    mem_cap = sizing.usable_memory_bytes(it, target="eks")
    limit = max_pods(it)
    items = sorted(expand(pods), key=lambda p: max(p[1] / cpu_cap, p[2] / mem_cap), reverse=True)
    bins: list[list] = []  # [names, cpu, memory]
    unplaced: list[str] = []
    for name, cpu, mem in items:
        if cpu > cpu_cap + 1e-9 or mem > mem_cap:
            unplaced.append(name)
            continue
        for b in bins:
            if b[1] + cpu <= cpu_cap + 1e-9 and b[2] + mem <= mem_cap and len(b[0]) < limit:
                b[0].append(name)
                b[1] += cpu
                b[2] += mem
                break
        else:
            bins.append([[name], cpu, mem])
    nodes = tuple(NodeLoad(tuple(b[0]), round(b[1], 6), b[2]) for b in bins)
    return PackingPlan(it, cpu_cap, mem_cap, limit, nodes, tuple(unplaced))


def choose(pods: Sequence[PodRequest], candidates: Sequence[str]) -> PackingPlan:
    """The candidate node type that places every pod on the fewest vCPUs (then the least memory)."""
    plans = [pack(pods, c) for c in candidates]
    placed = [p for p in plans if not p.unplaced]
    if not placed:
        raise ValueError(
            f"no node type in {list(candidates)} fits every pod; the largest pods: {plans[-1].unplaced[:3]}"
        )
    return min(placed, key=lambda p: (p.node_vcpus, p.node_count * p.instance.memory_gib))


def table(plans: Sequence[PackingPlan]) -> str:
    """Pods-per-node table, one row per node type."""
    head = f"{'node type':<13} {'alloc vCPU/GiB':>15} {'max pods':>8} {'pods':>5} {'nodes':>5} {'min':>4} {'pods per node':<28} {'CPU req':>8} {'mem req':>8} {'vCPUs':>6}"
    rows = [head, "-" * len(head)]
    for p in plans:
        per_node = ",".join(map(str, p.pods_per_node))
        if p.unplaced:
            per_node = f"{len(p.unplaced)} pods do not fit"
        rows.append(
            f"{p.instance.name:<13} {p.cpu_allocatable:>6.2f}/{p.memory_allocatable / sizing.GIB:>6.1f} {p.max_pods:>10} {p.pod_count:>5} "
            f"{p.node_count:>5} {p.lower_bound:>4} {per_node:<28} {p.cpu_utilization:>8.0%} {p.memory_utilization:>8.0%} {p.node_vcpus:>6}"
        )
    return "\n".join(rows)


def model_pod(
    name: str, spec: sizing.ModelSpec, node_type: str, *, cpu: float | None = None, replicas: int = 1
) -> PodRequest:
    """A llama-server pod's requests exactly as LlamaServerChart renders them (sizing on `node_type`)."""
    s = sizing.size(
        spec, sizing.instance(node_type), target="eks", cpu=cpu if cpu is not None else sizing.default_pod_cpu(spec)
    )
    return PodRequest(
        name, s.cpu_request + SIDECAR_CPU, s.memory_request_mib * sizing.MIB + SIDECAR_MEMORY_BYTES, replicas
    )


def pool_pod(name: str, plan: PoolPlan, *, cpu: float, replicas: int = 1) -> PodRequest:
    """A multi-model pool replica's requests exactly as ModelPoolChart renders them (request = limit: the plan's
    memory for models_max loaded models and the router + the node's Mountpoint pod allowance; `cpu` whole vCPUs)."""
    return PodRequest(
        f"pool-{name}",
        float(math.ceil(cpu)),
        math.ceil(replica_memory_bytes(plan.memory_request_bytes) / sizing.MIB) * sizing.MIB,
        replicas,
    )


def served_model_pods(models: Iterable[object], node_type: str, *, replicas: str = "min") -> list[PodRequest]:
    """Pod requests of the dedicated `patterns.ServedModel`s (e.g. `served_models(config)`) at their min or max
    replicas; pooled models (ServedModel.pool set) run in their pool's pods (pool_pod)."""
    if replicas not in ("min", "max"):
        raise ValueError("replicas must be 'min' or 'max'")
    out = []
    for m in models:
        if getattr(m, "pool", None) is not None:
            continue
        n = m.replicas_min if replicas == "min" else m.replicas_max  # type: ignore[attr-defined]
        if n:
            out.append(model_pod(m.name, m.spec, node_type, cpu=m.cpu, replicas=n))  # type: ignore[attr-defined]
    return out
