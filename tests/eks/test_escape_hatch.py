"""The escape hatch: `kubernetes_patch` changes rendered Kubernetes objects before they go into the KubernetesManifests
(InferenceWorkloadsProps, and through DeploymentProps the patterns). The charts render inside the constructor, so
without it nothing done to `workloads.charts[...]` afterwards reaches the cluster — shown below too.
One app, synthesized once per module."""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass
from typing import Any

import aws_cdk as cdk
import pytest

from cpu_inference import sizing
from cpu_inference.artifacts import ModelArtifact, ModelArtifactProps, ModelBucket
from cpu_inference.eks import InferenceCluster, InferenceClusterProps, Keda, KedaProps, Metrics, MetricsProps
from cpu_inference.eks.inference_workloads import (
    InferenceWorkloads,
    InferenceWorkloadsProps,
    KubernetesPatch,
    ModelDeployment,
)
from cpu_inference.k8s.charts.router_chart import RouterChartProps
from cpu_inference.k8s.workloads.serving_policy import ServingPolicy
from cpu_inference.patterns import DeploymentProps, EscalationTarget, ServedModel, SlmPrefilter, SlmPrefilterProps
from tests.support.k8s import manifests

ENV = cdk.Environment(account="123456789012", region="us-east-1")
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/llama-server@sha256:" + "b" * 64
ROUTER_IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/router@sha256:" + "c" * 64
NS = "slm-prefilter"
TEAM = {"example.com/team": "ml-platform"}
ANNOTATION = {"example.com/owner": "inference@example.com"}
PRUNE_LABEL = re.compile(r"aws\.cdk\.eks/prune-[0-9a-f]{42}")


def label_everything(obj: dict[str, Any]) -> dict[str, Any] | None:
    """In place for most objects; a replacement (a patched deep copy) for Deployments: both ways must work."""
    if obj["kind"] == "Deployment":
        new = copy.deepcopy(obj)
        new["spec"]["template"]["metadata"].setdefault("annotations", {}).update(ANNOTATION)
        new["metadata"].setdefault("labels", {}).update(TEAM)
        return new
    obj.setdefault("metadata", {}).setdefault("labels", {}).update(TEAM)
    return None


def leave_alone(obj: dict[str, Any]) -> None:
    return None


@dataclass
class Stacks:
    templates: dict[str, dict[str, Any]]
    late_edit: InferenceWorkloads


def workloads(app: cdk.App, name: str, patch: KubernetesPatch | None) -> InferenceWorkloads:
    stack = cdk.Stack(app, name, env=ENV)
    ic = InferenceCluster(
        stack,
        "Inference",
        props=InferenceClusterProps(admin_principal_arns=("arn:aws:iam::123456789012:role/PlatformAdmin",)),
    )
    metrics = Metrics(stack, "Metrics", props=MetricsProps.for_cluster(ic, mode="amp"))
    keda = Keda(stack, "Keda", props=KedaProps.for_cluster(ic, metrics=metrics))
    artifact = ModelArtifact(
        stack,
        "Model",
        props=ModelArtifactProps(
            model_bucket=ModelBucket(stack, "Models"),
            name="classifier",
            hf_repo="example/gguf",
            file="classifier-Q4_K_M.gguf",
            sha256="a" * 64,
        ),
    )
    model = ModelDeployment.from_artifact(
        artifact,
        image=IMAGE,
        spec=sizing.ModelSpec(0.135, task="classification", context_window=2048),
        node_type="m7g.2xlarge",
        replicas_max=3,
    )
    return InferenceWorkloads(
        stack,
        "Slm",
        props=InferenceWorkloadsProps(
            cluster=ic,
            models=(model,),
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
            kubernetes_patch=patch,
        ),
    )


def prefilter(app: cdk.App, patch: KubernetesPatch) -> None:
    slm = ServedModel(
        name="smollm2-1-7b",
        hf_repo="bartowski/SmolLM2-1.7B-Instruct-GGUF",
        file="SmolLM2-1.7B-Instruct-Q4_K_M.gguf",
        spec=sizing.ModelSpec(
            parameters_billions=1.7, quantization="Q4_K_M", context_window=4096, task="classification"
        ),
        role="slm",
    )
    SlmPrefilter(
        cdk.Stack(app, "Prefilter", env=ENV),
        "Prefilter",
        props=SlmPrefilterProps(
            deployment=DeploymentProps(models=(slm,), target="eks", kubernetes_patch=patch),
            escalation=EscalationTarget(kind="bedrock", model_id="anthropic.claude-3-5-haiku-20241022-v1:0"),
        ),
    )


@pytest.fixture(scope="module")
def built() -> Stacks:
    app = cdk.App()
    plain = workloads(app, "Plain", None)
    workloads(app, "Untouched", leave_alone)
    workloads(app, "Patched", label_everything)
    prefilter(app, label_everything)
    # What users tried before the escape hatch: a label added to a chart after construction.
    plain.charts["classifier"].api_objects[0].metadata.add_label("example.com/late", "too-late")
    assembly = app.synth()
    return Stacks({s.stack_name: s.template for s in assembly.stacks}, plain)


def workload_manifests(template: dict[str, Any]) -> dict[str, str]:
    """logical id → the Manifest property as synthesized (JSON text, tokens included) for every KubernetesManifest; the
    prune label CDK adds is named after the construct's address, which holds the stack's name: masked."""
    return {
        lid: PRUNE_LABEL.sub("aws.cdk.eks/prune-<address>", json.dumps(res["Properties"]["Manifest"], sort_keys=True))
        for lid, res in template["Resources"].items()
        if res["Type"] == "Custom::AWSCDK-EKS-KubernetesResource"
    }


def test_a_patch_that_changes_nothing_renders_byte_identically(built: Stacks) -> None:
    plain, untouched = workload_manifests(built.templates["Plain"]), workload_manifests(built.templates["Untouched"])
    assert len(plain) >= 4  # namespace, model, router, scaled objects
    assert untouched == plain


def test_the_patch_reaches_every_manifest(built: Stacks) -> None:
    objs = [
        (lid, o)
        for lid, batch, _ in manifests(built.templates["Patched"])
        for o in batch
        if o["metadata"].get("namespace") == NS or o["kind"] == "Namespace" and o["metadata"]["name"] == NS
    ]
    kinds = {o["kind"] for _, o in objs}
    assert {"Namespace", "Deployment", "Service", "ConfigMap", "ScaledObject", "TriggerAuthentication"} <= kinds
    unlabelled = [
        f"{lid}: {o['kind']}/{o['metadata'].get('name')}"
        for lid, o in objs
        if o["metadata"].get("labels", {}).get("example.com/team") != "ml-platform"
    ]
    assert unlabelled == []
    deployments = [o for _, o in objs if o["kind"] == "Deployment"]
    assert len(deployments) == 2  # the model and the router
    assert all(
        d["spec"]["template"]["metadata"]["annotations"]["example.com/owner"] == "inference@example.com"
        for d in deployments
    )


def test_the_pattern_passes_its_patch_to_the_workloads(built: Stacks) -> None:
    objs = [
        o
        for _, batch, _ in manifests(built.templates["Prefilter"])
        for o in batch
        if o.get("metadata", {}).get("namespace") == NS
    ]
    deployments = [o for o in objs if o["kind"] == "Deployment"]
    assert deployments and all(
        d["spec"]["template"]["metadata"]["annotations"]["example.com/owner"] == "inference@example.com"
        for d in deployments
    )
    assert all(o["metadata"]["labels"]["example.com/team"] == "ml-platform" for o in objs)


def test_editing_a_chart_after_construction_reaches_no_manifest(built: Stacks) -> None:
    """Why the hatch is a prop: the charts are rendered while InferenceWorkloads is constructed."""
    chart_now = built.late_edit.charts["classifier"].to_json()
    assert [o["kind"] for o in chart_now if o["metadata"].get("labels", {}).get("example.com/late") == "too-late"]
    assert "example.com/late" not in json.dumps(built.templates["Plain"])


def test_a_patch_must_return_none_or_an_object() -> None:
    with pytest.raises(
        TypeError,
        match=r"kubernetes_patch returned a str for Namespace/slm-prefilter: .* return None, or return a dict",
    ):
        workloads(cdk.App(), "Bad", lambda obj: "oops")  # type: ignore[arg-type,return-value]


def test_kubernetes_patch_is_refused_on_sagemaker() -> None:
    slm = ServedModel(
        name="s",
        hf_repo="a/b",
        file="f.gguf",
        spec=sizing.ModelSpec(1.7, task="classification"),
        role="slm",
        instance_type="ml.c7g.xlarge",
    )
    with pytest.raises(ValueError, match="kubernetes_patch .* target eks only"):
        DeploymentProps(models=(slm,), target="sagemaker", kubernetes_patch=leave_alone).validate()
