"""Hub → S3 without a local copy: parallel ranged GETs feed one S3 multipart upload; the parts are hashed in
file order as they arrive, and CompleteMultipartUpload runs only when the sha256 matches. Any failure aborts
the upload, so the final key never shows a partial or unverified object.

Keys are immutable: a key that already holds other bytes is never overwritten (consumers read by key, and a
scaled-out SageMaker instance or a new pod must get the bytes the running ones got). With `pin_commit` the
key names the commit the Hub resolved the revision to (`<prefix>/<commit>/<file>`), so a branch that moves
lands at a new key instead of replacing the old one."""

from __future__ import annotations

import base64
import hashlib
import re
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from .errors import ChecksumMismatchError, DownloadError, ImmutableKeyError
from .hub import COMMIT as COMMIT  # re-exported: the one definition lives with the Hub client
from .hub import DEFAULT_REVISION, Cancelled, FileInfo, FileRef, Hub, HubFile

MIB = 1024 * 1024
MIN_PART_SIZE = 5 * MIB  # S3's minimum for every part but the last
MAX_PART_SIZE = 5 * 1024 * MIB
MAX_PARTS = 10_000
DEFAULT_PART_SIZE = 16 * MIB
DEFAULT_CONCURRENCY = 8
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_REPO = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
# S3 conditional writes (botocore s3 PutObject/CompleteMultipartUpload IfNoneMatch): 412 = the key exists,
# 409 = a conflicting write of the same key was in progress.
_TAKEN = ("PreconditionFailed", "412")
_CONFLICT = ("ConditionalRequestConflict", "409")
_DENIED = ("403", "AccessDenied", "Forbidden")


@dataclass(frozen=True)
class CopyRequest:
    """Copy `repo/file@revision` to `s3://bucket/<key_prefix>/<file>`, or with pin_commit to
    `s3://bucket/<key_prefix>/<commit>/<file>` where commit is what the Hub resolves the revision to.

    sha256: expected hex digest; default: the one the Hub reports for the LFS file (a copy is always verified).
    concurrency: parallel ranged GETs (1 = a single stream). part_size: bytes per range and per S3 part;
    default 16 MiB, grown so a file never needs more than S3's 10,000 parts."""

    repo: str
    file: str
    bucket: str
    key_prefix: str
    revision: str = DEFAULT_REVISION
    sha256: str | None = None
    concurrency: int = DEFAULT_CONCURRENCY
    part_size: int | None = None
    pin_commit: bool = False
    dest_key: str | None = (
        None  # the exact key (a catalog entry's identity-hash key): key_prefix unused, pin_commit off
    )

    def key_for(self, commit: str | None) -> str:
        """The object key; with pin_commit it needs the resolved commit."""
        if self.dest_key:
            return self.dest_key
        parts = [self.key_prefix.strip("/")]
        if self.pin_commit:
            if not commit:
                raise DownloadError(f"{self.ref}: no commit to pin the key to")
            parts.append(commit)
        return "/".join(p for p in [*parts, self.file] if p)

    @property
    def key(self) -> str:
        """The key when it does not depend on the Hub: no pin, or the revision is itself a full commit."""
        return self.key_for(self.revision if self.pins_a_commit else None)

    @property
    def pins_a_commit(self) -> bool:
        return bool(COMMIT.match(self.revision))

    @property
    def ref(self) -> FileRef:
        return FileRef(self.repo, self.file, self.revision)

    def validate(self) -> None:
        if not _REPO.match(self.repo):
            raise DownloadError(f"repo must look like owner/name, got {self.repo!r}")
        if not self.file or self.file.startswith("/") or ".." in self.file.split("/"):
            raise DownloadError(f"file must be a path inside the repo, got {self.file!r}")
        if not self.revision:
            raise DownloadError("revision must not be empty")
        if not self.bucket:
            raise DownloadError("bucket must not be empty")
        if self.dest_key is not None and (
            not self.dest_key.strip("/") or self.dest_key.startswith("/") or self.pin_commit
        ):
            raise DownloadError(
                f"dest_key must be a relative object key and excludes pin_commit, got {self.dest_key!r}"
            )
        if self.sha256 is not None and not _HEX64.match(self.sha256.lower()):
            raise DownloadError(f"sha256 must be 64 hex characters, got {self.sha256!r}")
        if not 1 <= self.concurrency <= 64:
            raise DownloadError(f"concurrency must be 1..64, got {self.concurrency}")
        if self.part_size is not None and not MIN_PART_SIZE <= self.part_size <= MAX_PART_SIZE:
            raise DownloadError(f"part size must be {MIN_PART_SIZE // MIB} MiB..5 GiB, got {self.part_size} bytes")


@dataclass(frozen=True)
class CopyResult:
    bucket: str
    key: str
    size: int
    sha256: str
    copied: bool  # False: the object was already there with this sha256
    seconds: float
    parts: int = 0
    version_id: str | None = None
    commit: str | None = None  # the commit the key is pinned to (pin_commit), else what the Hub reported

    @property
    def uri(self) -> str:
        return f"s3://{self.bucket}/{self.key}"

    @property
    def mb_per_s(self) -> float:
        return self.size / 1e6 / self.seconds if self.copied and self.seconds > 0 else 0.0


def part_size_for(size: int, requested: int | None = None) -> int:
    """The requested (or default) part size, grown to whole MiB until the file fits in 10,000 parts."""
    part = requested or DEFAULT_PART_SIZE
    needed = -(-size // MAX_PARTS)
    if needed > part:
        part = -(-needed // MIB) * MIB
    if part > MAX_PART_SIZE:
        raise DownloadError(f"{size} bytes do not fit in {MAX_PARTS} parts of at most 5 GiB")
    return part


def plan_parts(size: int, part_size: int) -> list[tuple[int, int]]:
    """Inclusive byte ranges, one per S3 part."""
    return [(start, min(start + part_size, size) - 1) for start in range(0, size, part_size)]


def s3_client(concurrency: int = DEFAULT_CONCURRENCY, session=None):  # noqa: ANN001, ANN201 - boto3 types
    """An S3 client sized for the copy; the endpoint comes from botocore's usual settings (AWS_ENDPOINT_URL_S3 …)."""
    import boto3
    from botocore.config import Config

    config = Config(
        max_pool_connections=concurrency + 4,
        retries={"mode": "standard", "max_attempts": 10},
        connect_timeout=10,
        read_timeout=120,
    )
    return (session or boto3.session.Session()).client("s3", config=config)


def _client_error_code(exc: Exception) -> str:
    return str(getattr(exc, "response", {}).get("Error", {}).get("Code", ""))


def hf_source(repo: str, file: str, revision: str) -> str:
    """The `hf-source` metadata every copied object carries: `<repo>/<file>@<commit>` (what a re-run reads back)."""
    return quote(f"{repo}/{file}@{revision}", safe="/@")


def existing_object(s3, bucket: str, key: str) -> dict[str, Any] | None:  # noqa: ANN001
    """HEAD the final key; None when absent. A 403 is not "absent": S3 answers 403 for a missing key when the caller
    lacks s3:ListBucket (botocore s3 HeadObject doc), so a listing of exactly that key decides — absent if it does
    not list it; otherwise (listed, or the listing is refused too) access is denied and this says so."""
    from botocore.exceptions import ClientError

    try:
        return s3.head_object(Bucket=bucket, Key=key)
    except ClientError as exc:
        code = _client_error_code(exc)
        if code in ("404", "NoSuchKey", "NotFound"):
            return None
        if code not in _DENIED:
            raise
    try:
        listed = s3.list_objects_v2(Bucket=bucket, Prefix=key, MaxKeys=1).get("Contents", [])
    except ClientError as exc:
        raise DownloadError(
            f"access denied reading s3://{bucket}/{key} (HTTP 403 on HeadObject, {_client_error_code(exc)} on "
            "ListObjectsV2): the job role needs s3:GetObject on the key, s3:ListBucket on its prefix and kms:Decrypt "
            "on the bucket key"
        ) from None
    if not listed or listed[0].get("Key") != key:  # the first key under an exact-key prefix is the key itself
        return None
    raise DownloadError(
        f"access denied reading s3://{bucket}/{key} (HTTP 403 on HeadObject, though the key exists): the job role "
        "needs s3:GetObject on it and kms:Decrypt on the bucket key; nothing was copied"
    )


def require_object(s3, bucket: str, key: str, sha256: str, size: int | None, *, source: str) -> dict[str, Any]:  # noqa: ANN001
    """After S3 refused our write because the key was taken (412) or being written (409): the key must now hold
    exactly these bytes; absent is a failure (never a receipt for an object that is not there), other bytes too."""
    head = existing_object(s3, bucket, key)
    if head is None:
        raise DownloadError(
            f"s3://{bucket}/{key} was being written by another run at the same time, and does not hold a complete "
            "object now; nothing was overwritten — run again"
        )
    _already_there(head, sha256, size, bucket=bucket, key=key, source=source)
    return head


def put_if_absent(s3, *, bucket: str, key: str, **kwargs: Any) -> bool:  # noqa: ANN001
    """PutObject with `If-None-Match: *`: True when written, False when the key already exists (412). A 409
    ConditionalRequestConflict is retried once — botocore s3 PutObject.IfNoneMatch: "On a 409 failure you should
    retry the upload"."""
    from botocore.exceptions import ClientError

    for attempt in (1, 2):
        try:
            s3.put_object(Bucket=bucket, Key=key, IfNoneMatch="*", **kwargs)
            return True
        except ClientError as exc:
            code = _client_error_code(exc)
            if code in _TAKEN:
                return False
            if code not in _CONFLICT:
                raise
            if attempt == 2:
                raise DownloadError(
                    f"s3://{bucket}/{key} was being written by another run at the same time (HTTP 409 twice); run again"
                ) from None
    raise AssertionError("unreachable")


def _already_there(
    head: dict[str, Any] | None, sha256: str, size: int | None, *, bucket: str, key: str, source: str
) -> bool:
    """True when the key holds these bytes; False when it is free; refuses (never overwrites) anything else."""
    if head is None:
        return False
    held = head.get("Metadata", {}).get("sha256")
    if held == sha256 and (size is None or head.get("ContentLength") == size):
        return True
    raise ImmutableKeyError(
        f"s3://{bucket}/{key} already holds other bytes (sha256 {held or 'unknown'}, {head.get('ContentLength')} bytes) "
        f"than {source} (sha256 {sha256}); model keys are immutable and nothing was overwritten — "
        "copy to a new key prefix (or pin the commit), or delete that object first"
    )


class _Copy:
    """One multipart upload in flight: workers fetch + upload parts, the caller's thread hashes them in order."""

    def __init__(
        self, req: CopyRequest, key: str, source: HubFile, s3, expected: str, progress: Callable[[int], None] | None
    ) -> None:  # noqa: ANN001
        self.req = req
        self.key = key
        self.source = source
        self.s3 = s3
        self.expected = expected
        self.progress = progress
        self.size = source.info.size
        self.part_size = part_size_for(self.size, req.part_size)
        self.ranges = plan_parts(self.size, self.part_size)
        self.stop = threading.Event()
        self._failure: BaseException | None = None
        self._failure_lock = threading.Lock()
        self.upload_id: str | None = None

    def _metadata(self) -> dict[str, str]:
        return {
            "sha256": self.expected,
            "hf-source": hf_source(self.req.repo, self.req.file, self.source.info.commit or self.req.revision),
        }

    def _part(self, index: int) -> tuple[bytearray, dict[str, Any]]:
        try:
            start, end = self.ranges[index]
            data = self.source.read_range(start, end, stop=self.stop, on_bytes=self.progress)
            checksum = base64.b64encode(hashlib.sha256(data).digest()).decode()
            if self.stop.is_set():
                raise Cancelled()
            r = self.s3.upload_part(
                Bucket=self.req.bucket,
                Key=self.key,
                UploadId=self.upload_id,
                PartNumber=index + 1,
                Body=data,
                ChecksumSHA256=checksum,
            )
            return data, {"PartNumber": index + 1, "ETag": r["ETag"], "ChecksumSHA256": checksum}
        except Cancelled:
            raise
        except BaseException as exc:
            with self._failure_lock:
                if self._failure is None:
                    self._failure = exc
            self.stop.set()  # fail fast: the other ranges stop at their next chunk
            raise

    def run(self) -> tuple[str, list[dict[str, Any]]]:
        """Upload every part; return the in-order sha256 of the bytes and the part list."""
        hasher = hashlib.sha256()
        done: list[dict[str, Any]] = []
        # Parts held in memory at once: the ones downloading plus a few finished ahead of the hash cursor.
        window = self.req.concurrency + 2
        with ThreadPoolExecutor(max_workers=self.req.concurrency, thread_name_prefix="model-part") as pool:
            futures: dict[int, Future] = {}
            submitted = 0
            try:
                for index in range(len(self.ranges)):
                    while submitted < len(self.ranges) and submitted < index + window:
                        futures[submitted] = pool.submit(self._part, submitted)
                        submitted += 1
                    try:
                        data, part = futures.pop(index).result()
                    except Cancelled:
                        raise self._failure or DownloadError("copy cancelled") from None
                    hasher.update(data)
                    done.append(part)
            except BaseException:
                self.stop.set()
                for future in futures.values():
                    future.cancel()
                raise
        return hasher.hexdigest(), done


def _abort(s3, bucket: str, key: str, upload_id: str) -> None:  # noqa: ANN001
    for attempt in range(3):
        try:
            s3.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=upload_id)
            return
        except Exception:  # noqa: BLE001 - best effort; the bucket's lifecycle rule is the backstop
            time.sleep(0.5 * (attempt + 1))


def copy_model(
    req: CopyRequest,
    *,
    hub: Hub,
    s3=None,  # noqa: ANN001
    progress: Callable[[int], None] | None = None,
    on_start: Callable[[int, str], None] | None = None,
    info: FileInfo | None = None,
) -> CopyResult:
    """Copy one Hub file to S3, verified. No-op when the object is already there with the same sha256; refuses
    when its key holds other bytes.

    progress(n) is called from worker threads with each chunk's byte count; on_start(size, sha256) once the
    copy is about to begin. info: what `hub.info` already said about this file (a catalog entry resolves once),
    so the Hub is not asked again."""
    req.validate()
    if info is not None and (info.ref.repo, info.ref.file) != (req.repo, req.file):
        raise ValueError(f"copy_model: info is for {info.ref}, not {req.ref}")
    began = time.monotonic()
    s3 = s3 or s3_client(req.concurrency)
    given = req.sha256.lower() if req.sha256 else None
    source = f"hf://{req.ref}"

    def present(key: str, size: int, sha256: str, commit: str | None) -> CopyResult:
        return CopyResult(req.bucket, key, size, sha256, False, time.monotonic() - began, commit=commit)

    # With a pinned sha256 and a key that does not depend on the Hub, the Hub is not even asked.
    if given and (not req.pin_commit or req.pins_a_commit):
        key = req.key
        head = existing_object(s3, req.bucket, key)
        if head is not None and _already_there(head, given, None, bucket=req.bucket, key=key, source=source):
            return present(key, int(head["ContentLength"]), given, req.revision if req.pins_a_commit else None)

    info = info or hub.info(req.ref)
    if req.pin_commit and not (info.commit and COMMIT.match(info.commit)):
        raise DownloadError(
            f"{req.ref}: {hub.endpoint} reported no commit (X-Repo-Commit: {info.commit!r}) to pin the key to; "
            "give the revision as a full commit sha"
        )
    key = req.key_for(info.commit)
    if given and info.sha256 and given != info.sha256:
        raise ChecksumMismatchError(
            f"sha256 mismatch for {req.ref}: expected {given}, the Hub reports {info.sha256}; nothing was copied"
        )
    expected = given or info.sha256
    if not expected:
        raise DownloadError(f"{req.ref}: the Hub reports no sha256 (not an LFS file); pass the expected sha256")
    if info.size == 0:
        raise DownloadError(f"{req.ref}: the Hub reports an empty file")
    if _already_there(
        existing_object(s3, req.bucket, key), expected, info.size, bucket=req.bucket, key=key, source=source
    ):
        return present(key, info.size, expected, info.commit)

    job = _Copy(req, key, hub.open(info), s3, expected, progress)
    if on_start is not None:
        on_start(info.size, expected)
    job.upload_id = s3.create_multipart_upload(
        Bucket=req.bucket,
        Key=key,
        ContentType="application/octet-stream",
        Metadata=job._metadata(),
        ChecksumAlgorithm="SHA256",
    )["UploadId"]
    try:
        digest, parts = job.run()
        if digest != expected:
            raise ChecksumMismatchError(
                f"sha256 mismatch for {req.ref}: expected {expected}, the downloaded bytes hash to {digest}; "
                f"nothing was written to s3://{req.bucket}/{key}"
            )
        done = _complete_if_absent(s3, req.bucket, key, job.upload_id, parts)
    except BaseException:
        _abort(s3, req.bucket, key, job.upload_id)
        raise
    if done is None:  # another run completed (or was completing) the same key: fine only if it holds these bytes
        require_object(s3, req.bucket, key, expected, info.size, source=source)
        return present(key, info.size, expected, info.commit)
    return CopyResult(
        req.bucket,
        key,
        info.size,
        expected,
        True,
        time.monotonic() - began,
        parts=len(parts),
        version_id=done.get("VersionId"),
        commit=info.commit,
    )


def _complete_if_absent(
    s3, bucket: str, key: str, upload_id: str, parts: list[dict[str, Any]]
) -> dict[str, Any] | None:  # noqa: ANN001
    """CompleteMultipartUpload with `If-None-Match: *`: S3 itself refuses to replace an existing key (412
    PreconditionFailed; 409 ConditionalRequestConflict for a concurrent write), so two runs racing on one key
    can never overwrite each other. None when the key was taken or being written: this upload is aborted (after a
    409 botocore's CompleteMultipartUpload.IfNoneMatch doc says to re-initiate it, i.e. this one is spent) and the
    caller checks with require_object that the key holds these bytes — normally the other run was the same copy."""
    from botocore.exceptions import ClientError

    try:
        return s3.complete_multipart_upload(
            Bucket=bucket,
            Key=key,
            UploadId=upload_id,
            MultipartUpload={"Parts": parts},
            IfNoneMatch="*",
        )
    except ClientError as exc:
        if _client_error_code(exc) in (*_TAKEN, *_CONFLICT):
            _abort(s3, bucket, key, upload_id)
            return None
        raise
