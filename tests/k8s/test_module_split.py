"""The split of llama_server_chart.py, karpenter_specs.py and pod_hardening.py (issue 15): every name keeps its old
import path and is the very object of the module that now owns it, and both model charts take their probes,
resources, PodDisruptionBudget and NetworkPolicy from the one shared builder."""

from __future__ import annotations

import importlib

import cdk8s
import pytest

from cpu_inference import sizing
from cpu_inference.k8s.llama_server_chart import LlamaServerChart, LlamaServerChartProps, ModelWorkload, ServingPolicy
from cpu_inference.k8s.model_pool_chart import ModelPoolChart, ModelPoolChartProps, PoolModel

MOVED = {
    "cpu_inference.k8s.llama_server_chart": {
        "cpu_inference.k8s.model_workload": ["ModelWorkload"],
        "cpu_inference.k8s.serving_policy": ["ServingPolicy", "KedaSource"],
        "cpu_inference.k8s.model_placement": ["plan"],
        "cpu_inference.k8s.model_time_budgets": [
            "startup_budget_seconds", "download_budget_seconds", "disk_bytes", "NODE_LAUNCH_SECONDS",
            "LOAD_BYTES_PER_SECOND", "LOAD_FLOOR_SECONDS", "DOWNLOAD_BYTES_PER_SECOND", "DOWNLOAD_FLOOR_SECONDS",
        ],
        "cpu_inference.k8s.model_scaling": ["queue_target", "QUEUE_WEIGHT", "MIN_SCALE_DOWN_STABILIZATION"],
        "cpu_inference.k8s.network_policies": ["download_egress"],
        "cpu_inference.k8s.engine_container": [
            "ENGINE_PORT", "MODEL_DIR", "ENGINE_COMMAND", "ENGINE_CONTAINER", "COMPONENT", "ROUTER_COMPONENT",
            "PRE_STOP_SECONDS", "STARTUP_PERIOD_SECONDS",
        ],
    },
    "cpu_inference.k8s.karpenter_specs": {
        "cpu_inference.k8s.karpenter_rules": ["family_architecture", "family_parts", "NODEPOOL_API", "NODECLASS_API", "ARCH"],
        "cpu_inference.k8s.karpenter_node_pool": ["Requirement", "Taint", "Budget", "Disruption", "NodePoolSpec"],
        "cpu_inference.k8s.karpenter_node_class": ["BlockDevice", "MetadataOptions", "EC2NodeClassSpec"],
        "cpu_inference.k8s.default_node_pools": ["default_node_pools", "POOL_LABEL", "MEMORY_POOL", "MEMORY_TAINT"],
    },
    "cpu_inference.k8s.pod_hardening": {
        "cpu_inference.k8s.workload_defaults": [
            "pod_security_context", "container_security_context", "restrict", "require_architectures", "spread_constraints",
            "add_spread", "tolerate", "prefer_pools", "pre_stop_sleep", "unmanaged_replicas", "ARCHITECTURES", "NON_ROOT_UID",
        ],
    },
}


@pytest.mark.parametrize("old", sorted(MOVED))
def test_every_moved_name_is_importable_from_its_old_path_as_the_same_object(old: str) -> None:
    old_module = importlib.import_module(old)
    for new, names in MOVED[old].items():
        new_module = importlib.import_module(new)
        for name in names:
            assert getattr(old_module, name) is getattr(new_module, name), f"{old}.{name} is not {new}.{name}"


def _objects(chart: cdk8s.Chart) -> dict[str, dict]:
    return {o["kind"]: o for o in chart.to_json()}


def test_both_model_charts_render_probes_pdb_and_client_ingress_from_one_builder() -> None:
    app = cdk8s.App()
    policy = ServingPolicy(namespace="farm", client_namespaces=("apps",))
    model = LlamaServerChart(app, "m", props=LlamaServerChartProps(
        model=ModelWorkload("m", "img@sha256:" + "0" * 64, "s3://b/models/m/x.gguf", sizing.ModelSpec(0.135, task="classification", context_window=2048),
                            node_type="m7g.xlarge"),
        policy=policy,
    ))
    pool = ModelPoolChart(app, "p", props=ModelPoolChartProps(
        name="p", image="img@sha256:" + "0" * 64, models=(PoolModel("a", "a/1/a.gguf", ctx_size=1024),), models_max=1, cpu=2,
        memory_bytes=2 * 1024**3, bucket_name="bucket", region="us-east-1", policy=policy,
    ))
    m, p = _objects(model), _objects(pool)
    m_engine = m["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    p_engine = p["StatefulSet"]["spec"]["template"]["spec"]["containers"][0]
    assert m_engine["readinessProbe"] == p_engine["readinessProbe"]
    # The pool's liveness times out sooner (3 s, as before the split); everything else is the same probe.
    assert {k: v for k, v in m_engine["livenessProbe"].items() if k != "timeoutSeconds"} == \
        {k: v for k, v in p_engine["livenessProbe"].items() if k != "timeoutSeconds"}
    assert (m_engine["livenessProbe"]["timeoutSeconds"], p_engine["livenessProbe"]["timeoutSeconds"]) == (5, 3)
    assert m["PodDisruptionBudget"]["spec"]["maxUnavailable"] == p["PodDisruptionBudget"]["spec"]["maxUnavailable"] == 1
    assert m["PodDisruptionBudget"]["spec"]["unhealthyPodEvictionPolicy"] == p["PodDisruptionBudget"]["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
    # Client ingress (API port, the router's pods and the client namespaces) is one rule for both.
    assert m["NetworkPolicy"]["spec"]["ingress"][0] == p["NetworkPolicy"]["spec"]["ingress"][0]
    # Only the single-model pod is scraped and downloads its model; the pool has neither.
    assert len(m["NetworkPolicy"]["spec"]["ingress"]) == 2 and len(p["NetworkPolicy"]["spec"]["ingress"]) == 1
    assert m["NetworkPolicy"]["spec"]["egress"] and not p["NetworkPolicy"]["spec"].get("egress")
