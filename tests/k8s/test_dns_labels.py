"""Every Kubernetes name the library checks as a DNS label uses the one definition (cpu_inference._internal.k8s_object:
RFC 1123 label, at most 63 characters — Kubernetes "Object Names and IDs",
https://kubernetes.io/docs/concepts/overview/working-with-objects/names/#dns-label-names): a 64-character name, an
upper-case one and one with a trailing newline are refused at every place a label is checked, a 63-character one
passes where the label's own limit is the only one."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from cpu_inference._internal.k8s_object import DNS_LABEL_MAX, DNS_SUBDOMAIN_MAX, is_dns_label, is_dns_subdomain
from cpu_inference.k8s.charts.namespace_chart import ServingNamespaceProps
from cpu_inference.k8s.charts.router_chart import RouterChartProps
from cpu_inference.k8s.specs.keda import AwsTriggerAuthentication, PrometheusTrigger, ScaledObjectSpec
from cpu_inference.k8s.workloads.serving_policy import ServingPolicy

ROOT = Path(__file__).resolve().parents[2]
LONGEST = "a" + "b" * (DNS_LABEL_MAX - 2) + "c"  # 63
TOO_LONG = LONGEST + "d"  # 64
BAD = (TOO_LONG, "Upper", "name\n", "-lead", "trail-", "dot.ted", "")

_TRIGGER = PrometheusTrigger(name="running", server_address="http://prometheus:9090", query="vector(1)")
_SCALED = ScaledObjectSpec(
    name="m", namespace="inference", target_name="m", triggers=(_TRIGGER,), scaling_modifiers=None
)
_AUTH = AwsTriggerAuthentication(name="amp", namespace="inference", role_arn="arn:aws:iam::123456789012:role/keda-amp")
_ROUTER = RouterChartProps(image="123456789012.dkr.ecr.us-east-1.amazonaws.com/router@sha256:" + "a" * 64)
_NAMESPACE = ServingNamespaceProps(name="inference", pattern="slm-prefilter")


def _deployment_namespace(value: str) -> None:
    from cpu_inference.patterns.deployment import validate_namespace  # jsii: only this case pays for it

    validate_namespace(value, "ModelFarmProps.namespace")


# (where, validate a value at that place): each place whose only limit is the label's own.
LABEL_CHECKS: dict[str, Callable[[str], None]] = {
    "ScaledObjectSpec.name": lambda v: replace(_SCALED, name=v).validate(),
    "ScaledObjectSpec.namespace": lambda v: replace(_SCALED, namespace=v).validate(),
    "ScaledObjectSpec.target_name": lambda v: replace(_SCALED, target_name=v).validate(),
    "AwsTriggerAuthentication.name": lambda v: replace(_AUTH, name=v).validate(),
    "AwsTriggerAuthentication.namespace": lambda v: replace(_AUTH, namespace=v).validate(),
    "ServingPolicy.namespace": lambda v: ServingPolicy(namespace=v).validate(),
    "ServingPolicy.pattern": lambda v: ServingPolicy(pattern=v).validate(),
    "ServingPolicy.client_namespaces": lambda v: ServingPolicy(client_namespaces=(v,)).validate(),
    "ServingPolicy.metrics_namespaces": lambda v: ServingPolicy(metrics_namespaces=(v,)).validate(),
    "RouterChartProps.name": lambda v: replace(_ROUTER, name=v).validate(),
    "RouterChartProps.namespace": lambda v: replace(_ROUTER, namespace=v).validate(),
    "RouterChartProps.pattern": lambda v: replace(_ROUTER, pattern=v).validate(),
    "ServingNamespaceProps.name": lambda v: replace(_NAMESPACE, name=v).validate(),
    "ServingNamespaceProps.pattern": lambda v: replace(_NAMESPACE, pattern=v).validate(),
    "validate_namespace": _deployment_namespace,
}


@pytest.mark.parametrize("where", sorted(LABEL_CHECKS))
def test_a_label_check_takes_63_characters_and_refuses_64(where: str) -> None:
    check = LABEL_CHECKS[where]
    check(LONGEST)
    for bad in BAD:
        with pytest.raises(ValueError, match="DNS label"):
            check(bad)


def test_names_with_a_shorter_limit_refuse_a_trailing_newline() -> None:
    """ModelPoolChartProps keeps its own 40-character limit (pool-<name>-<i>) on top of the label; `$` matched
    before a final newline, so `small\\n` slipped through."""
    from tests.k8s.test_model_pool_chart import props

    props(name="small").validate()
    for bad in (*BAD, "a" * 41):
        with pytest.raises(ValueError, match="DNS label"):
            props(name=bad).validate()


def test_the_owner_follows_kubernetes() -> None:
    # apimachinery pkg/util/validation IsDNS1123Label / IsDNS1123Subdomain: the same shapes and limits.
    assert is_dns_label("a") and is_dns_label("0-a") and is_dns_label(LONGEST)
    assert not any(is_dns_label(b) for b in BAD)
    sub = ".".join([LONGEST] * 3) + "." + "a" * (DNS_SUBDOMAIN_MAX - 3 * 64)
    assert len(sub) == DNS_SUBDOMAIN_MAX and is_dns_subdomain(sub) and is_dns_subdomain("karpenter.sh")
    assert not is_dns_subdomain(sub + "a") and not is_dns_subdomain("a..b") and not is_dns_subdomain("a.\n")


def test_the_label_pattern_is_written_once() -> None:
    """No other module of the library compiles its own label regex (import the owner's instead)."""
    owner = ROOT / "constructs" / "cpu_inference" / "_internal" / "_internal/k8s_object.py"
    label = re.compile(r"\[a-z0-9\]\(\[-?a-z0-9-?\]")  # the start of `[a-z0-9]([-a-z0-9]...` in any spelling
    copies = [
        f"{p.relative_to(ROOT)}:{i}"
        for p in sorted((ROOT / "constructs" / "cpu_inference" / "k8s").rglob("*.py"))
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if label.search(line)
    ]
    copies += [
        f"{p.relative_to(ROOT)}:{i}"
        for p in (ROOT / "constructs" / "cpu_inference" / "patterns" / "deployment.py",)
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if label.search(line)
    ]
    assert copies == [], f"import DNS_LABEL / is_dns_label from {owner.relative_to(ROOT)}"
