"""ServingNamespaceChart: the namespace of one pattern, with Pod Security "restricted" enforced (pinned to
the cluster's minor, so a control-plane upgrade does not silently change the policy) and a default-deny
ingress NetworkPolicy: each workload then opens exactly its own port to its own callers."""

from __future__ import annotations

import re
from dataclasses import dataclass

import cdk8s
import cdk8s_plus_27 as kplus
from constructs import Construct

from cpu_inference._internal.k8s_object import is_dns_label

_MINOR = re.compile(r"^1\.\d{2}$")


def pod_security_labels(kubernetes_minor: str) -> dict[str, str]:
    version = f"v{kubernetes_minor}"
    labels: dict[str, str] = {}
    for mode in ("enforce", "audit", "warn"):
        labels[f"pod-security.kubernetes.io/{mode}"] = "restricted"
        labels[f"pod-security.kubernetes.io/{mode}-version"] = version
    return labels


@dataclass(frozen=True)
class ServingNamespaceProps:
    name: str
    pattern: str
    kubernetes_minor: str = "1.35"
    default_deny_ingress: bool = True

    def validate(self) -> None:
        for label, value in (("name", self.name), ("pattern", self.pattern)):
            if not is_dns_label(value):
                raise ValueError(f"ServingNamespaceProps.{label} {value!r} must be a DNS label")
        if not _MINOR.match(self.kubernetes_minor):
            raise ValueError(f"ServingNamespaceProps.kubernetes_minor {self.kubernetes_minor!r} must look like 1.35")


class ServingNamespaceChart(cdk8s.Chart):
    """Attributes: namespace_object (kplus.Namespace), deny_ingress (NetworkPolicy or None)."""

    def __init__(self, scope: Construct, id: str, *, props: ServingNamespaceProps) -> None:
        props.validate()
        super().__init__(scope, id, disable_resource_name_hashes=True)
        self.namespace_object = kplus.Namespace(
            self,
            "Namespace",
            metadata=cdk8s.ApiObjectMetadata(
                name=props.name,
                labels={"app.kubernetes.io/part-of": props.pattern, **pod_security_labels(props.kubernetes_minor)},
            ),
        )
        self.deny_ingress: kplus.k8s.KubeNetworkPolicy | None = None
        if props.default_deny_ingress:
            self.deny_ingress = kplus.k8s.KubeNetworkPolicy(
                self,
                "DefaultDenyIngress",
                metadata=kplus.k8s.ObjectMeta(name="default-deny-ingress", namespace=props.name),
                spec=kplus.k8s.NetworkPolicySpec(pod_selector=kplus.k8s.LabelSelector(), policy_types=["Ingress"]),
            )
