"""CodeBuild buildspecs for the native per-architecture builds and the manifest-list step (pure).

Each phase's logic runs in one `( set -euo pipefail ... )` subshell so a failing step fails the
phase without changing CodeBuild's own shell; the digest leaves the subshell through a file and is
exported as a CodeBuild variable that the Step Functions `.sync` task returns.

Tags are immutable and named from the content hash, so every step first asks ECR whether its tag
already exists and skips the work when it does: a retried or re-run deployment is idempotent.

Media types: SageMaker CreateModel accepts only Docker image manifest v2 schema 2 and Docker manifest
lists; an OCI manifest or index is refused ("Unsupported manifest media type",
https://github.com/aws/amazon-sagemaker-feedback/issues/180). Both images are handed to SageMaker by
digest, so every step publishes Docker v2 types only and then checks what ECR holds (`_CHECK_MEDIA`):
- BuildKit writes OCI types when asked (`oci-mediatypes=true`), and also forces them for
  attestations (provenance/SBOM), index/descriptor annotations and zstd/estargz layers
  (moby/buildkit exporter/containerimage/writer.go and opts.go: `EnableOCITypes("attestations")`,
  `EnableOCITypes("annotations")`, `OnlySupportOCITypes()`); `oci-mediatypes` defaults to false for
  `type=image` (https://docs.docker.com/build/exporters/image-registry/). The platform builds therefore
  pass `--provenance=false --sbom=false` and `--output type=image,push=true,oci-mediatypes=false,
  compression=gzip`, and no annotations.
- `docker buildx imagetools create` writes a Docker manifest list when every source manifest is a
  Docker type and no annotation is given, an OCI index otherwise (docker/buildx
  util/imagetools/create.go `Combine`, since docker/buildx#1797; older buildx always wrote a Docker list).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from typing import Any

# Files that carry results out of the subshell; TMPDIR lets a test run the scripts side by side.
DIGEST_FILE = '"${TMPDIR:-/tmp}/image-digest"'

DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_MANIFEST_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
# What each platform build's `docker buildx build` is told to emit (see the module docstring).
BUILD_OUTPUT = "type=image,push=true,oci-mediatypes=false,compression=gzip"
NO_ATTESTATIONS = ("--provenance=false", "--sbom=false")

# Prints the digest of tag $1 in $REPOSITORY_NAME, nothing when the tag does not exist, and fails on
# any other error (an AccessDenied must not read as "not built yet").
_DIGEST_OF = r"""digest_of() {
  local out
  if out=$(aws ecr describe-images --repository-name "$REPOSITORY_NAME" --image-ids "imageTag=$1" \
      --query 'imageDetails[0].imageDigest' --output text 2>&1); then
    echo "$out"
  elif [[ $out == *ImageNotFoundException* ]]; then
    return 0
  else
    echo "$out" >&2
    return 1
  fi
}"""

# Fails unless ECR holds tag $1 with media type $2 and its manifest names no OCI type and no
# attestation manifest: what SageMaker CreateModel will be given, checked at the source.
_CHECK_MEDIA = r"""require_media_type() {
  local media manifest
  media=$(aws ecr describe-images --repository-name "$REPOSITORY_NAME" --image-ids "imageTag=$1" \
    --query 'imageDetails[0].imageManifestMediaType' --output text)
  manifest=$(aws ecr batch-get-image --repository-name "$REPOSITORY_NAME" --image-ids "imageTag=$1" \
    --query 'images[0].imageManifest' --output text)
  if [[ $media != "$2" ]]; then
    echo "$REPOSITORY_NAME:$1 is $media, not $2: SageMaker CreateModel refuses OCI media types" >&2
    return 1
  fi
  if grep -Eq 'application/vnd\.oci\.|vnd\.docker\.reference\.type|"unknown"' <<<"$manifest"; then
    echo "$REPOSITORY_NAME:$1 references an OCI manifest or an attestation (SageMaker refuses them):" >&2
    echo "$manifest" >&2
    return 1
  fi
  echo "$REPOSITORY_NAME:$1 is $media (Docker v2 schema 2)"
}"""

_LOGIN = (
    'docker buildx version >/dev/null || { echo "docker buildx is required on the build image" >&2; exit 1; }\n'
    'aws ecr get-login-password --region "$AWS_REGION" \\\n'
    '  | docker login --username AWS --password-stdin "${REPOSITORY_URI%%/*}"'
)


def _subshell(script: str) -> str:
    body = "\n".join(f"  {line}" if line else "" for line in script.strip("\n").splitlines())
    return f"(\n  set -euo pipefail\n{body}\n)"


def _spec(build_commands: Sequence[str], exported: Sequence[str]) -> dict[str, Any]:
    return {
        "version": "0.2",
        "env": {"shell": "bash", "exported-variables": list(exported)},
        "phases": {"build": {"commands": list(build_commands)}},
    }


def platform_script(*, dockerfile: str, build_args: Mapping[str, str]) -> str:
    """Fetch the context asset, build it natively for $ARCH and push `$IMAGE_TAG-$ARCH` (skipped if present)."""
    args = "".join(f"    --build-arg {shlex.quote(f'{k}={v}')} \\\n" for k, v in build_args.items())
    return f"""{_DIGEST_OF}
{_CHECK_MEDIA}
{_LOGIN}
ref="$REPOSITORY_URI:$IMAGE_TAG-$ARCH"
existing=$(digest_of "$IMAGE_TAG-$ARCH")
if [[ -n $existing ]]; then
  echo "$ref is already in ECR as $existing (tags are immutable): skipping the build"
else
  # Only this build's context object is readable: no CodeBuild S3 source (its grant lists the bucket).
  context="${{TMPDIR:-/tmp}}/context"
  rm -rf "$context" "$context.zip"
  mkdir -p "$context"
  aws s3 cp --only-show-errors "s3://$CONTEXT_BUCKET/$CONTEXT_KEY" "$context.zip"
  command -v unzip >/dev/null 2>&1 || dnf install -y -q unzip
  unzip -q "$context.zip" -d "$context"  # unzip keeps file modes: an entrypoint stays executable
  cd "$context"
  # Native build on this architecture's host: no QEMU, the engine compiles for the real ISA family.
  # Docker v2 schema 2 only: no attestations, no OCI media types (SageMaker refuses them).
  docker buildx build --platform "linux/$ARCH" --pull {" ".join(NO_ATTESTATIONS)} \\
    --output {BUILD_OUTPUT} \\
{args}    --file {shlex.quote(dockerfile)} --tag "$ref" .
fi
require_media_type "$IMAGE_TAG-$ARCH" {DOCKER_MANIFEST}
digest=$(digest_of "$IMAGE_TAG-$ARCH")
echo "$ref@$digest"
echo "$digest" > {DIGEST_FILE}
"""


def manifest_script(*, platforms: Sequence[str]) -> str:
    """One tag for all platforms: a Docker manifest list of the platform images."""
    sources = " ".join(f'"$REPOSITORY_URI:$IMAGE_TAG-{arch}"' for arch in platforms)
    checks = "\n".join(f'require_media_type "$IMAGE_TAG-{arch}" {DOCKER_MANIFEST}' for arch in platforms)
    return f"""{_DIGEST_OF}
{_CHECK_MEDIA}
{_LOGIN}
final="$REPOSITORY_URI:$IMAGE_TAG"
existing=$(digest_of "$IMAGE_TAG")
if [[ -n $existing ]]; then
  echo "$final is already in ECR as $existing (tags are immutable): nothing to do"
else
  # Docker sources and no annotations: imagetools writes a Docker manifest list (see module docstring).
{_indent(checks, 2)}
  docker buildx imagetools create --tag "$final" {sources}
fi
require_media_type "$IMAGE_TAG" {DOCKER_MANIFEST_LIST}
digest=$(digest_of "$IMAGE_TAG")
echo "$final@$digest"
echo "$digest" > {DIGEST_FILE}
"""


def _indent(text: str, spaces: int) -> str:
    pad = " " * spaces
    return "\n".join(f"{pad}{line}" if line else "" for line in text.strip("\n").splitlines())


def _export_digest() -> list[str]:
    # Outside the subshell: CodeBuild exports variables from its own shell's environment.
    return [f"read -r IMAGE_DIGEST < {DIGEST_FILE} && export IMAGE_DIGEST", "[[ $IMAGE_DIGEST == sha256:* ]]"]


def platform_buildspec(*, dockerfile: str, build_args: Mapping[str, str]) -> dict[str, Any]:
    script = platform_script(dockerfile=dockerfile, build_args=build_args)
    return _spec([_subshell(script), *_export_digest()], ["IMAGE_DIGEST", "ARCH"])


def manifest_buildspec(*, platforms: Sequence[str]) -> dict[str, Any]:
    script = manifest_script(platforms=platforms)
    return _spec([_subshell(script), *_export_digest()], ["IMAGE_DIGEST"])


def shell_of(buildspec: Mapping[str, Any]) -> str:
    """Every command of a buildspec as one bash script, for `bash -n` and shellcheck."""
    lines = ["#!/usr/bin/env bash"]
    for phase in buildspec["phases"].values():
        lines.extend(phase["commands"])
    return "\n".join(lines) + "\n"
