"""The NetworkPolicies of the serving pods (one model or a pool): the API port admits only the policy's
clients; scrapers reach only the metrics sidecar's port; egress is what the pod needs to fetch its model."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import cdk8s_plus_27 as kplus

from cpu_inference.k8s.workloads.engine_container import ENGINE_PORT
from cpu_inference.k8s.workloads.serving_policy import ServingPolicy


def namespaces_selector(namespaces: Sequence[str]) -> kplus.k8s.LabelSelector:
    """Pods in any of `namespaces` (by the immutable kubernetes.io/metadata.name label)."""
    k = kplus.k8s
    return k.LabelSelector(
        match_expressions=[
            k.LabelSelectorRequirement(key="kubernetes.io/metadata.name", operator="In", values=list(namespaces))
        ]
    )


def serving_network_policy(
    selector: Mapping[str, str],
    p: ServingPolicy,
    *,
    metrics_port: int | None,
    egress: Sequence[kplus.k8s.NetworkPolicyEgressRule],
    client_ports: Sequence[int] = (ENGINE_PORT,),
) -> kplus.k8s.NetworkPolicySpec:
    """Ingress: `client_ports` (the API port; a pool adds its supervisor's status port, which the gateway asks) from
    the policy's client labels / client namespaces; with `metrics_port`, that port from the metrics namespaces and
    CIDRs (the AMP collector is allowed by subnet CIDR, which also covers every pod). Egress: exactly `egress`
    (none when empty)."""
    k = kplus.k8s
    port = [k.NetworkPolicyPort(port=k.IntOrString.from_number(n), protocol="TCP") for n in client_ports]
    clients: list[k.NetworkPolicyPeer] = [
        k.NetworkPolicyPeer(pod_selector=k.LabelSelector(match_labels=dict(p.client_labels)))
    ]
    if p.client_namespaces:
        clients.append(k.NetworkPolicyPeer(namespace_selector=namespaces_selector(p.client_namespaces)))
    ingress = [k.NetworkPolicyIngressRule(from_=clients, ports=port)]
    if metrics_port is not None:
        scrapers: list[k.NetworkPolicyPeer] = []
        if p.metrics_namespaces:
            scrapers.append(k.NetworkPolicyPeer(namespace_selector=namespaces_selector(p.metrics_namespaces)))
        scrapers += [k.NetworkPolicyPeer(ip_block=k.IpBlock(cidr=c)) for c in p.metrics_cidrs]
        if scrapers:
            metrics = [k.NetworkPolicyPort(port=k.IntOrString.from_number(metrics_port), protocol="TCP")]
            ingress.append(k.NetworkPolicyIngressRule(from_=scrapers, ports=metrics))
    return k.NetworkPolicySpec(
        pod_selector=k.LabelSelector(match_labels=dict(selector)),
        policy_types=["Ingress", "Egress"],
        ingress=ingress,
        egress=list(egress),
    )


def download_egress() -> list[kplus.k8s.NetworkPolicyEgressRule]:
    """What a model pod may reach: cluster DNS, the EKS Pod Identity agent (link-local, IPv4 and IPv6) and
    HTTPS (S3, via the gateway endpoint or NAT — no fixed addresses). The engine itself runs --offline."""
    k = kplus.k8s
    dns = k.NetworkPolicyPeer(
        namespace_selector=namespaces_selector(("kube-system",)),
        pod_selector=k.LabelSelector(match_labels={"k8s-app": "kube-dns"}),
    )
    return [
        k.NetworkPolicyEgressRule(
            to=[dns],
            ports=[k.NetworkPolicyPort(port=k.IntOrString.from_number(53), protocol=proto) for proto in ("UDP", "TCP")],
        ),
        k.NetworkPolicyEgressRule(
            to=[
                k.NetworkPolicyPeer(ip_block=k.IpBlock(cidr="169.254.170.23/32")),
                k.NetworkPolicyPeer(ip_block=k.IpBlock(cidr="fd00:ec2::23/128")),
            ],
            ports=[k.NetworkPolicyPort(port=k.IntOrString.from_number(80), protocol="TCP")],
        ),
        k.NetworkPolicyEgressRule(
            to=[
                k.NetworkPolicyPeer(ip_block=k.IpBlock(cidr="0.0.0.0/0")),
                k.NetworkPolicyPeer(ip_block=k.IpBlock(cidr="::/0")),
            ],
            ports=[k.NetworkPolicyPort(port=k.IntOrString.from_number(443), protocol="TCP")],
        ),
    ]
