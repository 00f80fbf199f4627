"""Every image the build contexts pull comes from ECR (ECR Public's Docker official-image mirror), pinned by
digest: CodeBuild pulls anonymously, and Docker Hub rate-limits anonymous pulls. Lint-clean (hadolint)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.images.contexts import ROOT

DOCKERFILES = sorted((ROOT / "containers").glob("*/Dockerfile"))
ECR = r"(public\.ecr\.aws|\d{12}\.dkr\.ecr\.[a-z0-9-]+\.amazonaws\.com)/[\w./-]+(:[\w.-]+)?@sha256:[0-9a-f]{64}"


def external_bases(dockerfile: Path) -> list[str]:
    """FROM images that are not an earlier stage of the same file."""
    stages: set[str] = set()
    bases = []
    for image, stage in re.findall(
        r"^FROM\s+(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?", dockerfile.read_text(), re.M | re.I
    ):
        if image not in stages:
            bases.append(image)
        if stage:
            stages.add(stage)
    return bases


def test_there_are_dockerfiles() -> None:
    assert {p.parent.name for p in DOCKERFILES} >= {"llama-server", "router"}


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.parent.name)
def test_every_base_is_from_ecr_and_pinned_by_digest(dockerfile: Path) -> None:
    bases = external_bases(dockerfile)
    assert bases
    for image in bases:
        assert re.fullmatch(ECR, image), f"{dockerfile}: {image} (use public.ecr.aws/docker/library/...@sha256:...)"


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.parent.name)
def test_hadolint_clean(dockerfile: Path) -> None:
    result = subprocess.run(
        [str(Path(sys.executable).parent / "hadolint"), str(dockerfile)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
