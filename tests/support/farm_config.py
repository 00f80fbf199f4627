"""A 1,000-model farm config generated from a shipped example (examples/model-farm-<target>.yaml): the example's
pools and dedicated (hot) models, and its model_groups grown to `total` models, each entry one compact line
(a distinct fine-tune: its own Hugging Face repo, the template entry's file). Used by the config/CLI tests and
the 1,000-model synth tests."""

from __future__ import annotations

import copy
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def example(target: str) -> Path:
    return ROOT / "examples" / f"model-farm-{target}.yaml"


def thousand_model_farm(path: Path, target: str = "eks", *, total: int = 1000, hot: int = 4) -> Path:
    """Write the farm config to `path` and return it: `hot` dedicated models (the example's, then copies of its
    first) and total - hot pooled models spread over the example's groups (and so its pools) in turn."""
    doc = yaml.safe_load(example(target).read_text())
    dedicated = [m for m in doc.get("models", []) if m.get("serving") == "dedicated"]
    assert dedicated and doc.get("model_groups"), f"{example(target)} needs a dedicated model and model_groups"
    models = [copy.deepcopy(m) for m in dedicated[:hot]]
    for k in range(len(models), hot):
        twin = copy.deepcopy(dedicated[0])
        twin["name"] = f"{dedicated[0]['name']}-hot{k}"
        models.append(twin)
    templates = [(g, entry) for g, group in enumerate(doc["model_groups"]) for entry in group["models"]]
    groups = [{"defaults": group.get("defaults", {}), "models": []} for group in doc["model_groups"]]
    for i in range(total - len(models)):
        g, entry = templates[i % len(templates)]
        twin = copy.deepcopy(entry)
        twin["name"] = f"{entry['name'][:28]}-{i:04d}"
        twin["source"] = {**entry["source"], "hf_repo": f"acme-farm/{entry['name']}-ft-{i:04d}-GGUF"}
        groups[g]["models"].append(twin)
    doc["models"] = models
    doc.pop("model_groups")
    header = f"# yaml-language-server: $schema={ROOT / 'config.schema.json'}\n# {total} models generated from {example(target).name}\n"
    text = header + yaml.safe_dump(doc, sort_keys=False, default_flow_style=None, width=200) + "model_groups:\n"
    for group in groups:
        if group["models"]:
            text += "- defaults: " + _flow(group["defaults"]) + "\n  models:\n"
            text += "".join(f"  - {_flow(entry)}\n" for entry in group["models"])  # one line per model
    path.write_text(text)
    return path


def _flow(value: dict) -> str:
    return yaml.safe_dump(value, sort_keys=False, default_flow_style=True, width=1 << 16).strip()
