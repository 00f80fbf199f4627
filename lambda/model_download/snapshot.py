"""A vLLM model's safetensors snapshot: every file vLLM loads from a Hub repo at one commit, copied to
`<key_prefix>/<commit>/<file>` and sealed by a manifest written last.

Steps: list the repo at the revision (one model-info call: the commit and every file's size and hash), select
what vLLM loads (snapshot_select), copy each file verified (snapshot_files; a key already holding it is skipped —
a re-run or a resumed run copies only what is missing), then write `<prefix>cpu-inference.manifest` — sorted
`<path> <sha256> <size>` lines — with `If-None-Match: *`.

"No partial snapshot": S3 has no atomic multi-object write, so completeness is a marker, not a rename (staging
and then copying to the final keys would double the bytes written and could itself stop half-way). Each file's
key exists only once its bytes verified; config.json is copied after every weight and tokenizer file, so an
interrupted prefix is not a checkpoint vLLM loads ("no config.json"); the manifest exists only when every file is
in place, and its sha256 is the receipt's `Sha256` — consumers fetch the manifest, check it against that digest,
then fetch and check exactly the files it lists. The deployment (the custom resource) succeeds only with a
manifest, so nothing is ever served from an unsealed prefix. The manifest never changes once written: the keys
below it are immutable, and a run that finds a manifest with other contents fails.
"""

from __future__ import annotations

import base64
import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass

from .copy import COMMIT, DEFAULT_CONCURRENCY, existing_object, put_if_absent
from .errors import DownloadError, ImmutableKeyError
from .hub import DEFAULT_REVISION, Hub
from .repo_info import RepoFile, list_repo
from .snapshot_files import Landed, copy_file, read_whole
from .snapshot_select import (
    AUTO_MAP_FILES,
    INDEX_FILE,
    auto_map,
    indexed_shards,
    refuse_remote_code,
    refuse_without_safetensors,
    select,
)

MANIFEST_NAME = "cpu-inference.manifest"


@dataclass(frozen=True)
class SnapshotRequest:
    repo: str
    bucket: str
    key_prefix: str  # `models/<name>`: the snapshot lands at `<key_prefix>/<commit>/`
    revision: str = DEFAULT_REVISION
    concurrency: int = DEFAULT_CONCURRENCY
    part_size: int | None = None
    # A repo whose config maps auto classes to its own *.py (auto_map) is refused unless this is set; then its
    # root *.py are copied too (and vLLM must run with --trust-remote-code).
    trust_remote_code: bool = False

    def prefix_for(self, commit: str) -> str:
        return f"{self.key_prefix.strip('/')}/{commit}/"

    def validate(self) -> None:
        from .catalog import REPO, REVISION

        if not REPO.match(self.repo):
            raise DownloadError(f"repo must look like owner/name, got {self.repo!r}")
        if not REVISION.match(self.revision) or ".." in self.revision.split("/"):
            raise DownloadError(f"revision must be a branch, tag or commit, got {self.revision!r}")
        if not self.bucket or not self.key_prefix.strip("/"):
            raise DownloadError("bucket and key prefix must not be empty")
        if not 1 <= self.concurrency <= 64:
            raise DownloadError(f"concurrency must be 1..64, got {self.concurrency}")


@dataclass(frozen=True)
class SnapshotResult:
    bucket: str
    prefix: str  # `<key_prefix>/<commit>/`
    commit: str
    sha256: str  # of the manifest's bytes
    files: tuple[Landed, ...]
    seconds: float

    @property
    def copied(self) -> int:
        return sum(1 for f in self.files if f.copied)

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def manifest_key(self) -> str:
        return self.prefix + MANIFEST_NAME

    @property
    def uri(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"


def manifest_text(files: list[Landed] | tuple[Landed, ...]) -> str:
    """The manifest: one `<path> <sha256> <size>` line per file, sorted by path (names carry no spaces)."""
    return "".join(f"{f.path} {f.sha256} {f.size}\n" for f in sorted(files, key=lambda f: f.path))


def parse_manifest(text: str, where: str) -> tuple[Landed, ...]:
    files = []
    for line in text.splitlines():
        parts = line.split(" ")
        if len(parts) != 3 or len(parts[1]) != 64 or not parts[2].isdigit():
            raise DownloadError(f"{where} is not a snapshot manifest (line {line[:80]!r})")
        files.append(Landed(parts[0], parts[1], int(parts[2]), False))
    if not files:
        raise DownloadError(f"{where} is an empty snapshot manifest")
    return tuple(files)


def _read_manifest(s3, bucket: str, key: str) -> bytes | None:  # noqa: ANN001
    if existing_object(s3, bucket, key) is None:
        return None
    return s3.get_object(Bucket=bucket, Key=key)["Body"].read()


def _check_in_place(s3, bucket: str, prefix: str, files: tuple[Landed, ...]) -> None:  # noqa: ANN001
    """Every file a manifest lists is at its key with its sha256 and size (a HEAD each, no bytes)."""
    for f in files:
        head = existing_object(s3, bucket, prefix + f.path)
        if head is None or head.get("Metadata", {}).get("sha256") != f.sha256 or head.get("ContentLength") != f.size:
            raise DownloadError(
                f"s3://{bucket}/{prefix}{f.path} is missing or differs from the snapshot's manifest; "
                "the snapshot at that prefix was altered — delete the prefix and run again"
            )


def _write_manifest(s3, bucket: str, key: str, body: bytes, digest: str, source: str) -> None:  # noqa: ANN001
    written = put_if_absent(
        s3,
        bucket=bucket,
        key=key,
        Body=body,
        ContentType="text/plain; charset=utf-8",
        ChecksumSHA256=base64.b64encode(hashlib.sha256(body).digest()).decode(),
        Metadata={"sha256": digest, "hf-source": source},
    )
    if not written:
        held = _read_manifest(s3, bucket, key)
        if held is None:
            raise DownloadError(f"s3://{bucket}/{key} was being written by another run at the same time; run again")
        if held != body:
            raise ImmutableKeyError(f"s3://{bucket}/{key} already holds another manifest; nothing was overwritten")


def copy_snapshot(
    req: SnapshotRequest,
    *,
    hub: Hub,
    s3=None,  # noqa: ANN001
    log: Callable[[str], None] = lambda _line: None,
    progress: Callable[[int], None] | None = None,
) -> SnapshotResult:
    """Copy the repo's safetensors snapshot at `req.revision`; a sealed snapshot already there copies nothing."""
    from .copy import s3_client

    req.validate()
    began = time.monotonic()
    s3 = s3 or s3_client(req.concurrency)
    # A full commit sha whose snapshot is sealed: not even the Hub is asked.
    if COMMIT.match(req.revision):
        sealed = _sealed(s3, req, req.revision)
        if sealed is not None:
            return SnapshotResult(
                req.bucket, req.prefix_for(req.revision), req.revision, *sealed, time.monotonic() - began
            )

    listing = list_repo(hub, req.repo, req.revision)
    commit, where = listing.commit, f"{req.repo}@{req.revision} ({listing.commit})"
    prefix = req.prefix_for(commit)
    sealed = _sealed(s3, req, commit)
    if sealed is not None:
        return SnapshotResult(req.bucket, prefix, commit, *sealed, time.monotonic() - began)

    refuse_without_safetensors(listing.files, where)  # before a single byte is read
    cache: dict[str, bytes] = {}
    # Read first (small git files, kept for the copy): the index's weight_map decides which shards are copied;
    # the configs' auto_map whether the repo needs its own code.
    for f in sorted(listing.files, key=lambda f: f.path != INDEX_FILE):
        if f.path == INDEX_FILE or f.path in AUTO_MAP_FILES:
            try:
                cache[f.path] = read_whole(hub, req.repo, commit, f)
            except DownloadError as exc:
                raise type(exc)(f"snapshot {where}: {f.path} failed: {exc}") from None
    mapped = {name: auto_map(name, cache[name], where) for name in AUTO_MAP_FILES if name in cache}
    for name, classes in mapped.items():
        if classes and not req.trust_remote_code:
            refuse_remote_code(name, classes, where)
    shards = indexed_shards(cache[INDEX_FILE], where) if INDEX_FILE in cache else None
    # The root *.py only when some config maps to them: trusting a repo that needs no code copies the same files
    # (so the same manifest) as not trusting it.
    chosen = select(listing.files, where, shards, code=any(mapped.values()))
    log(
        f"snapshot {where}: {len(chosen)} files, {sum(f.size for f in chosen) / 1e9:.2f} GB -> s3://{req.bucket}/{prefix}"
    )
    landed = [_copy_one(f, hub, s3, req, commit, prefix, cache.get(f.path), where, log, progress) for f in chosen]

    body = manifest_text(landed).encode()
    digest = hashlib.sha256(body).hexdigest()
    _write_manifest(s3, req.bucket, prefix + MANIFEST_NAME, body, digest, f"{req.repo}@{commit}")
    return SnapshotResult(req.bucket, prefix, commit, digest, tuple(landed), time.monotonic() - began)


def _copy_one(
    f: RepoFile,
    hub: Hub,
    s3,
    req: SnapshotRequest,
    commit: str,
    prefix: str,
    cached: bytes | None,  # noqa: ANN001
    where: str,
    log: Callable[[str], None],
    progress: Callable[[int], None] | None,
) -> Landed:
    try:
        done = copy_file(
            f,
            hub=hub,
            s3=s3,
            repo=req.repo,
            commit=commit,
            bucket=req.bucket,
            prefix=prefix,
            concurrency=req.concurrency,
            part_size=req.part_size,
            cached=cached,
            progress=progress,
        )
    except DownloadError as exc:
        # The same error class, one line: which file, and that the snapshot stays unsealed (a re-run resumes).
        raise type(exc)(
            f"snapshot {where}: {f.path} failed: {exc}; no manifest was written, so the snapshot at "
            f"s3://{req.bucket}/{prefix} is incomplete and unused — run again to resume"
        ) from None
    log(f"{'copied' if done.copied else 'already present'}: {f.path} ({done.size} bytes, sha256 {done.sha256})")
    return done


def _sealed(s3, req: SnapshotRequest, commit: str) -> tuple[str, tuple[Landed, ...]] | None:  # noqa: ANN001
    """(manifest sha256, files) of a snapshot sealed at that commit's prefix, every file checked in place."""
    prefix = req.prefix_for(commit)
    body = _read_manifest(s3, req.bucket, prefix + MANIFEST_NAME)
    if body is None:
        return None
    where = f"s3://{req.bucket}/{prefix}{MANIFEST_NAME}"
    files = parse_manifest(body.decode(), where)
    _check_in_place(s3, req.bucket, prefix, files)
    return hashlib.sha256(body).hexdigest(), files
