"""RouterChart: the router's ConfigMap is accepted by the router's own config loader (run for real with
`python -m slm_router --print-config` on the rendered file), the pods are restricted and probed on the
router's /health and /ready, scaling is KEDA on the request rate (or a CPU HPA without a metrics source),
and every object validates against Kubernetes 1.35 / the KEDA CRD."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import cdk8s
import pytest

from cpu_inference.k8s.charts.router_chart import (
    API_KEY_DIR,
    API_KEY_FILE,
    CONFIG_DIR,
    CONFIG_FILE,
    DEFAULT_MAX_IN_FLIGHT,
    ROUTER_PORT,
    RouterChart,
    RouterChartProps,
    gateway_cold_start_query,
    gateway_models,
)
from cpu_inference.k8s.workloads.engine_container import ENGINE_PORT
from cpu_inference.k8s.workloads.metrics_proxy import METRICS_PORT
from cpu_inference.k8s.workloads.serving_policy import KedaSource
from cpu_inference.testing.pod_security import restricted_violations
from tests.support.k8s import validate_core, validate_custom

ROOT = Path(__file__).resolve().parents[2]
ROUTER_DIR = ROOT / "containers" / "router"
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/router@sha256:" + "e" * 64
SLM = "http://smollm2.slm-prefilter.svc.cluster.local:8080"
AMP = KedaSource(
    "https://aps-workspaces.us-east-1.amazonaws.com/workspaces/ws-1",
    aws_region="us-east-1",
    authentication_ref="amp-sigv4",
)
CONFIG = {
    "slm_url": SLM,
    "labels": ["simple", "complex"],
    "slm_labels": ["simple"],
    "confidence_threshold": 0.8,
    "escalation": {"kind": "openai", "url": "https://llm.example.com/v1", "model_id": "big"},
}


def render(**kw: Any) -> tuple[RouterChart, dict[str, dict[str, Any]]]:
    props = RouterChartProps(image=IMAGE, config=CONFIG, namespace="slm-prefilter", pattern="slm-prefilter", keda=AMP)
    chart = RouterChart(cdk8s.App(), "router", props=replace(props, **kw))
    return chart, {o["kind"]: o for o in chart.to_json()}


@pytest.fixture(scope="module")
def rendered() -> tuple[RouterChart, dict[str, dict[str, Any]]]:
    return render(api_key_secret="llm-api-key")


def pod(objs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return objs["Deployment"]["spec"]["template"]["spec"]


def print_config(config_text: str, env: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """The router's own loader on the rendered ConfigMap file, with the Deployment's env."""
    path = tmp_path / CONFIG_FILE
    path.write_text(config_text)
    run_env = {k: v for k, v in os.environ.items() if not k.startswith("ROUTER_")}
    run_env.update(env, ROUTER_CONFIG=str(path), PYTHONPATH=str(ROUTER_DIR))
    return subprocess.run(
        [sys.executable, "-m", "slm_router", "--print-config"], env=run_env, capture_output=True, text=True, timeout=60
    )


def test_config_map_is_what_the_router_loads(rendered, tmp_path: Path) -> None:
    chart, objs = rendered
    text = objs["ConfigMap"]["data"][CONFIG_FILE]
    env = {e["name"]: e["value"] for e in pod(objs)["containers"][0]["env"]}
    assert env["ROUTER_CONFIG"] == f"{CONFIG_DIR}/{CONFIG_FILE}"
    out = print_config(text, {k: v for k, v in env.items() if k != "ROUTER_CONFIG"}, tmp_path)
    assert out.returncode == 0, out.stderr
    loaded = json.loads(out.stdout)
    assert (
        loaded["mode"] == "router"
        and loaded["slm_url"] == SLM
        and loaded["listen_port"] == ROUTER_PORT
        and loaded["listen_host"] == "0.0.0.0"
    )
    assert loaded["escalation"]["api_key_file"] == f"{API_KEY_DIR}/{API_KEY_FILE}"
    assert loaded["confidence_threshold"] == 0.8
    mounts = {m["mountPath"]: m for m in pod(objs)["containers"][0]["volumeMounts"]}
    assert mounts[CONFIG_DIR]["readOnly"] and mounts[API_KEY_DIR]["readOnly"]
    volumes = {v["name"]: v for v in pod(objs)["volumes"]}
    assert volumes[mounts[API_KEY_DIR]["name"]]["secret"]["secretName"] == "llm-api-key"
    assert objs["Deployment"]["spec"]["template"]["metadata"]["annotations"]["cpu-inference/config-sha256"]


def test_a_bad_router_config_is_caught_by_the_router_loader(tmp_path: Path) -> None:
    _, objs = render(config={**CONFIG, "slm_labels": ["easy"]})
    out = print_config(objs["ConfigMap"]["data"][CONFIG_FILE], {}, tmp_path)
    assert out.returncode == 2 and "slm_labels[0]" in out.stderr


def test_config_changes_roll_the_pods() -> None:
    _, a = render()
    _, b = render(config={**CONFIG, "confidence_threshold": 0.9})
    key = "cpu-inference/config-sha256"
    assert (
        a["Deployment"]["spec"]["template"]["metadata"]["annotations"][key]
        != b["Deployment"]["spec"]["template"]["metadata"]["annotations"][key]
    )


def test_probes_resources_and_placement(rendered) -> None:
    chart, objs = rendered
    c = pod(objs)["containers"][0]
    assert c["startupProbe"]["httpGet"]["path"] == c["livenessProbe"]["httpGet"]["path"] == "/health"
    assert c["readinessProbe"]["httpGet"]["path"] == "/ready"
    assert {p["httpGet"]["port"] for p in (c["startupProbe"], c["livenessProbe"], c["readinessProbe"])} == {ROUTER_PORT}
    p = chart.props
    assert c["resources"]["requests"] == {"cpu": f"{int(p.cpu * 1000)}m", "memory": f"{p.memory_mib}Mi"}
    assert c["resources"]["limits"] == {"memory": f"{p.memory_mib}Mi"}
    assert objs["PodDisruptionBudget"]["spec"]["maxUnavailable"] == 1
    assert {t["topologyKey"] for t in pod(objs)["topologySpreadConstraints"]} == {
        "topology.kubernetes.io/zone",
        "kubernetes.io/hostname",
    }
    assert (
        objs["Service"]["spec"]["selector"] == chart.selector
        and objs["Service"]["spec"]["ports"][0]["port"] == ROUTER_PORT
    )


def test_keda_scales_on_requests_in_progress(rendered) -> None:
    chart, objs = rendered
    so = chart.scaled_object.to_dict()
    (trigger,) = so["spec"]["triggers"]
    assert trigger["metadata"]["query"] == 'sum(router_in_flight{namespace="slm-prefilter",app="router"}) or vector(0)'
    assert (
        trigger["metadata"]["threshold"] == str(chart.props.in_flight_per_replica)
        and trigger["authenticationRef"]["name"] == "amp-sigv4"
    )
    assert chart.props.in_flight_per_replica < DEFAULT_MAX_IN_FLIGHT
    assert (so["spec"]["minReplicaCount"], so["spec"]["maxReplicaCount"]) == (
        chart.props.replicas_min,
        chart.props.replicas_max,
    )
    assert "replicas" not in objs["Deployment"]["spec"] and "HorizontalPodAutoscaler" not in objs
    assert validate_custom(so) == []


def test_without_metrics_a_cpu_hpa_scales_it() -> None:
    chart, objs = render(keda=None, replicas_min=3, replicas_max=9)
    hpa = objs["HorizontalPodAutoscaler"]["spec"]
    assert (hpa["minReplicas"], hpa["maxReplicas"]) == (3, 9)
    assert hpa["metrics"][0]["resource"] == {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 70}}
    assert chart.scaled_object is None
    assert [p for o in objs.values() for p in validate_core(o, "1.35")] == []


def test_network_policy_lets_it_reach_the_models_and_escalate(rendered) -> None:
    _, objs = rendered
    spec = objs["NetworkPolicy"]["spec"]
    front, scrapers = spec["ingress"]
    assert front == {"ports": [{"port": ROUTER_PORT, "protocol": "TCP"}]}, "front door: any source, router port only"
    assert scrapers["ports"] == [{"port": METRICS_PORT, "protocol": "TCP"}], "scrapers: the metrics sidecar only"
    annotations = objs["Deployment"]["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == str(METRICS_PORT)
    sidecar = objs["Deployment"]["spec"]["template"]["spec"]["containers"][1]
    assert sidecar["name"] == "metrics" and {e["name"]: e["value"] for e in sidecar["env"]}[
        "METRICS_UPSTREAM_PORT"
    ] == str(ROUTER_PORT)
    to_models = spec["egress"][0]
    assert to_models["to"] == [{"podSelector": {"matchLabels": {"app.kubernetes.io/component": "llama-server"}}}]
    assert to_models["ports"] == [{"port": ENGINE_PORT, "protocol": "TCP"}]
    assert {(p["port"], p["protocol"]) for r in spec["egress"] for p in r["ports"]} == {
        (ENGINE_PORT, "TCP"),
        (53, "UDP"),
        (53, "TCP"),
        (80, "TCP"),
        (443, "TCP"),
    }


def test_restricted_callers() -> None:
    _, objs = render(client_namespaces=("apps",), client_cidrs=("10.0.0.0/16",))
    callers, scrapers = objs["NetworkPolicy"]["spec"]["ingress"]
    assert callers["from"][0]["namespaceSelector"]["matchExpressions"][0]["values"] == ["apps"]
    assert callers["from"][1] == {"ipBlock": {"cidr": "10.0.0.0/16"}}
    assert scrapers["from"][0]["namespaceSelector"]["matchExpressions"][0]["values"] == ["monitoring"]


def test_gateway_mode_config_is_what_the_gateway_loads(tmp_path: Path) -> None:
    urls = {
        "bge-small": "http://bge-small.model-farm.svc.cluster.local:8080",
        "qwen3-0-6b": "http://qwen3-0-6b.model-farm.svc.cluster.local:8080",
    }
    chart, objs = render(
        mode="gateway",
        pattern="model-farm",
        namespace="model-farm",
        name="gateway",
        config={"gateway": {"models": gateway_models(urls), "retry_after_s": 5}},
    )
    assert objs["Deployment"]["metadata"]["labels"]["cpu-inference/router-mode"] == "gateway"
    assert chart.service_url == f"http://gateway.model-farm.svc.cluster.local:{ROUTER_PORT}"
    out = print_config(objs["ConfigMap"]["data"][CONFIG_FILE], {}, tmp_path)
    assert out.returncode == 0, out.stderr
    loaded = json.loads(out.stdout)
    assert loaded["mode"] == "gateway" and {m["name"]: m["url"] for m in loaded["gateway"]["models"]} == urls
    (trigger,) = chart.scaled_object.to_dict()["spec"]["triggers"]
    assert trigger["metadata"]["query"] == 'sum(gateway_in_flight{namespace="model-farm",app="gateway"}) or vector(0)'
    with pytest.raises(ValueError, match="gateway.models"):
        render(mode="gateway", config={})


def test_cold_start_query_reads_the_gateways_refusals() -> None:
    q = gateway_cold_start_query("model-farm", "bge-reranker")
    assert (
        q
        == 'clamp_max(sum(increase(gateway_backend_unavailable_total{namespace="model-farm",model="bge-reranker"}[2m])), 1) or vector(0)'
    )


def test_every_object_validates_and_is_restricted(rendered) -> None:
    _, objs = rendered
    assert set(objs) == {"ServiceAccount", "ConfigMap", "Deployment", "Service", "PodDisruptionBudget", "NetworkPolicy"}
    assert [p for o in objs.values() for p in validate_core(o, "1.35")] == []
    assert restricted_violations(objs["Deployment"]) == []


@pytest.mark.parametrize(
    "kw, message",
    [
        (dict(mode="mesh"), "mode must be one of"),
        (dict(config={**CONFIG, "max_in_flight": 32}), "below config.max_in_flight"),
        (dict(config={**CONFIG, "mode": "gateway"}), "differs from mode"),
        (dict(replicas_min=0), "replicas_min"),
        (dict(config={**CONFIG, "listen_port": 9000}), "listen_port must be 8000"),
        (
            dict(
                config={**CONFIG, "escalation": {"kind": "openai", "url": "https://x/v1", "api_key_env": "K"}},
                api_key_secret="s",
            ),
            "api_key_secret",
        ),
        (dict(name="Router"), "DNS label"),
        # The config is type-checked as the router reads it (slm_router.config), at synth rather than in the pod.
        (dict(config={"x": 1}), r"RouterChartProps\.config\.x: unknown key"),
        (dict(config={"labels": object()}), r"RouterChartProps\.config\.labels: must be a list of strings"),
        (
            dict(config={"escalation": {"kind": "openai", "url": 1}}),
            r"RouterChartProps\.config\.escalation\.url: must be a string",
        ),
    ],
)
def test_mistakes_fail_with_the_key(kw: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        render(**kw)
