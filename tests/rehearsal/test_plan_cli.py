"""`cpu-inference plan` on real synthesized cloud assemblies (cdk.out directories written by the app, as `cdk synth`
writes them): one assembly → the create-order check; two → the update plan; exit 1 on a hazard, 2 on a user error."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import aws_cdk as cdk
import pytest
import yaml

from cpu_inference.app import build_app
from cpu_inference.cli.main import main
from cpu_inference.config import parse

ROOT = Path(__file__).resolve().parents[2]
FARM = yaml.safe_load((ROOT / "examples" / "model-farm-eks.yaml").read_text())


def cdk_out(doc: dict, out: Path) -> Path:
    app, _ = build_app(parse(yaml.safe_dump(doc)), app=cdk.App(outdir=str(out)))
    app.synth()
    return out


@pytest.fixture(scope="module")
def outs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("plan")
    grown = copy.deepcopy(FARM)
    grown["model_groups"][0]["models"].append(
        {
            "name": "bge-small-en-b",
            "parameters_billions": 0.033,
            "source": {"hf_repo": "CompendiumLabs/bge-small-en-v1.5-gguf", "file": "bge-small-en-v1.5-q8_0.gguf"},
        }
    )
    return {"before": cdk_out(FARM, base / "before"), "after": cdk_out(grown, base / "after")}


def test_one_assembly_checks_the_create_order(outs, capsys) -> None:
    assert main(["plan", str(outs["before"])]) == 0
    assert capsys.readouterr().out.strip().startswith("create and delete order: 0 problems in ")


def test_two_assemblies_print_the_plan_and_exit_0_without_hazard(outs, capsys) -> None:
    assert main(["plan", str(outs["before"]), str(outs["after"])]) == 0
    out = capsys.readouterr().out
    assert "hazards: 0" in out
    # Adding a pooled model changes the pool's preset and the gateway's routing table, nothing else in the cluster.
    changed = [line for line in out.splitlines() if line.startswith("  ") and "/ConfigMap/" in line]
    assert changed and "Kubernetes objects to create: 0" in out and "Kubernetes objects to delete: 0" in out


def test_a_renamed_manifest_resource_is_a_hazard_and_exit_1(outs, tmp_path, capsys) -> None:
    renamed = tmp_path / "renamed"
    shutil.copytree(outs["before"], renamed)
    (template,) = renamed.glob("*.template.json")
    t = json.loads(template.read_text())
    lid = next(
        k
        for k, r in t["Resources"].items()
        if r["Type"] == "Custom::AWSCDK-EKS-KubernetesResource" and "WorkloadsPools" in k
    )
    t["Resources"][lid + "Renamed"] = t["Resources"].pop(lid)
    template.write_text(json.dumps(t))
    assert main(["plan", str(outs["before"]), str(renamed)]) == 1
    out = capsys.readouterr().out
    assert "[deleted-while-declared]" in out and "[rollback-deletes]" in out
    # Reviewed hazards can be accepted one by one (printed, not counted); every one must be, to exit 0.
    codes = {
        line.split("]")[0].strip(" [") + ":" + line.split("]")[1].split(":")[0].strip().rsplit("/", 1)[-1]
        for line in out.splitlines()
        if line.startswith("  [")
    }
    assert main(["plan", str(outs["before"]), str(renamed), *[f"--accept={c}" for c in sorted(codes)][:-1]]) == 1
    assert main(["plan", str(outs["before"]), str(renamed), *[f"--accept={c}" for c in sorted(codes)]]) == 0
    assert (
        "hazards: 0" in capsys.readouterr().out
        and main(["plan", str(outs["before"]), str(renamed), "--accept=nocolon"]) == 2
    )


def test_a_directory_that_is_not_an_assembly_is_one_line_and_exit_2(tmp_path, capsys) -> None:
    assert main(["plan", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "manifest.json not found" in err


def test_the_plan_prints_only_the_plan(outs, capsys) -> None:
    """The rollback probes run the model-copy handler, which logs for CloudWatch: none of that reaches the output."""
    main(["plan", str(outs["before"]), str(outs["after"])])
    out = capsys.readouterr().out
    assert (
        out.startswith("Kubernetes objects to create:")
        and "unchanged:" not in out
        and "Custom::ModelCatalogCopy" in out
    )
