"""LlamaCppImageProps.validate(): working defaults, and one precise message per mistake (no synth)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cpu_inference.images import DEFAULT_CONTEXT_DIR, LlamaCppImageProps
from tests.images.contexts import ROOT


def test_default_context_is_the_repo_llama_server_directory() -> None:
    props = LlamaCppImageProps()
    assert props.context_path == DEFAULT_CONTEXT_DIR == ROOT / "containers" / "llama-server"
    assert props.pin_file == "engine-pin.env" and props.platforms == ("arm64", "amd64")
    assert props.tags_per_build() == 3  # the manifest list and one image per platform


def test_a_valid_context_validates_and_merges_build_args(make_context, real_pin) -> None:
    props = LlamaCppImageProps(context_dir=make_context("ok"), build_args={"GGML_CPU_ALL_VARIANTS": "ON"})
    props.validate()
    assert props.all_build_args() == {**real_pin, "GGML_CPU_ALL_VARIANTS": "ON"}
    assert list(props.all_build_args())[: len(real_pin)] == list(real_pin)


def test_the_vllm_props_validate_and_build_the_vllm_context() -> None:
    from cpu_inference.engines import VLLM, VLLM_VERSION
    from cpu_inference.images import VLLM_IMAGE

    VLLM_IMAGE.validate()
    assert VLLM_IMAGE.context_path == ROOT / "containers" / "vllm-cpu" and VLLM_IMAGE.engine == VLLM
    assert VLLM_IMAGE.pin_file is None and VLLM_IMAGE.all_build_args() == {"VLLM_VERSION": VLLM_VERSION}
    assert VLLM_IMAGE.platforms == ("arm64", "amd64") and VLLM_IMAGE.tags_per_build() == 3


def test_router_style_context_without_a_pin(make_context) -> None:
    context = make_context("router")
    (context / "engine-pin.env").unlink()
    props = LlamaCppImageProps(context_dir=context, name="router", pin_file=None, platforms=("arm64",))
    props.validate()
    assert props.all_build_args() == {} and props.tags_per_build() == 2


def errors(context: Path) -> list[tuple[dict, str]]:
    return [
        ({"name": "Llama"}, r"name 'Llama' must match"),
        ({"name": "x" * 49}, r"must match"),
        ({"context_dir": context / "missing"}, r"context_dir .*missing is not a directory"),
        ({"dockerfile": "../Dockerfile"}, r"dockerfile '../Dockerfile' must be inside context_dir"),
        ({"dockerfile": "Dockerfile.cpu"}, r"dockerfile .*Dockerfile.cpu does not exist"),
        ({"pin_file": "nope.env"}, r"pin_file .*nope.env does not exist \(use pin_file=None for no pin\)"),
        (
            {"build_args": {"LLAMA_CPP_PYTHON_VERSION": "1"}},
            r"build_args.LLAMA_CPP_PYTHON_VERSION repeats a key of engine-pin.env",
        ),
        ({"build_args": {"X": "a b"}}, r"build_args.X: value of X has characters outside"),
        ({"platforms": ()}, r"platforms must name at least one of arm64, amd64"),
        ({"platforms": ("arm64", "riscv64")}, r"each of arm64, amd64 at most once"),
        ({"platforms": ("arm64", "arm64")}, r"each of arm64, amd64 at most once"),
        ({"keep_builds": 0}, r"keep_builds must be >= 1"),
        ({"untagged_expiry_days": 0}, r"untagged_expiry_days must be >= 1"),
        ({"build_timeout_minutes": 4}, r"must each be >= 5"),
        ({"build_timeout_minutes": 45, "manifest_timeout_minutes": 15}, r"= 60 exceeds 55: the deploy-time wait"),
        (
            {"repository_name": "r", "existing_repository": object()},
            r"give repository_name or existing_repository, not both",
        ),
        ({"engine": "vLLM"}, r"engine 'vLLM' must be one of llama\.cpp, vllm \(the engine the image serves\)"),
    ]


def test_each_mistake_has_a_precise_message(make_context) -> None:
    context = make_context("bad")
    for change, message in errors(context):
        props = LlamaCppImageProps(**{"context_dir": context, **change})
        with pytest.raises(ValueError, match=message):
            props.validate()


def test_a_malformed_pin_names_its_line(make_context) -> None:
    context = make_context("badpin", pin="LLAMA_CPP_PYTHON_VERSION=0.3.36\nBROKEN LINE\n")
    with pytest.raises(ValueError, match=r"engine-pin.env:2: expected KEY=VALUE"):
        LlamaCppImageProps(context_dir=context).validate()
