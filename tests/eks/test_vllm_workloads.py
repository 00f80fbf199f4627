"""InferenceWorkloads with a vLLM model beside a llama.cpp one on a synthesized EKS platform (AMP, KEDA, a model
bucket): the vLLM Deployment runs the vLLM image with exactly its sized environment and fetches its snapshot
prefix, its Pod Identity role reads only that model's prefix, its ScaledObject reads vLLM's queue gauges, the
AMP rule groups carry the vLLM alerts, every object validates (Kubernetes 1.35, KEDA CRD) and is Pod Security
"restricted", and the template is cdk-nag and cfn-lint clean. Synthesized once per module."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import aws_cdk as cdk
import pytest
import yaml

from cpu_inference import sizing
from cpu_inference.artifacts import ModelArtifact, ModelArtifactProps, ModelBucket
from cpu_inference.eks import InferenceCluster, InferenceClusterProps, Keda, KedaProps, Metrics, MetricsProps
from cpu_inference.eks.inference_workloads import InferenceWorkloads, InferenceWorkloadsProps, ModelDeployment
from cpu_inference.k8s.charts.llama_server_chart import rendered_engine_env
from cpu_inference.k8s.charts.router_chart import RouterChartProps
from cpu_inference.k8s.workloads.model_workload import ModelWorkload
from cpu_inference.k8s.workloads.serving_policy import ServingPolicy
from cpu_inference.testing.pod_security import has_pod_spec, restricted_violations
from tests.support.cdk import apply_nag, cfn_lint_errors, nag_errors, synth, template_json
from tests.support.k8s import is_custom, objects, validate_core, validate_custom

ENV = cdk.Environment(account="123456789012", region="us-east-1")
LLAMA_IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/llama-server@sha256:" + "b" * 64
VLLM_IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/vllm-cpu@sha256:" + "e" * 64
ROUTER_IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/router@sha256:" + "c" * 64
NS = "slm-prefilter"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
VLLM_SPEC = sizing.ModelSpec(1.7, engine="vllm", task="chat", context_window=8192)
LLAMA_SPEC = sizing.ModelSpec(0.135, task="classification", context_window=2048)


@dataclass
class Built:
    stack: cdk.Stack
    workloads: InferenceWorkloads
    template: dict[str, Any]


@pytest.fixture(scope="module")
def built() -> Built:
    app = cdk.App()
    apply_nag(app)
    stack = cdk.Stack(app, "VllmWorkloads", env=ENV)
    ic = InferenceCluster(
        stack,
        "Inference",
        props=InferenceClusterProps(admin_principal_arns=("arn:aws:iam::123456789012:role/PlatformAdmin",)),
    )
    metrics = Metrics(stack, "Metrics", props=MetricsProps.for_cluster(ic))
    keda = Keda(stack, "Keda", props=KedaProps.for_cluster(ic, metrics=metrics))
    bucket = ModelBucket(stack, "Models")
    snapshot = ModelArtifact(
        stack,
        "Chat",
        props=ModelArtifactProps(
            model_bucket=bucket,
            name="chat",
            hf_repo="HuggingFaceTB/SmolLM2-1.7B-Instruct",
            snapshot=True,
            revision=COMMIT,
        ),
    )
    chat = ModelDeployment.from_artifact(
        snapshot, image=VLLM_IMAGE, spec=VLLM_SPEC, node_type="m7g.2xlarge", replicas_max=3
    )
    classifier = ModelWorkload(
        name="classifier",
        image=LLAMA_IMAGE,
        model_uri=f"s3://{bucket.bucket.bucket_name}/models/classifier/main/c-Q4_K_M.gguf",
        spec=LLAMA_SPEC,
        node_type="m7g.2xlarge",
        sha256="a" * 64,
    )
    workloads = InferenceWorkloads(
        stack,
        "Slm",
        props=InferenceWorkloadsProps(
            cluster=ic,
            metrics=metrics,
            keda=keda,
            policy=ServingPolicy(namespace=NS, pattern="slm-prefilter"),
            models=(ModelDeployment(workload=classifier, model_bucket=bucket, read_prefix="models/classifier/"), chat),
            router=RouterChartProps(
                image=ROUTER_IMAGE,
                namespace=NS,
                config={
                    "slm_url": f"http://classifier.{NS}.svc.cluster.local:8080",
                    "escalation": {
                        "kind": "openai",
                        "url": f"http://chat.{NS}.svc.cluster.local:8080/v1",
                        "model_id": "chat",
                    },
                },
            ),
        ),
    )
    synth(app)
    return Built(stack, workloads, template_json(stack))


def _deployment(built: Built, name: str) -> dict[str, Any]:
    return next(o for o in objects(built.template) if o["kind"] == "Deployment" and o["metadata"]["name"] == name)


def test_the_vllm_deployment_runs_the_sized_vllm_engine_on_its_snapshot(built: Built) -> None:
    chart = built.workloads.charts["chat"]
    s = sizing.size(VLLM_SPEC, sizing.instance("m7g.2xlarge"), target="eks", cpu=sizing.default_pod_cpu(VLLM_SPEC))
    assert chart.sizing == s and chart.engine == "vllm"
    pod = _deployment(built, "chat")["spec"]["template"]["spec"]
    engine, sidecar = pod["containers"]
    assert engine["image"] == sidecar["image"] == VLLM_IMAGE and engine["command"] == [
        "python3",
        "/opt/vllm/app/entrypoint.py",
    ]
    env = {e["name"]: e["value"] for e in engine["env"]}
    assert env == rendered_engine_env(chart), "the template carries what the chart rendered"
    sized = s.engine_env(exclusive_cpus=False)
    assert (
        {k: env[k] for k in sized} == sized
        and env["MODEL_PATH"] == "/models/chat"
        and env["SERVE_MODEL_NAME"] == "chat"
    )
    (fetch,) = pod["initContainers"]
    fenv = {e["name"]: e["value"] for e in fetch["env"]}
    # The snapshot's commit-pinned prefix and its manifest's digest: CloudFormation attributes of the copy (TOKEN here).
    assert fenv["MODEL_URI"] == "s3://TOKEN/models/chat/TOKEN/" and fenv["MODEL_SHA256"] == "TOKEN"
    assert "cpu-inference.manifest" in fetch["command"][2]
    assert "/dev/shm" in {m["mountPath"] for m in engine["volumeMounts"]}
    llama = {
        e["name"]: e["value"]
        for e in _deployment(built, "classifier")["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert "LLAMA_THREADS" in llama and "SERVE_MODEL_NAME" not in llama, "each model keeps its own engine"


def test_scaled_objects_read_each_engines_queue(built: Built) -> None:
    scaled = {
        o["metadata"]["name"]: o
        for o in objects(built.template)
        if o["kind"] == "ScaledObject" and o["metadata"]["namespace"] == NS
    }
    queries = {
        n: " ".join(t["metadata"]["query"] for t in scaled[n]["spec"]["triggers"]) for n in ("chat", "classifier")
    }
    assert "vllm:num_requests_running" in queries["chat"] and "vllm:num_requests_waiting" in queries["chat"]
    assert "llamacpp:" not in queries["chat"] and "llamacpp:requests_processing" in queries["classifier"]
    assert [p for o in scaled.values() for p in validate_custom(o)] == []


def test_vllm_role_reads_only_its_prefix(built: Built) -> None:
    t = built.template
    (assoc,) = [
        a["Properties"]
        for a in t["Resources"].values()
        if a["Type"] == "AWS::EKS::PodIdentityAssociation" and a["Properties"]["ServiceAccount"] == "chat"
    ]
    role_id = assoc["RoleArn"]["Fn::GetAtt"][0]
    policies = [
        p["Properties"]["PolicyDocument"]["Statement"]
        for p in t["Resources"].values()
        if p["Type"] == "AWS::IAM::Policy" and {"Ref": role_id} in p["Properties"].get("Roles", [])
    ]
    text = json.dumps(policies)
    assert "/models/chat/*" in text and "/models/classifier/" not in text


def test_alert_rules_carry_the_vllm_alerts(built: Built) -> None:
    doc = yaml.safe_load(built.workloads.alert_rules_yaml)
    alerts = {r["alert"]: r for g in doc["groups"] for r in g["rules"] if "alert" in r}
    assert {"VllmKvCacheHigh", "VllmSlotsSaturated", "VllmMemoryNearLimit", "LlamaSlotsSaturated"} <= set(alerts)
    limit = built.workloads.charts["chat"].memory_limit_bytes
    records = {r["record"]: r["expr"] for g in doc["groups"] for r in g["rules"] if "record" in r}
    # The alert divides by the model's memory_limit_bytes parameter (monitoring/alerts.py): the limit rendered,
    # /dev/shm included, is chat's value there.
    assert "cpu_inference:dedicated_model:memory_limit_bytes" in alerts["VllmMemoryNearLimit"]["expr"]
    assert f"+ {limit}" in records["cpu_inference:dedicated_model:memory_limit_bytes"], (
        "the alert's limit is the one rendered, /dev/shm included"
    )
    deployment_limit = _deployment(built, "chat")["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"][
        "memory"
    ]
    assert deployment_limit == f"{limit // sizing.MIB}Mi"


def test_every_object_validates_and_every_pod_is_restricted(built: Built) -> None:
    objs = [o for o in objects(built.template) if o.get("metadata", {}).get("namespace") == NS]
    assert [p for o in objs if not is_custom(o) for p in validate_core(o, "1.35")] == []
    pods = [o for o in objs if has_pod_spec(o)]
    assert len(pods) == 3 and [v for o in pods for v in restricted_violations(o)] == []


def test_cdk_nag_and_cfn_lint_are_clean(built: Built) -> None:
    assert nag_errors(built.stack) == []
    assert cfn_lint_errors(built.template) == []


def test_the_router_may_reach_the_vllm_pods(built: Built) -> None:
    """The router's egress admits model pods by their serving-role label, which vLLM pods carry too."""
    objs = objects(built.template)
    router_np = next(o for o in objs if o["kind"] == "NetworkPolicy" and o["metadata"]["name"] == "router")
    labels = _deployment(built, "chat")["spec"]["template"]["metadata"]["labels"]
    to_models = [
        r
        for r in router_np["spec"]["egress"]
        if any(
            p.get("podSelector", {}).get("matchLabels", {}).items() <= labels.items()
            and p.get("podSelector", {}).get("matchLabels")
            for p in r.get("to", [])
        )
    ]
    assert to_models and {"port": 8080, "protocol": "TCP"} in to_models[0]["ports"]
    chat_np = next(o for o in objs if o["kind"] == "NetworkPolicy" and o["metadata"]["name"] == "chat")
    assert chat_np["spec"]["ingress"][0]["from"] == [
        {"podSelector": {"matchLabels": {"app.kubernetes.io/component": "router"}}}
    ]


def test_the_artifact_kind_must_match_the_engine(built: Built) -> None:
    stack = cdk.Stack(cdk.App(), "Mismatch", env=ENV)
    bucket = ModelBucket(stack, "Models")
    gguf = ModelArtifact(
        stack,
        "Gguf",
        props=ModelArtifactProps(model_bucket=bucket, name="gguf", hf_repo="example/gguf", file="m-Q4_K_M.gguf"),
    )
    with pytest.raises(
        ValueError, match=r"engine vllm needs a snapshot artifact \(ModelArtifactProps\(snapshot=True\)"
    ):
        ModelDeployment.from_artifact(gguf, image=VLLM_IMAGE, spec=VLLM_SPEC, node_type="m7g.2xlarge")
    snap = ModelArtifact(
        stack, "Snap", props=ModelArtifactProps(model_bucket=bucket, name="snap", hf_repo="example/st", snapshot=True)
    )
    with pytest.raises(ValueError, match="engine llama.cpp needs a GGUF file artifact"):
        ModelDeployment.from_artifact(snap, image=LLAMA_IMAGE, spec=LLAMA_SPEC, node_type="m7g.2xlarge")
