"""The CPU-inference pool policy: which Karpenter NodePools a cluster gets by default (one per architecture over
c/m/r families of generation ≥ 7, Graviton weighted first, plus the tainted memory-optimized pool of the model
farm), and the label and taint workloads use to select and tolerate them."""

from __future__ import annotations

from cpu_inference.k8s.specs.karpenter_node_pool import Budget, Disruption, NodePoolSpec, Taint
from cpu_inference.k8s.specs.karpenter_rules import family_architecture, family_parts

# Labels/taints shared by the default pools, so workloads can select and tolerate them by name.
POOL_LABEL = "cpu-inference/pool"
MEMORY_TAINT = Taint("cpu-inference/memory-optimized", "true", "NoSchedule")
MEMORY_POOL = "memory-optimized"  # the model farm's pool: its name and its POOL_LABEL value
# The Mountpoint for S3 CSI driver's startup taint (mountpoint-s3-csi-driver docs/CONFIGURATION.md "Configure node
# startup taint": use `s3.csi.aws.com/agent-not-ready:NoExecute`, "NoExecute is recommended"): the driver's node plugin
# removes it once it has registered on the node (pkg/driver/node/taint.go, AgentNotReadyNodeTaintKey; since v2.1.0),
# so no pod that mounts an S3 volume lands on a fresh node before the driver can serve the mount. Karpenter treats
# startupTaints as temporary (it does not wait for them when it simulates scheduling).
MOUNTPOINT_STARTUP_TAINT = Taint("s3.csi.aws.com/agent-not-ready", None, "NoExecute")
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
    startup_taints: tuple[Taint, ...] = (),
) -> list[NodePoolSpec]:
    """The CPU-inference pools: one per architecture over c/m/r families of generation ≥ 7, Spot preferred
    with On-Demand fallback, plus a tainted memory-optimized (r) pool for the model farm.

    Arguments mirror config.yaml's `eks` section (schema `Eks`). Each family must match one of the
    architectures, and every architecture needs at least one family, so a typo fails here.
    startup_taints go on every pool: each can host a farm's pool pods (the farm tolerates the memory pool's taint),
    e.g. (MOUNTPOINT_STARTUP_TAINT,) when the platform installs the Mountpoint for S3 CSI driver.
    """
    archs = tuple(dict.fromkeys(architectures))
    fams = tuple(dict.fromkeys(instance_families))
    by_arch: dict[str, list[str]] = {a: [] for a in archs}
    for fam in fams:
        arch = family_architecture(fam)
        if arch not in by_arch:
            raise ValueError(
                f"instance family {fam} is {arch} but architectures lists only {list(archs)} — add {arch} or drop {fam}"
            )
        category, generation, _ = family_parts(fam)
        if category not in DEFAULT_CATEGORIES or generation < DEFAULT_MIN_GENERATION:
            raise ValueError(
                f"instance family {fam} is outside the CPU-inference pools (c/m/r, generation ≥ {DEFAULT_MIN_GENERATION})"
            )
        by_arch[arch].append(fam)
    empty = [a for a, f in by_arch.items() if not f]
    if empty:
        raise ValueError(
            f"no instance family for architecture(s) {empty} — add e.g. {'c7g' if 'arm64' in empty else 'c7a'} or drop the architecture"
        )
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
            startup_taints=startup_taints,
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
                startup_taints=startup_taints,
                disruption=disruption,
                limit_cpu=max_node_cpu,
            )
        )
    return pools
