"""Adding or removing a model never moves another model's Kubernetes objects to a different
KubernetesManifest resource.

Why it matters (aws-cdk-lib 2.275, custom-resource-handlers/dist/aws-eks-v2/kubectl-handler/apply/__init__.py):
a manifest resource CloudFormation deletes runs `kubectl delete -f <its objects>`, and an updated one runs
`kubectl apply --prune -l aws.cdk.eks/prune-<its address>`. Had an object moved from one resource to another,
the old resource's delete (cleanup phase, after the new one applied it) or prune would remove a model that
is still configured. Chunks numbered by position (`Models0`, `Models1`) did exactly that."""

from __future__ import annotations

import json
from typing import Any

import aws_cdk as cdk
import pytest

from cpu_inference import sizing
from cpu_inference.artifacts import ModelBucket
from cpu_inference.eks import InferenceCluster, InferenceClusterProps
from cpu_inference.eks.inference_workloads import InferenceWorkloads, InferenceWorkloadsProps, ModelDeployment
from cpu_inference.eks.manifests import DEFAULT_MAX_BYTES, bucketize, object_key
from cpu_inference.k8s.workloads.model_workload import ModelWorkload
from cpu_inference.k8s.workloads.serving_policy import ServingPolicy
from tests.eks.conftest import imported_cluster
from tests.support.cdk import template_json
from tests.support.k8s import manifests

ENV = cdk.Environment(account="123456789012", region="eu-west-1")
IMAGE = "123456789012.dkr.ecr.eu-west-1.amazonaws.com/llama-server@sha256:" + "b" * 64
PRUNE = "aws.cdk.eks/prune-"
# ~10 KB of objects per model: 24 models are over one 200 KB manifest, so there are several.
MODELS = tuple(f"m{i:02d}" for i in range(24))


def synth(names: tuple[str, ...]) -> dict[str, Any]:
    app = cdk.App()
    stack = cdk.Stack(app, "Stable", env=ENV)
    vpc, cluster = imported_cluster(stack)
    ic = InferenceCluster(
        stack,
        "Inference",
        props=InferenceClusterProps(existing_cluster=cluster, existing_cluster_name="prod", existing_vpc=vpc),
    )
    bucket = ModelBucket(stack, "Bucket")
    models = tuple(
        ModelDeployment(
            workload=ModelWorkload(
                name=n,
                image=IMAGE,
                model_uri=f"s3://models-bucket/models/{n}/m.gguf",
                spec=sizing.ModelSpec(0.135, task="classification", context_window=2048),
                sha256="a" * 64,
                size_bytes=100,
            ),
            model_bucket=bucket,
            read_prefix=f"models/{n}/",
        )
        for n in names
    )
    InferenceWorkloads(
        stack,
        "Farm",
        props=InferenceWorkloadsProps(
            cluster=ic,
            models=models,
            policy=ServingPolicy(namespace="inference", pattern="model-farm"),
            alerts=False,
            dashboard=False,
        ),
    )
    app.synth()
    return template_json(stack)


def placement(t: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """object identity -> (logical id of the manifest holding it, the object without CDK's prune label)."""
    out: dict[str, tuple[str, str]] = {}
    for lid, objs, size in manifests(t):
        assert size < DEFAULT_MAX_BYTES
        for o in objs:
            k = object_key(o)
            assert k not in out, f"{k} is in two manifests: {out[k][0]} and {lid}"
            labels = {n: v for n, v in o["metadata"].get("labels", {}).items() if not n.startswith(PRUNE)}
            out[k] = (lid, json.dumps({**o, "metadata": {**o["metadata"], "labels": labels}}, sort_keys=True))
    return out


def owned_by(p: dict[str, tuple[str, str]], names: set[str]) -> dict[str, tuple[str, str]]:
    return {k: v for k, v in p.items() if k.rsplit("/", 1)[-1] in names}


@pytest.fixture(scope="module")
def variants() -> dict[str, dict[str, tuple[str, str]]]:
    removed = tuple(n for n in MODELS if n != "m03")
    added = (*MODELS[:5], "m04b", *MODELS[5:])
    return {name: placement(synth(names)) for name, names in (("all", MODELS), ("removed", removed), ("added", added))}


def test_every_model_and_every_object_is_deployed_once_in_several_bounded_manifests(variants) -> None:
    p = variants["all"]
    assert {k.rsplit("/", 1)[-1] for k in p} == {*MODELS, "inference"}  # + the cluster's workload namespace
    assert len({lid for lid, _ in p.values()}) > 1
    for n in MODELS:  # one model's objects travel together
        assert len({lid for lid, _ in owned_by(p, {n}).values()}) == 1, n


def test_removing_or_inserting_a_model_leaves_every_other_models_objects_where_they_were(variants) -> None:
    others = set(MODELS) - {"m03"}
    before = owned_by(variants["all"], others)
    assert before and owned_by(variants["removed"], others) == before
    assert owned_by(variants["added"], set(MODELS)) == owned_by(variants["all"], set(MODELS))
    assert not owned_by(variants["removed"], {"m03"}) and owned_by(variants["added"], {"m04b"})


def test_small_sets_stay_stable_too() -> None:
    """[a,b,c] -> [a,c] and [a,b,c,d] at a small bound: a's and c's buckets keep their names and objects."""

    def objs(names: str) -> list[dict[str, Any]]:
        return [
            {"apiVersion": "v1", "kind": k, "metadata": {"name": n, "namespace": "ns"}, "data": {"x": n * 3000}}
            for n in names
            for k in ("ConfigMap", "Secret")
        ]

    def where(names: str) -> dict[str, str]:
        buckets = bucketize(objs(names), max_bytes=13_000, key=lambda o: o["metadata"]["name"])
        return {object_key(o): b.prefix for b in buckets for o in b.objects}

    abc, ac, abcd = where("abc"), where("ac"), where("abcd")
    kept = {k: v for k, v in abc.items() if k.endswith(("/a", "/c"))}
    assert kept and {k: ac[k] for k in kept} == kept and {k: abcd[k] for k in kept} == kept


def test_the_bound_keeps_an_update_event_under_lambdas_asynchronous_payload_limit() -> None:
    """CloudFormation invokes a custom resource's Lambda asynchronously, and an Update event carries the old and the
    new manifest as JSON strings (escaped once more inside the event). The limit is botocore's own text."""
    import re

    import botocore.session

    doc = botocore.session.get_session().get_service_model("lambda").operation_model("Invoke").documentation
    (mb,) = re.findall(r"For asynchronous invocations, the maximum payload size is (\d+) MB", doc)
    limit = int(mb) * 1_000_000
    # The worst case for escaping: a manifest full of quotes and backslashes, filled to the bound.
    obj = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "x", "namespace": "ns"},
        "data": {"k": '"\\' * 40_000},
    }
    (bucket,) = bucketize([obj], max_bytes=DEFAULT_MAX_BYTES)
    manifest = json.dumps(bucket.objects, separators=(",", ":"))
    assert len(manifest) < DEFAULT_MAX_BYTES
    grown = DEFAULT_MAX_BYTES / len(manifest)  # scale the escaping overhead of this manifest up to the bound
    props = {
        "ServiceToken": "arn:aws:lambda:us-east-1:123456789012:function:" + "f" * 64,
        "ClusterName": "c" * 100,
        "Manifest": manifest,
        "PruneLabel": "aws.cdk.eks/prune-" + "a" * 42,
        "Overwrite": "true",
    }
    event = {
        "RequestType": "Update",
        "ResourceProperties": props,
        "OldResourceProperties": props,
        "ResponseURL": "https://" + "u" * 1500,
        "StackId": "s" * 200,
        "RequestId": "r" * 36,
        "LogicalResourceId": "l" * 255,
        "PhysicalResourceId": "p" * 1024,
        "ResourceType": "Custom::AWSCDK-EKS-KubernetesResource",
    }
    assert len(json.dumps(event)) * grown < limit
