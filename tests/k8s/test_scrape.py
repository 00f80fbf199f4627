"""The pod scrape contract: the relabel rules, applied with Prometheus' relabeling semantics (anchored
regexes, ';'-joined source labels, $n replacements), keep annotated llama-server pods, point at their
annotated port/path, and carry the labels KEDA's queries select on."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from cpu_inference.k8s.specs.scrape import (
    cadvisor_scrape_job,
    pod_scrape_job,
    scrape_annotations,
    scrape_config,
    scrape_config_yaml,
)


def relabel(labels: dict[str, str], rules: list[dict[str, Any]]) -> dict[str, str] | None:
    """Prometheus relabel_config semantics for the actions the scrape job uses (None = target dropped)."""
    out = dict(labels)
    for rule in rules:
        action = rule.get("action", "replace")
        regex = re.compile(rule.get("regex", "(.*)"))
        value = rule.get("separator", ";").join(out.get(name, "") for name in rule.get("source_labels", []))
        replacement = re.sub(r"\$(\d+)", r"\\\1", rule.get("replacement", "$1"))
        if action == "keep" and not regex.fullmatch(value):
            return None
        if action == "drop" and regex.fullmatch(value):
            return None
        if action == "replace":
            m = regex.fullmatch(value)
            if m:
                out[rule["target_label"]] = m.expand(replacement)
        if action == "labelmap":
            for name, v in list(out.items()):
                m = regex.fullmatch(name)
                if m:
                    out[m.expand(replacement)] = v
    return {k: v for k, v in out.items() if not k.startswith("__meta_")}


def pod(annotations: dict[str, str], phase: str = "Running") -> dict[str, str]:
    labels = {
        "__address__": "10.0.3.7",
        "__scheme__": "http",
        "__metrics_path__": "/metrics",
        "__meta_kubernetes_namespace": "inference",
        "__meta_kubernetes_pod_name": "smollm2-7d9c-abcde",
        "__meta_kubernetes_pod_ip": "10.0.3.7",
        "__meta_kubernetes_pod_node_name": "ip-10-0-3-1",
        "__meta_kubernetes_pod_phase": phase,
        "__meta_kubernetes_pod_label_app": "smollm2",
        "__meta_kubernetes_pod_label_app_kubernetes_io_name": "llama-server",
    }
    for key, value in annotations.items():
        labels["__meta_kubernetes_pod_annotation_" + re.sub(r"[^a-zA-Z0-9]", "_", key)] = value
    return labels


def test_annotated_pod_is_scraped_at_its_port_and_path_with_selector_labels() -> None:
    rules = pod_scrape_job()["relabel_configs"]
    target = relabel(pod(scrape_annotations(port=8080, path="/metrics")), rules)
    assert target is not None
    assert target["__address__"] == "10.0.3.7:8080"
    assert target["__metrics_path__"] == "/metrics"
    assert target["__scheme__"] == "http"
    assert (
        target["namespace"] == "inference" and target["pod"] == "smollm2-7d9c-abcde" and target["node"] == "ip-10-0-3-1"
    )
    assert target["app"] == "smollm2" and target["app_kubernetes_io_name"] == "llama-server"


def test_custom_path_and_scheme_are_honoured() -> None:
    target = relabel(
        pod({**scrape_annotations(9090, "/stats"), "prometheus.io/scheme": "https"}),
        pod_scrape_job()["relabel_configs"],
    )
    assert target is not None and (target["__address__"], target["__metrics_path__"], target["__scheme__"]) == (
        "10.0.3.7:9090",
        "/stats",
        "https",
    )


@pytest.mark.parametrize(
    ("annotations", "phase"),
    [
        ({}, "Running"),
        ({"prometheus.io/scrape": "false", "prometheus.io/port": "8080"}, "Running"),
        (scrape_annotations(), "Pending"),
        (scrape_annotations(), "Succeeded"),
    ],
)
def test_unannotated_or_finished_pods_are_dropped(annotations: dict[str, str], phase: str) -> None:
    assert relabel(pod(annotations, phase), pod_scrape_job()["relabel_configs"]) is None


def test_whole_config_round_trips_and_respects_the_amp_minimum_interval() -> None:
    parsed = yaml.safe_load(scrape_config_yaml("60s", "demo"))
    assert parsed == scrape_config("60s", "demo")
    assert parsed["global"] == {"scrape_interval": "60s", "external_labels": {"cluster": "demo"}}
    assert [j["kubernetes_sd_configs"] for j in parsed["scrape_configs"]] == [[{"role": "pod"}], [{"role": "node"}]]
    with pytest.raises(ValueError, match="under the AMP managed collector's 30s minimum"):
        scrape_config("15s")
    with pytest.raises(ValueError, match="must look like 30s"):
        scrape_config("half a minute")


def test_cadvisor_is_read_through_the_api_server_node_proxy() -> None:
    job = cadvisor_scrape_job()
    node = {
        "__address__": "10.0.3.1:10250",
        "__metrics_path__": "/metrics",
        "__meta_kubernetes_node_name": "ip-10-0-3-1",
    }
    out = relabel(node, job["relabel_configs"])
    assert out is not None
    assert out["__address__"] == "kubernetes.default.svc:443"
    assert out["__metrics_path__"] == "/api/v1/nodes/ip-10-0-3-1/proxy/metrics/cadvisor"
    assert out["node"] == "ip-10-0-3-1" and job["scheme"] == "https"
    keep = job["metric_relabel_configs"][0]
    assert relabel({"__name__": "container_memory_working_set_bytes"}, [keep]) is not None
    assert relabel({"__name__": "container_network_receive_bytes_total"}, [keep]) is None
