"""The platform on a cluster the user brings (imported eks_v2 cluster + VPC), with the in-cluster
Prometheus option, and the bounded-manifest helper on a large object set. One cheap synth per module:
no cluster resources are created."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam

from cpu_inference.eks import (
    InferenceCluster,
    InferenceClusterProps,
    Karpenter,
    KarpenterProps,
    Keda,
    KedaProps,
    Metrics,
    MetricsProps,
    add_bounded_manifests,
)
from cpu_inference.eks.inference_cluster import POD_IDENTITY_AGENT_VERSION
from cpu_inference.eks.manifests import chunk
from cpu_inference.k8s import llama_queue_scaled_object
from tests.eks.conftest import imported_cluster
from tests.support.cdk import apply_nag, cfn_lint_errors, nag_errors, synth, template_json
from tests.support.k8s import helm_charts, is_custom, manifests, objects, validate_core, validate_custom

ENV = cdk.Environment(account="123456789012", region="eu-west-1")
BULK = 300  # ConfigMaps of ~2 KB: about 650 KB in total, so several bounded manifests


@dataclass
class Existing:
    app: cdk.App
    stack: cdk.Stack
    cluster: InferenceCluster
    metrics: Metrics
    bulk: list[eks.KubernetesManifest]
    template: dict[str, Any]


def bulk_objects() -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": f"prompt-{i:03d}", "namespace": "inference"},
            "data": {"prompt": f"{i:03d}" * 680},
        }
        for i in range(BULK)
    ]


@pytest.fixture(scope="module")
def existing() -> Existing:
    app = cdk.App()
    apply_nag(app)
    stack = cdk.Stack(app, "Existing", env=ENV)
    vpc = ec2.Vpc.from_vpc_attributes(
        stack,
        "Vpc",
        vpc_id="vpc-0123456789abcdef0",
        availability_zones=["eu-west-1a", "eu-west-1b"],
        private_subnet_ids=["subnet-0aaaaaaaaaaaaaaa1", "subnet-0aaaaaaaaaaaaaaa2"],
    )
    handler_role = iam.Role.from_role_arn(stack, "KubectlRole", "arn:aws:iam::123456789012:role/kubectl-handler")
    provider = eks.KubectlProvider.from_kubectl_provider_attributes(
        stack,
        "Kubectl",
        service_token="arn:aws:lambda:eu-west-1:123456789012:function:kubectl-provider",
        role=handler_role,
    )
    imported = eks.Cluster.from_cluster_attributes(
        stack,
        "Imported",
        cluster_name="prod-inference",
        kubectl_provider=provider,
        vpc=vpc,
        cluster_security_group_id="sg-0123456789abcdef0",
    )
    ic = InferenceCluster(
        stack,
        "Inference",
        props=InferenceClusterProps(
            existing_cluster=imported,
            existing_cluster_name="prod-inference",
            existing_vpc=vpc,
            admin_principal_arns=("arn:aws:iam::123456789012:role/Ops",),
        ),
    )
    karpenter = Karpenter(stack, "Karpenter", props=KarpenterProps.for_cluster(ic))
    karpenter.add_default_node_pools(
        architectures=["arm64"], instance_families=["c8g", "m8g", "r8g"], capacity_types=["spot", "on-demand"]
    )
    metrics = Metrics(stack, "Metrics", props=MetricsProps.for_cluster(ic, mode="in-cluster"))
    keda = Keda(stack, "Keda", props=KedaProps.for_cluster(ic, metrics=metrics))
    scaled = llama_queue_scaled_object(
        "m", "inference", "m", server_address=metrics.query_url, series_labels={"app": "m"}, slots=15
    )
    assert ic.namespace_manifest is not None
    keda.add_scaled_objects("Scaling", [scaled], depends_on=[ic.namespace_manifest])
    bulk = add_bounded_manifests(ic.cluster, "Prompts", bulk_objects(), scope=stack, depends_on=[ic.namespace_manifest])
    synth(app)
    return Existing(app, stack, ic, metrics, bulk, template_json(stack))


def test_existing_cluster_gets_access_entries_and_the_pod_identity_agent_but_no_new_cluster(existing: Existing) -> None:
    t = existing.template["Resources"]
    types = [r["Type"] for r in t.values()]
    assert "AWS::EKS::Cluster" not in types and "AWS::EKS::Nodegroup" not in types and "AWS::EC2::VPC" not in types
    addons = [r["Properties"] for r in t.values() if r["Type"] == "AWS::EKS::Addon"]
    assert addons == [
        {
            "AddonName": "eks-pod-identity-agent",
            "AddonVersion": POD_IDENTITY_AGENT_VERSION,
            "ClusterName": "prod-inference",
        }
    ]
    principals = sorted(
        json.dumps(r["Properties"]["PrincipalArn"]) for r in t.values() if r["Type"] == "AWS::EKS::AccessEntry"
    )
    assert '"arn:aws:iam::123456789012:role/Ops"' in principals and len(principals) == 2  # admin + Karpenter nodes
    assocs = [r["Properties"] for r in t.values() if r["Type"] == "AWS::EKS::PodIdentityAssociation"]
    assert {a["ClusterName"] for a in assocs} == {"prod-inference"}


def test_in_cluster_prometheus_is_pinned_placed_on_system_nodes_and_queried_by_keda(existing: Existing) -> None:
    t = existing.template
    (prom,) = [p for p in helm_charts(t).values() if p["Chart"] == "prometheus"]
    assert prom["Repository"] == "https://prometheus-community.github.io/helm-charts"
    assert prom["Version"] == "29.45.2" and prom["Namespace"] == "monitoring"
    values = json.loads(prom["Values"]) if isinstance(prom["Values"], str) else prom["Values"]
    assert values["server"]["nodeSelector"] == {"cpu-inference/node-role": "system"}
    assert values["server"]["persistentVolume"] == {"enabled": False}
    assert values["alertmanager"] == {"enabled": False}
    assert "AWS::APS::Workspace" not in {r["Type"] for r in t["Resources"].values()}
    (scaled,) = [o for o in objects(t) if o["kind"] == "ScaledObject"]
    assert {tr["metadata"]["serverAddress"] for tr in scaled["spec"]["triggers"]} == {
        "http://prometheus-server.monitoring.svc.cluster.local"
    }
    assert existing.metrics.aws_region is None
    keda_policies = [
        r for k, r in t["Resources"].items() if k.startswith("KedaOperatorRole") and r["Type"] == "AWS::IAM::Policy"
    ]
    assert keda_policies == []  # no AMP workspace, no query permission


def test_bulk_objects_split_into_bounded_manifests_each_object_once(existing: Existing) -> None:
    t = existing.template
    ids = [cdk.Stack.of(m).get_logical_id(m.node.default_child) for m in existing.bulk]  # type: ignore[arg-type]
    found = {lid: (objs, size) for lid, objs, size in manifests(t) if lid in ids}
    assert len(found) == len(existing.bulk) >= 4
    assert all(size < 200_000 for _, size in found.values())
    names = [o["metadata"]["name"] for lid in ids for o in found[lid][0]]
    assert sorted(names) == [f"prompt-{i:03d}" for i in range(BULK)]  # every object exactly once
    (ns_id,) = [lid for lid, objs, _ in manifests(t) if objs[0]["kind"] == "Namespace"]
    assert all(ns_id in t["Resources"][lid]["DependsOn"] for lid in found)


def test_chunking_is_keyed_bounded_and_rejects_an_object_over_the_bound() -> None:
    objs = bulk_objects()[:50]
    parts = chunk(objs, max_bytes=20_000)
    assert sorted(o["metadata"]["name"] for p in parts for o in p) == sorted(o["metadata"]["name"] for o in objs)
    assert all(len(json.dumps(p)) < 20_000 for p in parts) and len(parts) > 1
    # Objects sharing a key stay in one chunk, in their order.
    keyed = chunk(objs, max_bytes=40_000, key=lambda o: str(int(o["metadata"]["name"][-3:]) % 25))
    for part in keyed:
        groups = {int(o["metadata"]["name"][-3:]) % 25 for o in part}
        assert all(
            sum(1 for o in q if int(o["metadata"]["name"][-3:]) % 25 in groups) == 0 for q in keyed if q is not part
        )
    with pytest.raises(ValueError, match="ConfigMap/prompt-000 alone is .* over the 1000-byte manifest bound"):
        chunk(objs, max_bytes=1_000)


def test_every_object_validates(existing: Existing) -> None:
    objs = objects(existing.template)
    core = [o for o in objs if not is_custom(o)]
    assert {o["kind"] for o in core} == {"Namespace", "ConfigMap"}
    assert [p for o in core[:5] + core[-5:] for p in validate_core(o, "1.35")] == []
    assert [p for o in objs if is_custom(o) for p in validate_custom(o)] == []


def test_cdk_nag_and_cfn_lint_are_clean(existing: Existing) -> None:
    assert nag_errors(existing.stack) == []
    assert cfn_lint_errors(existing.template) == []


def test_keda_assumes_a_given_role_with_its_pod_identity_credentials() -> None:
    """KEDA 2.20.2 (pkg/scalers/aws/aws_config_cache.go) assumes podIdentity.roleArn with sts:AssumeRole from
    the operator's own credentials when no web-identity token exists (Pod Identity injects none): the
    operator role must be allowed that call, on that role only."""
    app = cdk.App()
    stack = cdk.Stack(app, "KedaRole", env=ENV)
    _, cluster = imported_cluster(stack, vpc=False)
    keda = Keda(stack, "Keda", props=KedaProps(cluster=cluster))
    role = "arn:aws:iam::123456789012:role/amp-query"
    auth = keda.trigger_authentication("inference", role_arn=role)
    keda.trigger_authentication("other", role_arn=role)
    assert auth.to_dict()["spec"]["podIdentity"] == {"provider": "aws", "roleArn": role}
    policies = [
        r["Properties"]["PolicyDocument"]["Statement"]
        for r in template_json(stack)["Resources"].values()
        if r["Type"] == "AWS::IAM::Policy"
    ]
    assert policies == [[{"Action": "sts:AssumeRole", "Effect": "Allow", "Resource": role}]]


def test_amp_alerts_can_go_to_an_existing_topic() -> None:
    """MetricsProps(alert_topic=...) routes the alert manager to your topic (no new topic or key); CDK cannot
    change an imported topic's policy, so the statement AMP needs is exposed for you to add."""
    from aws_cdk import aws_sns as sns

    app = cdk.App()
    stack = cdk.Stack(app, "AmpTopic", env=ENV)
    vpc, cluster = imported_cluster(stack, cluster_security_group_id="sg-0123456789abcdef0")
    topic_arn = "arn:aws:sns:eu-west-1:123456789012:oncall"
    metrics = Metrics(
        stack,
        "Metrics",
        props=MetricsProps(
            cluster=cluster, cluster_name="prod", vpc=vpc, alert_topic=sns.Topic.from_topic_arn(stack, "T", topic_arn)
        ),
    )
    t = template_json(stack)["Resources"]
    assert not [r for r in t.values() if r["Type"] in ("AWS::SNS::Topic", "AWS::KMS::Key", "AWS::SNS::TopicPolicy")]
    (ws,) = [r["Properties"] for r in t.values() if r["Type"] == "AWS::APS::Workspace"]
    assert (
        f"topic_arn: {topic_arn}" in ws["AlertManagerDefinition"]
        and "region: eu-west-1" in ws["AlertManagerDefinition"]
    )
    statement = stack.resolve(metrics.alert_topic_statement.to_statement_json())
    assert statement["Principal"] == {"Service": "aps.amazonaws.com"} and statement["Resource"] == topic_arn
    with pytest.raises(ValueError, match="alert_topic needs mode 'amp', a new workspace"):
        MetricsProps(
            cluster=cluster, cluster_name="prod", vpc=vpc, existing_workspace_id="ws-1", alert_topic=metrics.alert_topic
        ).validate()
