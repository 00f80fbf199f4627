"""`cpu-inference validate --sources` (issue 26): each adapter's GGUF header and tensor infos against its base's, read
from the Hub (HF_ENDPOINT: the fake Hub serving real files) by the CLI as users run it; one line per problem naming
models[i].adapters[j].source and the fix; without --sources nothing touches the network. The adapters: the real
trained one (tests/support/lora.py), one the pin's gguf-py wrote with a wrong shape (test_adapter_shapes.ADAPTERS), and
PEFT sources whose adapter_config.json names a Hub base whose config.json architecture is or is not the base GGUF's."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from cpu_inference.cli.validate_cmd import HF_TO_GGUF_ARCH
from tests.runtime.model_download.fake_hub import FakeHub
from tests.runtime.model_download.test_adapter_shapes import (
    REFUSED,
    adapter_files,  # noqa: F401 - a fixture
)
from tests.support.engine import pinned_sdist
from tests.support.lora import lora_adapter_path

CLI = str(Path(sys.executable).parent / "cpu-inference")  # the console script, as users run it
BASE_SLICE = 7 * 1024 * 1024  # the real header and tensor infos (validate reads no further)
PROXY_VARS = ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "HF_TOKEN")

FARM = """
pattern: model-farm
farm:
  pools:
    - {{name: small, cpu: 2, memory_gib: 4, models_max: 1, replication: 1, replicas: {{min: 1, max: 2}}}}
models:
  - name: chat-small
    source: {{hf_repo: acme-v/base, file: smol.gguf}}
    parameters_billions: 0.135
    quantization: Q4_1
    context_window: 2048
    context_per_slot: 512
    parallel_slots: 2
    task: chat
    adapters:
      - {{name: chat-json, source: {{hf_repo: acme-v/real, file: real-lora.gguf}}}}
      - {{name: chat-bad, source: {{hf_repo: acme-v/bad, file: bad-lora.gguf}}}}
      - {{name: chat-peft, source: {{hf_repo: acme-v/peft-good}}}}
      - {{name: chat-qwen, source: {{hf_repo: acme-v/peft-qwen}}}}
      - {{name: chat-odd, source: {{hf_repo: acme-v/peft-odd}}}}
"""


@pytest.fixture(scope="module")
def hub(
    smollm2_gguf: Path,
    adapter_files: dict[str, Path],  # noqa: F811 - the imported fixture
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[FakeHub]:
    root = tmp_path_factory.mktemp("validate-hub")
    base = root / "smol.gguf"
    with open(smollm2_gguf, "rb") as src:
        base.write_bytes(src.read(BASE_SLICE))
    hub = FakeHub()
    hub.add_file("acme-v/base", "smol.gguf", base)
    hub.add_file("acme-v/real", "real-lora.gguf", lora_adapter_path())
    hub.add_file("acme-v/bad", "bad-lora.gguf", adapter_files["wrong-inner"])
    for repo, base_repo, arch in (
        ("acme-v/peft-good", "acme-v/smol-hf", "LlamaForCausalLM"),
        ("acme-v/peft-qwen", "acme-v/qwen-hf", "Qwen2ForCausalLM"),
        ("acme-v/peft-odd", "acme-v/odd-hf", "SomethingNewForCausalLM"),
    ):
        d = root / repo.replace("/", "_")
        d.mkdir()
        (d / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "base_model_name_or_path": base_repo}))
        (d / "config.json").write_text(json.dumps({"architectures": [arch]}))
        hub.add_file(repo, "adapter_config.json", d / "adapter_config.json", lfs=False)
        hub.add_file(base_repo, "config.json", d / "config.json", lfs=False)
    with hub:
        yield hub


def _validate(config: Path, hub: FakeHub, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in PROXY_VARS}
    env["HF_ENDPOINT"] = hub.url
    return subprocess.run(
        [CLI, "validate", str(config), *args], capture_output=True, text=True, env=env, timeout=300, check=False
    )


def test_validate_sources_names_each_adapter_that_does_not_fit_its_base(hub: FakeHub, tmp_path: Path) -> None:
    config = tmp_path / "farm.yaml"
    config.write_text(FARM.format())
    hub.reset()
    offline = _validate(config, hub)
    assert offline.returncode == 0, offline.stderr
    assert hub.stats.heads == 0 and hub.stats.gets == 0  # without --sources: no request at all

    out = _validate(config, hub, "--sources")
    assert out.returncode == 2, (out.stdout, out.stderr)
    problems = [line for line in out.stderr.splitlines() if not line.startswith(f"{config}: warning")]
    by_key = {
        m.group(1): line for line in problems if (m := re.search(r"(models\[0\]\.adapters\[\d\]\.source):", line))
    }
    assert sorted(by_key) == [
        "models[0].adapters[1].source",
        "models[0].adapters[3].source",
        "models[0].adapters[4].source",
    ]
    assert REFUSED["wrong-inner"][0] in by_key["models[0].adapters[1].source"]
    assert "— convert an adapter trained on this base model" in by_key["models[0].adapters[1].source"]
    qwen = by_key["models[0].adapters[3].source"]
    assert "acme-v/qwen-hf (Qwen2ForCausalLM, GGUF architecture 'qwen2')" in qwen and "is 'llama'" in qwen
    assert "is checked at copy" in by_key["models[0].adapters[4].source"]  # a note, not an error line of its own
    errors = [line for line in problems if "is checked at copy" not in line]
    assert len(errors) == 2, errors


def test_help_says_only_sources_touches_the_network() -> None:
    out = subprocess.run([CLI, "validate", "--help"], capture_output=True, text=True, check=True)
    assert "without it validate never touches the network" in " ".join(out.stdout.split())


def test_the_architecture_table_is_the_pinned_converters() -> None:
    """HF_TO_GGUF_ARCH equals what the pin's conversion/*.py registers (its @ModelBase.register names and the class's
    model_arch) and gguf-py's MODEL_ARCH_NAMES."""
    registered: dict[str, str] = {}
    with tarfile.open(pinned_sdist()) as tar:
        for member in tar.getmembers():
            if re.search(r"/vendor/llama\.cpp/conversion/[^/]+\.py$", member.name):
                text = tar.extractfile(member).read().decode()  # type: ignore[union-attr]
                pattern = r"@ModelBase\.register\(([^)]*)\)(?:\s*(?:#[^\n]*|@[^\n]*))*\s*class \w+\([^)]*\):\s*model_arch = gguf\.MODEL_ARCH\.(\w+)"
                for names, arch in re.findall(pattern, text):
                    for name in re.findall(r'"([^"]+)"', names):
                        registered[name] = arch
            elif member.name.endswith("/vendor/llama.cpp/gguf-py/gguf/constants.py"):
                constants = tar.extractfile(member).read().decode()  # type: ignore[union-attr]
    arch_names = dict(re.findall(r"MODEL_ARCH\.(\w+):\s+\"([\w-]+)\",", constants))
    assert {hf: arch_names[registered[hf]] for hf in HF_TO_GGUF_ARCH} == HF_TO_GGUF_ARCH
