"""Extract Kubernetes objects from synthesized CloudFormation and validate them against real schemas:
kubernetes-validate (core kinds, at the target minor) and the upstream Karpenter/KEDA CRDs in ../shared/crds."""

from __future__ import annotations

import json
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from cpu_inference.testing import flatten

ROOT = Path(__file__).resolve().parents[2]
SHARED_CRDS = ROOT.parent / "shared" / "crds"

MANIFEST_TYPES = ("Custom::AWSCDK-EKS-KubernetesResource",)
HELM_TYPES = ("Custom::AWSCDK-EKS-HelmChart",)


def manifests(template: dict[str, Any]) -> Iterator[tuple[str, list[dict[str, Any]], int]]:
    """(logical id, objects, manifest size in bytes) for every KubernetesManifest resource."""
    for lid, res in template.get("Resources", {}).items():
        if res.get("Type") in MANIFEST_TYPES:
            raw = flatten(res["Properties"]["Manifest"])
            yield lid, json.loads(raw), len(raw.encode())


def objects(template: dict[str, Any]) -> list[dict[str, Any]]:
    return [obj for _, objs, _ in manifests(template) for obj in objs]


def helm_charts(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {lid: r["Properties"] for lid, r in template.get("Resources", {}).items() if r.get("Type") in HELM_TYPES}


@cache
def _crd_schemas(crd_dir: str) -> dict[tuple[str, str], dict[str, Any]]:
    # A missing directory fails here, loudly: skipping the custom objects' validation would pass unchecked objects.
    assert Path(crd_dir).is_dir(), (
        f"no CRD directory at {crd_dir}: the upstream CRDs (../shared/crds) belong beside the repo"
    )
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for f in sorted(Path(crd_dir).glob("*.yaml")):
        crd = yaml.safe_load(f.read_text())
        if not crd or crd.get("kind") != "CustomResourceDefinition":
            continue
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        for v in crd["spec"]["versions"]:
            out[(f"{group}/{v['name']}", kind)] = v["schema"]["openAPIV3Schema"]
    return out


def crd_schema(api_version: str, kind: str, crd_dir: Path = SHARED_CRDS) -> dict[str, Any] | None:
    return _crd_schemas(str(crd_dir)).get((api_version, kind))


def validate_custom(obj: dict[str, Any], crd_dir: Path = SHARED_CRDS) -> list[str]:
    """Validate a custom resource against its CRD's openAPIV3Schema. [] when valid."""
    schema = crd_schema(obj["apiVersion"], obj["kind"], crd_dir)
    if schema is None:
        return [f"no CRD for {obj['apiVersion']} {obj['kind']} in {crd_dir}"]
    validator = jsonschema.Draft7Validator(schema)
    return [
        f"{obj['kind']}/{obj.get('metadata', {}).get('name')}: {'/'.join(map(str, e.path))}: {e.message}"
        for e in validator.iter_errors(obj)
    ]


def validate_core(obj: dict[str, Any], minor: str) -> list[str]:
    """Validate a core object with kubernetes-validate at `minor` (e.g. "1.35"), strict (no unknown fields)."""
    import kubernetes_validate

    try:
        kubernetes_validate.validate(obj, f"{minor}.0", strict=True)
    except kubernetes_validate.ValidationError as exc:
        return [f"{obj['kind']}/{obj.get('metadata', {}).get('name')}: {'/'.join(map(str, exc.path))}: {exc.message}"]
    return []


CUSTOM_GROUPS = ("karpenter.sh", "karpenter.k8s.aws", "keda.sh")


def is_custom(obj: dict[str, Any]) -> bool:
    return obj["apiVersion"].split("/")[0] in CUSTOM_GROUPS
