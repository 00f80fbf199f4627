"""CodeBuild buildspecs for the native per-architecture builds and the manifest + SOCI step (pure).

Each phase's logic runs in one `( set -euo pipefail ... )` subshell so a failing step fails the
phase without changing CodeBuild's own shell; the digest leaves the subshell through a file and is
exported as a CodeBuild variable that the Step Functions `.sync` task returns.

Tags are immutable and named from the content hash, so every step first asks ECR whether its tag
already exists and skips the work when it does: a retried or re-run deployment is idempotent.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

# Files that carry results out of the subshell; TMPDIR lets a test run the scripts side by side.
DIGEST_FILE = '"${TMPDIR:-/tmp}/image-digest"'
SOCI_FLAG_FILE = '"${TMPDIR:-/tmp}/soci-indexed"'

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

_LOGIN = (
    'docker buildx version >/dev/null || { echo "docker buildx is required on the build image" >&2; exit 1; }\n'
    'aws ecr get-login-password --region "$AWS_REGION" \\\n'
    '  | docker login --username AWS --password-stdin "${REPOSITORY_URI%%/*}"'
)


@dataclass(frozen=True)
class SociRelease:
    """A pinned soci-snapshotter release: the CLI that writes SOCI index manifest v2 (`soci convert`).

    The sha256 values are those of the release's `-static.tar.gz` assets (its `.sha256sum` files);
    the download is refused when they differ. Bump all three together.
    """

    version: str
    sha256_arm64: str
    sha256_amd64: str

    def url(self, arch: str) -> str:
        return (
            "https://github.com/awslabs/soci-snapshotter/releases/download/"
            f"v{self.version}/soci-snapshotter-{self.version}-linux-{arch}-static.tar.gz"
        )


SOCI_0_14_1 = SociRelease(
    version="0.14.1",
    sha256_arm64="4f7a40988c4e51342969b8265ab2841b497d62e44c575cb361bb26eda0dca0a3",
    sha256_amd64="e70531df676f742f96fa6a7a0c344f1dd91ed52697abc476cb628d52f756f5ea",
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
  docker buildx build --platform "linux/$ARCH" --provenance=false --pull --push \\
{args}    --file {shlex.quote(dockerfile)} --tag "$ref" .
fi
digest=$(digest_of "$IMAGE_TAG-$ARCH")
echo "$ref@$digest"
echo "$digest" > {DIGEST_FILE}
"""


def _soci_script(soci: SociRelease, min_layer_bytes: int) -> str:
    return f"""# SOCI index manifest v2: `soci convert` binds a SOCI index to each platform's image inside one
# OCI index, so the index travels with the tag (v1's separate `soci create` + `soci push` artifacts
# are deprecated and disabled by default in the snapshotter since v0.10).
case "$(uname -m)" in
  aarch64) host_arch=arm64; soci_sha256={soci.sha256_arm64} ;;
  x86_64) host_arch=amd64; soci_sha256={soci.sha256_amd64} ;;
  *) echo "unsupported build host $(uname -m)" >&2; exit 1 ;;
esac
curl -fsSL --retry 3 -o /tmp/soci.tar.gz \\
  "https://github.com/awslabs/soci-snapshotter/releases/download/v{soci.version}/soci-snapshotter-{soci.version}-linux-$host_arch-static.tar.gz"
echo "$soci_sha256  /tmp/soci.tar.gz" | sha256sum -c -
mkdir -p /tmp/soci && tar -xzf /tmp/soci.tar.gz -C /tmp/soci
install -m 0755 "$(find /tmp/soci -name soci -type f | head -n 1)" /usr/local/bin/soci
soci --version
command -v ctr >/dev/null 2>&1 || dnf install -y -q containerd
# A private containerd (own socket and root) next to Docker's: soci converts inside containerd's store.
state=/tmp/soci-containerd
sock="$state/containerd.sock"
mkdir -p "$state"
containerd --address "$sock" --root "$state/root" --state "$state/run" >"$state/log" 2>&1 &
containerd_pid=$!
trap 'kill "$containerd_pid" 2>/dev/null || true' EXIT
for _ in $(seq 1 30); do ctr --address "$sock" version >/dev/null 2>&1 && break; sleep 1; done
ctr --address "$sock" version >/dev/null || {{ cat "$state/log" >&2; exit 1; }}
password=$(aws ecr get-login-password --region "$AWS_REGION")
# Content only (no unpack): the foreign architecture's layers are indexed, never run.
ctr --address "$sock" content fetch --all-platforms --user "AWS:$password" "$plain"
if soci --address "$sock" --content-store containerd convert --all-platforms \\
    --min-layer-size {min_layer_bytes} "$plain" "$final" 2>&1 | tee /tmp/soci-convert.log; then
  ctr --address "$sock" images push --user "AWS:$password" "$final"
  echo true > {SOCI_FLAG_FILE}
elif grep -q "no ztocs created" /tmp/soci-convert.log; then
  # Every layer is below the minimum size: lazy loading would gain nothing, publish the plain list.
  echo "no layer reaches {min_layer_bytes} bytes: publishing $final without a SOCI index"
  docker buildx imagetools create --tag "$final" "$plain"
else
  exit 1
fi
"""


def manifest_script(*, platforms: Sequence[str], soci: SociRelease | None, min_layer_bytes: int) -> str:
    """One tag for all platforms: a manifest list, then (with `soci`) its SOCI-enabled v2 form."""
    sources = " ".join(f'"$REPOSITORY_URI:$IMAGE_TAG-{arch}"' for arch in platforms)
    if soci is None:
        publish = f"""  docker buildx imagetools create --tag "$final" {sources}
"""
    else:
        steps = _soci_script(soci, min_layer_bytes)
        publish = f"""  # The plain manifest list stays under its own tag: the SOCI-enabled image is built from it.
  plain="$REPOSITORY_URI:$IMAGE_TAG-multiarch"
  plain_digest=$(digest_of "$IMAGE_TAG-multiarch")
  if [[ -z $plain_digest ]]; then
    docker buildx imagetools create --tag "$plain" {sources}
  fi
{_indent(steps, 2)}
"""
    return f"""{_DIGEST_OF}
{_LOGIN}
final="$REPOSITORY_URI:$IMAGE_TAG"
echo false > {SOCI_FLAG_FILE}
existing=$(digest_of "$IMAGE_TAG")
if [[ -n $existing ]]; then
  echo "$final is already in ECR as $existing (tags are immutable): nothing to do"
else
{publish}fi
docker buildx imagetools inspect "$final" || true  # for the log only; ECR's answer below decides
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


def manifest_buildspec(*, platforms: Sequence[str], soci: SociRelease | None, min_layer_bytes: int) -> dict[str, Any]:
    script = manifest_script(platforms=platforms, soci=soci, min_layer_bytes=min_layer_bytes)
    commands = [_subshell(script), *_export_digest(), f"read -r SOCI_INDEXED < {SOCI_FLAG_FILE} && export SOCI_INDEXED"]
    return _spec(commands, ["IMAGE_DIGEST", "SOCI_INDEXED"])


def shell_of(buildspec: Mapping[str, Any]) -> str:
    """Every command of a buildspec as one bash script, for `bash -n` and shellcheck."""
    lines = ["#!/usr/bin/env bash"]
    for phase in buildspec["phases"].values():
        lines.extend(phase["commands"])
    return "\n".join(lines) + "\n"
