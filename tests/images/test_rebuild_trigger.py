"""What rebuilds: the custom resource's properties follow the build context's content, the engine
pin and the build recipe, and nothing else (so an unchanged image is never rebuilt)."""

from __future__ import annotations

import shutil
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Template

from cpu_inference.images import LlamaCppImage, LlamaCppImageProps
from cpu_inference.images.engine_pin import read_pin
from tests.images.contexts import DOCKERFILE, REAL_PIN

pytestmark = pytest.mark.synth


def build_properties(**props: Any) -> dict[str, Any]:
    app = cdk.App()
    stack = cdk.Stack(app, "S")
    LlamaCppImage(stack, "Image", props=LlamaCppImageProps(**props))
    (resource,) = Template.from_stack(stack).find_resources("Custom::ContainerImageBuild").values()
    return {
        k: v for k, v in resource["Properties"].items() if k in ("Tag", "ContentHash", "ContextAssetHash", "EnginePin")
    }


@pytest.fixture(scope="module")
def base(make_context) -> tuple[Any, dict[str, Any]]:
    context = make_context("base", files={".dockerignore": "notes.md\n"})
    return context, build_properties(context_dir=context)


def test_same_content_elsewhere_is_the_same_image(base, tmp_path) -> None:
    context, props = base
    copy = tmp_path / "copy"
    shutil.copytree(context, copy)
    assert build_properties(context_dir=copy) == props


def test_a_changed_dockerfile_rebuilds(base, tmp_path) -> None:
    context, props = base
    changed = tmp_path / "changed"
    shutil.copytree(context, changed)
    (changed / "Dockerfile").write_text(DOCKERFILE + "RUN true\n")
    new = build_properties(context_dir=changed)
    for key in ("Tag", "ContentHash", "ContextAssetHash"):
        assert new[key] != props[key], key
    assert new["EnginePin"] == props["EnginePin"]


def test_a_changed_engine_pin_rebuilds(base, tmp_path) -> None:
    context, props = base
    changed = tmp_path / "pin"
    shutil.copytree(context, changed)
    version = read_pin(REAL_PIN)["LLAMA_CPP_PYTHON_VERSION"]
    text = REAL_PIN.read_text().replace(
        f"LLAMA_CPP_PYTHON_VERSION={version}", f"LLAMA_CPP_PYTHON_VERSION={version}.post1"
    )
    assert text != REAL_PIN.read_text()
    (changed / "engine-pin.env").write_text(text)
    new = build_properties(context_dir=changed)
    assert f"LLAMA_CPP_PYTHON_VERSION={version}.post1" in new["EnginePin"]
    assert new["Tag"] != props["Tag"] and new["ContentHash"] != props["ContentHash"]


def test_ignored_and_cache_files_do_not_rebuild(base, tmp_path) -> None:
    context, props = base
    noisy = tmp_path / "noisy"
    shutil.copytree(context, noisy)
    (noisy / "notes.md").write_text("excluded by .dockerignore\n")
    (noisy / "__pycache__").mkdir()
    (noisy / "__pycache__" / "entrypoint.cpython-311.pyc").write_bytes(b"\x00")
    assert build_properties(context_dir=noisy) == props


def test_a_changed_recipe_rebuilds(base) -> None:
    context, props = base
    one_platform = build_properties(context_dir=context, platforms=("arm64",))
    assert one_platform["ContextAssetHash"] == props["ContextAssetHash"]
    assert one_platform["Tag"] != props["Tag"]
