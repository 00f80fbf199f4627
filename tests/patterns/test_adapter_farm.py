"""LoRA adapter farms at scale (issue 26): one pooled base with 500 adapters synthesizes on EKS within CloudFormation's
per-template quotas (deployment.CFN_MAX_RESOURCES / CFN_MAX_TEMPLATE_BYTES) with exactly the resources of the same farm
without adapters — the adapters live in the catalog (an S3 asset) and in two ConfigMaps (the pool's preset, the
gateway's config), each far below Kubernetes' 1 MiB object limit — and the deploy rehearsal of a change that adds 10
adapters and removes 10 touches nothing but those ConfigMaps, the gateway's pods (its config checksum) and the
catalog's asset. On target sagemaker the config is refused in one line.

Synthesized through the app as `cdk synth` builds it (cpu_inference.app.build_app over a generated config.yaml)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from cpu_inference.config import ConfigError, load
from cpu_inference.eks.manifests import DEFAULT_MAX_BYTES, object_size
from cpu_inference.engines.adapter_hosting import adapter_hosting_problem
from cpu_inference.k8s.charts.model_pool_chart import PRESET_FILE
from cpu_inference.k8s.charts.router_chart import CONFIG_FILE
from cpu_inference.patterns.deployment import CFN_MAX_RESOURCES, CFN_MAX_TEMPLATE_BYTES
from cpu_inference.testing.rehearsal import load_assembly, plan
from inference_runtime.lora import split_paths
from model_download.catalog import Catalog
from tests.support.synthesized_farm import SynthesizedFarm, synth_farm

pytestmark = pytest.mark.synth

ADAPTERS = 500
SHIFT = 10  # the rehearsal's change: adapters 10..509 instead of 0..499 (10 removed, 10 added)
# "The data stored in a ConfigMap cannot exceed 1 MiB" (kubernetes.io/docs/concepts/configuration/configmap/). The
# tighter bound here is our own: each manifest resource carries at most eks/manifests.DEFAULT_MAX_BYTES (200 kB, under
# the kubectl provider's Lambda payload), and a ConfigMap is one object, never split.
CONFIGMAP_MAX_BYTES = 1024 * 1024
# What one adapter adds to the farm's template (its preset path and gateway entry, inside two manifests' JSON).
TEMPLATE_BYTES_PER_ADAPTER = 320
BASE = "qwen2-5-1-5b"
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def _config(path: Path, adapters: range, target: str = "eks") -> Path:
    doc = {
        "project": {"name": "lora-farm"},
        "target": target,
        "pattern": "model-farm",
        "farm": {"pools": [{"name": "tuned", "cpu": 4, "memory_gib": 16, "replicas": {"min": 1, "max": 4}}]},
        "models": [
            {
                "name": BASE,
                "source": {
                    "hf_repo": "Qwen/Qwen2.5-1.5B-Instruct-GGUF",
                    "file": "qwen2.5-1.5b-instruct-q4_k_m.gguf",
                    "revision": COMMIT,
                },
                "parameters_billions": 1.5,
                "task": "chat",
                "adapters": [
                    {
                        "name": f"task-{i:04d}",
                        "source": {
                            "hf_repo": f"acme-tuned/task-{i:04d}-lora-GGUF",
                            "file": f"task-{i:04d}-lora-f16.gguf",
                            "revision": COMMIT,
                        },
                        "size_mb": 4,  # a rank-8 adapter of the attention projections
                    }
                    for i in adapters
                ],
            },
            {
                "name": "bge-small-en",
                "source": {"hf_repo": "CompendiumLabs/bge-small-en-v1.5-gguf", "file": "bge-small-en-v1.5-q8_0.gguf"},
                "parameters_billions": 0.033,
                "quantization": "Q8_0",
                "context_window": 512,
                "task": "embedding",
            },
        ],
    }
    if target == "sagemaker":
        doc["farm"] = {"pools": [{"name": "tuned", "instance_type": "ml.r7gd.2xlarge"}]}
    path.write_text(yaml.safe_dump(doc, sort_keys=False, width=200))
    return path


def _synth(tmp: Path, label: str, adapters: range) -> SynthesizedFarm:
    return synth_farm(_config(tmp / f"{label}.yaml", adapters), tmp / f"out-{label}")


@pytest.fixture(scope="module")
def farms(tmp_path_factory: pytest.TempPathFactory) -> dict[str, SynthesizedFarm]:
    tmp = tmp_path_factory.mktemp("adapter-farm")
    return {
        "none": _synth(tmp, "none", range(0)),
        "before": _synth(tmp, "before", range(ADAPTERS)),
        "after": _synth(tmp, "after", range(SHIFT, ADAPTERS + SHIFT)),
    }


def test_500_adapters_fit_cloudformation_with_the_resources_of_the_farm_without_them(
    farms: dict[str, SynthesizedFarm],
) -> None:
    farm, bare = farms["before"], farms["none"]
    sizes, bare_sizes = farm.measure(), bare.measure()
    table = (
        "\n".join(f"{n}: {r} resources, {b:,} bytes" for n, (r, b) in sizes.items()) + f"\nsynth {farm.seconds:.0f} s"
    )
    print(table, "\nwithout adapters:", bare_sizes, f"synth {bare.seconds:.0f} s")
    assert all(r <= CFN_MAX_RESOURCES and b <= CFN_MAX_TEMPLATE_BYTES for r, b in sizes.values()), table
    # The same resources, the same template size: what grows per adapter is in the catalog asset and the manifests.
    assert {n: r for n, (r, _) in sizes.items()} == {n: r for n, (r, _) in bare_sizes.items()}
    parent, bare_parent = farm.templates()[farm.parent], bare.templates()[bare.parent]
    assert sorted(r["Type"] for r in parent["Resources"].values()) == sorted(
        r["Type"] for r in bare_parent["Resources"].values()
    )
    # The manifests carry the two ConfigMaps' growth (a few hundred bytes an adapter).
    grown = sizes[farm.parent][1] - bare_sizes[bare.parent][1]
    print(f"template growth for {ADAPTERS} adapters: {grown:,} bytes ({grown / ADAPTERS:.0f} an adapter)")
    assert grown <= TEMPLATE_BYTES_PER_ADAPTER * ADAPTERS, table


def test_a_farm_without_adapters_renders_as_before(farms: dict[str, SynthesizedFarm]) -> None:
    """No `adapters` key in the gateway's config and no `lora` key in the preset: the objects of farms deployed before
    keep their bytes (and the gateway its config checksum)."""
    bare = farms["none"]
    gateway = json.loads(bare.one("ConfigMap", "gateway")["data"][CONFIG_FILE])
    assert all("adapters" not in pool for pool in gateway["gateway"]["pools"])
    assert "lora" not in bare.one("ConfigMap", "pool-tuned")["data"][PRESET_FILE]
    assert bare.farm.catalog is not None
    assert all("base" not in e.to_dict() for e in bare.farm.catalog.catalog.entries)


def test_the_catalog_lists_every_adapter_after_its_base(farms: dict[str, SynthesizedFarm]) -> None:
    farm = farms["before"].farm
    assert farm.catalog is not None
    catalog: Catalog = farm.catalog.catalog
    names = [e.name for e in catalog.entries]
    adapters = [e for e in catalog.entries if e.base is not None]
    assert [e.name for e in adapters] == [f"task-{i:04d}" for i in range(ADAPTERS)]
    assert {e.base for e in adapters} == {BASE}
    assert names.index(BASE) < names.index(adapters[0].name)
    assert all(e.layouts is None and e.engine_args == {} for e in adapters)  # a plain gguf copy, no flags


def test_the_preset_and_the_gateway_config_carry_the_adapters_under_1_mib(farms: dict[str, SynthesizedFarm]) -> None:
    farm = farms["before"]
    catalog = farm.farm.catalog
    assert catalog is not None
    preset_cm = farm.one("ConfigMap", "pool-tuned")
    gateway_cm = farm.one("ConfigMap", "gateway")
    sizes = {"preset": object_size(preset_cm), "gateway": object_size(gateway_cm)}
    print(f"ConfigMaps with {ADAPTERS} adapters: {sizes} bytes (manifest bound {DEFAULT_MAX_BYTES:,})")
    assert all(size <= DEFAULT_MAX_BYTES < CONFIGMAP_MAX_BYTES for size in sizes.values()), sizes
    # The base's section names every adapter's landed key on the Mountpoint volume, in config (= id) order.
    preset = preset_cm["data"][PRESET_FILE]
    section = preset.split(f"[{BASE}]\n", 1)[1].split("\n[", 1)[0]
    lora = dict(line.split(" = ", 1) for line in section.splitlines() if " = " in line)
    expected = [f"/models/{catalog.gguf_key(f'task-{i:04d}').removeprefix('farm/')}" for i in range(ADAPTERS)]
    assert list(split_paths(lora["lora"])) == expected
    assert lora["lora-init-without-apply"] == "true"
    assert "lora" not in preset.split("[bge-small-en]\n", 1)[1]
    # The gateway maps each adapter name to its base, its scale and that same path.
    config = json.loads(gateway_cm["data"][CONFIG_FILE])
    (pool,) = config["gateway"]["pools"]
    assert [a["name"] for a in pool["adapters"]] == [f"task-{i:04d}" for i in range(ADAPTERS)]
    assert {a["base"] for a in pool["adapters"]} == {BASE} and [a["path"] for a in pool["adapters"]] == expected
    assert all(a.get("scale", 1.0) == 1.0 for a in pool["adapters"])


def test_adding_10_adapters_and_removing_10_changes_only_configmaps_and_the_catalog(
    farms: dict[str, SynthesizedFarm],
) -> None:
    p = plan(load_assembly(farms["before"].out), load_assembly(farms["after"].out))
    print(p.text())
    assert p.hazards == [] and p.replaced == [], p.text()
    changed = sorted((c.action, c.key) for c in p.objects)
    kinds = {key.split("/")[0] if "/" in key else key for _, key in changed}
    assert all(action == "change" for action, _ in changed), p.text()
    # The pool's preset (applied in place by each replica, no roll) and the gateway's config, whose checksum
    # annotation rolls the gateway's pods (as adding a pooled model does); the pool's StatefulSet is untouched.
    assert [key for _, key in changed if "ConfigMap" in key] and not [k for _, k in changed if "StatefulSet" in k]
    assert all(("ConfigMap" in k) or ("Deployment" in k and "gateway" in k) for _, k in changed), (kinds, p.text())
    # In AWS: the three manifests holding those objects, and the catalog's copy (its asset key and fingerprint).
    manifests = {c.manifest for c in p.objects}
    assert all(r.split(" ")[0] in manifests or r.split("/")[1].startswith("ModelFarmCatalog") for r in p.updated), (
        p.text()
    )


def test_target_sagemaker_refuses_adapters_over_a_pooled_base_in_one_line(tmp_path: Path) -> None:
    """A pooled base on sagemaker is a multi-model endpoint's: refused with engines.adapter_hosting's line (a dedicated
    base is served: tests/patterns/test_adapter_farm_sagemaker.py)."""
    with pytest.raises(ConfigError) as err:
        load(_config(tmp_path / "sm.yaml", range(3), target="sagemaker"))
    problem = adapter_hosting_problem("sagemaker", pooled=True, hosting="endpoints", copy="catalog")
    assert str(err.value).splitlines() == [f"{tmp_path / 'sm.yaml'}: models[0].adapters: {BASE}: {problem}"]
