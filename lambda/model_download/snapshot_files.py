"""One file of a snapshot into S3, verified before its key exists, never over other bytes.

- LFS files (the weights, often tokenizer.json): the single-file copy (copy.copy_model — parallel ranged GETs
  into a multipart upload that completes only when the bytes hash to the sha256 the Hub's listing reports, with
  `If-None-Match: *`).
- Plain git files (config.json, tokenizer_config.json, the index, ...): the Hub refuses git files over 10 MB
  (larger ones must be LFS), so they are read whole into memory, checked against the listing's size and git blob
  OID, and written by one PutObject with `If-None-Match: *` and their `ChecksumSHA256` (S3 checks it).
Every object carries metadata `sha256` (+ `git-oid` for git files) — what a re-run and the manifest compare.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .copy import CopyRequest, copy_model, existing_object, hf_source, put_if_absent
from .errors import ChecksumMismatchError, DownloadError, ImmutableKeyError
from .hub import FileRef, Hub
from .repo_info import RepoFile, git_blob_id

MAX_GIT_FILE = 64 * 1024 * 1024  # the Hub keeps git files under 10 MB; anything bigger here is not one


@dataclass(frozen=True)
class Landed:
    """One file as it is in S3 now: the manifest's line."""

    path: str
    sha256: str
    size: int
    copied: bool


def _git_file_present(head: dict[str, Any] | None, f: RepoFile, *, bucket: str, key: str) -> str | None:
    """The object's sha256 when the key holds this git blob; None when free; refuses anything else."""
    if head is None:
        return None
    meta = head.get("Metadata", {})
    if meta.get("git-oid") == f.blob_id and head.get("ContentLength") == f.size and meta.get("sha256"):
        return meta["sha256"]
    raise ImmutableKeyError(
        f"s3://{bucket}/{key} already holds other bytes (git-oid {meta.get('git-oid') or 'unknown'}, "
        f"{head.get('ContentLength')} bytes) than {f.path} (git-oid {f.blob_id}); model keys are immutable and nothing "
        "was overwritten — delete that object first"
    )


def read_whole(hub: Hub, repo: str, commit: str, f: RepoFile) -> bytes:
    """A small file's bytes at `commit`, verified against the listing (sha256 for LFS, git OID otherwise)."""
    ref = FileRef(repo, f.path, commit)
    if f.size > MAX_GIT_FILE:
        raise DownloadError(f"{ref}: {f.size} bytes is too big to read whole")
    info = hub.info(ref)
    if info.size != f.size:
        raise ChecksumMismatchError(f"{ref}: the Hub lists {f.size} bytes but serves {info.size}; run again")
    data = bytes(hub.open(info).read_range(0, f.size - 1)) if f.size else b""
    if f.lfs:
        got = hashlib.sha256(data).hexdigest()
        if got != f.sha256:
            raise ChecksumMismatchError(
                f"sha256 mismatch for {ref}: expected {f.sha256}, the downloaded bytes hash to {got}"
            )
    elif f.blob_id is None:
        raise DownloadError(f"{ref}: the Hub lists no git OID for this file, so it cannot be verified")
    elif (got := git_blob_id(data)) != f.blob_id:
        raise ChecksumMismatchError(
            f"git OID mismatch for {ref}: expected {f.blob_id}, the downloaded bytes hash to {got}"
        )
    return data


def _put_git_file(s3, bucket: str, key: str, repo: str, commit: str, f: RepoFile, data: bytes) -> Landed:  # noqa: ANN001
    digest = hashlib.sha256(data)
    sha256 = digest.hexdigest()
    written = put_if_absent(
        s3,
        bucket=bucket,
        key=key,
        Body=data,
        ContentType="application/octet-stream",
        ChecksumSHA256=base64.b64encode(digest.digest()).decode(),
        Metadata={"sha256": sha256, "git-oid": f.blob_id or "", "hf-source": hf_source(repo, f.path, commit)},
    )
    if not written:  # another run wrote the key first: fine only if it holds this blob
        if _git_file_present(existing_object(s3, bucket, key), f, bucket=bucket, key=key) is None:
            raise DownloadError(f"s3://{bucket}/{key} was being written by another run at the same time; run again")
        return Landed(f.path, sha256, f.size, False)
    return Landed(f.path, sha256, f.size, True)


def copy_file(
    f: RepoFile,
    *,
    hub: Hub,
    s3,  # noqa: ANN001
    repo: str,
    commit: str,
    bucket: str,
    prefix: str,
    concurrency: int,
    part_size: int | None,
    cached: bytes | None = None,
    progress: Callable[[int], None] | None = None,
) -> Landed:
    """Copy `repo/f.path@commit` to `s3://bucket/<prefix><f.path>`; a key already holding it is left alone."""
    key = prefix + f.path
    if f.lfs:
        done = copy_model(
            CopyRequest(
                repo=repo,
                file=f.path,
                bucket=bucket,
                key_prefix="",
                revision=commit,
                sha256=f.sha256,
                concurrency=concurrency,
                part_size=part_size,
                dest_key=key,
            ),
            hub=hub,
            s3=s3,
            progress=progress,
        )
        if done.size != f.size:
            raise ChecksumMismatchError(
                f"{repo}/{f.path}@{commit}: the Hub lists {f.size} bytes, s3://{bucket}/{key} holds {done.size}"
            )
        return Landed(f.path, done.sha256, done.size, done.copied)
    held = _git_file_present(existing_object(s3, bucket, key), f, bucket=bucket, key=key)
    if held is not None:
        return Landed(f.path, held, f.size, False)
    data = cached if cached is not None else read_whole(hub, repo, commit, f)
    return _put_git_file(s3, bucket, key, repo, commit, f, data)
