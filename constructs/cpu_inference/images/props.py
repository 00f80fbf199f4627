"""LlamaCppImageProps: what to build and where to publish it (frozen, validated at synth)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import aws_cdk as cdk
from aws_cdk import aws_codebuild as codebuild
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs

from cpu_inference._internal.resources import INFERENCE_RUNTIME, LLAMA_SERVER, runtime_dir
from cpu_inference.engines import ENGINES, LLAMA_CPP
from cpu_inference.images.engine_pin import check_build_arg, read_pin

DEFAULT_CONTEXT_DIR = runtime_dir(LLAMA_SERVER)
# The runtime package the library's images share (containers/inference_runtime): its directory name, looked for beside
# context_dir when `shared_dirs` is left at None.
SHARED_RUNTIME = Path(INFERENCE_RUNTIME).name
PLATFORMS = ("arm64", "amd64")
_NAME = re.compile(r"^[a-z0-9](?:[a-z0-9._-]{0,46}[a-z0-9])?$")
# A custom resource (and so the CDK Provider framework's isComplete loop) waits at most 1 hour;
# leave room for polling and hand-over slack.
PROVIDER_WAIT_MINUTES = 60
WAIT_SLACK_MINUTES = 5


def _default_arm64_image() -> codebuild.IBuildImage:
    return codebuild.LinuxArmBuildImage.AMAZON_LINUX_2023_STANDARD_3_0


def _default_amd64_image() -> codebuild.IBuildImage:
    # amazonlinux-x86_64-standard:5.0: the AL2023 sibling of aarch64-standard:3.0 (same tools, dnf).
    return codebuild.LinuxBuildImage.AMAZON_LINUX_2023_5


@dataclass(frozen=True)
class LlamaCppImageProps:
    """What to build and where to publish it. Every field has a working default.

    context_dir: the image's directory (Dockerfile, pin, files), shipped as an S3 asset: the Docker build context
        itself, or with shared_dirs inside their common parent (default: containers/llama-server, from the installed
        package or the source checkout). A second instance builds containers/router the same way.
    dockerfile: path of the Dockerfile inside context_dir (default "Dockerfile").
    name: short image name; prefixes the tag `<name>-<content hash>` and names the resources'
        descriptions (default "llama-server"; lowercase, digits, `.`, `_`, `-`, at most 48 chars).
    pin_file: KEY=VALUE file inside context_dir whose pairs become `--build-arg`s of both native
        builds and are part of the rebuild key (default "engine-pin.env"; None for no pin).
    build_args: more `--build-arg`s (default none); a key may not repeat one of the pin's.
    platforms: architectures to build natively, each on its own CodeBuild host type
        (default ("arm64", "amd64")). The manifest step runs on the first one's host type.
    keep_builds: builds whose tagged images the lifecycle policy keeps (default 10). Each build
        tags 1 + len(platforms) images (the manifest list and one image per platform).
    untagged_expiry_days: untagged images expire after this many days (default 7).
    compute_type: CodeBuild size of the native builds (default LARGE: 8 vCPU for the llama.cpp
        compile); the manifest step always runs on SMALL.
    arm64_build_image / amd64_build_image: CodeBuild images (default Amazon Linux 2023
        aarch64-standard:3.0 and x86_64-standard:5.0; both ship Docker with buildx).
    build_timeout_minutes: per native build (default 40; they run in parallel);
        manifest_timeout_minutes: the manifest-list step (default 15). Their sum must leave the
        1-hour custom-resource wait 5 minutes of slack. A deployment that times out leaves the builds
        running; their pushed tags make the next deployment skip straight to the digest.
    log_retention: retention of the build, workflow and handler log groups (default one month).
    repository_name: name of the created repository (default: generated).
    existing_repository: publish into this repository instead of creating one (its scanning,
        tag mutability, lifecycle and encryption are then the owner's choice; tags must not clash).
    existing_key: KMS key for the repository, projects and log groups instead of a new one (its key
        policy must let CloudWatch Logs in this region use it).
    removal_policy: for the created repository, key and log groups (default RETAIN: images and
        their build logs outlive the stack).
    shared_dirs: names of directories beside context_dir that the build also gets (default None: the library's shared
        runtime package, inference_runtime, when it sits beside context_dir, as it does for the library's own images
        from a checkout or a wheel; else none). With any, the Docker build context is context_dir's parent holding only
        context_dir and them, and the Dockerfile names its files from there (`COPY <context_dir name>/...`); () for a
        context of its own.
    engine: the inference engine the image serves, "llama.cpp" (default) or "vllm" (VLLM_IMAGE). Not part
        of the build: the SageMaker endpoints check it against the model's engine (a vLLM checkpoint on the
        llama-server image, or a vLLM image behind a multi-model endpoint, is refused at synth).
    """

    context_dir: Path | str = DEFAULT_CONTEXT_DIR
    dockerfile: str = "Dockerfile"
    name: str = "llama-server"
    pin_file: str | None = "engine-pin.env"
    build_args: Mapping[str, str] = field(default_factory=dict)
    platforms: tuple[str, ...] = PLATFORMS
    keep_builds: int = 10
    untagged_expiry_days: int = 7
    compute_type: codebuild.ComputeType = codebuild.ComputeType.LARGE
    arm64_build_image: codebuild.IBuildImage = field(default_factory=_default_arm64_image)
    amd64_build_image: codebuild.IBuildImage = field(default_factory=_default_amd64_image)
    build_timeout_minutes: int = 40
    manifest_timeout_minutes: int = 15
    log_retention: logs.RetentionDays = logs.RetentionDays.ONE_MONTH
    repository_name: str | None = None
    existing_repository: ecr.IRepository | None = None
    existing_key: kms.IKey | None = None
    removal_policy: cdk.RemovalPolicy = cdk.RemovalPolicy.RETAIN
    engine: str = LLAMA_CPP
    shared_dirs: tuple[str, ...] | None = None

    @property
    def context_path(self) -> Path:
        return Path(self.context_dir).resolve()

    def shared_paths(self) -> list[Path]:
        """The shared directories the build gets besides context_dir (see shared_dirs)."""
        parent = self.context_path.parent
        if self.shared_dirs is None:
            default = parent / SHARED_RUNTIME
            return [default] if default.is_dir() else []
        return [parent / name for name in self.shared_dirs]

    @property
    def dockerfile_path(self) -> Path:
        return (self.context_path / self.dockerfile).resolve()

    def pin(self) -> dict[str, str]:
        return read_pin(self.context_path / self.pin_file) if self.pin_file else {}

    def all_build_args(self) -> dict[str, str]:
        """The pin's pairs first (file order), then build_args."""
        args = self.pin()
        for key, value in self.build_args.items():
            if key in args:
                raise ValueError(f"build_args.{key} repeats a key of {self.pin_file}; change the pin instead")
            args[key] = value
        return args

    def validate(self) -> None:
        if not _NAME.match(self.name):
            raise ValueError(f"name {self.name!r} must match {_NAME.pattern} (it prefixes image tags)")
        context = self.context_path
        if not context.is_dir():
            raise ValueError(f"context_dir {context} is not a directory")
        dockerfile = self.dockerfile_path
        if not dockerfile.is_relative_to(context):
            raise ValueError(f"dockerfile {self.dockerfile!r} must be inside context_dir {context}")
        if not dockerfile.is_file():
            raise ValueError(f"dockerfile {dockerfile} does not exist")
        for shared in self.shared_paths():
            if (
                shared.parent != context.parent
                or shared.name in ("", ".", "..")
                or shared == context
                or not shared.is_dir()
            ):
                raise ValueError(
                    f"shared_dirs: {shared.name!r} must name a directory beside context_dir {context} (found none at {shared})"
                )
        if self.pin_file is not None and not (context / self.pin_file).is_file():
            raise ValueError(f"pin_file {context / self.pin_file} does not exist (use pin_file=None for no pin)")
        for key, value in self.build_args.items():
            check_build_arg(key, value, f"build_args.{key}")
        self.all_build_args()  # parses the pin: its errors name file and line
        if not self.platforms:
            raise ValueError("platforms must name at least one of arm64, amd64")
        unknown = [p for p in self.platforms if p not in PLATFORMS]
        if unknown or len(set(self.platforms)) != len(self.platforms):
            raise ValueError(f"platforms {self.platforms!r}: each of arm64, amd64 at most once, nothing else")
        if self.keep_builds < 1:
            raise ValueError(f"keep_builds must be >= 1, got {self.keep_builds}")
        if self.untagged_expiry_days < 1:
            raise ValueError(f"untagged_expiry_days must be >= 1, got {self.untagged_expiry_days}")
        if self.build_timeout_minutes < 5 or self.manifest_timeout_minutes < 5:
            raise ValueError(
                "build_timeout_minutes and manifest_timeout_minutes must each be >= 5 (CodeBuild's minimum)"
            )
        budget = PROVIDER_WAIT_MINUTES - WAIT_SLACK_MINUTES
        if self.build_timeout_minutes + self.manifest_timeout_minutes > budget:
            raise ValueError(
                f"build_timeout_minutes + manifest_timeout_minutes = "
                f"{self.build_timeout_minutes + self.manifest_timeout_minutes} exceeds {budget}: the deploy-time "
                f"wait (a CloudFormation custom resource) is capped at {PROVIDER_WAIT_MINUTES} minutes"
            )
        if self.existing_repository is not None and self.repository_name is not None:
            raise ValueError("give repository_name or existing_repository, not both")
        if self.engine not in ENGINES:
            raise ValueError(
                f"engine {self.engine!r} must be one of {', '.join(ENGINES)} (the engine the image serves)"
            )

    def tags_per_build(self) -> int:
        return len(self.platforms) + 1
