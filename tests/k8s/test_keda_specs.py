"""KEDA specs: the queue-depth ScaledObject (with model_scaling's rule: formula running + waiting*10, target 25 for 15
slots, activation 5) and the SigV4 TriggerAuthentication render to objects the KEDA v2.20.2 CRDs accept; mistakes fail
early. The specs carry no default formula or target of their own."""

from __future__ import annotations

import dataclasses

import pytest

from cpu_inference.k8s.specs.keda import (
    AwsTriggerAuthentication,
    PrometheusTrigger,
    ScaledObjectSpec,
    ScalingModifiers,
    amp_query_url,
)
from cpu_inference.k8s.workloads.model_scaling import llama_queue_scaled_object, queue_modifiers
from tests.support.k8s import validate_custom

AMP = amp_query_url("eu-west-1", "ws-0123abcd")


def queue_object(**kw: object) -> ScaledObjectSpec:
    return llama_queue_scaled_object(
        "gemma",
        "inference",
        "gemma",
        server_address=AMP,
        series_labels={"namespace": "inference", "app": "gemma"},
        aws_region="eu-west-1",
        authentication_ref="amp-sigv4",
        **{"modifiers": queue_modifiers(15), **kw},  # type: ignore[arg-type]
    )


def test_queue_depth_scaled_object_renders_the_field_notes_formula() -> None:
    d = queue_object(min_replicas=0, max_replicas=8).to_dict()
    spec = d["spec"]
    assert spec["advanced"]["scalingModifiers"] == {
        "formula": "running + (waiting * 10)",
        "target": "25",
        "activationTarget": "5",
        "metricType": "AverageValue",
    }
    running, waiting = spec["triggers"]
    assert running["name"] == "running" and waiting["name"] == "waiting"
    assert (
        running["metadata"]["query"]
        == 'sum(llamacpp:requests_processing{app="gemma",namespace="inference"}) or vector(0)'
    )
    assert (
        waiting["metadata"]["query"]
        == 'sum(llamacpp:requests_deferred{app="gemma",namespace="inference"}) or vector(0)'
    )
    for trig in (running, waiting):
        assert (
            trig["metadata"]["serverAddress"] == "https://aps-workspaces.eu-west-1.amazonaws.com/workspaces/ws-0123abcd"
        )
        assert trig["metadata"]["awsRegion"] == "eu-west-1"
        assert trig["authenticationRef"] == {"name": "amp-sigv4", "kind": "TriggerAuthentication"}
    assert spec["minReplicaCount"] == 0 and spec["maxReplicaCount"] == 8
    assert spec["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "gemma"}


def test_the_specs_have_no_default_formula_or_target() -> None:
    """A default here would look like the deployed one without being it (model_scaling owns the rule): the
    modifiers' formula and target are required, and a queue object built without modifiers has none."""
    fields = {f.name: f for f in dataclasses.fields(ScalingModifiers)}
    assert fields["formula"].default is dataclasses.MISSING and fields["target"].default is dataclasses.MISSING
    assert fields["activation_target"].default is None
    assert {f.name: f.default for f in dataclasses.fields(ScaledObjectSpec)}["scaling_modifiers"] is None
    # The queue helper takes the owner's rule (model_scaling.queue_modifiers) for the replica's slots, or refuses.
    with pytest.raises(ValueError, match="give slots"):
        llama_queue_scaled_object("m", "inference", "m", server_address="http://p", series_labels={"app": "m"})
    built = llama_queue_scaled_object(
        "m", "inference", "m", server_address="http://p", series_labels={"app": "m"}, slots=4
    )
    assert built.scaling_modifiers == queue_modifiers(4)


def test_in_cluster_prometheus_needs_no_authentication() -> None:
    so = llama_queue_scaled_object(
        "m",
        "inference",
        "m",
        server_address="http://prometheus-server.monitoring.svc.cluster.local",
        series_labels={"app": "m"},
        slots=15,
    )
    for trig in so.to_dict()["spec"]["triggers"]:
        assert "authenticationRef" not in trig and "awsRegion" not in trig["metadata"]


def test_trigger_authentication_variants() -> None:
    assert AwsTriggerAuthentication("amp", "inference").to_dict()["spec"] == {"podIdentity": {"provider": "aws"}}
    role = "arn:aws:iam::123456789012:role/amp-query"
    assert AwsTriggerAuthentication("amp", "inference", role_arn=role).to_dict()["spec"]["podIdentity"] == {
        "provider": "aws",
        "roleArn": role,
    }
    assert (
        AwsTriggerAuthentication("amp", "inference", identity_owner="keda").to_dict()["spec"]["podIdentity"][
            "identityOwner"
        ]
        == "keda"
    )


def test_workload_identity_owner_is_refused_although_the_crd_accepts_it() -> None:
    """KEDA 2.20.2 resolves identityOwner: workload from the workload's `eks.amazonaws.com/role-arn` (IRSA)
    annotation, which EKS Pod Identity never sets: the CRD's enum lets it through, so synth must stop it."""
    raw = {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "TriggerAuthentication",
        "metadata": {"name": "amp", "namespace": "inference"},
        "spec": {"podIdentity": {"provider": "aws", "identityOwner": "workload"}},
    }
    assert validate_custom(raw) == []
    with pytest.raises(
        ValueError,
        match=r"identity_owner='workload' makes KEDA read the workload's IRSA annotation eks\.amazonaws\.com/role-arn, which EKS Pod Identity never sets — leave identity_owner unset",
    ):
        AwsTriggerAuthentication("amp", "inference", identity_owner="workload").to_dict()


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (
            lambda: AwsTriggerAuthentication(
                "amp", "inference", role_arn="arn:aws:iam::1:role/x", identity_owner="keda"
            ),
            "mutually exclusive",
        ),
        (lambda: queue_object(min_replicas=5, max_replicas=2), r"min_replicas \(5\) ≤ max_replicas \(2\)"),
        (
            lambda: queue_object(modifiers=ScalingModifiers(formula="running * 2", target="25")),
            r"does not use trigger\(s\) \['waiting'\]",
        ),
        (
            lambda: queue_object(modifiers=ScalingModifiers(formula="running + waiting", target="twenty")),
            "target 'twenty'",
        ),
        (
            lambda: ScaledObjectSpec(
                "so",
                "ns",
                "dep",
                triggers=(PrometheusTrigger("q", "http://p", "up"), PrometheusTrigger("q", "http://p", "up")),
            ),
            "must be unique",
        ),
        (
            lambda: ScaledObjectSpec(
                "so", "ns", "dep", triggers=(PrometheusTrigger("Bad-Name", "http://p", "up"),), scaling_modifiers=None
            ),
            "trigger name 'Bad-Name'",
        ),
        (
            lambda: ScaledObjectSpec(
                "so", "ns", "dep", triggers=(PrometheusTrigger("q", "prometheus:9090", "up"),), scaling_modifiers=None
            ),
            "must be an http",
        ),
        (
            lambda: ScaledObjectSpec(
                "so",
                "ns",
                "dep",
                triggers=(PrometheusTrigger("q", "https://aps", "up", aws_region="us-east-1"),),
                scaling_modifiers=None,
            ),
            "needs authentication_ref",
        ),
        (lambda: ScaledObjectSpec("so", "ns", "dep", triggers=()), "at least one trigger"),
        (
            lambda: ScaledObjectSpec("So", "ns", "dep", triggers=(PrometheusTrigger("q", "http://p", "up"),)),
            "DNS label",
        ),
    ],
)
def test_mistakes_fail_with_a_precise_message(build: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        build().to_dict()  # type: ignore[operator]


def test_rendered_objects_validate_against_upstream_keda_crds() -> None:
    objs = [
        queue_object().to_dict(),
        ScaledObjectSpec(
            "plain",
            "inference",
            "router",
            triggers=(
                PrometheusTrigger(
                    "rps",
                    "http://prometheus-server.monitoring.svc",
                    "sum(rate(x[1m]))",
                    threshold="50",
                    activation_threshold="1",
                ),
            ),
            scaling_modifiers=None,
            scale_down_stabilization_seconds=None,
            fallback_replicas=2,
        ).to_dict(),
        AwsTriggerAuthentication("amp", "inference").to_dict(),
        AwsTriggerAuthentication("amp", "inference", role_arn="arn:aws:iam::123456789012:role/q").to_dict(),
    ]
    assert [p for o in objs for p in validate_custom(o)] == []


def test_the_keda_crd_check_is_not_vacuous() -> None:
    broken = queue_object().to_dict()
    broken["spec"]["advanced"]["scalingModifiers"]["metricType"] = "Average"
    broken["spec"]["triggers"][0]["authenticationRef"]["kind"] = "Secret"
    problems = validate_custom(broken)
    assert len(problems) == 2, problems
