"""InferenceWorkloads on a synthesized EKS platform (AMP metrics, KEDA, a model bucket with three model
artifacts — 135M classifier, 8B chat, 30B batch — and the router): per-model Pod Identity roles that read
only their model's prefix, manifests in dependency order, every Kubernetes object valid (Kubernetes 1.35,
KEDA CRD) and Pod Security "restricted", the field-notes alerts in AMP, cdk-nag and cfn-lint clean.
Synthesized once per module (EKS synth is slow on 2 cores)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import aws_cdk as cdk
import pytest
import yaml
from aws_cdk import aws_iam as iam

from cpu_inference import sizing
from cpu_inference.artifacts import ModelArtifact, ModelArtifactProps, ModelBucket
from cpu_inference.eks import InferenceCluster, InferenceClusterProps, Keda, KedaProps, Metrics, MetricsProps
from cpu_inference.eks.inference_workloads import InferenceWorkloads, InferenceWorkloadsProps, ModelDeployment
from cpu_inference.k8s.charts.router_chart import RouterChartProps
from cpu_inference.k8s.specs.default_node_pools import MEMORY_TAINT
from cpu_inference.k8s.workloads.model_workload import ModelWorkload
from cpu_inference.k8s.workloads.serving_policy import ServingPolicy
from cpu_inference.testing.pod_security import has_pod_spec, restricted_violations
from tests.support.cdk import apply_nag, cfn_lint_errors, nag_errors, synth, template_json
from tests.support.k8s import is_custom, manifests, objects, validate_core, validate_custom

ENV = cdk.Environment(account="123456789012", region="us-east-1")
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/llama-server@sha256:" + "b" * 64
ROUTER_IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/router@sha256:" + "c" * 64
NS = "slm-prefilter"
FARM_NS = "model-farm"
SPECS = {
    "classifier": (sizing.ModelSpec(0.135, task="classification", context_window=2048), None, "m7g.2xlarge"),
    "chat-8b": (sizing.ModelSpec(8.0, task="chat"), None, "m7g.4xlarge"),
    "batch-30b": (sizing.ModelSpec(30.0, task="batch"), 12.0, "r7g.4xlarge"),
}
BEDROCK_MODEL = "arn:aws:bedrock:us-east-1::foundation-model/anthropic.claude-3-5-haiku-20241022-v1:0"


@dataclass
class Built:
    stack: cdk.Stack
    workloads: InferenceWorkloads
    artifacts: dict[str, ModelArtifact]
    template: dict[str, Any]


def build(app: cdk.App, *, mode: str = "amp", names: tuple[str, ...] = tuple(SPECS), farm: bool = False) -> Built:
    stack = cdk.Stack(app, f"Workloads{mode.title().replace('-', '')}", env=ENV)
    ic = InferenceCluster(
        stack,
        "Inference",
        props=InferenceClusterProps(admin_principal_arns=("arn:aws:iam::123456789012:role/PlatformAdmin",)),
    )
    metrics = Metrics(stack, "Metrics", props=MetricsProps.for_cluster(ic, mode=mode))
    keda = Keda(stack, "Keda", props=KedaProps.for_cluster(ic, metrics=metrics))
    bucket = ModelBucket(stack, "Models")
    artifacts = {
        n: ModelArtifact(
            stack,
            f"Model-{n}",
            props=ModelArtifactProps(
                model_bucket=bucket,
                name=n,
                hf_repo="example/gguf",
                file=f"{n}-Q4_K_M.gguf",
                sha256="a" * 64 if n == "classifier" else None,
            ),
        )
        for n in names
    }
    models = tuple(
        ModelDeployment.from_artifact(
            artifacts[n],
            image=IMAGE,
            spec=SPECS[n][0],
            cpu=SPECS[n][1],
            node_type=SPECS[n][2],
            replicas_max=3,
            replicas_min=0 if farm else 1,
        )
        for n in names
    )
    if farm:
        workloads = InferenceWorkloads(
            stack,
            "Farm",
            props=InferenceWorkloadsProps(
                cluster=ic,
                models=models,
                metrics=metrics,
                keda=keda,
                policy=ServingPolicy(
                    namespace=FARM_NS,
                    pattern="model-farm",
                    tolerations=(MEMORY_TAINT.toleration(),),
                    preferred_pools=("memory-optimized",),
                ),
                router=RouterChartProps(image=ROUTER_IMAGE, namespace=FARM_NS, name="gateway", mode="gateway"),
                p95_latency_slo_ms=800,
            ),
        )
        return Built(stack, workloads, artifacts, {})
    workloads = InferenceWorkloads(
        stack,
        "Slm",
        props=InferenceWorkloadsProps(
            cluster=ic,
            models=models,
            metrics=metrics,
            keda=keda,
            policy=ServingPolicy(namespace=NS, pattern="slm-prefilter"),
            router=RouterChartProps(
                image=ROUTER_IMAGE,
                namespace=NS,
                config={
                    "slm_url": f"http://classifier.{NS}.svc.cluster.local:8080",
                    "escalation": {"kind": "bedrock", "model_id": "anthropic.claude-3-5-haiku-20241022-v1:0"},
                },
            ),
            router_policy_statements=(
                iam.PolicyStatement(
                    actions=["bedrock:InvokeModel", "bedrock:InvokeModelWithResponseStream"], resources=[BEDROCK_MODEL]
                ),
            ),
            p95_latency_slo_ms=500,
        ),
    )
    return Built(stack, workloads, artifacts, {})


@pytest.fixture(scope="module")
def built() -> Built:
    app = cdk.App()
    apply_nag(app)
    b = build(app)
    synth(app)
    b.template = template_json(b.stack)
    return b


@pytest.fixture(scope="module")
def in_cluster() -> Built:
    """A model farm behind the gateway, cold models (min 0), in-cluster Prometheus."""
    app = cdk.App()
    b = build(app, mode="in-cluster", names=("classifier", "chat-8b"), farm=True)
    app.synth()
    b.template = template_json(b.stack)
    return b


def resources(t: dict[str, Any], type_: str) -> dict[str, dict[str, Any]]:
    return {k: r for k, r in t["Resources"].items() if r["Type"] == type_}


def refs_in(value: Any) -> set[str]:
    text = json.dumps(value)
    return {p.split('"')[0] for p in text.split('"Ref": "')[1:]} | {
        p.split('"')[0] for p in text.split('"Fn::GetAtt": ["')[1:]
    }


def depends_closure(t: dict[str, Any], lid: str) -> set[str]:
    seen: set[str] = set()
    todo = [lid]
    while todo:
        for dep in t["Resources"][todo.pop()].get("DependsOn", []):
            if dep not in seen:
                seen.add(dep)
                todo.append(dep)
    return seen


def statements(t: dict[str, Any], role_id: str) -> list[dict[str, Any]]:
    out = []
    for p in resources(t, "AWS::IAM::Policy").values():
        if {"Ref": role_id} in p["Properties"].get("Roles", []):
            out += p["Properties"]["PolicyDocument"]["Statement"]
    return out


def manifest_ids_with(t: dict[str, Any], kind: str, name: str | None = None) -> set[str]:
    return {
        lid
        for lid, objs, _ in manifests(t)
        if any(o["kind"] == kind and (name is None or o["metadata"]["name"] == name) for o in objs)
    }


def test_each_model_role_reads_only_its_own_prefix(built: Built) -> None:
    t = built.template
    assocs = {
        a["Properties"]["ServiceAccount"]: a["Properties"]
        for a in resources(t, "AWS::EKS::PodIdentityAssociation").values()
        if a["Properties"]["Namespace"] == NS
    }
    assert set(assocs) == {*SPECS, "router"}
    roles = resources(t, "AWS::IAM::Role")
    (bucket_id,) = [k for k in resources(t, "AWS::S3::Bucket") if k.startswith("ModelsBucket")]
    for name in SPECS:
        (role_id,) = refs_in(assocs[name]["RoleArn"])
        trust = roles[role_id]["Properties"]["AssumeRolePolicyDocument"]["Statement"]
        assert [(s["Principal"], sorted(s["Action"])) for s in trust] == [
            ({"Service": "pods.eks.amazonaws.com"}, ["sts:AssumeRole", "sts:TagSession"])
        ]
        sts = statements(t, role_id)
        s3 = [
            s
            for s in sts
            if any(a.startswith("s3:") for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"]))
        ]
        get = next(s for s in s3 if s["Action"] == "s3:GetObject")
        assert get["Resource"] == {"Fn::Join": ["", [{"Fn::GetAtt": [bucket_id, "Arn"]}, f"/models/{name}/*"]]}
        listing = next(s for s in s3 if s["Action"] == "s3:ListBucket")
        assert listing["Condition"] == {"StringLike": {"s3:prefix": [f"models/{name}/*"]}}
        assert not [s for s in s3 if s not in (get, listing)], "no other S3 access"
        assert any(s["Action"] == "kms:Decrypt" for s in sts)
        others = {o for o in SPECS if o != name}
        assert not any(f"/models/{o}/" in json.dumps(sts) for o in others)
    (router_role,) = refs_in(assocs["router"]["RoleArn"])
    assert [s["Resource"] for s in statements(t, router_role)] == [BEDROCK_MODEL]


def test_pods_start_after_namespace_pod_identity_and_model_copy(built: Built) -> None:
    t = built.template
    ns_ids = manifest_ids_with(t, "Namespace", NS)
    assocs = set(resources(t, "AWS::EKS::PodIdentityAssociation"))
    copies = {k for k, r in t["Resources"].items() if r["Type"] == "Custom::ModelArtifact"}
    assert len(copies) == len(SPECS)
    for name in SPECS:
        (lid,) = manifest_ids_with(t, "Deployment", name)
        closure = depends_closure(t, lid)
        assert ns_ids <= closure and copies <= closure
        assert {a for a in assocs if t["Resources"][a]["Properties"]["Namespace"] == NS} <= closure
    agent = [
        k
        for k, a in resources(t, "AWS::EKS::Addon").items()
        if a["Properties"]["AddonName"] == "eks-pod-identity-agent"
    ]
    assert all(
        set(agent) <= depends_closure(t, a) for a in assocs if t["Resources"][a]["Properties"]["Namespace"] == NS
    )
    keda_chart = next(
        k for k, r in resources(t, "Custom::AWSCDK-EKS-HelmChart").items() if r["Properties"].get("Chart") == "keda"
    )
    for lid in manifest_ids_with(t, "ScaledObject"):
        closure = depends_closure(t, lid)
        assert keda_chart in closure and manifest_ids_with(t, "Deployment", "classifier") <= closure


def test_deployments_carry_the_sized_engine_and_the_models_s3_uri(built: Built) -> None:
    objs = objects(built.template)
    for name, (spec, cpu, node) in SPECS.items():
        dep = next(o for o in objs if o["kind"] == "Deployment" and o["metadata"]["name"] == name)
        pod = dep["spec"]["template"]["spec"]
        s = sizing.size(spec, sizing.instance(node), target="eks", cpu=cpu or sizing.default_pod_cpu(spec))
        env = {e["name"]: e["value"] for e in pod["containers"][0]["env"]}
        assert env["LLAMA_THREADS"] == env["OMP_NUM_THREADS"] == str(int(s.cpu_request)) and env[
            "LLAMA_PARALLEL"
        ] == str(s.slots)
        assert pod["containers"][0]["resources"]["requests"]["memory"] == f"{s.memory_request_mib}Mi"
        fetch = {e["name"]: e["value"] for e in pod["initContainers"][0]["env"]}
        # The bucket name is a CloudFormation reference (flattened to TOKEN by the test helper).
        # ... and so is the commit the copy pinned (its Commit attribute), never the branch name.
        assert fetch["MODEL_URI"] == f"s3://TOKEN/models/{name}/TOKEN/{name}-Q4_K_M.gguf"
        assert fetch["AWS_REGION"] == "us-east-1"
        assert fetch["MODEL_SHA256"] == (
            "a" * 64 if name == "classifier" else "TOKEN"
        )  # pinned, else the copy's Sha256
        assert pod["serviceAccountName"] == name and dep["metadata"]["namespace"] == NS


def test_network_policies_allow_the_amp_collector_subnets(built: Built) -> None:
    objs = objects(built.template)
    vpc = built.workloads.props.cluster.vpc
    cidrs = {s.ipv4_cidr_block for s in vpc.private_subnets}
    np = next(o for o in objs if o["kind"] == "NetworkPolicy" and o["metadata"]["name"] == "classifier")
    callers, scrapers = np["spec"]["ingress"]
    assert {p["ipBlock"]["cidr"] for p in scrapers["from"]} == cidrs
    assert callers["from"] == [{"podSelector": {"matchLabels": {"app.kubernetes.io/component": "router"}}}]


def test_every_object_validates_and_every_pod_is_restricted(built: Built) -> None:
    objs = [
        o
        for o in objects(built.template)
        if o.get("metadata", {}).get("namespace") == NS or o["kind"] == "Namespace" and o["metadata"]["name"] == NS
    ]
    kinds = sorted({o["kind"] for o in objs})
    assert kinds == [
        "ConfigMap",
        "Deployment",
        "Namespace",
        "NetworkPolicy",
        "PodDisruptionBudget",
        "ScaledObject",
        "Service",
        "ServiceAccount",
        "TriggerAuthentication",
    ]
    core = [o for o in objs if not is_custom(o)]
    assert [p for o in core for p in validate_core(o, "1.35")] == []
    assert [p for o in objs if is_custom(o) for p in validate_custom(o)] == []
    pods = [o for o in objs if has_pod_spec(o)]
    assert len(pods) == len(SPECS) + 1
    assert [v for o in pods for v in restricted_violations(o)] == []
    ns = next(o for o in objs if o["kind"] == "Namespace")
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


def test_scaled_objects_for_every_model_and_the_router(built: Built) -> None:
    objs = objects(built.template)
    scaled = {
        o["metadata"]["name"]: o for o in objs if o["kind"] == "ScaledObject" and o["metadata"]["namespace"] == NS
    }
    assert set(scaled) == {*SPECS, "router"}
    for name in SPECS:
        spec = scaled[name]["spec"]
        slots = built.workloads.charts[name].sizing.slots
        assert spec["advanced"]["scalingModifiers"]["target"] == str(slots + 10)
        assert all(
            tr["authenticationRef"] == {"name": "amp-sigv4", "kind": "TriggerAuthentication"} for tr in spec["triggers"]
        )
        assert all(tr["metadata"]["awsRegion"] == "us-east-1" for tr in spec["triggers"])
    (auth,) = [o for o in objs if o["kind"] == "TriggerAuthentication" and o["metadata"]["namespace"] == NS]
    assert auth["spec"] == {"podIdentity": {"provider": "aws"}}


def test_amp_alert_rules_cover_the_field_notes_table(built: Built) -> None:
    t = built.template
    (rg,) = resources(t, "AWS::APS::RuleGroupsNamespace").values()
    (ws_id,) = resources(t, "AWS::APS::Workspace")
    assert rg["Properties"]["Workspace"] == {"Fn::GetAtt": [ws_id, "Arn"]}
    doc = yaml.safe_load(rg["Properties"]["Data"])
    recording, alerting = doc["groups"]
    alerts = {}
    for r in alerting["rules"]:
        alerts.setdefault(r["alert"], []).append(r)
    assert set(alerts) == {
        "LlamaRequestsQueued",
        "LlamaSlotsSaturated",
        "LlamaTokenThroughputLow",
        "LlamaMemoryNearLimit",
        "LlamaMetricsMissing",
        "InferenceLatencyP95AboveSlo",
    }
    # One rule per kind, joined on (namespace, app) to the models' parameter series (monitoring/alerts.py): every
    # chart is a model of the parameters, with the memory limit it renders.
    records = {r["record"]: r["expr"] for r in recording["rules"]}
    for name, chart in built.workloads.charts.items():
        assert f'"app","{name}"' in records["cpu_inference:dedicated_model:replicas_min"]
        limit = chart.sizing.memory_request_mib * sizing.MIB
        assert f"+ {limit}" in records["cpu_inference:dedicated_model:memory_limit_bytes"]
    (memory,) = alerts["LlamaMemoryNearLimit"]
    assert "cpu_inference:dedicated_model:memory_limit_bytes" in memory["expr"] and memory["expr"].endswith("> 0.85")
    (throughput,) = alerts["LlamaTokenThroughputLow"]
    assert "0.5 * cpu_inference:decode_tokens_per_second:median1d" in throughput["expr"]
    (latency,) = alerts["InferenceLatencyP95AboveSlo"]
    assert latency["expr"] == f'cpu_inference:router_latency_seconds:p95{{namespace="{NS}"}} > 0.5'
    assert "llamacpp:requests_deferred" in json.dumps(recording) and "llamacpp:requests_processing" in json.dumps(
        recording
    )
    dash = next(
        o for o in objects(t) if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "slm-prefilter-dashboard"
    )
    assert dash["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert len(json.loads(dash["data"]["slm-prefilter.json"])["panels"]) >= 7


def _render(value: Any, refs: dict[str, str]) -> str:
    """A CloudFormation string expression with Ref/GetAtt of known resources replaced by a name."""
    if isinstance(value, str):
        return value
    if "Fn::Join" in value:
        sep, parts = value["Fn::Join"]
        return sep.join(_render(p, refs) for p in parts)
    target = value.get("Ref") or (value.get("Fn::GetAtt") or [None])[0]
    return refs.get(target, "TOKEN")


def _route(route: dict[str, Any], labels: dict[str, str]) -> str:
    """Alertmanager routing (first matching child wins, `continue` unset): the receiver an alert reaches."""
    for child in route.get("routes", []):
        if all(labels.get(k) == v for k, v in child.get("match", {}).items()):
            return _route({**child, "receiver": child.get("receiver", route["receiver"])}, labels)
    return route["receiver"]


def test_amp_alerts_reach_an_encrypted_sns_topic_only_this_workspace_may_publish_to(built: Built) -> None:
    """AMP user guide: SNS is the only alert receiver; sigv4.region is required and api_url/http_config are
    refused; the topic policy lets aps.amazonaws.com publish with aws:SourceArn (the workspace) and
    aws:SourceAccount conditions; an SSE topic's key must let aps.amazonaws.com GenerateDataKey*/Decrypt."""
    t = built.template
    ((ws_id, ws),) = resources(t, "AWS::APS::Workspace").items()
    ((topic_id, topic),) = resources(t, "AWS::SNS::Topic").items()
    definition = yaml.safe_load(_render(ws["Properties"]["AlertManagerDefinition"], {topic_id: "TOPIC_ARN"}))
    config = yaml.safe_load(definition["alertmanager_config"])
    receivers = {r["name"]: r for r in config["receivers"]}
    assert set(receivers) == {"sns"}
    (sns_config,) = receivers["sns"]["sns_configs"]
    assert sns_config["topic_arn"] == "TOPIC_ARN" and sns_config["sigv4"] == {"region": "us-east-1"}
    assert not {"api_url", "http_config"} & set(sns_config)
    rules = [
        r
        for g in yaml.safe_load(resources(t, "AWS::APS::RuleGroupsNamespace").popitem()[1]["Properties"]["Data"])[
            "groups"
        ]
        for r in g["rules"]
    ]
    alerts = [r for r in rules if "alert" in r]
    assert len(alerts) >= 6 and {r["labels"]["severity"] for r in alerts} == {"warning", "critical"}
    for r in alerts:
        assert _route(config["route"], {"alertname": r["alert"], **r["labels"]}) == "sns", r["alert"]
    (key_id,) = refs_in(topic["Properties"]["KmsMasterKeyId"])
    key_statements = t["Resources"][key_id]["Properties"]["KeyPolicy"]["Statement"]
    assert any(
        st["Principal"] == {"Service": "aps.amazonaws.com"}
        and sorted(st["Action"]) == ["kms:Decrypt", "kms:GenerateDataKey*"]
        for st in key_statements
    )
    assert t["Resources"][key_id]["Properties"]["EnableKeyRotation"] is True
    (policy,) = [
        r["Properties"]
        for r in resources(t, "AWS::SNS::TopicPolicy").values()
        if topic_id in refs_in(r["Properties"]["Topics"])
    ]
    (publish,) = [
        st for st in policy["PolicyDocument"]["Statement"] if st.get("Principal") == {"Service": "aps.amazonaws.com"}
    ]
    assert sorted(publish["Action"]) == ["sns:GetTopicAttributes", "sns:Publish"]
    assert publish["Condition"] == {
        "ArnEquals": {"aws:SourceArn": {"Fn::GetAtt": [ws_id, "Arn"]}},
        "StringEquals": {"aws:SourceAccount": "123456789012"},
    }
    assert built.workloads.props.metrics.alert_topic is not None


def test_model_farm_behind_the_gateway_with_in_cluster_prometheus(in_cluster: Built) -> None:
    t = in_cluster.template
    assert not resources(t, "AWS::APS::RuleGroupsNamespace"), "alert rules go to AMP only"
    objs = [
        o
        for o in objects(t)
        if o.get("metadata", {}).get("namespace") == FARM_NS or o.get("metadata", {}).get("name") == FARM_NS
    ]
    ns = next(o for o in objs if o["kind"] == "Namespace")
    assert ns["metadata"]["labels"]["app.kubernetes.io/part-of"] == "model-farm"
    np = next(o for o in objs if o["kind"] == "NetworkPolicy" and o["metadata"]["name"] == "classifier")
    _, scrapers = np["spec"]["ingress"]
    assert scrapers["from"][0]["namespaceSelector"]["matchExpressions"][0]["values"] == ["monitoring"]
    gateway_cfg = json.loads(
        next(o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "gateway")["data"]["config.json"]
    )
    assert gateway_cfg["mode"] == "gateway"
    assert {m["name"]: m["url"] for m in gateway_cfg["gateway"]["models"]} == {
        n: f"http://{n}.{FARM_NS}.svc.cluster.local:8080" for n in ("classifier", "chat-8b")
    }
    for name in ("classifier", "chat-8b"):
        so = next(o for o in objs if o["kind"] == "ScaledObject" and o["metadata"]["name"] == name)
        assert so["spec"]["minReplicaCount"] == 0
        triggers = {tr["name"]: tr for tr in so["spec"]["triggers"]}
        assert triggers["demand"]["metadata"]["query"] == (
            f'clamp_max(sum(increase(gateway_backend_unavailable_total{{namespace="{FARM_NS}",model="{name}"}}[2m])), 1) or vector(0)'
        )
        assert so["spec"]["advanced"]["scalingModifiers"]["formula"] == "running + (waiting * 10) + (demand * 10)"
        assert all(
            tr["metadata"]["serverAddress"] == "http://prometheus-server.monitoring.svc.cluster.local"
            for tr in triggers.values()
        )
        assert all("authenticationRef" not in tr for tr in triggers.values())
        assert validate_custom(so) == []
        pod = next(o for o in objs if o["kind"] == "Deployment" and o["metadata"]["name"] == name)["spec"]["template"][
            "spec"
        ]
        assert pod["tolerations"] == [MEMORY_TAINT.toleration()]
    assert not [o for o in objs if o["kind"] == "TriggerAuthentication"]
    gw = next(o for o in objs if o["kind"] == "ScaledObject" and o["metadata"]["name"] == "gateway")
    assert (
        gw["spec"]["triggers"][0]["metadata"]["query"]
        == f'sum(gateway_in_flight{{namespace="{FARM_NS}",app="gateway"}}) or vector(0)'
    )
    core = [o for o in objs if not is_custom(o)]
    assert [p for o in core for p in validate_core(o, "1.35")] == []
    assert [v for o in objs if has_pod_spec(o) for v in restricted_violations(o)] == []
    latency = [
        r
        for g in yaml.safe_load(in_cluster.workloads.alert_rules_yaml)["groups"]
        for r in g["rules"]
        if r.get("record") == "cpu_inference:router_latency_seconds:p95"
    ]
    assert "gateway_request_seconds_bucket" in latency[0]["expr"] and "le, model" in latency[0]["expr"]


def test_manifests_stay_under_the_size_bound(built: Built) -> None:
    sizes = [size for _, _, size in manifests(built.template)]
    assert max(sizes) < 200_000


def test_cdk_nag_is_clean(built: Built) -> None:
    assert nag_errors(built.stack) == []


def test_cfn_lint_is_clean(built: Built) -> None:
    assert cfn_lint_errors(built.template) == []


def test_props_mistakes_fail_with_the_fix() -> None:
    app = cdk.App()
    stack = cdk.Stack(app, "Bad", env=ENV)
    ic = InferenceCluster(stack, "Inference")
    w = ModelWorkload(
        name="m",
        image=IMAGE,
        model_uri="s3://b/models/m/main/m.gguf",
        spec=sizing.ModelSpec(0.1),
        node_type="m7g.xlarge",
    )
    bucket = ModelBucket(stack, "Models")
    with pytest.raises(ValueError, match="exactly one of artifact, model_bucket"):
        InferenceWorkloads(stack, "A", props=InferenceWorkloadsProps(cluster=ic, models=(ModelDeployment(workload=w),)))
    with pytest.raises(ValueError, match="needs read_prefix"):
        InferenceWorkloads(
            stack,
            "B",
            props=InferenceWorkloadsProps(cluster=ic, models=(ModelDeployment(workload=w, model_bucket=bucket),)),
        )
    ok = ModelDeployment(workload=w, model_bucket=bucket, read_prefix="models/m/")
    with pytest.raises(ValueError, match="must be unique"):
        InferenceWorkloads(stack, "C", props=InferenceWorkloadsProps(cluster=ic, models=(ok, ok)))
    with pytest.raises(ValueError, match="router.namespace"):
        InferenceWorkloads(
            stack,
            "D",
            props=InferenceWorkloadsProps(
                cluster=ic, models=(ok,), router=RouterChartProps(image="r", namespace="other")
            ),
        )


def test_readme_section_continues_the_minimal_example() -> None:
    import re
    from pathlib import Path

    from aws_cdk.assertions import Template

    readme = (Path(__file__).resolve().parents[2] / "constructs" / "cpu_inference" / "eks" / "README.md").read_text()
    (platform,) = re.findall(r"```python\n(.*?)```", readme, re.S)
    section = re.findall(r"```py\n(.*?)```", readme, re.S)[
        0
    ]  # the workloads section (the later one: the escape hatch, a fragment)
    scope: dict[str, object] = {}
    exec(compile(platform.replace("app.synth()", ""), "README platform", "exec"), scope)
    exec(compile(section, "README workloads", "exec"), scope)
    t = Template.from_stack(scope["stack"]).to_json()  # type: ignore[arg-type]
    assocs = {
        (a["Properties"]["Namespace"], a["Properties"]["ServiceAccount"])
        for a in resources(t, "AWS::EKS::PodIdentityAssociation").values()
    }
    assert {("slm-prefilter", "smollm2"), ("slm-prefilter", "router")} <= assocs
    assert len(resources(t, "AWS::APS::RuleGroupsNamespace")) == 1
    deployments = {
        o["metadata"]["name"]
        for o in objects(t)
        if o["kind"] == "Deployment" and o["metadata"]["namespace"] == "slm-prefilter"
    }
    assert deployments == {"smollm2", "router"}
