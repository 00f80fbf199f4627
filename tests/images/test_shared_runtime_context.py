"""The library's images get the runtime package they share (containers/inference_runtime) through their build
context: containers/ holding only the image's own directory and that package (LlamaCppImageProps.shared_dirs), the
Dockerfile named from there. A context of one's own (no inference_runtime beside it) ships as before."""

from __future__ import annotations

import json
from pathlib import Path

import aws_cdk as cdk
import pytest

from cpu_inference._internal.resources import INFERENCE_RUNTIME, LLAMA_SERVER, ROUTER, runtime_dir
from cpu_inference.images import LlamaCppImage, LlamaCppImageProps
from tests.images.contexts import DOCKERFILE, ROOT

CONTAINERS = ROOT / "containers"


def _staged(props: LlamaCppImageProps) -> tuple[Path, dict]:
    app = cdk.App()
    stack = cdk.Stack(app, "S", env=cdk.Environment(account="111111111111", region="eu-west-1"))
    image = LlamaCppImage(stack, "Image", props=props)
    outdir = Path(app.synth().directory)
    template = json.loads((outdir / "S.template.json").read_text())
    return outdir / image.context_asset.asset_path, template


def _files(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


def _source_files(*dirs: str) -> set[str]:
    """The files of `dirs` under containers/ minus byte-code and what each directory's .dockerignore names."""
    files = set()
    for d in dirs:
        ignore = CONTAINERS / d / ".dockerignore"
        ignored = (
            {line for line in ignore.read_text().splitlines() if line and "*" not in line}
            if ignore.is_file()
            else set()
        )
        files |= {
            f"{d}/{p}"
            for p in _files(CONTAINERS / d)
            if "__pycache__" not in p and not p.endswith(".pyc") and p not in ignored
        }
    return files


def test_the_library_images_default_to_the_shared_runtime_package() -> None:
    assert LlamaCppImageProps().shared_paths() == [runtime_dir(INFERENCE_RUNTIME)]
    assert LlamaCppImageProps(context_dir=runtime_dir(ROUTER)).shared_paths() == [runtime_dir(INFERENCE_RUNTIME)]
    assert LlamaCppImageProps(shared_dirs=()).shared_paths() == []


@pytest.mark.parametrize("image", [LLAMA_SERVER, ROUTER])
def test_the_asset_is_the_image_directory_and_the_shared_package_only(image: str) -> None:
    name = Path(image).name
    props = LlamaCppImageProps(
        context_dir=runtime_dir(image), name=name, pin_file="engine-pin.env" if image == LLAMA_SERVER else None
    )
    staged, template = _staged(props)
    assert sorted(p.name for p in staged.iterdir()) == sorted([name, "inference_runtime"])
    assert _files(staged) == _source_files(name, "inference_runtime")
    buildspecs = [
        json.dumps(r["Properties"]["Source"])
        for r in template["Resources"].values()
        if r["Type"] == "AWS::CodeBuild::Project" and "--file" in json.dumps(r["Properties"].get("Source", {}))
    ]
    assert len(buildspecs) == 2 and all(f"--file {name}/Dockerfile " in b for b in buildspecs)


def test_a_context_of_its_own_ships_alone(make_context) -> None:
    context = make_context("own")
    props = LlamaCppImageProps(context_dir=context)
    assert props.shared_paths() == []
    staged, _ = _staged(props)
    assert _files(staged) == {"Dockerfile", "engine-pin.env"}


def test_explicit_shared_dirs_are_siblings_and_dockerignore_applies_inside_the_image_directory(
    tmp_path: Path, real_pin
) -> None:
    context = tmp_path / "img"
    (context / "docs").mkdir(parents=True)
    (context / "Dockerfile").write_text(DOCKERFILE)
    (context / "docs" / "notes.md").write_text("not shipped")
    (context / "keep.md").write_text("shipped")
    (context / ".dockerignore").write_text("docs\n*.md\n!keep.md\n")
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "x.py").write_text("X = 1\n")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "y.py").write_text("Y = 1\n")
    props = LlamaCppImageProps(context_dir=context, pin_file=None, shared_dirs=("lib",))
    staged, _ = _staged(props)
    assert _files(staged) == {"img/Dockerfile", "img/.dockerignore", "img/keep.md", "lib/x.py"}
    with pytest.raises(ValueError, match="shared_dirs: 'nope' must name a directory beside context_dir"):
        LlamaCppImageProps(context_dir=context, pin_file=None, shared_dirs=("nope",)).validate()
