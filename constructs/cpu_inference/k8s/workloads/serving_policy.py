"""ServingPolicy: the namespace-wide settings shared by the models of one pattern (clients, scrapers, node
families and pools, downloader, CPU limit, KEDA source), used by LlamaServerChart and ModelPoolChart alike."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from cpu_inference import sizing
from cpu_inference._internal.k8s_object import is_dns_label
from cpu_inference.k8s.workloads.engine_container import ROUTER_COMPONENT
from cpu_inference.k8s.workloads.model_fetch import DEFAULT_DOWNLOADER_IMAGE
from cpu_inference.k8s.workloads.workload_defaults import ARCHITECTURES


@dataclass(frozen=True)
class KedaSource:
    """Where KEDA reads the llama-server metrics: `Metrics.query_url`, and for AMP the region + the
    SigV4 TriggerAuthentication's name."""

    server_address: str
    aws_region: str | None = None
    authentication_ref: str | None = None


@dataclass(frozen=True)
class ServingPolicy:
    """Namespace-wide settings shared by the models of one pattern.

    namespace / pattern: where the models run (one namespace per pattern) and the part-of label.
    client_labels: pods of the namespace allowed to call the models (default: the router).
    client_namespaces: further namespaces whose pods may call them (e.g. an application namespace).
    metrics_namespaces / metrics_cidrs: scrapers allowed on the port (in-cluster Prometheus namespace; the
    AMP managed collector's subnets — it has no pod identity, so a CIDR is the only handle).
    node_families: candidate instance families for models without a node_type.
    architectures: node architectures accepted (the image is multi-arch).
    tolerations / preferred_pools: e.g. the memory-optimized pool's taint and label for a model farm.
    downloader_image: the AWS CLI v2 image for the init container. aws_region: the bucket's region.
    cpu_limit: "none" (default, see the module docstring) or "request" (Guaranteed QoS).
    keda: where KEDA reads metrics; None renders no ScaledObject (fixed replicas = replicas_min).
    kubernetes_minor: the Pod Security version the namespace enforces.
    """

    namespace: str = "inference"
    pattern: str = "slm-prefilter"
    client_labels: Mapping[str, str] = field(default_factory=lambda: {"app.kubernetes.io/component": ROUTER_COMPONENT})
    client_namespaces: tuple[str, ...] = ()
    metrics_namespaces: tuple[str, ...] = ("monitoring",)
    metrics_cidrs: tuple[str, ...] = ()
    node_families: tuple[str, ...] = ("c7g", "m7g", "r7g")
    architectures: tuple[str, ...] = ARCHITECTURES
    tolerations: tuple[Mapping[str, Any], ...] = ()
    preferred_pools: tuple[str, ...] = ()
    downloader_image: str = DEFAULT_DOWNLOADER_IMAGE
    aws_region: str | None = None
    cpu_limit: Literal["none", "request"] = "none"
    keda: KedaSource | None = None
    kubernetes_minor: str = "1.35"

    def validate(self) -> None:
        for label, value in (
            ("namespace", self.namespace),
            ("pattern", self.pattern),
            *(("client_namespaces", n) for n in self.client_namespaces),
            *(("metrics_namespaces", n) for n in self.metrics_namespaces),
        ):
            if not is_dns_label(value):
                raise ValueError(f"ServingPolicy.{label} {value!r} must be a DNS label")
        if not self.architectures or any(a not in ARCHITECTURES for a in self.architectures):
            raise ValueError(f"ServingPolicy.architectures must be a non-empty subset of {ARCHITECTURES}")
        if self.cpu_limit not in ("none", "request"):
            raise ValueError("ServingPolicy.cpu_limit must be 'none' or 'request'")
        unknown = [f for f in self.node_families if f not in sizing.FAMILIES]
        if unknown or not self.node_families:
            raise ValueError(
                f"ServingPolicy.node_families {list(self.node_families)}: unknown {unknown}; choose from {list(sizing.FAMILIES)}"
            )
        for cidr in self.metrics_cidrs:
            if "/" not in cidr and "${Token[" not in cidr:
                raise ValueError(f"ServingPolicy.metrics_cidrs: {cidr!r} is not a CIDR such as 10.0.0.0/16")
