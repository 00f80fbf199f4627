"""config.yaml checks for what EKS will actually schedule: a pod's CPU request against node allocatable
(sizing.usable_vcpus: vCPUs − kube-reserved − DaemonSets), and admin principals EKS access entries accept."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from cpu_inference import sizing
from cpu_inference.config.loader import parse, warnings_for
from cpu_inference.config.problems import ConfigError

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "slm-prefilter-eks.yaml"


def _example(mutate) -> str:
    doc = yaml.safe_load(EXAMPLE.read_text())
    mutate(doc)
    return yaml.safe_dump(doc, sort_keys=False)


def _llm(doc: dict) -> dict:
    (llm,) = [m for m in doc["models"] if m.get("role") == "llm"]
    return llm


def _cpu_lines(text: str) -> list[str]:
    return [p.render("x.yaml") for p in warnings_for(parse(text, "x.yaml")) if p.path.endswith(".cpu")]


def test_the_example_llm_fits_a_16_vcpu_node() -> None:
    doc = yaml.safe_load(EXAMPLE.read_text())
    cpu = _llm(doc)["cpu"]
    assert cpu <= sizing.usable_vcpus(sizing.instance("c7g.4xlarge"), target="eks")
    assert _cpu_lines(EXAMPLE.read_text()) == []


def test_a_request_equal_to_a_node_size_is_flagged_with_the_key_and_the_fix() -> None:
    """cpu: 16 never fits a 16-vCPU node (15.64 allocatable), so each replica would take a 32-vCPU node."""
    text = _example(lambda d: _llm(d).update(cpu=16))
    assert _cpu_lines(text) == [
        "x.yaml: warning: models[1].cpu: 16 vCPUs does not fit a 16-vCPU node such as c7g.4xlarge (15.64 allocatable), "
        "so every replica takes a larger node — use cpu: 15 to fit it"
    ]


def test_a_request_over_the_largest_allowed_node_is_an_error_naming_the_key() -> None:
    """With only 16-vCPU types allowed, cpu: 16 cannot be scheduled at all: one error line, key and fix."""

    def mutate(d: dict) -> None:
        _llm(d).update(cpu=16)
        d["eks"]["instance_types"] = ["c7g.4xlarge", "c7i.4xlarge"]

    with pytest.raises(ConfigError) as err:
        parse(_example(mutate), "x.yaml")
    assert (
        str(err.value)
        == "x.yaml: models[1].cpu: 16 vCPUs is more than the largest allowed node can give (15.6) — lower cpu or allow larger instance types"
    )


def test_sts_assumed_role_admins_are_refused_by_the_config() -> None:
    """botocore eks CreateAccessEntry.principalArn: "You can't use the STS session principal type with access
    entries"."""
    text = _example(
        lambda d: d["eks"].update(admin_principal_arns=["arn:aws:sts::123456789012:assumed-role/Admin/alice"])
    )
    with pytest.raises(ConfigError) as err:
        parse(text, "x.yaml")
    line = str(err.value)
    assert line.startswith("x.yaml: eks.admin_principal_arns[0]: ") and "\n" not in line
    assert "not sts assumed-role ARNs" in line
    parse(_example(lambda d: d["eks"].update(admin_principal_arns=["arn:aws:iam::123456789012:role/Admin"])), "x.yaml")
