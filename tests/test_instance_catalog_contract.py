"""The instance catalog against the service contract: botocore's service models, not our own table.

- every EC2 type of the catalog is in the ec2 `InstanceType` enum;
- the SageMaker flag is exactly "ml.<name> is in sagemaker's `ProductionVariantInstanceType`", size by size;
- nothing the library can emit for SageMaker (catalog lookups, `smallest_fitting`, config and props suggestions)
  is outside that enum; a non-hosting type in config.yaml is one line naming the key and a hosted type.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import botocore.session
import pytest
import yaml

from cpu_inference import sizing

ROOT = Path(__file__).resolve().parents[1]
_SESSION = botocore.session.get_session()
HOSTING = frozenset(_SESSION.get_service_model("sagemaker").shape_for("ProductionVariantInstanceType").enum)
EC2 = frozenset(_SESSION.get_service_model("ec2").shape_for("InstanceType").enum)
SAGEMAKER_CATALOG = [it for it in sizing.CATALOG.values() if it.sagemaker]


def test_every_catalog_type_is_an_ec2_instance_type() -> None:
    assert sorted(n for n in sizing.CATALOG if n not in EC2) == []


def test_sagemaker_flag_is_exactly_the_hosting_enum_size_by_size() -> None:
    ours = {it.sagemaker_name for it in SAGEMAKER_CATALOG}
    theirs = {name for name in HOSTING if name[3:] in sizing.CATALOG}
    assert ours - HOSTING == set(), "flagged for SageMaker but not a hosting type"
    assert theirs - ours == set(), "a hosting type of a catalog family that the catalog does not flag"
    assert set(sizing.sagemaker_instance_types()) == ours


@pytest.mark.parametrize("name", ["ml.m7g.2xlarge", "ml.r7g.2xlarge", "ml.c7g.medium", "ml.c7a.2xlarge"])
def test_non_hosting_types_are_not_sagemaker_instances(name: str) -> None:
    assert name not in HOSTING  # the premise, from botocore
    with pytest.raises(sizing.UnknownInstanceType):
        sizing.instance(name)
    assert name[3:] in sizing.CATALOG  # still an EC2 (EKS node) type


@pytest.mark.parametrize(
    "name", ["ml.c8g.medium", "ml.c8g.48xlarge", "ml.c7g.large", "ml.c7g.16xlarge", "ml.r7gd.medium", "ml.m7i.48xlarge"]
)
def test_hosting_types_at_both_ends_of_a_family_are_sagemaker_instances(name: str) -> None:
    assert name in HOSTING
    assert sizing.instance(name).sagemaker_name == name


@pytest.mark.parametrize(
    "params_b,quant",
    [
        (0.135, "Q4_1"),
        (1.7, "Q4_K_M"),
        (7, "Q4_K_M"),
        (8, "Q8_0"),
        (13, "Q4_K_M"),
        (34, "Q4_K_M"),
        (70, "Q4_K_M"),
        (70, "Q8_0"),
    ],
)
@pytest.mark.parametrize("arch", ["arm64", "amd64"])
def test_smallest_fitting_on_sagemaker_returns_a_hosting_type(params_b: float, quant: str, arch: str) -> None:
    spec = sizing.ModelSpec(params_b, quantization=quant)
    candidates = [it for it in sizing.CATALOG.values() if it.sagemaker and it.arch == arch]
    s = sizing.smallest_fitting(spec, candidates, target="sagemaker")
    assert s is not None and s.instance.sagemaker_name in HOSTING


@pytest.mark.parametrize("name", sorted(it.sagemaker_name for it in sizing.CATALOG.values() if not it.sagemaker))
def test_the_suggested_replacement_is_hosted_and_no_smaller(name: str) -> None:
    alt = sizing.sagemaker_alternative(name)
    it = sizing.CATALOG[name[3:]]
    assert alt is not None and alt.sagemaker_name in HOSTING
    assert alt.arch == it.arch and alt.vcpus >= it.vcpus and alt.memory_gib >= it.memory_gib


def _validate(tmp_path: Path, mutate) -> subprocess.CompletedProcess:
    doc = yaml.safe_load((ROOT / "config.yaml").read_text())
    mutate(doc)
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return subprocess.run(
        [sys.executable, "-m", "cpu_inference.cli.main", "validate", "config.yaml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )


def test_config_with_a_non_hosting_sagemaker_type_is_one_line_naming_the_key_and_a_hosted_type(tmp_path: Path) -> None:
    proc = _validate(
        tmp_path,
        lambda d: (d.update(target="sagemaker"), d.setdefault("sagemaker", {}).update(instance_type="ml.m7g.2xlarge")),
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.splitlines() == [
        "config.yaml: sagemaker.instance_type: 'ml.m7g.2xlarge' is not a SageMaker hosting instance type "
        "(not in ProductionVariantInstanceType) — use ml.m8g.2xlarge (8 vCPUs, 32 GiB)"
    ]
    assert "ml.m8g.2xlarge" in HOSTING


def test_config_too_big_suggests_a_hosting_type(tmp_path: Path) -> None:
    # The README's example error: a 70B model on the default ml.c7g.2xlarge.
    proc = _validate(
        tmp_path, lambda d: (d.update(target="sagemaker"), d["models"][0].update(parameters_billions=70, task="batch"))
    )
    assert proc.returncode == 2
    (line,) = [ln for ln in proc.stderr.splitlines() if ln.startswith("config.yaml: models[0]: ")]
    suggested = line.rsplit("such as ", 1)[1]
    assert suggested in HOSTING, line
    assert f"use a larger instance such as {suggested}" in (ROOT / "README.md").read_text()
