"""A vLLM model's safetensors snapshot against real servers: the fake Hub (model-info API, LFS files behind a CDN
redirect, plain git files) → moto's S3 server. Every byte is checked against the files on disk, not against what
the job reports."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

import pytest

from model_download import (
    ChecksumMismatchError,
    Hub,
    HubAuthError,
    HubNotFoundError,
    ImmutableKeyError,
    RetryPolicy,
    SnapshotError,
    SnapshotRequest,
    copy_snapshot,
)
from model_download.snapshot import MANIFEST_NAME
from tests.runtime.model_download.constants import GOOD_TOKEN
from tests.runtime.model_download.fake_hub import FakeHub, sha256_file
from tests.runtime.model_download.snapshot_repo import (
    BIN_ONLY,
    CORRUPT,
    GATED,
    INDEX,
    MOVING,
    REPO,
    SELECTED,
    SHARD_1,
    SHARD_2,
    SKIPPED,
)

FAST_RETRY = RetryPolicy(attempts=3, backoff_seconds=0.01, max_backoff_seconds=0.02)
PART = 5 * 1024 * 1024  # S3's minimum: shard 1 (12 MiB) is copied as 3 parts


@pytest.fixture
def hub(snap_hub: FakeHub) -> FakeHub:
    snap_hub.reset()
    return snap_hub


def _copy(hub: FakeHub, s3, bucket: str, repo: str = REPO, revision: str = "main"):  # noqa: ANN001, ANN202
    req = SnapshotRequest(
        repo=repo, revision=revision, bucket=bucket, key_prefix="models/tiny", concurrency=3, part_size=PART
    )
    return copy_snapshot(req, hub=Hub(hub.url, retry=FAST_RETRY), s3=s3)


def _objects(s3, bucket: str, prefix: str = "") -> dict[str, str]:  # noqa: ANN001
    """key -> sha256 of the bytes S3 returns, for every current object under prefix."""
    out = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for obj in page.get("Contents", []):
            out[obj["Key"]] = hashlib.sha256(s3.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read()).hexdigest()
    return out


def _versions(s3, bucket: str, prefix: str) -> list[tuple[str, str]]:  # noqa: ANN001
    listed = s3.list_object_versions(Bucket=bucket, Prefix=prefix)
    return sorted((v["Key"], v["VersionId"]) for v in [*listed.get("Versions", []), *listed.get("DeleteMarkers", [])])


def _expected_manifest(root: Path, names) -> str:  # noqa: ANN001
    return "".join(f"{n} {sha256_file(root / n)} {(root / n).stat().st_size}\n" for n in sorted(names))


def test_the_snapshot_lands_at_the_commit_prefix_with_every_byte_verified(hub, checkpoint, s3, bucket) -> None:  # noqa: ANN001
    result = _copy(hub, s3, bucket)

    prefix = f"models/tiny/{hub.commit_of(REPO)}/"
    assert result.prefix == prefix and result.commit == hub.commit_of(REPO)
    # Exactly what vLLM loads (the indexed shards, index, config, tokenizer), each with the bytes on disk, and the
    # manifest; never the duplicate consolidated.safetensors, the .bin, original/ or the README.
    want = {prefix + name: sha256_file(checkpoint.path(name)) for name in SELECTED}
    manifest = _expected_manifest(checkpoint.root, SELECTED)
    want[prefix + MANIFEST_NAME] = hashlib.sha256(manifest.encode()).hexdigest()
    assert _objects(s3, bucket) == want
    assert s3.get_object(Bucket=bucket, Key=prefix + MANIFEST_NAME)["Body"].read().decode() == manifest
    assert result.sha256 == hashlib.sha256(manifest.encode()).hexdigest() and len(result.files) == len(SELECTED)
    assert result.size == sum(checkpoint.path(n).stat().st_size for n in SELECTED) and result.copied == len(SELECTED)
    # S3 checked each part's checksum too (multipart for the LFS shards, one PutObject for git files).
    head = s3.head_object(Bucket=bucket, Key=prefix + SHARD_1, ChecksumMode="ENABLED")
    parts = hashlib.sha256(
        b"".join(
            hashlib.sha256(checkpoint.path(SHARD_1).read_bytes()[i : i + PART]).digest()
            for i in range(0, checkpoint.path(SHARD_1).stat().st_size, PART)
        )
    ).digest()
    assert head["ChecksumSHA256"].split("-")[0] == base64.b64encode(parts).decode()  # composite of 3 part checksums
    assert head["Metadata"]["sha256"] == want[prefix + SHARD_1]
    config = s3.head_object(Bucket=bucket, Key=prefix + "config.json", ChecksumMode="ENABLED")
    assert config["Metadata"]["git-oid"] == hub.files[(REPO, "config.json")].git_sha1
    assert not set(SKIPPED) & {k.removeprefix(prefix) for k in _objects(s3, bucket)}
    assert s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []


def test_a_rerun_copies_nothing_and_a_pinned_commit_asks_no_hub(hub, s3, bucket) -> None:  # noqa: ANN001
    first = _copy(hub, s3, bucket)
    before = _versions(s3, bucket, "models/")
    hub.reset()

    again = _copy(hub, s3, bucket)
    assert (again.copied, again.sha256, again.prefix) == (0, first.sha256, first.prefix)
    assert hub.stats.bytes_served == 0 and hub.stats.model_infos == 1  # one listing resolves the branch, no bytes
    pinned = _copy(hub, s3, bucket, revision=first.commit)
    assert pinned.sha256 == first.sha256 and hub.stats.model_infos == 1 and hub.stats.heads == 0  # sealed: no Hub call
    assert _versions(s3, bucket, "models/") == before  # not one new version


def test_a_moved_branch_lands_at_a_new_prefix_and_leaves_the_first_untouched(
    hub, checkpoint, s3, bucket, tmp_path
) -> None:  # noqa: ANN001
    first = _copy(hub, s3, bucket, MOVING)
    old = _versions(s3, bucket, first.prefix)
    old_bytes = _objects(s3, bucket, first.prefix)
    new_shard = tmp_path / SHARD_2
    new_shard.write_bytes(checkpoint.path(SHARD_2).read_bytes()[:-1] + b"\x01")  # same size, one byte differs
    hub.push(MOVING, SHARD_2, new_shard, "2222222222222222222222222222222222222222")

    second = _copy(hub, s3, bucket, MOVING)

    assert (
        second.commit == "2222222222222222222222222222222222222222"
        and second.prefix == "models/tiny/2222222222222222222222222222222222222222/"
    )
    assert second.sha256 != first.sha256
    assert _versions(s3, bucket, first.prefix) == old and _objects(s3, bucket, first.prefix) == old_bytes
    assert _objects(s3, bucket, second.prefix)[second.prefix + SHARD_2] == sha256_file(new_shard)
    # The old commit stays reachable by its sha: the sealed prefix is found without copying.
    assert _copy(hub, s3, bucket, MOVING, revision=first.commit).sha256 == first.sha256


def test_a_corrupted_shard_fails_names_the_file_and_leaves_nothing_that_looks_complete(hub, s3, bucket) -> None:  # noqa: ANN001
    prefix = f"models/tiny/{hub.commit_of(CORRUPT)}/"

    with pytest.raises(ChecksumMismatchError) as err:
        _copy(hub, s3, bucket, CORRUPT)

    message = str(err.value)
    assert "\n" not in message and f"{SHARD_2} failed: sha256 mismatch for {CORRUPT}/{SHARD_2}@" in message
    assert "no manifest was written" in message
    left = _objects(s3, bucket, prefix)
    # No seal, no config.json (vLLM refuses a directory without it), nothing — not even a version — of the bad shard.
    assert prefix + MANIFEST_NAME not in left and prefix + "config.json" not in left
    assert not [k for k, _ in _versions(s3, bucket, prefix + SHARD_2)]
    assert s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []
    # A re-run does not mistake the leftovers for a snapshot: it fails the same way.
    with pytest.raises(ChecksumMismatchError):
        _copy(hub, s3, bucket, CORRUPT)


def test_a_repo_with_only_bin_weights_is_refused_in_one_line(hub, s3, bucket) -> None:  # noqa: ANN001
    with pytest.raises(SnapshotError) as err:
        _copy(hub, s3, bucket, BIN_ONLY)

    assert str(err.value) == (
        f"{BIN_ONLY}@main ({hub.commit_of(BIN_ONLY)}) has no *.safetensors weights in its root (it has only *.bin weights): "
        "vLLM models are copied as safetensors snapshots; pick a safetensors repo (or a GGUF file with engine llama.cpp)"
    )
    assert hub.stats.gets == 0 and _objects(s3, bucket) == {}


@pytest.mark.parametrize(
    ("repo", "revision", "reason"), [("acme-corp/nope", "main", "repo not found"), (REPO, "v9.9", "revision not found")]
)
def test_an_unknown_repo_or_revision_is_one_line(hub, s3, bucket, repo: str, revision: str, reason: str) -> None:  # noqa: ANN001
    with pytest.raises(HubNotFoundError) as err:
        _copy(hub, s3, bucket, repo, revision=revision)

    assert (
        str(err.value) == f"{repo}@{revision} not found on {hub.url} (HTTP 404: {reason}): check hf_repo and revision"
    )


def test_a_gated_repo_needs_the_token_which_never_reaches_the_cdn(hub, s3, bucket) -> None:  # noqa: ANN001
    with pytest.raises(
        HubAuthError,
        match=rf"^snapshot {GATED}@main \(.*\): {INDEX} failed: {GATED}/{INDEX}@.* needs a Hugging Face token",
    ):
        _copy(hub, s3, bucket, GATED)

    req = SnapshotRequest(repo=GATED, bucket=bucket, key_prefix="models/tiny", concurrency=3, part_size=PART)
    result = copy_snapshot(req, hub=Hub(hub.url, GOOD_TOKEN, retry=FAST_RETRY), s3=s3)
    assert len(result.files) == len(SELECTED) and hub.stats.auth_seen_by_cdn == 0


def test_a_renamed_repo_is_followed_to_its_new_name(hub, checkpoint, s3, bucket) -> None:  # noqa: ANN001
    hub.renamed["acme-corp/old-tiny-llama"] = REPO
    try:
        result = _copy(hub, s3, bucket, "acme-corp/old-tiny-llama")
    finally:
        hub.renamed.clear()

    assert result.commit == hub.commit_of(REPO) and len(result.files) == len(SELECTED)
    assert _objects(s3, bucket, result.prefix + SHARD_2) == {
        result.prefix + SHARD_2: sha256_file(checkpoint.path(SHARD_2))
    }


def test_a_key_holding_other_bytes_is_never_overwritten(hub, s3, bucket) -> None:  # noqa: ANN001
    key = f"models/tiny/{hub.commit_of(REPO)}/config.json"
    s3.put_object(Bucket=bucket, Key=key, Body=b'{"someone": "else"}')

    with pytest.raises(ImmutableKeyError, match=r"config\.json failed: s3://.*config\.json already holds other bytes"):
        _copy(hub, s3, bucket)

    assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == b'{"someone": "else"}'
    assert f"models/tiny/{hub.commit_of(REPO)}/{MANIFEST_NAME}" not in _objects(s3, bucket)
