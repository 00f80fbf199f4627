"""A stand-in `docker` CLI for running the buildspec scripts on this machine, which has no Docker
engine: it records every call and makes `buildx build --push` and `buildx imagetools create` put a
manifest into the ECR the scripts talk to (moto's server), so the scripts' ECR checks see real state.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys

import boto3

DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"


def _ecr():
    return boto3.client("ecr", endpoint_url=os.environ["AWS_ENDPOINT_URL"], region_name=os.environ["AWS_REGION"])


def _split(ref: str) -> tuple[str, str]:
    uri, tag = ref.rsplit(":", 1)
    return uri.split("/", 1)[1], tag


def _option(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


def _build(args: list[str]) -> int:
    if os.environ.get("FAKE_DOCKER_BUILD_FAILS"):
        print("ERROR: failed to solve: process did not complete successfully", file=sys.stderr)
        return 1
    dockerfile = _option(args, "--file")
    if args[-1] != "." or not os.path.isfile(dockerfile):
        print(f"ERROR: unable to prepare context: {dockerfile} not found in {os.getcwd()}", file=sys.stderr)
        return 1
    # What the build would have seen: the context's files and which of them are executable.
    files = sorted(os.path.relpath(os.path.join(d, f)) for d, _, names in os.walk(".") for f in names)
    with open(os.environ["FAKE_DOCKER_LOG"] + ".context", "w", encoding="utf-8") as seen:
        json.dump({"files": files, "executable": [f for f in files if os.access(f, os.X_OK)]}, seen)
    ref, platform = _option(args, "--tag"), _option(args, "--platform")
    repo, tag = _split(ref)
    layer = "sha256:" + hashlib.sha256(f"{ref}|{platform}".encode()).hexdigest()
    manifest = {
        "schemaVersion": 2,
        "mediaType": DOCKER_MANIFEST,
        "config": {"mediaType": "application/vnd.docker.container.image.v1+json", "digest": layer, "size": 1},
        "layers": [{"mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip", "digest": layer, "size": 1}],
    }
    _ecr().put_image(repositoryName=repo, imageTag=tag, imageManifest=json.dumps(manifest), imageManifestMediaType=DOCKER_MANIFEST)
    return 0


def _imagetools_create(args: list[str]) -> int:
    ref = _option(args, "--tag")
    repo, tag = _split(ref)
    sources = [a for a in args[3:] if a not in ("--tag", ref)]
    children = []
    for source in sources:
        source_repo, source_tag = _split(source)
        detail = _ecr().describe_images(repositoryName=source_repo, imageIds=[{"imageTag": source_tag}])["imageDetails"][0]
        children.append({"mediaType": DOCKER_MANIFEST, "digest": detail["imageDigest"], "size": 1,
                         "platform": {"os": "linux", "architecture": source_tag.rsplit("-", 1)[1]}})
    index = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": children}
    _ecr().put_image(repositoryName=repo, imageTag=tag, imageManifest=json.dumps(index), imageManifestMediaType=OCI_INDEX)
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
        print(f"Name: {args[3]}")
        return 0
    print(f"fake docker: unsupported call {args}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
