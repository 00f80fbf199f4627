"""A model-farm app synthesized from a config file, and what the farm tests read of it: the templates (the parent and
every nested one) with their resource counts and bytes, the resources of a type, and the Kubernetes objects of the
manifests (through the rehearsal's own assembly reader)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import aws_cdk as cdk

from cpu_inference.app import build_app
from cpu_inference.config import load
from cpu_inference.patterns.model_farm import ModelFarm
from cpu_inference.testing.rehearsal import load_assembly


@dataclass
class SynthesizedFarm:
    out: Path  # the cloud assembly
    parent: str  # the parent stack's template file name
    seconds: float  # synth time
    farm: ModelFarm

    def templates(self) -> dict[str, dict]:
        """File name → template, the parent and every nested one."""
        return {f.name: json.loads(f.read_text()) for f in sorted(self.out.glob("*.json")) if "template" in f.name}

    def measure(self) -> dict[str, tuple[int, int]]:
        """File name → (resources, bytes)."""
        return {n: (len(t["Resources"]), (self.out / n).stat().st_size) for n, t in self.templates().items()}

    def resources(self, kind: str) -> dict[str, dict]:
        """`<template file>/<logical id>` → resource, for every resource of CloudFormation type `kind`."""
        return {
            f"{n}/{lid}": r
            for n, t in self.templates().items()
            for lid, r in t["Resources"].items()
            if r["Type"] == kind
        }

    def objects(self) -> list[dict]:
        """Every Kubernetes object of every manifest resource."""
        return [o for st in load_assembly(self.out).stacks.values() for m in st.manifests.values() for o in m.objects]

    def one(self, kind: str, name: str) -> dict:
        """The one Kubernetes object of `kind` named `name`."""
        (obj,) = [o for o in self.objects() if o.get("kind") == kind and o["metadata"]["name"] == name]
        return obj


def synth_farm(config_path: Path, out: Path) -> SynthesizedFarm:
    """Load `config_path` (a model-farm config), synthesize its app into `out`, time it."""
    config = load(config_path)
    began = time.monotonic()
    app, stack = build_app(config, app=cdk.App(outdir=str(out)))
    app.synth()
    farm = stack.node.find_child("ModelFarm")
    assert isinstance(farm, ModelFarm)
    return SynthesizedFarm(out, f"{stack.artifact_id}.template.json", time.monotonic() - began, farm)
