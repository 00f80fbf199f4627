"""Scrapers reach /metrics and nothing else.

The AMP managed collector scrapes from ENIs in the scraper's subnets — by default the cluster's private
subnets, where the VPC CNI also gives every pod its IP — so it is admitted by CIDR, which admits every pod
too. The rendered NetworkPolicies are evaluated here with Kubernetes NetworkPolicy semantics (a pod is
isolated for ingress once any policy selects it; then a connection is allowed iff some rule of a selecting
policy matches its source and port; ipBlock matches pod IPs under the VPC CNI), and the metrics sidecar the
chart renders is run for real in front of a real llama-server."""

from __future__ import annotations

import ipaddress
import os
import subprocess
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cdk8s
import pytest

from cpu_inference import sizing
from cpu_inference.k8s.charts.llama_server_chart import LlamaServerChart, LlamaServerChartProps
from cpu_inference.k8s.charts.namespace_chart import ServingNamespaceChart, ServingNamespaceProps
from cpu_inference.k8s.workloads.engine_container import ENGINE_PORT
from cpu_inference.k8s.workloads.metrics_proxy import METRICS_PORT
from cpu_inference.k8s.workloads.model_workload import ModelWorkload
from cpu_inference.k8s.workloads.serving_policy import ServingPolicy
from tests.support.engine import free_port, llama_server

NS = "inference"
SUBNETS = ("10.0.0.0/19", "10.0.32.0/19")  # the private subnets: pods and the collector's ENIs alike


@dataclass(frozen=True)
class Source:
    ip: str
    namespace: str | None = None  # None: not a pod (the collector's ENI)
    labels: dict[str, str] = field(default_factory=dict)
    namespace_labels: dict[str, str] = field(default_factory=dict)


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for e in selector.get("matchExpressions", []):
        present = e["key"] in labels
        value = labels.get(e["key"])
        ok = {
            "In": present and value in e.get("values", []),
            "NotIn": not present or value not in e.get("values", []),
            "Exists": present,
            "DoesNotExist": not present,
        }[e["operator"]]
        if not ok:
            return False
    return True


def _peer_matches(peer: dict[str, Any], policy_ns: str, src: Source) -> bool:
    if "ipBlock" in peer:
        ip = ipaddress.ip_address(src.ip)
        block = peer["ipBlock"]
        return ip in ipaddress.ip_network(block["cidr"]) and not any(
            ip in ipaddress.ip_network(x) for x in block.get("except", [])
        )
    if src.namespace is None:
        return False
    ns_labels = {"kubernetes.io/metadata.name": src.namespace, **src.namespace_labels}
    if "namespaceSelector" in peer:
        if not _selects(peer["namespaceSelector"], ns_labels):
            return False
    elif src.namespace != policy_ns:
        return False
    return _selects(peer.get("podSelector", {}), src.labels)


def admits(policies: list[dict[str, Any]], pod_ns: str, pod_labels: dict[str, str], src: Source, port: int) -> bool:
    """NetworkPolicy ingress semantics (networking.k8s.io/v1) for numeric TCP ports."""
    selecting = [
        p
        for p in policies
        if p["metadata"].get("namespace", pod_ns) == pod_ns
        and "Ingress" in p["spec"].get("policyTypes", ["Ingress"])
        and _selects(p["spec"]["podSelector"], pod_labels)
    ]
    if not selecting:
        return True
    for p in selecting:
        for rule in p["spec"].get("ingress", []):
            ports = rule.get("ports")
            if ports and not any(x.get("port") in (None, port) and x.get("protocol", "TCP") == "TCP" for x in ports):
                continue
            peers = rule.get("from")
            if not peers or any(_peer_matches(peer, pod_ns, src) for peer in peers):
                return True
    return False


def rendered(policy: ServingPolicy) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    app = cdk8s.App()
    w = ModelWorkload(
        name="smollm2",
        image="llama@sha256:" + "d" * 64,
        model_uri="s3://b/models/smollm2/m.gguf",
        spec=sizing.ModelSpec(0.135, quantization="Q4_1", task="classification"),
        node_type="m7g.large",
        cpu=1,
        sha256="a" * 64,
    )
    objs = LlamaServerChart(app, "smollm2", props=LlamaServerChartProps(model=w, policy=policy)).to_json()
    objs += ServingNamespaceChart(app, "ns", props=ServingNamespaceProps(NS, "slm-prefilter", "1.35")).to_json()
    for o in objs:
        if o["kind"] == "NetworkPolicy":
            o["metadata"].setdefault("namespace", NS)
    return [o for o in objs if o["kind"] == "NetworkPolicy"], next(o for o in objs if o["kind"] == "Deployment")


AMP_POLICY = ServingPolicy(namespace=NS, pattern="slm-prefilter", metrics_cidrs=SUBNETS, metrics_namespaces=())


def test_with_the_amp_collector_allowed_by_subnet_no_other_pod_reaches_the_model_api() -> None:
    policies, dep = rendered(AMP_POLICY)
    pod_labels = dep["spec"]["template"]["metadata"]["labels"]
    router = Source("10.0.1.20", NS, {"app.kubernetes.io/component": "router"})
    other_pod = Source("10.0.1.21", NS, {"app": "something-else"})
    foreign_pod = Source("10.0.40.9", "default", {"app": "curl"})
    collector_eni = Source("10.0.33.7")
    outside = Source("192.168.5.5")

    def allowed(src: Source, port: int) -> bool:
        return admits(policies, NS, pod_labels, src, port)

    assert allowed(router, ENGINE_PORT)
    assert allowed(collector_eni, METRICS_PORT) and not allowed(collector_eni, ENGINE_PORT)
    for pod in (other_pod, foreign_pod):  # inside the scraper's CIDRs, yet not the router
        assert not allowed(pod, ENGINE_PORT), pod
        assert allowed(
            pod, METRICS_PORT
        )  # what the CIDR rule must admit: /metrics only (the sidecar serves nothing else)
    assert not allowed(outside, ENGINE_PORT) and not allowed(outside, METRICS_PORT)
    annotations = dep["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == str(METRICS_PORT), "the collector scrapes the sidecar, not the API port"


def test_in_cluster_prometheus_reaches_only_the_metrics_port() -> None:
    policies, dep = rendered(ServingPolicy(namespace=NS, pattern="slm-prefilter"))
    pod_labels = dep["spec"]["template"]["metadata"]["labels"]
    prom = Source("10.0.2.2", "monitoring", {"app": "prometheus"})
    assert admits(policies, NS, pod_labels, prom, METRICS_PORT) and not admits(
        policies, NS, pod_labels, prom, ENGINE_PORT
    )


def test_the_evaluator_is_not_vacuous() -> None:
    """Without the namespace's policies nothing is isolated; an allow-all rule admits everyone."""
    _, dep = rendered(AMP_POLICY)
    labels = dep["spec"]["template"]["metadata"]["labels"]
    anyone = Source("10.0.1.21", NS, {"app": "x"})
    assert admits([], NS, labels, anyone, ENGINE_PORT)
    open_all = {"metadata": {"namespace": NS}, "spec": {"podSelector": {}, "policyTypes": ["Ingress"], "ingress": [{}]}}
    assert admits([open_all], NS, labels, anyone, ENGINE_PORT)
    deny = {"metadata": {"namespace": NS}, "spec": {"podSelector": {}, "policyTypes": ["Ingress"]}}
    assert not admits([deny], NS, labels, anyone, ENGINE_PORT)


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_the_rendered_sidecar_serves_the_engines_metrics_and_nothing_else(
    llama_server_bin: Path, smollm2_gguf: Path, tmp_path: Path
) -> None:
    """The sidecar's command and env exactly as rendered (only its ports moved to free loopback ports),
    in front of a real llama-server with --metrics."""
    _, dep = rendered(AMP_POLICY)
    (sidecar,) = [c for c in dep["spec"]["template"]["spec"]["containers"] if c["name"] == "metrics"]
    env = {e["name"]: e["value"] for e in sidecar["env"]}
    assert env["METRICS_PORT"] == str(METRICS_PORT) and env["METRICS_UPSTREAM_PORT"] == str(ENGINE_PORT)
    with llama_server(llama_server_bin, smollm2_gguf, "--metrics", "-t", "1", "-c", "256", "-np", "1") as base:
        listen = free_port()
        env.update(METRICS_PORT=str(listen), METRICS_UPSTREAM_PORT=base.rsplit(":", 1)[1])
        cmd = [sys.executable if c == "python3" else c for c in sidecar["command"]]
        proc = subprocess.Popen(cmd, env={**os.environ, **env}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            url = f"http://127.0.0.1:{listen}"
            for _ in range(50):
                try:
                    status, body = _get(f"{url}/metrics")
                    break
                except urllib.error.URLError:
                    import time

                    time.sleep(0.1)
            assert status == 200 and "llamacpp:requests_processing" in body
            assert _get(f"{url}/v1/models")[0] == 404 and _get(f"{url}/health")[0] == 404
            req = urllib.request.Request(f"{url}/completion", data=b'{"prompt":"hi","n_predict":1}', method="POST")
            with pytest.raises(urllib.error.HTTPError) as err:
                urllib.request.urlopen(req, timeout=10)
            assert err.value.code == 501
            assert _get(f"{base}/v1/models")[0] == 200  # the API itself is up, just not on this port
        finally:
            proc.terminate()
            proc.wait(timeout=10)


def test_a_router_restricted_to_its_client_namespaces_stays_closed_to_other_pods_in_the_scraper_cidrs() -> None:
    from tests.k8s.test_router_chart import render as render_router

    _, objs = render_router(client_namespaces=("apps",), metrics_cidrs=SUBNETS, metrics_namespaces=())
    policy = {**objs["NetworkPolicy"], "metadata": {**objs["NetworkPolicy"]["metadata"], "namespace": "slm-prefilter"}}
    labels = objs["Deployment"]["spec"]["template"]["metadata"]["labels"]
    port = objs["Service"]["spec"]["ports"][0]["port"]
    app = Source("10.0.5.5", "apps", {"app": "web"})
    stranger = Source("10.0.5.6", "default", {"app": "curl"})
    collector_eni = Source("10.0.33.7")
    assert admits([policy], "slm-prefilter", labels, app, port)
    assert not admits([policy], "slm-prefilter", labels, stranger, port) and not admits(
        [policy], "slm-prefilter", labels, collector_eni, port
    )
    assert admits([policy], "slm-prefilter", labels, collector_eni, METRICS_PORT)
