"""EngineImage: any ECR image by tag or digest, as the image of a SageMaker endpoint (the alternative to a
LlamaCppImage built by the library)."""

from __future__ import annotations

import re
from dataclasses import dataclass

import aws_cdk as cdk
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_iam as iam

from cpu_inference.engines import ENGINES, LLAMA_CPP
from cpu_inference.images import LlamaCppImage

_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")


@dataclass(frozen=True)
class EngineImage:
    """An engine image in any ECR repository, by `tag` or (reproducible) `digest` (`sha256:<64 hex>`).
    The image must serve SageMaker's contract with `serve` as its argument (containers/llama-server and
    containers/vllm-cpu do); `architectures` says which CPU architectures it has, checked against the instance
    type; `engine` which engine it runs ("llama.cpp" or "vllm"), checked against the model's."""

    repository: ecr.IRepository
    tag: str | None = None
    digest: str | None = None
    architectures: tuple[str, ...] = ("arm64", "amd64")
    engine: str = LLAMA_CPP

    def validate(self) -> None:
        if (self.tag is None) == (self.digest is None):
            raise ValueError("EngineImage: give exactly one of tag or digest (a digest is reproducible)")
        if self.digest is not None and not cdk.Token.is_unresolved(self.digest) and not _DIGEST.match(self.digest):
            raise ValueError(f"EngineImage.digest must be sha256:<64 lowercase hex>, got {self.digest!r}")
        if self.tag is not None and not cdk.Token.is_unresolved(self.tag) and not _TAG.match(self.tag):
            raise ValueError(f"EngineImage.tag must be a Docker tag ([A-Za-z0-9_.-], at most 128), got {self.tag!r}")
        unknown = [a for a in self.architectures if a not in ("arm64", "amd64")]
        if not self.architectures or unknown:
            raise ValueError(f"EngineImage.architectures must name arm64 and/or amd64, got {self.architectures!r}")
        if self.engine not in ENGINES:
            raise ValueError(f"EngineImage.engine must be one of {', '.join(ENGINES)}, got {self.engine!r}")

    @property
    def image_uri(self) -> str:
        if self.digest is not None:
            return self.repository.repository_uri_for_digest(self.digest)
        assert self.tag is not None
        return self.repository.repository_uri_for_tag(self.tag)

    def image_uri_for(self, arch: str) -> str:
        """The image as given: its tag or digest is the caller's (give a single-architecture one for SageMaker)."""
        return self.image_uri

    def grant_pull(self, grantee: iam.IGrantable) -> iam.Grant:
        return self.repository.grant_pull(grantee)


def image_architectures(image: LlamaCppImage | EngineImage) -> tuple[str, ...]:
    if isinstance(image, LlamaCppImage):
        return tuple(image.props.platforms)
    return image.architectures


def sagemaker_image_uri(image: LlamaCppImage | EngineImage, arch: str) -> str:
    """What CreateModel gets for an instance of `arch`: a LlamaCppImage's own single-architecture image, not its
    manifest list (LlamaCppImage.image_uri_for); an EngineImage as given."""
    return image.image_uri_for(arch)


def image_engine(image: LlamaCppImage | EngineImage) -> str:
    """The engine the image serves: "llama.cpp" or "vllm"."""
    if isinstance(image, LlamaCppImage):
        return image.props.engine
    return image.engine
