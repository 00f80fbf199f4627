"""Both model charts take their probes, resources, PodDisruptionBudget and NetworkPolicy from the one shared
builder (k8s/workloads/)."""

from __future__ import annotations

import cdk8s

from cpu_inference import sizing
from cpu_inference.engines.pool_preset import PoolModel
from cpu_inference.k8s.charts.llama_server_chart import LlamaServerChart, LlamaServerChartProps
from cpu_inference.k8s.charts.model_pool_chart import STATUS_PORT, ModelPoolChart, ModelPoolChartProps
from cpu_inference.k8s.workloads.model_workload import ModelWorkload
from cpu_inference.k8s.workloads.serving_policy import ServingPolicy


def _objects(chart: cdk8s.Chart) -> dict[str, dict]:
    return {o["kind"]: o for o in chart.to_json()}


def test_both_model_charts_render_probes_pdb_and_client_ingress_from_one_builder() -> None:
    app = cdk8s.App()
    policy = ServingPolicy(namespace="farm", client_namespaces=("apps",))
    model = LlamaServerChart(
        app,
        "m",
        props=LlamaServerChartProps(
            model=ModelWorkload(
                "m",
                "img@sha256:" + "0" * 64,
                "s3://b/models/m/x.gguf",
                sizing.ModelSpec(0.135, task="classification", context_window=2048),
                node_type="m7g.xlarge",
            ),
            policy=policy,
        ),
    )
    pool = ModelPoolChart(
        app,
        "p",
        props=ModelPoolChartProps(
            name="p",
            image="img@sha256:" + "0" * 64,
            models=(PoolModel("a", "a/1/a.gguf", ctx_size=1024),),
            models_max=1,
            cpu=2,
            memory_bytes=2 * 1024**3,
            bucket_name="bucket",
            region="us-east-1",
            policy=policy,
        ),
    )
    m, p = _objects(model), _objects(pool)
    m_engine = m["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    p_engine = p["StatefulSet"]["spec"]["template"]["spec"]["containers"][0]
    assert m_engine["readinessProbe"] == p_engine["readinessProbe"]
    # The pool's liveness times out sooner (3 s, as before the split); everything else is the same probe.
    assert {k: v for k, v in m_engine["livenessProbe"].items() if k != "timeoutSeconds"} == {
        k: v for k, v in p_engine["livenessProbe"].items() if k != "timeoutSeconds"
    }
    assert (m_engine["livenessProbe"]["timeoutSeconds"], p_engine["livenessProbe"]["timeoutSeconds"]) == (5, 3)
    assert m["PodDisruptionBudget"]["spec"]["maxUnavailable"] == p["PodDisruptionBudget"]["spec"]["maxUnavailable"] == 1
    assert (
        m["PodDisruptionBudget"]["spec"]["unhealthyPodEvictionPolicy"]
        == p["PodDisruptionBudget"]["spec"]["unhealthyPodEvictionPolicy"]
        == "AlwaysAllow"
    )
    # Client ingress (the router's pods and the client namespaces) is one rule for both; the pool's also admits the
    # gateway to its supervisor's status port.
    m_clients, p_clients = m["NetworkPolicy"]["spec"]["ingress"][0], p["NetworkPolicy"]["spec"]["ingress"][0]
    assert m_clients["from"] == p_clients["from"]
    assert p_clients["ports"] == [*m_clients["ports"], {"port": STATUS_PORT, "protocol": "TCP"}]
    # Both are scraped (the single model's metrics proxy; the pool's supervisor on its status port); only the
    # single-model pod downloads its model (the pool reads it through Mountpoint).
    m_scrape, p_scrape = m["NetworkPolicy"]["spec"]["ingress"][1], p["NetworkPolicy"]["spec"]["ingress"][1]
    assert m_scrape["from"] == p_scrape["from"] and p_scrape["ports"] == [{"port": STATUS_PORT, "protocol": "TCP"}]
    assert m["NetworkPolicy"]["spec"]["egress"] and not p["NetworkPolicy"]["spec"].get("egress")
