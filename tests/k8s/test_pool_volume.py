"""A pool's model volume across updates, its room on the node, and its start-up budget.

Sources that are not the chart:
- Kubernetes' update validation (kubernetes/kubernetes pkg/apis/core/validation/validation.go):
  ValidatePersistentVolumeUpdate — "spec.persistentvolumesource is immutable after creation" (the csi source with
  driver, volumeHandle, readOnly, volumeAttributes), volumeMode immutable, nodeAffinity immutable once set;
  ValidatePersistentVolumeClaimUpdate — "spec is immutable after creation except resources.requests and
  volumeAttributesClassName for bound claims" (volumeName may be set once, from empty).
  `kubectl apply` of a changed immutable field fails, and with it the KubernetesManifest update.
- The Mountpoint for S3 CSI driver (awslabs/mountpoint-s3-csi-driver): pkg/driver/node/volumecontext/volume_context.go
  (volume attribute names), docs/CONFIGURATION.md (resource requests on Mountpoint pods "not recommended", #543).
- The catalog's key layout (lambda/model_download/catalog.py gguf_key), run for real.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import aws_cdk as cdk
import cdk8s
import pytest

from cpu_inference.engines.pool_preset import PoolModel
from cpu_inference.k8s.charts.model_pool_chart import (
    LOOKUP_SECONDS,
    STARTUP_FLOOR_SECONDS,
    ModelPoolChart,
    ModelPoolChartProps,
    startup_budget_seconds,
)
from cpu_inference.k8s.workloads.serving_policy import ServingPolicy
from cpu_inference.sizing.pools import MOUNTPOINT_MEMORY_BYTES
from model_download.catalog import FARM_PREFIX
from tests.support.k8s import validate_core

IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/llama-server@sha256:" + "b" * 64
NS = "model-farm"
MIB = 1024 * 1024


def props(**kw: Any) -> ModelPoolChartProps:
    models = tuple(PoolModel(f"m-{i}", f"m-{i}/{i:016x}/m.gguf", ctx_size=2048) for i in range(3))
    base = ModelPoolChartProps(
        name="small",
        image=IMAGE,
        models=models,
        models_max=2,
        cpu=4,
        memory_bytes=8 << 30,
        bucket_name="cpu-inference-models-123456789012",
        region="us-east-1",
        policy=ServingPolicy(namespace=NS, pattern="model-farm"),
    )
    return replace(base, **kw)


def objects(p: ModelPoolChartProps) -> dict[tuple[str, str], dict[str, Any]]:
    chart = ModelPoolChart(cdk8s.App(), f"pool-{p.name}", props=p)
    return {(o["kind"], o["metadata"]["name"]): o for o in chart.to_json()}


def _pv_immutable(pv: dict[str, Any]) -> dict[str, Any]:
    """The PV fields ValidatePersistentVolumeUpdate refuses to change: the volume source (here `csi`), volumeMode,
    nodeAffinity."""
    spec = pv["spec"]
    mutable = {
        "capacity",
        "accessModes",
        "claimRef",
        "persistentVolumeReclaimPolicy",
        "storageClassName",
        "mountOptions",
        "volumeAttributesClassName",
    }
    return {k: v for k, v in spec.items() if k not in mutable}


def _pvc_immutable(pvc: dict[str, Any]) -> dict[str, Any]:
    """ValidatePersistentVolumeClaimUpdate: the whole spec but resources.requests and volumeAttributesClassName."""
    spec = dict(pvc["spec"])
    spec.pop("volumeAttributesClassName", None)
    spec["resources"] = {k: v for k, v in spec.get("resources", {}).items() if k != "requests"}
    return spec


def immutable_changes(
    old: dict[tuple[str, str], dict[str, Any]], new: dict[tuple[str, str], dict[str, Any]]
) -> list[str]:
    """Objects of the same identity (kind, name) whose immutable fields differ: what `kubectl apply` would refuse."""
    out = []
    for key in old.keys() & new.keys():
        check = {"PersistentVolume": _pv_immutable, "PersistentVolumeClaim": _pvc_immutable}.get(key[0])
        if check is not None and check(old[key]) != check(new[key]):
            out.append(f"{key[0]}/{key[1]}")
    return sorted(out)


def volume(objs: dict[tuple[str, str], dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    (pv,) = [o for (kind, _), o in objs.items() if kind == "PersistentVolume"]
    (pvc,) = [o for (kind, _), o in objs.items() if kind == "PersistentVolumeClaim"]
    return pv, pvc


def claim_of_pods(objs: dict[tuple[str, str], dict[str, Any]]) -> str:
    (sts,) = [o for (kind, _), o in objs.items() if kind == "StatefulSet"]
    (models,) = [v for v in sts["spec"]["template"]["spec"]["volumes"] if v["name"] == "models"]
    return models["persistentVolumeClaim"]["claimName"]


# --- F7: a change of the volume's source is a new PV/PVC pair, never an update of an immutable field ---------------


@pytest.mark.parametrize(
    "change",
    [
        dict(cache_gib=40),  # volumeAttributes.cacheEmptyDirSizeLimit
        dict(cache_gib=0),  # volumeAttributes without the cache keys
        dict(bucket_name="another-models-bucket"),  # volumeAttributes.bucketName
        dict(prefix="farm-v2/"),  # a mount option: mutable on the PV, but only new Mountpoint pods read it
        dict(region="eu-west-1"),
    ],
)
def test_a_changed_volume_source_is_a_new_pv_and_claim_that_the_pods_roll_to(change: dict[str, Any]) -> None:
    before, after = objects(props()), objects(props(**change))
    assert immutable_changes(before, after) == []
    (pv0, pvc0), (pv1, pvc1) = volume(before), volume(after)
    assert pv0["metadata"]["name"] != pv1["metadata"]["name"] and pvc0["metadata"]["name"] != pvc1["metadata"]["name"]
    assert pv1["spec"]["csi"]["volumeHandle"] == pv1["metadata"]["name"] != pv0["spec"]["csi"]["volumeHandle"]
    assert (
        pv1["spec"]["claimRef"] == {"namespace": NS, "name": pvc1["metadata"]["name"]}
        and pvc1["spec"]["volumeName"] == pv1["metadata"]["name"]
    )
    assert claim_of_pods(after) == pvc1["metadata"]["name"]  # the StatefulSet rolls onto the new claim
    assert [p for o in after.values() for p in validate_core(o, "1.35")] == []


@pytest.mark.parametrize(
    "change",
    [
        dict(models=(PoolModel("x", "x/0000000000000001/x.gguf", ctx_size=512),)),
        dict(memory_bytes=16 << 30, cpu=8, models_max=3),
        dict(replicas_max=8, replication=3, image=IMAGE.replace("b" * 64, "d" * 64)),
    ],
)
def test_the_volume_keeps_its_name_when_its_source_does_not_change(change: dict[str, Any]) -> None:
    before, after = objects(props()), objects(props(**change))
    assert [o["metadata"]["name"] for o in volume(before)] == [o["metadata"]["name"] for o in volume(after)]
    assert volume(before) == volume(after)
    assert immutable_changes(before, after) == []


def test_a_bucket_known_at_deploy_time_only_is_part_of_the_names() -> None:
    """The farm's bucket name is a CloudFormation reference: no hash at synth can see it change (a replaced bucket),
    so the reference itself is in the PV and claim names, and the names change with it at deploy time."""
    stack = cdk.Stack(cdk.App(), "S")
    bucket = cdk.Token.as_string(cdk.Fn.ref("ModelBucket"))
    objs = objects(props(bucket_name=bucket))
    pv, pvc = volume(objs)
    for name in (
        pv["metadata"]["name"],
        pvc["metadata"]["name"],
        pv["spec"]["csi"]["volumeHandle"],
        claim_of_pods(objs),
    ):
        assert bucket in name
    resolved = json.dumps(stack.resolve(pv["metadata"]["name"]))
    assert "ModelBucket" in resolved
    # The other inputs still hash to the same suffix whatever the token's number in this synth.
    again = objects(props(bucket_name=cdk.Token.as_string(cdk.Fn.ref("ModelBucket"))))
    assert volume(again)[0]["metadata"]["name"].rsplit("-", 1)[1] == pv["metadata"]["name"].rsplit("-", 1)[1]


# --- F6: room for the node's Mountpoint pod ------------------------------------------------------------------------


def test_each_replica_reserves_the_mountpoint_pods_memory_and_mountpoint_pods_request_nothing() -> None:
    objs = objects(props())
    (sts,) = [o for (kind, _), o in objs.items() if kind == "StatefulSet"]
    res = sts["spec"]["template"]["spec"]["containers"][0]["resources"]
    expected = f"{(8 << 30) // MIB + MOUNTPOINT_MEMORY_BYTES // MIB}Mi"
    assert res["requests"]["memory"] == res["limits"]["memory"] == expected
    # Requests on the Mountpoint pod (volume attributes mountpointContainerResources*) would make it wait for room
    # the scheduler never kept for it (priority class mount-s3-critical: preemptionPolicy Never): docs/CONFIGURATION.md
    # "Specifying `ResourcesRequests` is currently not recommended", issue #543. The room is the replica's.
    pv, _ = volume(objs)
    assert not [k for k in pv["spec"]["csi"]["volumeAttributes"] if k.startswith("mountpointContainerResources")]


# --- F10: the start-up budget counts every path component Mountpoint looks up ----------------------------------------


def test_startup_budget_counts_a_lookup_per_component_of_the_catalogs_key() -> None:
    from model_download.catalog import CatalogEntry, gguf_key

    key = gguf_key(CatalogEntry(name="m-1", hf_repo="org/repo", file="m.gguf", revision="a" * 40))
    assert key.startswith(FARM_PREFIX)
    lookups = len(key.removeprefix(FARM_PREFIX).split("/"))  # <name>, <idhash>, <file>: none cached on a cold mount
    assert lookups == 3
    for n in (1, 3, 100, 1000, 4096):
        assert startup_budget_seconds(n) >= STARTUP_FLOOR_SECONDS + n * lookups * LOOKUP_SECONDS, n
    assert startup_budget_seconds(1000) == STARTUP_FLOOR_SECONDS + 154  # 1,024 (its size class) x 3 x 0.05 s
