"""A stand-in `docker` CLI for running the buildspec scripts on this machine, which has no Docker
engine: it records every call and makes `buildx build` and `buildx imagetools create` put what the
real tools would push into the ECR the scripts talk to (moto's server), so the scripts' ECR checks
see real state — including the media types, which decide whether SageMaker accepts the image.

Media types, per flag, as documented and implemented upstream:
- `buildx build` (BuildKit image exporter): Docker v2 schema 2 types unless `oci-mediatypes=true`
  (default false for type=image/registry: https://docs.docker.com/build/exporters/image-registry/);
  attestations (`--provenance`, on by default in buildx ≥ 0.10 unless `=false`; `--sbom=true`;
  `--attest`), `--annotation`s and zstd/estargz compression force OCI types
  (moby/buildkit exporter/containerimage/writer.go `EnableOCITypes("attestations")`, opts.go
  `OnlySupportOCITypes()` / `EnableOCITypes("annotations")`). With attestations the tag is an index
  holding the image and an attestation manifest (platform unknown/unknown,
  `vnd.docker.reference.type: attestation-manifest`; docs.docker.com/build/metadata/attestations/
  attestation-storage).
- `buildx imagetools create`: a Docker manifest list when every child is a Docker type and no
  annotation is given, else an OCI index; one source that is already a list/index is copied as is
  (docker/buildx util/imagetools/create.go `Combine`).
FAKE_DOCKER_OCI_DEFAULT=1 models a builder whose default is OCI (e.g. a containerd image store) when
no `oci-mediatypes` is given.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys

import boto3

DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
DOCKER_CONFIG = "application/vnd.docker.container.image.v1+json"
DOCKER_LAYER = "application/vnd.docker.image.rootfs.diff.tar.gzip"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
LISTS = (DOCKER_LIST, OCI_INDEX)


def _ecr():
    return boto3.client("ecr", endpoint_url=os.environ["AWS_ENDPOINT_URL"], region_name=os.environ["AWS_REGION"])


def _split(ref: str) -> tuple[str, str]:
    uri, tag = ref.rsplit(":", 1)
    return uri.split("/", 1)[1], tag


def _option(args: list[str], name: str) -> str | None:
    """`--name value` or `--name=value` (last one wins, as in the real CLI)."""
    found = None
    for i, a in enumerate(args):
        if a == name and i + 1 < len(args):
            found = args[i + 1]
        elif a.startswith(name + "="):
            found = a[len(name) + 1 :]
    return found


def _options(args: list[str], name: str) -> list[str]:
    return [args[i + 1] for i, a in enumerate(args) if a == name and i + 1 < len(args)] + [
        a[len(name) + 1 :] for a in args if a.startswith(name + "=")
    ]


def _false(value: str | None) -> bool:
    return value is not None and value.split(",")[0] in ("false", "0", "disabled=true")


def _put(tag_ref: str, doc: dict, media_type: str) -> None:
    repo, tag = _split(tag_ref)
    body = json.dumps(doc)
    # A registry names a manifest by the sha256 of its bytes.
    _ecr().put_image(
        repositoryName=repo,
        imageTag=tag,
        imageManifest=body,
        imageManifestMediaType=media_type,
        imageDigest="sha256:" + hashlib.sha256(body.encode()).hexdigest(),
    )


def build_media_types(args: list[str]) -> tuple[bool, bool]:
    """(OCI types?, attestations?) for a `buildx build` command line, as BuildKit decides them."""
    output = _option(args, "--output") or _option(args, "-o") or ""
    params = dict(p.split("=", 1) for p in output.split(",") if "=" in p)
    attestations = (
        not _false(_option(args, "--provenance")) and os.environ.get("BUILDX_NO_DEFAULT_ATTESTATIONS") is None
    )
    sbom = _option(args, "--sbom")
    attestations |= sbom is not None and not _false(sbom)
    attestations |= any(not a.endswith("disabled=true") for a in _options(args, "--attest"))
    default_oci = "true" if os.environ.get("FAKE_DOCKER_OCI_DEFAULT") else "false"
    oci = params.get("oci-mediatypes", default_oci) == "true"
    oci |= params.get("compression", "gzip") in ("zstd", "estargz")
    oci |= bool(_options(args, "--annotation"))
    oci |= attestations  # BuildKit: EnableOCITypes("attestations")
    return oci, attestations


def _pushes(args: list[str]) -> bool:
    output = _option(args, "--output") or _option(args, "-o") or ""
    params = dict(p.split("=", 1) for p in output.split(",") if "=" in p)
    return (
        "--push" in args
        or params.get("type") == "registry"
        or (params.get("type") == "image" and params.get("push") == "true")
    )


def _build(args: list[str]) -> int:
    if os.environ.get("FAKE_DOCKER_BUILD_FAILS"):
        print("ERROR: failed to solve: process did not complete successfully", file=sys.stderr)
        return 1
    dockerfile = _option(args, "--file")
    if args[-1] != "." or not dockerfile or not os.path.isfile(dockerfile):
        print(f"ERROR: unable to prepare context: {dockerfile} not found in {os.getcwd()}", file=sys.stderr)
        return 1
    # What the build would have seen: the context's files and which of them are executable.
    files = sorted(os.path.relpath(os.path.join(d, f)) for d, _, names in os.walk(".") for f in names)
    with open(os.environ["FAKE_DOCKER_LOG"] + ".context", "w", encoding="utf-8") as seen:
        json.dump({"files": files, "executable": [f for f in files if os.access(f, os.X_OK)]}, seen)
    ref, platform = _option(args, "--tag"), _option(args, "--platform")
    if not ref or not platform:
        print("ERROR: fake docker needs --tag and --platform", file=sys.stderr)
        return 1
    if not _pushes(args):
        return 0  # built into the builder's cache only: nothing reaches ECR
    oci, attestations = build_media_types(args)
    layer = "sha256:" + hashlib.sha256(f"{ref}|{platform}".encode()).hexdigest()
    manifest = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST if oci else DOCKER_MANIFEST,
        "config": {"mediaType": OCI_CONFIG if oci else DOCKER_CONFIG, "digest": layer, "size": 1},
        "layers": [{"mediaType": OCI_LAYER if oci else DOCKER_LAYER, "digest": layer, "size": 1}],
    }
    if not attestations:
        _put(ref, manifest, manifest["mediaType"])
        return 0
    os_, arch = platform.split("/")[:2]
    image_digest = "sha256:" + hashlib.sha256(json.dumps(manifest).encode()).hexdigest()
    index = {
        "schemaVersion": 2,
        "mediaType": OCI_INDEX,
        "manifests": [
            {
                "mediaType": OCI_MANIFEST,
                "digest": image_digest,
                "size": 1,
                "platform": {"os": os_, "architecture": arch},
            },
            {
                "mediaType": OCI_MANIFEST,
                "digest": "sha256:" + hashlib.sha256(image_digest.encode()).hexdigest(),
                "size": 1,
                "platform": {"os": "unknown", "architecture": "unknown"},
                "annotations": {
                    "vnd.docker.reference.type": "attestation-manifest",
                    "vnd.docker.reference.digest": image_digest,
                },
            },
        ],
    }
    _put(ref, index, OCI_INDEX)
    return 0


def _stored(ref: str) -> tuple[dict, str, str]:
    repo, tag = _split(ref)
    image = _ecr().batch_get_image(repositoryName=repo, imageIds=[{"imageTag": tag}])["images"][0]
    return json.loads(image["imageManifest"]), image["imageManifestMediaType"], image["imageId"]["imageDigest"]


def _imagetools_create(args: list[str]) -> int:
    ref = _option(args, "--tag") or _option(args, "-t")
    if not ref:
        print("ERROR: fake docker imagetools create needs --tag", file=sys.stderr)
        return 1
    annotations = _options(args, "--annotation")
    skip = {"--tag", "-t", "--annotation", ref, *annotations}
    sources = [a for a in args[3:] if a not in skip and not a.startswith("--")]
    stored = [_stored(s) for s in sources]
    if len(stored) == 1 and stored[0][1] in LISTS and not annotations:
        _put(ref, stored[0][0], stored[0][1])  # a carbon copy
        return 0
    children = []
    for source, (doc, media, digest) in zip(sources, stored, strict=True):
        if media in LISTS:
            children.extend(doc["manifests"])
        else:
            children.append(
                {
                    "mediaType": media,
                    "digest": digest,
                    "size": 1,
                    "platform": {"os": "linux", "architecture": source.rsplit("-", 1)[1]},
                }
            )
    docker = all(c["mediaType"].startswith("application/vnd.docker.") for c in children) and not annotations
    media = DOCKER_LIST if docker else OCI_INDEX
    _put(ref, {"schemaVersion": 2, "mediaType": media, "manifests": children}, media)
    return 0


def main(args: list[str]) -> int:
    with open(os.environ["FAKE_DOCKER_LOG"], "a", encoding="utf-8") as log:
        log.write(json.dumps(args) + "\n")
    if args[:1] == ["login"]:
        if not sys.stdin.read().strip():
            print("Error: password is empty", file=sys.stderr)
            return 1
        print("Login Succeeded")
        return 0
    if args[:2] == ["buildx", "version"]:
        print("github.com/docker/buildx v0.0.0-fake")
        return 0
    if args[:2] == ["buildx", "build"]:
        return _build(args)
    if args[:3] == ["buildx", "imagetools", "create"]:
        return _imagetools_create(args)
    if args[:3] == ["buildx", "imagetools", "inspect"]:
        doc, _, _ = _stored(args[-1])
        print(json.dumps(doc, indent=2) if "--raw" in args else f"Name: {args[-1]}")
        return 0
    print(f"fake docker: unsupported call {args}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
