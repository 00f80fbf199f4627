"""Generated updates of real synths, rehearsed: each is 0 hazards (nothing deleted that the new template declares,
no immutable field changed, no stateful resource replaced, every new prerequisite ordered), and growth past the
manifest bound is refused at synth instead of renaming resources.

The config transitions synthesize the shipped model-farm example (dedicated models, two pools, a gateway, KEDA,
AMP alerts) and the default config with one change each, as `cdk synth` would after the user edits config.yaml."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
import yaml

from cpu_inference.app import build_app
from cpu_inference.config import parse
from cpu_inference.eks import InferenceCluster, InferenceClusterProps
from cpu_inference.eks.manifests import ManifestBoundError, add_bounded_manifests
from cpu_inference.testing.rehearsal import Assembly, assembly_from_templates, create_order, plan
from tests.eks.conftest import imported_cluster
from tests.support.cdk import template_json

ROOT = Path(__file__).resolve().parents[2]
FARM = yaml.safe_load((ROOT / "examples" / "model-farm-eks.yaml").read_text())
DEFAULT = yaml.safe_load((ROOT / "config.yaml").read_text())


def synth_config(doc: dict[str, Any]) -> Assembly:
    app, stack = build_app(parse(yaml.safe_dump(doc)), app=cdk.App())
    app.synth()
    return assembly_from_templates({stack.stack_name: template_json(stack)})


def _farm_group(doc: dict[str, Any], i: int) -> list[dict[str, Any]]:
    return doc["model_groups"][i]["models"]


def add_dedicated(doc):
    doc["models"].append({**copy.deepcopy(doc["models"][0]), "name": "qwen3-0-6b-b"})


def remove_dedicated(doc):
    doc["models"] = [m for m in doc["models"] if m["name"] != "phi-3-5-mini"]


def add_pooled(doc):
    _farm_group(doc, 0).append(
        {
            "name": "bge-small-en-b",
            "parameters_billions": 0.033,
            "source": {"hf_repo": "CompendiumLabs/bge-small-en-v1.5-gguf", "file": "bge-small-en-v1.5-q8_0.gguf"},
        }
    )


def remove_pooled(doc):
    del _farm_group(doc, 0)[0]


def add_pool(doc):
    doc["farm"]["pools"].append(
        {"name": "large", "cpu": 7, "memory_gib": 24, "replicas": {"min": 1, "max": 2}, "replication": 1}
    )
    _farm_group(doc, 1)[-1]["pool"] = "large"


def remove_pool(doc):
    doc["farm"]["pools"] = [p for p in doc["farm"]["pools"] if p["name"] != "medium"]
    for m in _farm_group(doc, 1):
        m.pop("pool", None)  # the medium pool's models go to the group's default (small)


def change_revision(doc):
    doc["models"][0]["source"]["revision"] = "9f1d4a1e7c6b5a4d3c2b1a0f9e8d7c6b5a4d3c2b"


def change_models_max(doc):
    doc["farm"]["pools"][0]["models_max"] = 3


FARM_TRANSITIONS = [
    add_dedicated,
    remove_dedicated,
    add_pooled,
    remove_pooled,
    add_pool,
    remove_pool,
    change_revision,
    change_models_max,
]


@pytest.fixture(scope="module")
def farm_base() -> Assembly:
    return synth_config(FARM)


@pytest.mark.parametrize("change", FARM_TRANSITIONS, ids=lambda f: f.__name__)
def test_a_farm_update_has_no_hazard(farm_base: Assembly, change) -> None:
    doc = copy.deepcopy(FARM)
    change(doc)
    after = synth_config(doc)
    p = plan(farm_base, after)
    assert p.hazards == [], "\n".join(map(str, p.hazards))
    # The transition did something: Kubernetes objects, or (a revision) the model copy resolved at deploy time.
    assert p.objects or any("Custom::ModelArtifact" in u for u in p.updated), p.text()
    assert create_order(after) == []


def test_the_default_config_updates_without_hazard() -> None:
    doc = copy.deepcopy(DEFAULT)
    before = synth_config(doc)
    doc["models"][0]["replicas"] = {"min": 2, "max": 5}
    p = plan(before, synth_config(doc))
    assert p.hazards == [] and [c.action for c in p.objects] == ["change"] * len(p.objects) and p.objects


# --- the manifest bound, driven small: growth never renames a resource; past the bound synth refuses


def _bounded(groups: int, max_bytes: int) -> Assembly:
    app = cdk.App()
    stack = cdk.Stack(app, "Bounded", env=cdk.Environment(account="123456789012", region="eu-west-1"))
    vpc, cluster = imported_cluster(stack)
    ic = InferenceCluster(
        stack,
        "Inference",
        props=InferenceClusterProps(existing_cluster=cluster, existing_cluster_name="prod", existing_vpc=vpc),
    )
    objs = [
        {
            "apiVersion": "v1",
            "kind": k,
            "metadata": {"name": f"g{i:03d}", "namespace": "default"},
            "data": {"x": "y" * 900},
        }
        for i in range(groups)
        for k in ("ConfigMap", "Secret")
    ]
    add_bounded_manifests(
        ic.cluster, "Objs", objs, max_bytes=max_bytes, scope=stack, key=lambda o: o["metadata"]["name"]
    )
    app.synth()
    return assembly_from_templates({"Bounded": template_json(stack)})


def test_growing_toward_a_small_bound_never_moves_an_object_and_past_it_synth_refuses() -> None:
    bound = 8_000
    previous = _bounded(1, bound)
    grown = 1
    for n in range(2, 200):
        try:
            current = _bounded(n, bound)
        except ManifestBoundError as exc:
            assert "over the 8000-byte bound" in str(exc) and "never split" in str(exc)
            break
        p = plan(previous, current, create_only=lambda t: ())
        assert p.hazards == [] and {c.action for c in p.objects} == {"create"}, "\n".join(map(str, p.hazards))
        previous, grown = current, n
    else:
        pytest.fail("the bound was never reached")
    assert grown >= 3  # several groups fit before the first bucket fills


# --- construct-level changes no config key reaches: a pool's Mountpoint cache, alerts switched on


def _farm_workloads(*, cache_gib: int, alerts: bool) -> Assembly:
    from cpu_inference.artifacts import ModelBucket
    from cpu_inference.eks import Keda, KedaProps, Metrics, MetricsProps
    from cpu_inference.eks.inference_workloads import InferenceWorkloads, InferenceWorkloadsProps
    from cpu_inference.eks.mountpoint import MountpointS3Csi, MountpointS3CsiProps
    from cpu_inference.engines.pool_preset import PoolModel
    from cpu_inference.k8s.charts.model_pool_chart import ModelPoolChartProps
    from cpu_inference.k8s.charts.router_chart import RouterChartProps
    from cpu_inference.k8s.workloads.serving_policy import ServingPolicy

    app = cdk.App()
    stack = cdk.Stack(app, "Pools", env=cdk.Environment(account="123456789012", region="us-east-1"))
    ic = InferenceCluster(
        stack,
        "Inference",
        props=InferenceClusterProps(admin_principal_arns=("arn:aws:iam::123456789012:role/PlatformAdmin",)),
    )
    metrics = Metrics(stack, "Metrics", props=MetricsProps.for_cluster(ic))
    keda = Keda(stack, "Keda", props=KedaProps.for_cluster(ic, metrics=metrics))
    bucket = ModelBucket(stack, "Models")
    mp = MountpointS3Csi(stack, "Mountpoint", props=MountpointS3CsiProps(cluster=ic, model_bucket=bucket))
    image = "123456789012.dkr.ecr.us-east-1.amazonaws.com/llama-server@sha256:" + "b" * 64
    models = tuple(
        PoolModel(f"m-{i:04d}", f"m-{i:04d}/{i:016x}/model.gguf", ctx_size=2048, parallel=1, threads=2)
        for i in range(20)
    )
    pool = ModelPoolChartProps(
        name="small",
        image=image,
        models=models,
        models_max=4,
        cpu=8,
        memory_bytes=16 << 30,
        bucket_name=mp.bucket_name,
        region="us-east-1",
        replicas_max=6,
        cache_gib=cache_gib,
    )
    InferenceWorkloads(
        stack,
        "Farm",
        props=InferenceWorkloadsProps(
            cluster=ic,
            metrics=metrics,
            keda=keda,
            mountpoint=mp,
            pools=(pool,),
            alerts=alerts,
            policy=ServingPolicy(namespace="model-farm", pattern="model-farm"),
            router=RouterChartProps(
                image=image.replace("llama-server", "router"), namespace="model-farm", name="gateway", mode="gateway"
            ),
        ),
    )
    app.synth()
    return assembly_from_templates({"Pools": template_json(stack)})


def test_changing_a_pools_cache_and_switching_alerts_on_have_no_hazard() -> None:
    base = _farm_workloads(cache_gib=20, alerts=False)
    cache = plan(base, _farm_workloads(cache_gib=40, alerts=False))
    # A new PV/PVC pair (the old one pruned: PV and PVC are on kubectl's allowlist), never an immutable-field change.
    assert cache.hazards == [], "\n".join(map(str, cache.hazards))
    actions = {(c.action, c.key.split("/")[1]) for c in cache.objects}
    assert {
        ("create", "PersistentVolume"),
        ("create", "PersistentVolumeClaim"),
        ("delete", "PersistentVolume"),
        ("change", "StatefulSet"),
    } <= actions
    with_alerts = _farm_workloads(cache_gib=20, alerts=True)
    alerts = plan(base, with_alerts)
    assert alerts.hazards == [], alerts.text()
    rule_groups = [
        lid for lid, r in with_alerts.stacks["Pools"].resources.items() if r["Type"] == "AWS::APS::RuleGroupsNamespace"
    ]
    assert rule_groups and not set(rule_groups) & set(base.stacks["Pools"].resources)  # the switch added them


@pytest.mark.parametrize("doc", [DEFAULT, FARM], ids=["config.yaml", "model-farm-eks.yaml"])
def test_synthesizing_the_same_config_again_changes_nothing(doc) -> None:
    """A redeploy of unchanged config is a no-op: nothing rendered from a CDK token's per-process text (the router's
    config-sha256 rollout annotation hashed `${Token[AWS.Region.N]}`, so every synth restarted the router)."""
    first, second = synth_config(copy.deepcopy(doc)), synth_config(copy.deepcopy(doc))
    p = plan(first, second)
    assert (p.objects, p.updated, p.replaced, p.hazards) == ([], [], [], []), p.text()
