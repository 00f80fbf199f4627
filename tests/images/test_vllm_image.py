"""The vLLM CPU engine image: LlamaCppImage with VLLM_IMAGE, synthesized once (cdk-nag on) from the real
containers/vllm-cpu context. Native builds per architecture with the version pin as a build argument the
Dockerfile consumes, the same Docker-v2-only media-type guard, a context that holds every file the Dockerfile
copies, cdk-nag and cfn-lint clean."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import aws_cdk as cdk
import pytest
import yaml
from aws_cdk import aws_iam as iam

from cpu_inference._internal.nag import acknowledge
from cpu_inference.engines import LLAMA_CPP, VLLM, VLLM_ARCHITECTURES, VLLM_VERSION, ZENTORCH_ARCHITECTURES
from cpu_inference.images import VLLM_IMAGE, LlamaCppImage
from cpu_inference.images.buildspecs import BUILD_OUTPUT, DOCKER_MANIFEST, DOCKER_MANIFEST_LIST, NO_ATTESTATIONS
from cpu_inference.images.vllm_image import VERSION_BUILD_ARG
from tests.images.contexts import ROOT
from tests.support.cdk import apply_nag, cfn_lint_errors, nag_errors, template_json

pytestmark = pytest.mark.synth

CONTEXT = ROOT / "containers" / "vllm-cpu"
DOCKERFILE = CONTEXT / "Dockerfile"


@pytest.fixture(scope="module")
def synth() -> SimpleNamespace:
    app = cdk.App()
    stack = cdk.Stack(app, "VllmImageStack", env=cdk.Environment(account="111111111111", region="eu-west-1"))
    image = LlamaCppImage(stack, "VllmImage", props=VLLM_IMAGE)
    puller = iam.Role(stack, "Puller", assumed_by=iam.ServicePrincipal("sagemaker.amazonaws.com"))
    image.grant_pull(puller)
    acknowledge(puller, "AwsSolutions-IAM5[Resource::*]", "ecr:GetAuthorizationToken accepts no resource but '*'.")
    apply_nag(app)
    template = template_json(stack)  # raises if cdk-nag finds an unacknowledged rule
    assembly = app.synth()
    return SimpleNamespace(stack=stack, image=image, template=template, outdir=Path(assembly.directory))


def projects(template: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in template["Resources"].values() if r["Type"] == "AWS::CodeBuild::Project"]


def env_vars(project: dict[str, Any]) -> dict[str, Any]:
    return {v["Name"]: v["Value"] for v in project["Properties"]["Environment"]["EnvironmentVariables"]}


def commands(project: dict[str, Any]) -> str:
    spec = yaml.safe_load(project["Properties"]["Source"]["BuildSpec"])
    return "\n".join(c for phase in spec["phases"].values() for c in phase["commands"])


def native_builds(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {env_vars(p)["ARCH"]: p for p in projects(template) if "CONTEXT_KEY" in env_vars(p)}


def dockerfile_copies() -> list[str]:
    """The sources of the Dockerfile's COPY instructions (relative to the context)."""
    sources: list[str] = []
    for line in re.findall(r"^COPY\s+(.+)$", DOCKERFILE.read_text(), re.M):
        words = [w for w in line.split() if not w.startswith("--")]
        sources += words[:-1]
    return sources


# -- what is built -------------------------------------------------------------------------------------


def test_both_architectures_build_natively_on_their_own_hosts(synth) -> None:
    builds = native_builds(synth.template)
    assert set(builds) == {"arm64", "amd64"} == set(VLLM_ARCHITECTURES)
    environment = {arch: p["Properties"]["Environment"] for arch, p in builds.items()}
    assert environment["arm64"]["Type"] == "ARM_CONTAINER" and environment["amd64"]["Type"] == "LINUX_CONTAINER"
    for arch, env in environment.items():
        # No compile, but a multi-GB layer to unpack, compress and push: LARGE (8 vCPU, 15-16 GB, >= 50 GB disk).
        assert env["ComputeType"] == "BUILD_GENERAL1_LARGE" and env["PrivilegedMode"] is True, arch
        assert builds[arch]["Properties"]["TimeoutInMinutes"] == 40


def test_each_build_targets_its_platform_so_the_dockerfile_picks_zentorch_on_amd64_only(synth) -> None:
    """BuildKit sets TARGETARCH from --platform; the Dockerfile installs the `zen` extra (zentorch: x86_64 wheels
    only) in its amd64 branch and plain vllm in the arm64 one."""
    for arch, project in native_builds(synth.template).items():
        assert '--platform "linux/$ARCH"' in commands(project) and env_vars(project)["ARCH"] == arch
    text = DOCKERFILE.read_text()
    assert re.search(r"^ARG TARGETARCH$", text, re.M)
    branches = dict(re.findall(r"^\s*(amd64|arm64)\)\s*(machine=.+?);;", text, re.M))
    assert set(branches) == set(VLLM_ARCHITECTURES)
    for arch, install in branches.items():
        assert ("[zen]" in install) == (arch in ZENTORCH_ARCHITECTURES), f"{arch}: {install}"
    # Each branch's wheel is named by the build argument's version (vLLM's release wheel of engines.VLLM_VERSION).
    assert f'wheel="vllm-${{{VERSION_BUILD_ARG}}}+cpu-cp38-abi3-manylinux_2_34_${{machine}}.whl"' in text


def test_the_image_ships_the_library_pinned_vllm_version(synth) -> None:
    """engines.VLLM_VERSION reaches both builds as --build-arg VLLM_VERSION, which the Dockerfile declares
    (an undeclared build arg is ignored with a warning) with the same default for a local `docker build`."""
    assert VLLM_IMAGE.all_build_args() == {VERSION_BUILD_ARG: VLLM_VERSION}
    for project in native_builds(synth.template).values():
        assert f"--build-arg {VERSION_BUILD_ARG}={VLLM_VERSION} \\" in commands(project)
    assert re.search(rf"^ARG {VERSION_BUILD_ARG}={re.escape(VLLM_VERSION)}$", DOCKERFILE.read_text(), re.M)


def test_media_type_guard_applies_to_every_step(synth) -> None:
    builds = native_builds(synth.template)
    for arch, project in builds.items():
        text = commands(project)
        assert all(flag in text for flag in NO_ATTESTATIONS) and f"--output {BUILD_OUTPUT}" in text, arch
        assert f'require_media_type "$IMAGE_TAG-$ARCH" {DOCKER_MANIFEST}' in text, arch
    (manifest,) = [p for p in projects(synth.template) if p not in builds.values()]
    text = commands(manifest)
    for arch in VLLM_ARCHITECTURES:
        assert f'require_media_type "$IMAGE_TAG-{arch}" {DOCKER_MANIFEST}' in text
    assert f'require_media_type "$IMAGE_TAG" {DOCKER_MANIFEST_LIST}' in text
    assert "docker buildx imagetools create" in text and "--annotation" not in text
    for banned in ("soci", "oci-mediatypes=true", "zstd", "estargz"):
        assert banned not in text.lower()


def test_tags_are_its_own_and_the_image_says_it_serves_vllm(synth) -> None:
    """Its own tag prefix (the lifecycle rule keeps `vllm-cpu-*` builds apart from llama-server's), and the engine
    label the SageMaker endpoints check a model against."""
    assert re.fullmatch(r"vllm-cpu-[0-9a-f]{16}", synth.image.tag)
    assert synth.image.props.engine == VLLM and LlamaCppImage(cdk.Stack(), "Default").props.engine == LLAMA_CPP


# -- the build context ------------------------------------------------------------------------------------


def test_build_context_is_containers_vllm_cpu_with_every_copied_file(synth) -> None:
    """The staged asset is containers/ holding only vllm-cpu/ and the shared runtime package inference_runtime/ (no
    other image's files, so only those change the hash), and holds every file the Dockerfile COPYs; the builds name the
    Dockerfile from that root."""
    staged = synth.outdir / synth.image.context_asset.asset_path
    assert staged.is_dir()
    assert sorted(p.name for p in staged.iterdir()) == ["inference_runtime", "vllm-cpu"]
    names = {p.relative_to(staged).as_posix() for p in staged.rglob("*") if p.is_file()}
    assert {
        "vllm-cpu/Dockerfile",
        "vllm-cpu/entrypoint.py",
        "inference_runtime/sagemaker_adapter.py",
        "inference_runtime/requirements.txt",
    } <= names
    assert not any("__pycache__" in n or n.endswith(".gguf") for n in names)
    copied = dockerfile_copies()
    assert "inference_runtime/" in copied
    files = {n for c in copied for n in names if n == c or (c.endswith("/") and n.startswith(c))}
    assert all(any(n == c or (c.endswith("/") and n.startswith(c)) for n in names) for c in copied), copied
    for name in files:
        staged_file, source = staged / name, ROOT / "containers" / name
        assert not staged_file.is_symlink() and staged_file.read_bytes() == source.read_bytes(), name
    assert (staged / "vllm-cpu" / "Dockerfile").read_bytes() == DOCKERFILE.read_bytes()
    for build in native_builds(synth.template).values():
        assert "--file vllm-cpu/Dockerfile" in json.dumps(build)


# -- checks ---------------------------------------------------------------------------------------------


def test_cdk_nag_clean_with_reviewed_acknowledgments(synth) -> None:
    assert nag_errors(synth.stack) == []


def test_cfn_lint_has_no_errors(synth) -> None:
    assert cfn_lint_errors(synth.template) == []
