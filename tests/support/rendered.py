"""What a shipped config deploys, read back from its synthesized CloudFormation: the Kubernetes objects the EKS
charts render and the SageMaker containers' environments (intrinsics flattened to
cpu_inference.testing.crd_validation.TOKEN)."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from cpu_inference.testing.crd_validation import flatten
from tests.support.k8s import objects

ROOT = Path(__file__).resolve().parents[2]


@cache
def template(config: str) -> dict[str, Any]:
    """The app's stack for `config` (a path relative to the repository), synthesized as `cdk synth` does."""
    import aws_cdk as cdk

    from cpu_inference.app import build_app
    from cpu_inference.config import load
    from tests.support.cdk import template_json

    _, stack = build_app(load(ROOT / config), app=cdk.App())
    return template_json(stack)


def k8s_object(config: str, kind: str, name: str) -> dict[str, Any]:
    found = [o for o in objects(template(config)) if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, f"{len(found)} {kind}/{name} in the manifests of {config}"
    return found[0]


def engine_container(config: str, model: str) -> dict[str, Any]:
    """The llama-server container of `model`'s Deployment, as the chart rendered it."""
    dep = k8s_object(config, "Deployment", model)
    return next(c for c in dep["spec"]["template"]["spec"]["containers"] if c["name"] == "llama-server")


def router_config_map(config: str, name: str = "router") -> dict[str, Any]:
    """The router's config.json as its ConfigMap holds it."""
    return json.loads(k8s_object(config, "ConfigMap", name)["data"]["config.json"])


def sagemaker_environments(config: str) -> list[dict[str, str]]:
    """The Environment of every SageMaker Model's container, values flattened."""
    out = []
    for res in template(config)["Resources"].values():
        if res["Type"] != "AWS::SageMaker::Model":
            continue
        props = res["Properties"]
        for c in [props["PrimaryContainer"]] if "PrimaryContainer" in props else props.get("Containers", []):
            out.append({k: flatten(v) for k, v in (c.get("Environment") or {}).items()})
    return out
