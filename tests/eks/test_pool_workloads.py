"""InferenceWorkloads with multi-model pools on a synthesized EKS platform: the Mountpoint for S3 CSI add-on with
driver-level EKS Pod Identity reading only `farm/`, each pool's objects in one bounded manifest after the add-on,
the pool's KEDA ScaledObject (StatefulSet target), and the gateway config (with `pools`) that the gateway's own
loader accepts. cdk-nag and cfn-lint clean; every Kubernetes object valid and restricted. One synth per module."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest

from cpu_inference.artifacts import ModelBucket
from cpu_inference.eks import InferenceCluster, InferenceClusterProps, Keda, KedaProps, Metrics, MetricsProps
from cpu_inference.eks.inference_workloads import InferenceWorkloads, InferenceWorkloadsProps
from cpu_inference.eks.mountpoint import ADDON_NAME, DRIVER_SERVICE_ACCOUNT, MountpointS3Csi, MountpointS3CsiProps
from cpu_inference.engines.pool_preset import PoolModel
from cpu_inference.k8s.charts.model_pool_chart import ModelPoolChartProps
from cpu_inference.k8s.charts.router_chart import RouterChartProps
from cpu_inference.k8s.workloads.serving_policy import ServingPolicy
from cpu_inference.testing.crd_cel import validate_rules
from cpu_inference.testing.pod_security import has_pod_spec, restricted_violations
from tests.support.cdk import apply_nag, cfn_lint_errors, nag_errors, synth, template_json
from tests.support.k8s import crd_schema, is_custom, manifests, objects, validate_core, validate_custom

ENV = cdk.Environment(account="123456789012", region="us-east-1")
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/llama-server@sha256:" + "b" * 64
ROUTER_IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/router@sha256:" + "c" * 64
NS = "model-farm"
ROUTER_DIR = Path(__file__).resolve().parents[2] / "containers" / "router"
MODELS = 300


@dataclass
class Built:
    stack: cdk.Stack
    workloads: InferenceWorkloads
    mountpoint: MountpointS3Csi
    template: dict[str, Any]


def pool(name: str, first: int, count: int) -> ModelPoolChartProps:
    models = tuple(
        PoolModel(f"m-{i:04d}", f"m-{i:04d}/{i:016x}/model.gguf", ctx_size=2048, parallel=1, threads=2)
        for i in range(first, first + count)
    )
    # bucket_name / region are what the coordinator passes from the ModelBucket (a token) and the stack.
    return ModelPoolChartProps(
        name=name,
        image=IMAGE,
        models=models,
        models_max=4,
        cpu=8,
        memory_bytes=16 << 30,
        bucket_name="${Token[TOKEN.1]}",
        region="us-east-1",
        replicas_max=6,
    )


@pytest.fixture(scope="module")
def built() -> Built:
    app = cdk.App()
    apply_nag(app)
    stack = cdk.Stack(app, "Pools", env=ENV)
    ic = InferenceCluster(
        stack,
        "Inference",
        props=InferenceClusterProps(admin_principal_arns=("arn:aws:iam::123456789012:role/PlatformAdmin",)),
    )
    metrics = Metrics(stack, "Metrics", props=MetricsProps.for_cluster(ic))
    keda = Keda(stack, "Keda", props=KedaProps.for_cluster(ic, metrics=metrics))
    bucket = ModelBucket(stack, "Models")
    mp = MountpointS3Csi(stack, "Mountpoint", props=MountpointS3CsiProps(cluster=ic, model_bucket=bucket))
    small, medium = pool("small", 0, MODELS - 50), pool("medium", MODELS - 50, 50)
    small = ModelPoolChartProps(**{**small.__dict__, "bucket_name": mp.bucket_name})
    medium = ModelPoolChartProps(**{**medium.__dict__, "bucket_name": mp.bucket_name})
    workloads = InferenceWorkloads(
        stack,
        "Farm",
        props=InferenceWorkloadsProps(
            cluster=ic,
            metrics=metrics,
            keda=keda,
            mountpoint=mp,
            pools=(small, medium),
            policy=ServingPolicy(namespace=NS, pattern="model-farm"),
            router=RouterChartProps(image=ROUTER_IMAGE, namespace=NS, name="gateway", mode="gateway"),
        ),
    )
    synth(app)
    return Built(stack, workloads, mp, template_json(stack))


def resources(t: dict[str, Any], type_: str) -> dict[str, dict[str, Any]]:
    return {k: r for k, r in t["Resources"].items() if r["Type"] == type_}


def ns_objects(t: dict[str, Any]) -> list[dict[str, Any]]:
    return [o for o in objects(t) if o.get("metadata", {}).get("namespace") == NS or o["kind"] == "PersistentVolume"]


def test_mountpoint_addon_has_a_pod_identity_role_reading_only_the_farm_prefix(built: Built) -> None:
    t = built.template
    (addon,) = [
        r["Properties"] for r in resources(t, "AWS::EKS::Addon").values() if r["Properties"]["AddonName"] == ADDON_NAME
    ]
    (assoc,) = addon["PodIdentityAssociations"]
    assert assoc["ServiceAccount"] == DRIVER_SERVICE_ACCOUNT == "s3-csi-driver-sa"
    role_id = assoc["RoleArn"]["Fn::GetAtt"][0]
    trust = t["Resources"][role_id]["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert {tuple(sorted(s["Action"])) for s in trust} == {("sts:AssumeRole", "sts:TagSession")}
    assert all(s["Principal"] == {"Service": "pods.eks.amazonaws.com"} for s in trust)
    stmts = [
        s
        for p in resources(t, "AWS::IAM::Policy").values()
        if {"Ref": role_id} in p["Properties"].get("Roles", [])
        for s in p["Properties"]["PolicyDocument"]["Statement"]
    ]
    actions = {a for s in stmts for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])}
    assert actions <= {"s3:GetObject", "s3:ListBucket", "kms:Decrypt"}, actions  # read-only
    (get,) = [s for s in stmts if s["Action"] == "s3:GetObject"]
    assert json.dumps(get["Resource"]).endswith('"/farm/*"]]}')
    (listing,) = [s for s in stmts if s["Action"] == "s3:ListBucket"]
    # Mountpoint lists under the mounted prefix only (ListObjectsV2 prefix=farm/...): "farm/*" also matches "farm/".
    assert listing["Condition"] == {"StringLike": {"s3:prefix": ["farm/*"]}}


def test_pools_are_objects_per_pool_in_bounded_manifests_after_the_addon(built: Built) -> None:
    t = built.template
    objs = ns_objects(t)
    kinds = sorted(o["kind"] for o in objs if o["metadata"].get("labels", {}).get("cpu-inference/pool") == "small")
    assert kinds == sorted(
        [
            "ServiceAccount",
            "ConfigMap",
            "PersistentVolume",
            "PersistentVolumeClaim",
            "Service",
            "StatefulSet",
            "PodDisruptionBudget",
            "NetworkPolicy",
        ]
    )
    (addon_id,) = [k for k, r in resources(t, "AWS::EKS::Addon").items() if r["Properties"]["AddonName"] == ADDON_NAME]
    pool_manifests = {lid for lid, objs_, _ in manifests(t) if any(o["kind"] == "StatefulSet" for o in objs_)}
    assert pool_manifests and all(addon_id in t["Resources"][lid].get("DependsOn", []) for lid in pool_manifests)
    for lid, objs_, _ in manifests(t):  # each pool's objects travel together
        pools = {o["metadata"].get("labels", {}).get("cpu-inference/pool") for o in objs_} - {None}
        assert len(pools) <= 1, (lid, pools)
    assert max(size for _, _, size in manifests(t)) < 200_000


def test_every_object_validates_and_every_pod_is_restricted(built: Built) -> None:
    objs = ns_objects(built.template)
    assert [p for o in objs if not is_custom(o) for p in validate_core(o, "1.35")] == []
    custom = [o for o in objs if is_custom(o)]
    assert {o["metadata"]["name"] for o in custom if o["kind"] == "ScaledObject"} == {
        "pool-small",
        "pool-medium",
        "gateway",
    }
    assert [p for o in custom for p in validate_custom(o)] == []
    assert [p for o in custom for p in validate_rules(o, crd_schema(o["apiVersion"], o["kind"]))] == []
    assert [v for o in objs if has_pod_spec(o) for v in restricted_violations(o)] == []
    so = next(o for o in custom if o["metadata"]["name"] == "pool-small")
    assert so["spec"]["scaleTargetRef"]["kind"] == "StatefulSet"
    assert (
        so["spec"]["triggers"][0]["metadata"]["query"]
        == f'sum(gateway_pool_in_flight{{namespace="{NS}",pool="small"}}) or vector(0)'
    )


def test_gateway_config_lists_the_pools_and_the_gateway_loads_it(built: Built, tmp_path: Path) -> None:
    objs = ns_objects(built.template)
    text = next(o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "gateway")["data"][
        "config.json"
    ]
    path = tmp_path / "config.json"
    path.write_text(text)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROUTER_")} | {
        "ROUTER_CONFIG": str(path),
        "PYTHONPATH": str(ROUTER_DIR),
    }
    out = subprocess.run(
        [sys.executable, "-m", "slm_router", "--print-config"], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    gw = json.loads(out.stdout)["gateway"]
    assert gw["models"] == [] and [p["name"] for p in gw["pools"]] == ["small", "medium"]
    assert sum(len(p["models"]) for p in gw["pools"]) == MODELS
    assert gw["pools"][0]["replicas"][5] == f"http://pool-small-5.pool-small.{NS}.svc.cluster.local:8080"
    assert (gw["cold_load_timeout_s"], gw["health_interval_s"]) == (60, 5)
    assert built.workloads.pool_charts["small"].replica_urls == gw["pools"][0]["replicas"]
    # The gateway may reach the pool pods (its egress) and the pool pods admit the gateway (their ingress).
    policies = {o["metadata"]["name"]: o["spec"] for o in objs if o["kind"] == "NetworkPolicy"}
    gateway_pod = next(o for o in objs if o["kind"] == "Deployment" and o["metadata"]["name"] == "gateway")["spec"][
        "template"
    ]["metadata"]["labels"]
    pool_pod = next(o for o in objs if o["kind"] == "StatefulSet" and o["metadata"]["name"] == "pool-small")["spec"][
        "template"
    ]["metadata"]["labels"]
    assert any(
        peer.get("podSelector", {}).get("matchLabels", {}).items() <= pool_pod.items()
        and {"port": 8080, "protocol": "TCP"} in rule["ports"]
        for rule in policies["gateway"]["egress"]
        for peer in rule.get("to", [])
    )
    assert any(
        peer["podSelector"]["matchLabels"].items() <= gateway_pod.items()
        for peer in policies["pool-small"]["ingress"][0]["from"]
    )


def test_cdk_nag_is_clean(built: Built) -> None:
    assert nag_errors(built.stack) == []


def test_cfn_lint_is_clean(built: Built) -> None:
    assert cfn_lint_errors(built.template) == []


def test_mistakes_fail_with_the_fix() -> None:
    app = cdk.App()
    stack = cdk.Stack(app, "Bad", env=ENV)
    ic = InferenceCluster(stack, "Inference")
    bucket = ModelBucket(stack, "Models")
    with pytest.raises(ValueError, match="v2 build"):
        MountpointS3Csi(
            stack, "M", props=MountpointS3CsiProps(cluster=ic, model_bucket=bucket, addon_version="v1.15.0-eksbuild.1")
        )
    p = pool("small", 0, 2)
    with pytest.raises(ValueError, match="pool names .* more than once"):
        InferenceWorkloads(stack, "A", props=InferenceWorkloadsProps(cluster=ic, pools=(p, p)))
    with pytest.raises(ValueError, match="served twice"):
        InferenceWorkloads(
            stack,
            "B",
            props=InferenceWorkloadsProps(
                cluster=ic, pools=(p, ModelPoolChartProps(**{**p.__dict__, "name": "other"}))
            ),
        )
    with pytest.raises(ValueError, match="at least one model"):
        InferenceWorkloads(stack, "C", props=InferenceWorkloadsProps(cluster=ic))
