"""The scrape contract between llama-server pods and Prometheus (AMP managed scraper or in-cluster).

Pods opt in with the conventional `prometheus.io/*` annotations; both the AMP scrape configuration
below and the in-cluster prometheus chart's default `kubernetes-pods` job honour them. Pod labels are
copied onto the series (sanitized: `app.kubernetes.io/name` becomes `app_kubernetes_io_name`), plus
`namespace` and `pod`, so KEDA queries can select one model's replicas.
"""

from __future__ import annotations

from typing import Any

import yaml

SCRAPE = "prometheus.io/scrape"
PORT = "prometheus.io/port"
PATH = "prometheus.io/path"
SCHEME = "prometheus.io/scheme"


def scrape_annotations(port: int = 8080, path: str = "/metrics") -> dict[str, str]:
    """Annotations a llama-server pod template carries so its /metrics is scraped."""
    return {SCRAPE: "true", PORT: str(port), PATH: path}


def _meta(annotation: str) -> str:
    return "__meta_kubernetes_pod_annotation_" + "".join(c if c.isalnum() else "_" for c in annotation)


def pod_scrape_job(job_name: str = "annotated-pods") -> dict[str, Any]:
    """A Prometheus scrape_config for annotated pods (kubernetes_sd role: pod, the only SD the AMP
    managed collector supports)."""
    return {
        "job_name": job_name,
        "kubernetes_sd_configs": [{"role": "pod"}],
        "relabel_configs": [
            {"source_labels": [_meta(SCRAPE)], "action": "keep", "regex": "true"},
            {"source_labels": ["__meta_kubernetes_pod_phase"], "action": "drop", "regex": "Pending|Succeeded|Failed|Completed"},
            {"source_labels": [_meta(SCHEME)], "action": "replace", "regex": "(https?)", "target_label": "__scheme__"},
            {"source_labels": [_meta(PATH)], "action": "replace", "regex": "(.+)", "target_label": "__metrics_path__"},
            {
                "source_labels": ["__meta_kubernetes_pod_ip", _meta(PORT)],
                "action": "replace",
                "regex": r"(.+);(\d+)",
                "replacement": "$1:$2",
                "target_label": "__address__",
            },
            {"action": "labelmap", "regex": "__meta_kubernetes_pod_label_(.+)"},
            {"source_labels": ["__meta_kubernetes_namespace"], "action": "replace", "target_label": "namespace"},
            {"source_labels": ["__meta_kubernetes_pod_name"], "action": "replace", "target_label": "pod"},
            {"source_labels": ["__meta_kubernetes_pod_node_name"], "action": "replace", "target_label": "node"},
        ],
    }


def scrape_config(interval: str = "30s", cluster_label: str | None = None) -> dict[str, Any]:
    """A whole Prometheus configuration (global + the annotated-pods job). AMP managed collectors reject
    scrape intervals under 30 s."""
    seconds = _seconds(interval)
    if seconds < 30:
        raise ValueError(f"scrape interval {interval} is under the AMP managed collector's 30s minimum")
    glob: dict[str, Any] = {"scrape_interval": interval}
    if cluster_label:
        glob["external_labels"] = {"cluster": cluster_label}
    return {"global": glob, "scrape_configs": [pod_scrape_job()]}


def scrape_config_yaml(interval: str = "30s", cluster_label: str | None = None) -> str:
    return yaml.safe_dump(scrape_config(interval, cluster_label), sort_keys=False)


def _seconds(interval: str) -> int:
    units = {"s": 1, "m": 60, "h": 3600}
    if len(interval) < 2 or interval[-1] not in units or not interval[:-1].isdigit():
        raise ValueError(f"scrape interval {interval!r} must look like 30s, 1m or 1h")
    return int(interval[:-1]) * units[interval[-1]]
