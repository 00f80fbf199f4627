"""The copy job against real servers: the fake Hub (real GGUF bytes, Range, 302 to a CDN, 401/404) → moto S3."""

from __future__ import annotations

import base64
import hashlib
import json
import uuid
from pathlib import Path

import pytest

from model_download import (
    ChecksumMismatchError,
    CopyRequest,
    DownloadError,
    Hub,
    HubAuthError,
    HubError,
    HubNotFoundError,
    ImmutableKeyError,
    RetryPolicy,
    TokenError,
    copy_model,
    part_size_for,
    plan_parts,
    read_token,
)
from model_download.copy import MIB
from tests.runtime.model_download.constants import FILE, GATED_REPO, GOOD_TOKEN, PLAIN_REPO, PUBLIC_REPO
from tests.runtime.model_download.fake_hub import ServedFile

FAST_RETRY = RetryPolicy(attempts=5, backoff_seconds=0.01, max_backoff_seconds=0.05)
PART = 8 * MIB


def _hub(fake, token=None, source=None) -> Hub:  # noqa: ANN001
    return Hub(fake.url, token, token_source=source, retry=FAST_RETRY)


def _request(bucket: str, repo: str = PUBLIC_REPO, file: str = FILE, **kw) -> CopyRequest:  # noqa: ANN003
    revision = kw.pop("revision", "main")
    return CopyRequest(
        repo=repo,
        file=file,
        bucket=bucket,
        key_prefix=f"models/smollm2/{revision}",
        revision=revision,
        concurrency=kw.pop("concurrency", 4),
        part_size=kw.pop("part_size", PART),
        **kw,
    )


def _sha256_of_object(s3, bucket: str, key: str) -> str:  # noqa: ANN001
    h = hashlib.sha256()
    for chunk in s3.get_object(Bucket=bucket, Key=key)["Body"].iter_chunks(4 * MIB):
        h.update(chunk)
    return h.hexdigest()


def _composite_sha256(path, part_size: int) -> str:  # noqa: ANN001
    """S3's checksum of a multipart object: sha256 over the parts' sha256 digests (suffix "-<parts>" aside)."""
    digests = b""
    with open(path, "rb") as f:
        while block := f.read(part_size):
            digests += hashlib.sha256(block).digest()
    return base64.b64encode(hashlib.sha256(digests).digest()).decode()


def _nothing_left(s3, bucket: str, key: str) -> None:  # noqa: ANN001
    assert s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []
    versions = s3.list_object_versions(Bucket=bucket, Prefix=key)
    assert versions.get("Versions", []) == [] and versions.get("DeleteMarkers", []) == []


def test_clean_copy_lands_with_the_right_sha256(hub, served, s3, bucket) -> None:  # noqa: ANN001
    result = copy_model(_request(bucket), hub=_hub(hub), s3=s3)

    assert result.copied and result.size == served.size and result.sha256 == served.sha256
    assert result.key == f"models/smollm2/main/{FILE}"
    assert _sha256_of_object(s3, bucket, result.key) == served.sha256
    head = s3.head_object(Bucket=bucket, Key=result.key, ChecksumMode="ENABLED")
    assert head["Metadata"]["sha256"] == served.sha256
    assert head["Metadata"]["hf-source"] == f"{PUBLIC_REPO}/{FILE}@{hub.commit}"  # pinned to the commit the HEAD saw
    assert head["ChecksumSHA256"].split("-")[0] == _composite_sha256(served.path, PART)  # S3 checked every part
    assert result.version_id == head["VersionId"]
    # Parallel ranged GETs, one per part, the whole file exactly once.
    assert sorted(hub.stats.ranges) == sorted(f"{a}-{b}" for a, b in plan_parts(served.size, PART))
    assert hub.stats.bytes_served == served.size
    assert s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []


def test_a_dropped_connection_resumes_from_where_it_stopped(hub, served, s3, bucket) -> None:  # noqa: ANN001
    cut_at = 2 * PART
    hub.drop_once(cut_at, after=3 * MIB + 123)

    result = copy_model(_request(bucket), hub=_hub(hub), s3=s3)

    assert hub.stats.drops == 1
    assert f"{cut_at + 3 * MIB + 123}-{cut_at + PART - 1}" in hub.stats.ranges  # re-requested only the rest
    assert _sha256_of_object(s3, bucket, result.key) == served.sha256


def test_an_expired_cdn_url_is_resolved_again(hub, served, s3, bucket) -> None:  # noqa: ANN001
    hub.fail(PART, 403, times=1)  # signed CDN URLs expire during long copies

    result = copy_model(_request(bucket), hub=_hub(hub), s3=s3)

    assert hub.stats.heads == 2  # the first resolve, then one more for the fresh URL
    assert _sha256_of_object(s3, bucket, result.key) == served.sha256


def test_corrupted_bytes_fail_the_copy_and_leave_nothing(hub, served, s3, bucket) -> None:  # noqa: ANN001
    hub.corrupt(50_000_001)  # the CDN serves one flipped byte; sizes all match

    with pytest.raises(ChecksumMismatchError) as err:
        copy_model(_request(bucket), hub=_hub(hub), s3=s3)

    message = str(err.value)
    assert "sha256 mismatch" in message and PUBLIC_REPO in message and served.sha256 in message
    assert "\n" not in message
    assert hub.stats.bytes_served == served.size  # it really streamed everything before refusing to complete
    _nothing_left(s3, bucket, f"models/smollm2/main/{FILE}")


def test_a_range_that_keeps_failing_aborts_everything(hub, served, s3, bucket) -> None:  # noqa: ANN001
    hub.fail(3 * PART, 503, times=1000)

    with pytest.raises(HubError, match=rf"bytes {3 * PART}-{4 * PART - 1} failed 5 times in a row \(HTTP 503\)"):
        copy_model(_request(bucket), hub=_hub(hub), s3=s3)

    assert hub.stats.bytes_served < served.size  # the other ranges stopped instead of finishing a doomed copy
    _nothing_left(s3, bucket, f"models/smollm2/main/{FILE}")


def test_a_wrong_expected_sha256_fails_before_copying(hub, s3, bucket) -> None:  # noqa: ANN001
    wrong = "ab" * 32

    with pytest.raises(ChecksumMismatchError, match=f"expected {wrong}, the Hub reports"):
        copy_model(_request(bucket, sha256=wrong), hub=_hub(hub), s3=s3)

    assert hub.stats.gets == 0
    _nothing_left(s3, bucket, f"models/smollm2/main/{FILE}")


def test_a_second_run_copies_nothing(hub, served, s3, bucket) -> None:  # noqa: ANN001
    first = copy_model(_request(bucket), hub=_hub(hub), s3=s3)
    hub.reset()

    again = copy_model(_request(bucket), hub=_hub(hub), s3=s3)
    assert not again.copied and again.uri == first.uri and again.sha256 == served.sha256
    assert (hub.stats.gets, hub.stats.bytes_served) == (0, 0)
    assert hub.stats.heads == 1  # only to learn the sha256 to compare with

    pinned = copy_model(_request(bucket, sha256=served.sha256), hub=_hub(hub), s3=s3)
    assert not pinned.copied and pinned.size == served.size
    assert hub.stats.heads == 1  # a pinned sha256 does not even ask the Hub
    assert len(s3.list_object_versions(Bucket=bucket, Prefix=first.key)["Versions"]) == 1


def test_gated_model_with_a_token_from_secrets_manager(hub, served, s3, bucket) -> None:  # noqa: ANN001
    import boto3

    name = f"hf/token-{uuid.uuid4().hex[:6]}"
    boto3.client("secretsmanager").create_secret(Name=name, SecretString=json.dumps({"token": GOOD_TOKEN}))
    token, source = read_token(name)

    result = copy_model(_request(bucket, repo=GATED_REPO, concurrency=8), hub=_hub(hub, token, source), s3=s3)

    assert _sha256_of_object(s3, bucket, result.key) == served.sha256
    assert hub.stats.auth_seen_by_cdn == 0  # the token goes to the Hub only, never to the CDN


def test_gated_model_without_a_token_names_the_setting(hub, bucket, s3) -> None:  # noqa: ANN001
    with pytest.raises(HubAuthError) as err:
        copy_model(_request(bucket, repo=GATED_REPO), hub=_hub(hub), s3=s3)
    assert f"{GATED_REPO}/{FILE}@main needs a Hugging Face token (HTTP 401" in str(err.value)
    assert "token_secret_name" in str(err.value)


def test_a_bad_token_names_the_secret_and_never_shows_the_token(hub, bucket, s3) -> None:  # noqa: ANN001
    import boto3

    name = f"hf/bad-{uuid.uuid4().hex[:6]}"
    boto3.client("secretsmanager").create_secret(Name=name, SecretString="hf_not_a_real_token")
    token, source = read_token(name)

    with pytest.raises(HubAuthError) as err:
        copy_model(_request(bucket, repo=GATED_REPO), hub=_hub(hub, token, source), s3=s3)
    assert f"token from secret '{name}' was rejected" in str(err.value) and "(HTTP 401)" in str(err.value)
    assert "hf_not_a_real_token" not in str(err.value)
    _nothing_left(s3, bucket, f"models/smollm2/main/{FILE}")


def test_a_missing_secret_is_named(aws_env) -> None:  # noqa: ANN001
    with pytest.raises(TokenError, match="secret 'hf/does-not-exist' .* not found"):
        read_token("hf/does-not-exist")


@pytest.mark.parametrize(
    ("repo", "file", "revision", "reason"),
    [
        (PUBLIC_REPO, "missing-Q8_0.gguf", "main", "file not found"),
        ("nobody/nothing-here", FILE, "main", "repo not found"),
        (PUBLIC_REPO, FILE, "v9.9", "revision not found"),
    ],
)
def test_not_found_names_repo_and_file(hub, bucket, s3, repo, file, revision, reason) -> None:  # noqa: ANN001
    with pytest.raises(HubNotFoundError) as err:
        copy_model(_request(bucket, repo=repo, file=file, revision=revision), hub=_hub(hub), s3=s3)
    assert f"{repo}/{file}@{revision} not found on {hub.url} (HTTP 404: {reason})" in str(err.value)


def test_a_plain_git_file_needs_an_explicit_sha256(hub, s3, bucket) -> None:  # noqa: ANN001
    plain = hub.files[(PLAIN_REPO, "tiny.gguf")]
    with pytest.raises(DownloadError, match="reports no sha256"):
        copy_model(_request(bucket, repo=PLAIN_REPO, file="tiny.gguf"), hub=_hub(hub), s3=s3)

    result = copy_model(
        _request(bucket, repo=PLAIN_REPO, file="tiny.gguf", sha256=plain.sha256, part_size=5 * MIB),
        hub=_hub(hub),
        s3=s3,
    )
    assert result.parts == 2 and _sha256_of_object(s3, bucket, result.key) == plain.sha256


def test_part_sizes_fit_s3_limits_for_a_70b_file() -> None:
    forty_gb = 40 * 10**9
    assert part_size_for(forty_gb) == 16 * MIB and len(plan_parts(forty_gb, 16 * MIB)) == 2385
    huge = 400 * 10**9  # would need 23,842 parts of 16 MiB: grown to whole MiB until it fits 10,000
    part = part_size_for(huge)
    assert part == 39 * MIB and len(plan_parts(huge, part)) <= 10_000
    ranges = plan_parts(10, 4)
    assert ranges == [(0, 3), (4, 7), (8, 9)]


def test_requests_are_validated() -> None:
    with pytest.raises(DownloadError, match="owner/name"):
        CopyRequest(repo="no-slash", file=FILE, bucket="b", key_prefix="p").validate()
    with pytest.raises(DownloadError, match="64 hex"):
        CopyRequest(repo=PUBLIC_REPO, file=FILE, bucket="b", key_prefix="p", sha256="abc").validate()
    with pytest.raises(DownloadError, match="part size"):
        CopyRequest(repo=PUBLIC_REPO, file=FILE, bucket="b", key_prefix="p", part_size=MIB).validate()


# -- keys are immutable: a moving branch lands at a new key, an existing key is never overwritten --------------

NEXT_COMMIT = "7c0ffee5badc0de5eed1234567890abcdef01234"


@pytest.fixture
def moving(fake_hub, smollm2_gguf, tmp_path) -> tuple[str, ServedFile, Path]:  # noqa: ANN001
    """A repo of its own whose `main` will move: now 11 MiB of the real GGUF, next another 7 MiB of it."""
    fake_hub.reset()
    repo = f"acme-corp/moving-{uuid.uuid4().hex[:6]}"
    data = smollm2_gguf.read_bytes()[: 18 * MIB]
    first, second = tmp_path / "first.gguf", tmp_path / "second.gguf"
    first.write_bytes(data[: 11 * MIB])
    second.write_bytes(data[11 * MIB :])
    return repo, fake_hub.add_file(repo, FILE, first), second


def _pinned(bucket: str, repo: str, **kw) -> CopyRequest:  # noqa: ANN003
    return CopyRequest(
        repo=repo,
        file=FILE,
        bucket=bucket,
        key_prefix="models/moving",
        pin_commit=True,
        concurrency=2,
        part_size=5 * MIB,
        **kw,
    )


def _versions(s3, bucket: str, key: str) -> list[dict]:  # noqa: ANN001
    return [v for v in s3.list_object_versions(Bucket=bucket, Prefix=key).get("Versions", []) if v["Key"] == key]


def test_a_moved_branch_lands_at_a_new_key_and_leaves_the_first_untouched(hub, moving, s3, bucket) -> None:  # noqa: ANN001
    repo, first, second_path = moving
    before = copy_model(_pinned(bucket, repo), hub=_hub(hub), s3=s3)
    assert before.copied and before.commit == hub.commit
    assert before.key == f"models/moving/{hub.commit}/{FILE}"
    (version,) = _versions(s3, bucket, before.key)

    second = hub.push(repo, FILE, second_path, NEXT_COMMIT)  # `main` moves on; the deployment re-runs the job
    after = copy_model(_pinned(bucket, repo), hub=_hub(hub), s3=s3)

    assert after.copied and after.commit == NEXT_COMMIT and after.sha256 == second.sha256
    assert after.key == f"models/moving/{NEXT_COMMIT}/{FILE}" != before.key
    assert _sha256_of_object(s3, bucket, after.key) == second.sha256
    # What running instances and pods were given is still there, byte for byte, as the only version.
    assert _versions(s3, bucket, before.key) == [version]
    body = s3.get_object(Bucket=bucket, Key=before.key)["Body"].read()
    assert body == first.path.read_bytes()
    assert s3.head_object(Bucket=bucket, Key=before.key)["Metadata"]["hf-source"] == f"{repo}/{FILE}@{hub.commit}"


def test_an_existing_key_is_never_overwritten_with_other_bytes(hub, moving, s3, bucket) -> None:  # noqa: ANN001
    repo, first, second_path = moving
    # The old layout: a key named after the branch, not the commit.
    by_branch = CopyRequest(
        repo=repo, file=FILE, bucket=bucket, key_prefix="models/moving/main", concurrency=2, part_size=5 * MIB
    )
    copied = copy_model(by_branch, hub=_hub(hub), s3=s3)
    hub.push(repo, FILE, second_path, NEXT_COMMIT)
    hub.reset()

    with pytest.raises(ImmutableKeyError) as err:
        copy_model(by_branch, hub=_hub(hub), s3=s3)

    message = str(err.value)
    assert f"s3://{bucket}/{copied.key} already holds other bytes (sha256 {first.sha256}" in message
    assert "nothing was overwritten" in message and "\n" not in message
    assert hub.stats.bytes_served == 0  # refused before downloading anything
    (only,) = _versions(s3, bucket, copied.key)
    assert only["VersionId"] == copied.version_id and _sha256_of_object(s3, bucket, copied.key) == first.sha256


def test_a_revision_that_resolves_to_an_existing_key_copies_nothing(hub, moving, s3, bucket) -> None:  # noqa: ANN001
    repo, first, second_path = moving
    old_commit = hub.commit
    before = copy_model(_pinned(bucket, repo), hub=_hub(hub), s3=s3)
    hub.push(repo, FILE, second_path, NEXT_COMMIT)
    hub.reset()

    again = copy_model(_pinned(bucket, repo, revision=old_commit), hub=_hub(hub), s3=s3)  # the commit main was at
    assert (again.copied, again.key, again.sha256, again.commit) == (False, before.key, first.sha256, old_commit)
    assert (hub.stats.heads, hub.stats.bytes_served) == (1, 0)

    pinned = copy_model(_pinned(bucket, repo, revision=old_commit, sha256=first.sha256), hub=_hub(hub), s3=s3)
    assert not pinned.copied and pinned.key == before.key and pinned.commit == old_commit
    assert hub.stats.heads == 1  # a full commit + sha256 name the key: the Hub is not even asked
    assert len(_versions(s3, bucket, before.key)) == 1


def test_a_run_that_loses_the_race_for_its_key_never_overwrites(hub, moving, s3, bucket) -> None:  # noqa: ANN001
    repo, first, _ = moving
    key = f"models/moving/{hub.commit}/{FILE}"

    def another_run_finishes_first(_size: int, _sha256: str) -> None:
        s3.put_object(Bucket=bucket, Key=key, Body=b"not the model", Metadata={"sha256": "0" * 64})

    # S3 itself refuses the overwrite (CompleteMultipartUpload with If-None-Match: *), after the HEAD found nothing.
    with pytest.raises(ImmutableKeyError, match="already holds other bytes"):
        copy_model(_pinned(bucket, repo), hub=_hub(hub), s3=s3, on_start=another_run_finishes_first)
    assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == b"not the model"
    assert len(_versions(s3, bucket, key)) == 1
    assert s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []
