"""Bin-packing check for the model-farm example (examples/model-farm-eks.yaml, 20 small models in two pools and two
dedicated hot models): the pods' requests — exactly what LlamaServerChart renders for each dedicated model and
ModelPoolChart for each pool replica — fit the chosen node sizes at the planned density. Run with `-s` to see the
pods-per-node table."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import cdk8s
import pytest

from cpu_inference import sizing
from cpu_inference.config import load
from cpu_inference.config.rules import plan_pool
from cpu_inference.k8s.charts.llama_server_chart import LlamaServerChart, LlamaServerChartProps
from cpu_inference.k8s.charts.model_pool_chart import ModelPoolChart, ModelPoolChartProps
from cpu_inference.k8s.workloads.bin_packing import (
    NodeLoad,
    PodRequest,
    choose,
    expand,
    max_pods,
    model_pod,
    pack,
    pool_pod,
    served_model_pods,
    table,
)
from cpu_inference.k8s.workloads.model_workload import ModelWorkload
from cpu_inference.k8s.workloads.serving_policy import ServingPolicy
from cpu_inference.patterns.from_config import served_models

ROOT = Path(__file__).resolve().parents[2]
FARM = ROOT / "examples" / "model-farm-eks.yaml"
SIZES = ("2xlarge", "4xlarge")
COMPARISON = ("c7g.2xlarge", "c7g.4xlarge")  # compute-optimized, not in the example's families: printed for comparison
CONFIG = load(FARM)
# The node sizes Karpenter may choose for the example: 2xlarge/4xlarge of its families (r7g, r8g, m7g, m8g, r7a, r7i).
CANDIDATES = tuple(f"{fam}.{size}" for fam in CONFIG.eks.instance_families for size in SIZES)


@pytest.fixture(scope="module")
def farm():
    return served_models(CONFIG)


def farm_pods(farm, node: str, replicas: str) -> list[PodRequest]:
    """The dedicated models' pods and every used pool's replicas at their min or max."""
    pods = served_model_pods(farm, node, replicas=replicas)
    for pool in CONFIG.farm.pools:
        plan = plan_pool(CONFIG, pool)
        if plan is not None:
            pods.append(
                pool_pod(
                    pool.name,
                    plan,
                    cpu=pool.cpu,
                    replicas=pool.replicas.min if replicas == "min" else pool.replicas.max,
                )
            )
    return pods


def test_pool_pod_requests_are_what_the_pool_chart_renders() -> None:
    used = [(pool, plan) for pool in CONFIG.farm.pools if (plan := plan_pool(CONFIG, pool)) is not None]
    assert used
    for pool, plan in used:
        props = ModelPoolChartProps.from_plan(
            name=pool.name,
            image="i@sha256:" + "f" * 64,
            plan=plan,
            paths={n: f"{n}/0123456789abcdef/m.gguf" for n in plan.per_model},
            bucket_name="models-bucket",
            region="us-east-1",
        )
        chart = ModelPoolChart(cdk8s.App(), pool.name, props=props)
        sts = next(o for o in chart.to_json() if o["kind"] == "StatefulSet")
        containers = sts["spec"]["template"]["spec"]["containers"]
        cpu = sum(
            float(str(c["resources"]["requests"]["cpu"]).removesuffix("m"))
            / (1000 if str(c["resources"]["requests"]["cpu"]).endswith("m") else 1)
            for c in containers
        )
        mem = sum(int(str(c["resources"]["requests"]["memory"]).removesuffix("Mi")) * sizing.MIB for c in containers)
        pod = pool_pod(pool.name, plan, cpu=pool.cpu)
        assert (cpu, mem) == (pod.cpu, pod.memory_bytes)


def fits_together(a: tuple[str, float, int], b: tuple[str, float, int], plan) -> bool:
    return a[1] + b[1] <= plan.cpu_allocatable + 1e-9 and a[2] + b[2] <= plan.memory_allocatable and plan.max_pods >= 2


def nodes_needed(pods: list[PodRequest], plan) -> int:
    """A lower bound on the nodes of `plan`'s type any packing of `pods` needs, counting CPU and memory together:
    a pod that fits beside no other pod (e.g. a 12.4 GiB pool replica on a 12.8 GiB-allocatable node) takes a node
    alone, whatever CPU that node has left, and the other pods need at least the larger of their CPU, memory and
    pod-count bounds on top. Never below plan.lower_bound (the same bounds over all pods), never above the optimum."""
    items = expand(pods)
    alone = [
        p for i, p in enumerate(items) if not any(fits_together(p, q, plan) for j, q in enumerate(items) if j != i)
    ]
    rest = [p for p in items if p not in alone]
    return len(alone) + max(
        math.ceil(round(sum(p[1] for p in rest) / plan.cpu_allocatable, 9)),
        math.ceil(sum(p[2] for p in rest) / plan.memory_allocatable),
        math.ceil(len(rest) / plan.max_pods),
    )


def within_one_node_of_optimal(plan, pods: list[PodRequest]) -> bool:
    bound = nodes_needed(pods, plan)
    return plan.lower_bound <= bound <= plan.node_count <= bound + 1


def check(plan, pods: list[PodRequest]) -> None:
    """Every pod placed, no node over its allocatable CPU, memory or pod limit, and within one node of optimal."""
    assert not plan.unplaced
    for node in plan.nodes:
        assert node.cpu <= plan.cpu_allocatable + 1e-9
        assert node.memory_bytes <= plan.memory_allocatable
        assert len(node.pods) <= plan.max_pods
    assert within_one_node_of_optimal(plan, pods), (plan.node_count, nodes_needed(pods, plan))


def test_farm_has_at_least_20_small_models(farm) -> None:
    assert len(farm) >= 20 and all(m.spec.parameters_billions < 4 for m in farm)


def test_pod_requests_are_what_the_chart_renders(farm) -> None:
    node = CANDIDATES[0]
    for m in farm:
        w = ModelWorkload(
            name=m.name,
            image="i@sha256:" + "f" * 64,
            model_uri=f"s3://b/models/{m.name}/main/{m.file}",
            spec=m.spec,
            cpu=m.cpu,
            node_type=node,
            replicas_min=max(1, m.replicas_min),
            replicas_max=m.replicas_max,
        )
        chart = LlamaServerChart(cdk8s.App(), m.name, props=LlamaServerChartProps(model=w, policy=ServingPolicy()))
        dep = next(o for o in chart.to_json() if o["kind"] == "Deployment")
        containers = dep["spec"]["template"]["spec"]["containers"]  # the engine and its metrics sidecar
        cpu_m = sum(int(c["resources"]["requests"]["cpu"].removesuffix("m")) for c in containers)
        mem_mi = sum(int(c["resources"]["requests"]["memory"].removesuffix("Mi")) for c in containers)
        pod = model_pod(m.name, m.spec, node, cpu=m.cpu)
        assert cpu_m == round(pod.cpu * 1000) and mem_mi * sizing.MIB == pod.memory_bytes
        assert chart.pod_requests == (pod.cpu, pod.memory_bytes)


@pytest.mark.parametrize("replicas", ["min", "max"])
def test_farm_fits_the_chosen_node_sizes(farm, replicas: str) -> None:
    plans = [pack(farm_pods(farm, node, replicas), node) for node in CANDIDATES]
    compare = [pack(farm_pods(farm, node, replicas), node) for node in COMPARISON]
    print(f"\nmodel farm ({FARM.name}), {replicas} replicas:\n{table(plans + compare)}")
    for plan in plans + compare:
        check(plan, farm_pods(farm, plan.instance.name, replicas))
    pods = farm_pods(farm, CANDIDATES[0], replicas)
    chosen = choose(pods, CANDIDATES)
    print(
        f"chosen: {chosen.instance.name} x {chosen.node_count} ({chosen.node_vcpus} vCPUs, pods per node {chosen.pods_per_node})"
    )
    total_cpu = sum(p.cpu * p.replicas for p in pods)
    assert chosen.cpu_requested == pytest.approx(total_cpu)
    assert chosen.node_vcpus == min(p.node_vcpus for p in plans)
    # The planned density: the chosen plan packs ≥ 80% of its allocatable CPU (CPU is what binds for 1-2 thread pods).
    assert chosen.cpu_utilization >= 0.8
    assert math.ceil(total_cpu / chosen.cpu_allocatable) == chosen.lower_bound


def test_cpu_binds_before_memory_for_a_farm_of_small_models(farm) -> None:
    plan = pack(served_model_pods(farm, "r7g.2xlarge", replicas="max"), "r7g.2xlarge")
    assert plan.cpu_utilization > 3 * plan.memory_utilization


def test_pods_that_cannot_fit_are_reported_not_dropped() -> None:
    big = model_pod("llama-70b", sizing.ModelSpec(70.0), "r7g.16xlarge", cpu=16)
    plan = pack([big, PodRequest("tiny", 1, 256 * sizing.MIB)], "m7g.2xlarge")
    assert plan.unplaced == ("llama-70b",) and plan.pod_count == 1
    with pytest.raises(ValueError, match="fits every pod"):
        choose([big], ("m7g.2xlarge",))


def test_the_pod_limit_binds_for_tiny_pods() -> None:
    it = sizing.instance("r7g.4xlarge")
    tiny = [PodRequest("t", 0.1, 64 * sizing.MIB, replicas=300)]
    plan = pack(tiny, it.name)
    assert max(plan.pods_per_node) == max_pods(it) and plan.node_count == math.ceil(300 / max_pods(it))
    check(plan, tiny)


def test_the_bound_counts_a_pod_that_fills_a_nodes_memory_as_a_whole_node(farm) -> None:
    # c7g.2xlarge at max replicas: each pool-medium replica (5 vCPUs, 12.4 GiB with the Mountpoint allowance) leaves
    # 2.66 vCPUs but 0.4 GiB, less than any other pod asks: 4 nodes alone + 7 by CPU for the rest, where CPU over
    # all pods alone says 10.
    pods = farm_pods(farm, "c7g.2xlarge", "max")
    plan = pack(pods, "c7g.2xlarge")
    assert (plan.lower_bound, nodes_needed(pods, plan), plan.node_count) == (10, 11, 12)
    # A packing that wastes a node per pod is still refused, here and on a node type where memory does not bind.
    for node in ("c7g.2xlarge", "r7g.2xlarge"):
        pods = farm_pods(farm, node, "max")
        plan = pack(pods, node)
        one_per_node = replace(plan, nodes=tuple(NodeLoad((name,), cpu, mem) for name, cpu, mem in expand(pods)))
        assert within_one_node_of_optimal(plan, pods) and not within_one_node_of_optimal(one_per_node, pods)
