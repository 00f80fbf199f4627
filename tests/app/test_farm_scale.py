"""Issue 13's scale promise: a 1,000-model farm (generated from the shipped examples) synthesizes on both targets
into templates CloudFormation accepts — ≤ 1 MB and ≤ 500 resources each — that are cfn-lint and cdk-nag clean, with
Kubernetes objects that validate; and the template does not grow per pooled model beyond a few hundred bytes."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest

from cpu_inference.app import build_app
from cpu_inference.config import load
from tests.app.test_synth_checks import STACK_MAX_RESOURCES, TEMPLATE_BODY_MAX_BYTES
from tests.support import k8s
from tests.support.cdk import apply_nag, cfn_lint_errors, nag_errors, synth
from tests.support.farm_config import thousand_model_farm


@dataclass
class Synth:
    templates: dict[str, tuple[int, dict[str, Any]]]  # template file → (bytes as uploaded, template)
    stack: cdk.Stack
    minor: str


def _synth(path: Path) -> Synth:
    config = load(path)
    app, stack = build_app(config, app=cdk.App())
    apply_nag(app)
    assembly = synth(app)
    templates = {}
    # Every template of the cloud assembly: the stack and any nested stack (each is its own CloudFormation template).
    for file in sorted(Path(assembly.directory).glob("*.template.json")):
        raw = file.read_bytes()
        templates[file.name] = (len(raw), json.loads(raw))
    return Synth(templates, stack, config.eks.kubernetes_version)


@pytest.fixture(scope="module", params=["eks", "sagemaker"])
def farms(request, tmp_path_factory) -> tuple[str, Synth, Synth]:
    target = request.param
    tmp = tmp_path_factory.mktemp(f"farm-{target}")
    small = _synth(thousand_model_farm(tmp / "small.yaml", target, total=20))
    big = _synth(thousand_model_farm(tmp / "big.yaml", target, total=1000))
    return target, small, big


def test_every_template_of_a_1000_model_farm_fits_cloudformation(farms) -> None:
    target, _, big = farms
    assert big.templates
    for name, (size, template) in big.templates.items():
        assert size <= TEMPLATE_BODY_MAX_BYTES, f"{target} {name}: {size} bytes"
        assert len(template["Resources"]) <= STACK_MAX_RESOURCES, (
            f"{target} {name}: {len(template['Resources'])} resources"
        )


def test_the_template_grows_by_at_most_a_few_hundred_bytes_per_pooled_model(farms) -> None:
    target, small, big = farms
    grow = sum(s for s, _ in big.templates.values()) - sum(s for s, _ in small.templates.values())
    per_model = grow / (1000 - 20)
    # EKS: each pooled model is one preset section (ConfigMap) and one name in the gateway's config; SageMaker: nothing.
    assert per_model <= 300, f"{target}: {per_model:.0f} bytes per pooled model"
    resources = (
        {len(t["Resources"]) for _, t in small.templates.values()},
        {len(t["Resources"]) for _, t in big.templates.values()},
    )
    assert resources[0] == resources[1], f"{target}: resource counts differ between 20 and 1,000 models: {resources}"


def test_a_1000_model_farm_is_cfn_lint_and_cdk_nag_clean(farms) -> None:
    target, _, big = farms
    for name, (_, template) in big.templates.items():
        assert cfn_lint_errors(template) == [], name
    assert nag_errors(big.stack) == []


@pytest.mark.parametrize("farms", ["eks"], indirect=True)  # target sagemaker renders no Kubernetes objects
def test_a_1000_model_farms_kubernetes_objects_validate(farms) -> None:
    _, _, big = farms
    problems: list[str] = []
    objects = [o for _, t in big.templates.values() for o in k8s.objects(t)]
    assert any(o["kind"] == "StatefulSet" for o in objects)
    for obj in objects:
        if k8s.is_custom(obj):
            problems += k8s.validate_custom(obj)
        else:
            problems += k8s.validate_core(obj, big.minor)
    assert problems == []
