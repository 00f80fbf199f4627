"""The user-reproducible validation path: `python -m cpu_inference.testing.crd_validation` against a CRD
directory (the upstream copies beside the repo, and the same CRDs laid out as `helm pull --untar` leaves the
pinned charts: one directory per chart, the CRDs under templates/ with template directives), run as a user
would run it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from cpu_inference.k8s import BottlerocketNodeClass, llama_queue_scaled_object
from cpu_inference.k8s.specs.default_node_pools import default_node_pools
from cpu_inference.testing.crd_validation import load_schemas, validate
from tests.support.k8s import SHARED_CRDS

ROOT = Path(__file__).resolve().parents[2]
# The charts whose CRDs the docstring of cpu_inference/testing/crd_validation.py tells users to `helm pull`.
CHARTS = {"karpenter-crd": ("karpenter.sh_", "karpenter.k8s.aws_"), "keda": ("keda.sh_",)}


def sample_objects() -> list[dict]:
    nc = BottlerocketNodeClass(
        name="bottlerocket-soci",
        role="KarpenterNodeRole-demo",
        subnet_selector_terms=({"tags": {"karpenter.sh/discovery": "demo"}},),
        security_group_selector_terms=({"tags": {"aws:eks:cluster-name": "demo"}},),
    )
    so = llama_queue_scaled_object(
        "m",
        "inference",
        "m",
        server_address="http://prometheus-server.monitoring.svc",
        series_labels={"app": "m"},
        slots=15,
    )
    return [
        nc.to_dict(),
        *(p.to_dict() for p in default_node_pools(nc.name)),
        so.to_dict(),
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "inference"}},
    ]


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cpu_inference.testing.crd_validation", *args],
        cwd=ROOT / "constructs",
        capture_output=True,
        text=True,
    )


def helm_pull_tree(dest: Path) -> Path:
    """The shared CRDs as `helm pull --untar -d DEST` lays the charts out: DEST/<chart>/Chart.yaml and the CRDs
    under DEST/<chart>/templates/, each wrapped in a chart conditional as chart templates are."""
    for chart, prefixes in CHARTS.items():
        (dest / chart / "templates").mkdir(parents=True)
        (dest / chart / "Chart.yaml").write_text(f"apiVersion: v2\nname: {chart}\nversion: 0.0.0\n")
        for crd in sorted(p for p in SHARED_CRDS.glob("*.yaml") if p.name.startswith(prefixes)):
            text = crd.read_text()
            (dest / chart / "templates" / crd.name).write_text(
                "{{- if .Values.crds.install }}\n" + text + "{{- end }}\n"
            )
    return dest


@pytest.fixture(params=["shared", "helm-pull-tree"])
def crd_dir(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    assert SHARED_CRDS.is_dir(), f"the upstream CRDs belong beside the repo at {SHARED_CRDS}"
    return SHARED_CRDS if request.param == "shared" else helm_pull_tree(tmp_path / "crds")


def test_cli_accepts_the_rendered_objects(crd_dir: Path, tmp_path: Path) -> None:
    manifest = tmp_path / "objects.yaml"
    manifest.write_text(yaml.safe_dump_all(sample_objects()))
    out = run_cli("--crds", str(crd_dir), str(manifest))
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.strip().splitlines()[-1].startswith("5 custom objects checked against")
    assert out.stdout.strip().endswith(": 0 problems")


def test_cli_reports_a_broken_object_and_exits_1(crd_dir: Path, tmp_path: Path) -> None:
    objs = sample_objects()
    objs[0]["spec"]["metadataOptions"]["httpTokens"] = "sometimes"
    objs[1]["spec"]["disruption"]["budgets"][0]["nodes"] = "lots"
    manifest = tmp_path / "broken.yaml"
    manifest.write_text(yaml.safe_dump_all(objs))
    out = run_cli("--crds", str(crd_dir), str(manifest))
    assert out.returncode == 1
    assert "EC2NodeClass/bottlerocket-soci: spec/metadataOptions/httpTokens" in out.stdout
    assert "NodePool/cpu-arm64: spec/disruption/budgets/0/nodes" in out.stdout
    assert out.stdout.strip().endswith(": 2 problems")


def test_cli_explains_a_missing_crd_directory(tmp_path: Path) -> None:
    out = run_cli("--crds", str(tmp_path / "absent"))
    assert out.returncode == 2 and "CRD directory not found" in out.stderr and "helm pull" in out.stderr


def test_unknown_kinds_are_reported_not_skipped(tmp_path: Path) -> None:
    (tmp_path / "crd.yaml").write_text("kind: ConfigMap\n")
    problems = validate(
        {"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledJob", "metadata": {"name": "x"}}, load_schemas([tmp_path])
    )
    assert problems == ["ScaledJob/x: no CRD for keda.sh/v1alpha1 ScaledJob"]


def test_chart_templates_with_helm_directives_still_load(tmp_path: Path) -> None:
    """The karpenter-crd chart's templates may carry {{ }} lines; the schema must still load."""
    text = (SHARED_CRDS / "karpenter.sh_nodepools.yaml").read_text()
    templated = text.replace(
        "metadata:\n",
        "metadata:\n  {{- with .Values.additionalAnnotations }}\n  annotations: {{ toYaml . }}\n  {{- end }}\n",
        1,
    )
    (tmp_path / "templates").mkdir()
    (tmp_path / "templates" / "karpenter.sh_nodepools.yaml").write_text(templated)
    schemas = load_schemas([tmp_path])
    assert ("karpenter.sh/v1", "NodePool") in schemas
    assert validate(default_node_pools("nc")[0].to_dict(), schemas) == []
