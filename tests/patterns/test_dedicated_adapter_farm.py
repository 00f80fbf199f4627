"""LoRA adapters over a DEDICATED base on EKS (issue 26): the base's adapters are catalog entries as a pooled base's
are, its pod fetches them in ONE init container (adapter-fetch) into the model emptyDir, the engine gets LLAMA_LORA
(their pod paths in config order = ids), the namespace's one identity reads them under the catalog's farm/ read, and
the gateway's config lists them on the base's dedicated backend with the same paths (the path its GET /lora-adapters
echoes). 1 dedicated base + 500 adapters stays within CloudFormation's per-template quotas and the manifest bound,
and the deploy rehearsal of a change that adds 10 adapters and removes 10 touches only the base's Deployment, the
gateway's config (and so its pods) and the catalog.

Synthesized through the app as `cdk synth` builds it (cpu_inference.app.build_app over a generated config.yaml); the
rendered objects are validated with kubernetes-validate (tests/support/k8s.py)."""

from __future__ import annotations

import fnmatch
import json
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
import yaml

from cpu_inference.config import ConfigError, load
from cpu_inference.eks.inference_workloads import SHARED_SERVICE_ACCOUNT
from cpu_inference.eks.manifests import DEFAULT_MAX_BYTES, object_size
from cpu_inference.engines.adapter_hosting import adapter_hosting_problem
from cpu_inference.k8s.charts.llama_server_chart import ADAPTER_FETCH_CONTAINER, FETCH_CONTAINER
from cpu_inference.k8s.charts.router_chart import CONFIG_FILE
from cpu_inference.k8s.workloads.model_fetch import ADAPTERS_COMMAND, adapter_path
from cpu_inference.patterns.deployment import CFN_MAX_RESOURCES, CFN_MAX_TEMPLATE_BYTES
from cpu_inference.testing.pod_security import restricted_violations
from cpu_inference.testing.rehearsal import load_assembly, plan
from inference_runtime.lora import split_paths
from tests.support.k8s import validate_core
from tests.support.synthesized_farm import SynthesizedFarm, synth_farm

pytestmark = pytest.mark.synth

ADAPTERS = 500
SHIFT = 10  # the rehearsal's change: adapters 10..509 instead of 0..499 (10 removed, 10 added)
BASE = "qwen2-5-1-5b"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
PINNED = "ab" * 32  # adapter 1 pins its sha256: the fetch verifies that, not the object's metadata
# What one adapter adds to the farm's template: its line in the fetch list, its LLAMA_LORA path and its gateway entry.
TEMPLATE_BYTES_PER_ADAPTER = 400


def _adapter(i: int) -> dict[str, Any]:
    source = {
        "hf_repo": f"acme-tuned/task-{i:04d}-lora-GGUF",
        "file": f"task-{i:04d}-lora-f16.gguf",
        "revision": COMMIT,
    }
    if i == 1:
        source["sha256"] = PINNED
    return {"name": f"task-{i:04d}", "source": source, "size_mb": 4, **({"scale": 0.5} if i == 2 else {})}


def _config(path: Path, adapters: range) -> Path:
    doc = {
        "project": {"name": "lora-dedicated"},
        "target": "eks",
        "pattern": "model-farm",
        "models": [
            {
                "name": BASE,
                "serving": "dedicated",
                "source": {
                    "hf_repo": "Qwen/Qwen2.5-1.5B-Instruct-GGUF",
                    "file": "qwen2.5-1.5b-instruct-q4_k_m.gguf",
                    "revision": COMMIT,
                },
                "parameters_billions": 1.5,
                "task": "chat",
                **({"adapters": [_adapter(i) for i in adapters]} if adapters else {}),
            },
            {
                "name": "bge-small-en",
                "serving": "dedicated",
                "source": {"hf_repo": "CompendiumLabs/bge-small-en-v1.5-gguf", "file": "bge-small-en-v1.5-q8_0.gguf"},
                "parameters_billions": 0.033,
                "quantization": "Q8_0",
                "context_window": 512,
                "task": "embedding",
            },
        ],
    }
    path.write_text(yaml.safe_dump(doc, sort_keys=False, width=200))
    return path


def _synth(tmp: Path, label: str, adapters: range) -> SynthesizedFarm:
    return synth_farm(_config(tmp / f"{label}.yaml", adapters), tmp / f"out-{label}")


@pytest.fixture(scope="module")
def farms(tmp_path_factory: pytest.TempPathFactory) -> dict[str, SynthesizedFarm]:
    tmp = tmp_path_factory.mktemp("dedicated-adapters")
    return {
        "none": _synth(tmp, "none", range(0)),
        "three": _synth(tmp, "three", range(3)),
        "before": _synth(tmp, "before", range(ADAPTERS)),
        "after": _synth(tmp, "after", range(SHIFT, ADAPTERS + SHIFT)),
    }


def _pod(deployment: dict) -> dict:
    return deployment["spec"]["template"]["spec"]


def _env(container: dict) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container.get("env", [])}


def test_the_catalog_lists_a_dedicated_bases_adapters_after_every_model(farms: dict[str, SynthesizedFarm]) -> None:
    catalog = farms["three"].farm.catalog
    assert catalog is not None
    entries = catalog.catalog.entries
    names = [e.name for e in entries]
    assert names == [BASE, "bge-small-en", "task-0000", "task-0001", "task-0002"]
    assert [e.base for e in entries] == [None, None, BASE, BASE, BASE]
    assert entries[3].sha256 == PINNED
    # The deploy waits for the dedicated models only, never for an adapter (catalog_wait reads the first `awaited`).
    assert catalog.props.awaited == 2


def test_the_bases_pod_fetches_its_adapters_in_one_init_container_and_loads_them_in_config_order(
    farms: dict[str, SynthesizedFarm],
) -> None:
    farm = farms["three"]
    catalog = farm.farm.catalog
    assert catalog is not None
    deployment = farm.one("Deployment", BASE)
    pod = _pod(deployment)
    assert [c["name"] for c in pod["initContainers"]] == [FETCH_CONTAINER, ADAPTER_FETCH_CONTAINER]
    fetch = pod["initContainers"][1]
    assert fetch["command"] == list(ADAPTERS_COMMAND)
    env = _env(fetch)
    # One bucket (the catalog's), one `<name> <key> <sha256|->` line per adapter in config order.
    lines = [line.split(" ") for line in env["LORA_ADAPTERS"].splitlines()]
    assert lines == [[f"task-{i:04d}", catalog.gguf_key(f"task-{i:04d}"), PINNED if i == 1 else "-"] for i in range(3)]
    assert all(key.startswith(f"farm/task-{i:04d}/") for i, (_, key, _) in enumerate(lines))
    assert fetch["volumeMounts"] == pod["initContainers"][0]["volumeMounts"]  # the model emptyDir, writable
    # The engine loads exactly those files, in that order (= ids); the other dedicated model gets no LLAMA_LORA.
    engine = pod["containers"][0]
    assert list(split_paths(_env(engine)["LLAMA_LORA"])) == [adapter_path(f"task-{i:04d}") for i in range(3)]
    assert all(m["readOnly"] for m in engine["volumeMounts"] if m["mountPath"] == "/models")
    other = _pod(farm.one("Deployment", "bge-small-en"))
    assert "LLAMA_LORA" not in _env(other["containers"][0]) and len(other["initContainers"]) == 1
    # Valid at the cluster's minor, Pod Security restricted (the second init container too).
    minor = farm.farm.props.deployment.platform.cluster.kubernetes_version
    assert validate_core(deployment, minor) == [] and restricted_violations(deployment) == []


def test_the_gateway_maps_each_adapter_to_the_dedicated_backend_with_its_pod_path_and_scale(
    farms: dict[str, SynthesizedFarm],
) -> None:
    farm = farms["three"]
    config = json.loads(farm.one("ConfigMap", "gateway")["data"][CONFIG_FILE])
    models = {m["name"]: m for m in config["gateway"]["models"]}
    assert [a["name"] for a in models[BASE]["adapters"]] == ["task-0000", "task-0001", "task-0002"]
    assert [a["path"] for a in models[BASE]["adapters"]] == [adapter_path(f"task-{i:04d}") for i in range(3)]
    assert [a.get("scale", 1.0) for a in models[BASE]["adapters"]] == [1.0, 1.0, 0.5]
    assert "adapters" not in models["bge-small-en"]  # a model without adapters renders as before
    # The gateway's own parser reads it (the router image's config module).
    from slm_router.config import from_dict

    cfg = from_dict(config)
    assert [a.name for a in cfg.gateway.models[0].adapters] == ["task-0000", "task-0001", "task-0002"]


def _allows(statements: list[dict], action: str, arn_suffix: str) -> bool:
    """Whether an Allow statement grants `action` on an object ARN ending in `arn_suffix` (the bucket's ARN is a
    token: its resource patterns are Fn::Join ['', [<bucket arn>, '/farm/*']])."""
    for s in statements:
        actions = s["Action"] if isinstance(s["Action"], list) else [s["Action"]]
        if s["Effect"] != "Allow" or not any(fnmatch.fnmatch(action, a) for a in actions):
            continue
        resources = s["Resource"] if isinstance(s["Resource"], list) else [s["Resource"]]
        for r in resources:
            if isinstance(r, dict) and "Fn::Join" in r:
                tail = "".join(p for p in r["Fn::Join"][1] if isinstance(p, str))
                if fnmatch.fnmatch(arn_suffix, tail):
                    return True
    return False


def test_the_namespaces_one_identity_reads_the_adapter_keys_under_farm_only(farms: dict[str, SynthesizedFarm]) -> None:
    farm = farms["three"]
    catalog = farm.farm.catalog
    assert catalog is not None and farm.farm.workloads is not None
    role = farm.farm.workloads.roles[SHARED_SERVICE_ACCOUNT]
    assert farm.farm.workloads.roles[BASE] is role  # the base runs as the shared ServiceAccount
    assert _pod(farm.one("Deployment", BASE))["serviceAccountName"] == SHARED_SERVICE_ACCOUNT
    template = farm.templates()[farm.parent]
    role_id = cdk.Stack.of(role).resolve(role.role_name)["Ref"]
    statements = [
        st
        for r in template["Resources"].values()
        if r["Type"] == "AWS::IAM::Policy" and {"Ref": role_id} in r["Properties"]["Roles"]
        for st in r["Properties"]["PolicyDocument"]["Statement"]
    ]
    for name in ("task-0000", "task-0002", BASE):
        assert _allows(statements, "s3:GetObject", "/" + catalog.gguf_key(name)), name
    assert not _allows(statements, "s3:GetObject", "/models/other/x.gguf")  # nothing outside farm/
    assert not _allows(statements, "s3:PutObject", "/" + catalog.gguf_key("task-0000"))


def test_1_dedicated_base_and_500_adapters_fit_cloudformation_and_the_manifest_bound(
    farms: dict[str, SynthesizedFarm],
) -> None:
    farm, bare = farms["before"], farms["none"]
    sizes, bare_sizes = farm.measure(), bare.measure()
    table = "\n".join(f"{n}: {r} resources, {b:,} bytes" for n, (r, b) in sizes.items())
    deployment = farm.one("Deployment", BASE)
    gateway = farm.one("ConfigMap", "gateway")
    objects = {"deployment": object_size(deployment), "gateway": object_size(gateway)}
    grown = sizes[farm.parent][1] - bare_sizes[bare.parent][1]
    print(
        f"{table}\nsynth {farm.seconds:.0f} s\nwithout adapters: {bare_sizes}\n{ADAPTERS} adapters: objects {objects} "
        f"bytes (bound {DEFAULT_MAX_BYTES:,}); template growth {grown:,} bytes ({grown / ADAPTERS:.0f} an adapter)"
    )
    assert all(r <= CFN_MAX_RESOURCES and b <= CFN_MAX_TEMPLATE_BYTES for r, b in sizes.values()), table
    # The same resources as without adapters: they live in the catalog (an S3 asset) and in two objects' fields.
    assert {n: r for n, (r, _) in sizes.items()} == {n: r for n, (r, _) in bare_sizes.items()}
    assert grown <= TEMPLATE_BYTES_PER_ADAPTER * ADAPTERS, table
    # Each manifest resource carries at most DEFAULT_MAX_BYTES (the kubectl provider's payload); the base's Deployment
    # (with its 500 fetch lines and LLAMA_LORA paths) and the gateway's config are one object each, never split.
    assert all(size <= DEFAULT_MAX_BYTES for size in objects.values()), objects
    pod = _pod(deployment)
    assert len(pod["initContainers"]) == 2
    assert len(_env(pod["initContainers"][1])["LORA_ADAPTERS"].splitlines()) == ADAPTERS
    assert len(split_paths(_env(pod["containers"][0])["LLAMA_LORA"])) == ADAPTERS


def test_adding_10_adapters_and_removing_10_changes_the_bases_deployment_the_gateway_and_the_catalog(
    farms: dict[str, SynthesizedFarm],
) -> None:
    p = plan(load_assembly(farms["before"].out), load_assembly(farms["after"].out))
    print(p.text())
    assert p.hazards == [] and p.replaced == [], p.text()
    changed = sorted((c.action, c.key) for c in p.objects)
    assert all(action == "change" for action, _ in changed), p.text()
    # The base's Deployment (its fetch list and LLAMA_LORA: a rolling update, maxUnavailable 0) and the gateway's
    # config (its checksum rolls the gateway's pods); the other model, Services, identity: untouched.
    keys = [key for _, key in changed]
    assert any("Deployment" in k and BASE in k for k in keys) and any("ConfigMap" in k and "gateway" in k for k in keys)
    assert all((BASE in k and "Deployment" in k) or "gateway" in k for k in keys), p.text()
    # In AWS: the two manifests holding those objects, the catalog's copy (its asset key and fingerprint) and, since
    # the deploy waits for the dedicated models by reading that catalog object, the copy provider's read of it.
    manifests = {c.manifest for c in p.objects}

    def expected(r: str) -> bool:
        logical = r.split("/")[1]
        reads_catalog = logical.startswith("CpuInferenceModelCopyProvider") and "(AWS::IAM::Policy)" in r
        return r.split(" ")[0] in manifests or logical.startswith("ModelFarmCatalog") or reads_catalog

    assert all(expected(r) for r in p.updated), p.text()


def test_a_dedicated_base_copied_as_a_model_artifact_is_refused_naming_dedicated_copy(tmp_path: Path) -> None:
    """Its pods read the adapters under the catalog's farm/ read; a ModelArtifact base reads models/<name>/ only."""
    path = _config(tmp_path / "artifact.yaml", range(2))
    doc = yaml.safe_load(path.read_text())
    doc["farm"] = {"dedicated_copy": "artifact"}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    with pytest.raises(ConfigError) as err:  # refused by validate, before anything is built
        load(path)
    problem = adapter_hosting_problem("eks", pooled=False, hosting="endpoints", copy="artifact")
    assert problem is not None and "set farm.dedicated_copy: catalog (it is 'artifact')" in problem
    assert f"{path}: models[0].adapters: {BASE}: {problem}" in str(err.value).splitlines()


def test_a_peft_adapter_is_verified_against_its_converted_gguf_not_its_pinned_source(tmp_path: Path) -> None:
    """A PEFT source's sha256 pins the safetensors the copy converts; what lands is a GGUF whose own digest is the
    object's `sha256` metadata (model_download.peft_convert), so the fetch line carries '-' for it, never the pin."""
    path = _config(tmp_path / "peft.yaml", range(2))
    doc = yaml.safe_load(path.read_text())
    source = {"hf_repo": "acme-tuned/triage-lora", "revision": COMMIT, "sha256": "cd" * 32}  # no file: PEFT
    doc["models"][0]["adapters"].append({"name": "triage", "source": source})
    path.write_text(yaml.safe_dump(doc, sort_keys=False, width=200))
    farm = synth_farm(path, tmp_path / "out")
    catalog = farm.farm.catalog
    assert catalog is not None and catalog.catalog.entry("triage").peft
    fetch = _pod(farm.one("Deployment", BASE))["initContainers"][1]
    lines = [line.split(" ") for line in _env(fetch)["LORA_ADAPTERS"].splitlines()]
    assert lines[1][2] == PINNED  # a GGUF source's pin is its landed bytes' digest
    assert lines[2] == ["triage", catalog.gguf_key("triage"), "-"] and lines[2][1].endswith("/adapter_model.gguf")
