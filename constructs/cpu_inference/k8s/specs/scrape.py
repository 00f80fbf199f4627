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
            {
                "source_labels": ["__meta_kubernetes_pod_phase"],
                "action": "drop",
                "regex": "Pending|Succeeded|Failed|Completed",
            },
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


def cadvisor_scrape_job(job_name: str = "cadvisor") -> dict[str, Any]:
    """Container metrics (container_memory_working_set_bytes for the memory-vs-limit alert) from every
    node's kubelet, through the API server's node proxy: the collector needs no route to the kubelets."""
    return {
        "job_name": job_name,
        "scheme": "https",
        "authorization": {"credentials_file": "/var/run/secrets/kubernetes.io/serviceaccount/token"},
        "kubernetes_sd_configs": [{"role": "node"}],
        "relabel_configs": [
            {"replacement": "kubernetes.default.svc:443", "target_label": "__address__"},
            {
                "source_labels": ["__meta_kubernetes_node_name"],
                "regex": "(.+)",
                "target_label": "__metrics_path__",
                "replacement": "/api/v1/nodes/$1/proxy/metrics/cadvisor",
            },
            {"source_labels": ["__meta_kubernetes_node_name"], "target_label": "node"},
        ],
        # Only what the alerts and dashboard read: cAdvisor's full output is large.
        "metric_relabel_configs": [
            {
                "source_labels": ["__name__"],
                "action": "keep",
                "regex": "container_memory_working_set_bytes|container_cpu_usage_seconds_total|container_cpu_cfs_throttled_periods_total",
            },
        ],
    }


def collector_rbac(user: str = "aps-collector-user") -> list[dict[str, Any]]:
    """What the AMP managed collector may read, bound to the Kubernetes user its access entry maps to:
    discovery (pods, nodes, services, endpoints) and the node proxy for cAdvisor — read-only."""
    name = "aps-collector-role"
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": name},
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["nodes", "nodes/proxy", "nodes/metrics", "pods", "services", "endpoints"],
                    "verbs": ["get", "list", "watch"],
                },
                {"nonResourceURLs": ["/metrics"], "verbs": ["get"]},
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": f"{name}-binding"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
        },
    ]


def scrape_config(interval: str = "30s", cluster_label: str | None = None) -> dict[str, Any]:
    """A whole Prometheus configuration (global + the annotated-pods and cAdvisor jobs). AMP managed
    collectors reject scrape intervals under 30 s."""
    seconds = _seconds(interval)
    if seconds < 30:
        raise ValueError(f"scrape interval {interval} is under the AMP managed collector's 30s minimum")
    glob: dict[str, Any] = {"scrape_interval": interval}
    if cluster_label:
        glob["external_labels"] = {"cluster": cluster_label}
    return {"global": glob, "scrape_configs": [pod_scrape_job(), cadvisor_scrape_job()]}


def scrape_config_yaml(interval: str = "30s", cluster_label: str | None = None) -> str:
    return yaml.safe_dump(scrape_config(interval, cluster_label), sort_keys=False)


def _seconds(interval: str) -> int:
    units = {"s": 1, "m": 60, "h": 3600}
    if len(interval) < 2 or interval[-1] not in units or not interval[:-1].isdigit():
        raise ValueError(f"scrape interval {interval!r} must look like 30s, 1m or 1h")
    return int(interval[:-1]) * units[interval[-1]]
