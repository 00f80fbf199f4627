"""Hub → S3 without a local copy: parallel ranged GETs feed one S3 multipart upload; the parts are hashed in
file order as they arrive, and CompleteMultipartUpload runs only when the sha256 matches. Any failure aborts
the upload, so the final key never shows a partial or unverified object."""

from __future__ import annotations

import base64
import hashlib
import re
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable
from urllib.parse import quote

from .errors import ChecksumMismatchError, DownloadError
from .hub import Cancelled, FileRef, Hub, HubFile

MIB = 1024 * 1024
MIN_PART_SIZE = 5 * MIB  # S3's minimum for every part but the last
MAX_PART_SIZE = 5 * 1024 * MIB
MAX_PARTS = 10_000
DEFAULT_PART_SIZE = 16 * MIB
DEFAULT_CONCURRENCY = 8
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_REPO = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")


@dataclass(frozen=True)
class CopyRequest:
    """Copy `repo/file@revision` to `s3://bucket/<key_prefix>/<file>`.

    sha256: expected hex digest; default: the one the Hub reports for the LFS file (a copy is always verified).
    concurrency: parallel ranged GETs (1 = a single stream). part_size: bytes per range and per S3 part;
    default 16 MiB, grown so a file never needs more than S3's 10,000 parts."""

    repo: str
    file: str
    bucket: str
    key_prefix: str
    revision: str = "main"
    sha256: str | None = None
    concurrency: int = DEFAULT_CONCURRENCY
    part_size: int | None = None

    @property
    def key(self) -> str:
        prefix = self.key_prefix.strip("/")
        return f"{prefix}/{self.file}" if prefix else self.file

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


def existing_object(s3, bucket: str, key: str) -> dict[str, Any] | None:  # noqa: ANN001
    """HEAD the final key; None when absent (403 too: a role without s3:ListBucket sees 403 for a missing key)."""
    from botocore.exceptions import ClientError

    try:
        return s3.head_object(Bucket=bucket, Key=key)
    except ClientError as exc:
        if _client_error_code(exc) in ("404", "NoSuchKey", "NotFound", "403", "AccessDenied", "Forbidden"):
            return None
        raise


def _already_there(head: dict[str, Any] | None, sha256: str, size: int | None) -> bool:
    if head is None or head.get("Metadata", {}).get("sha256") != sha256:
        return False
    return size is None or head.get("ContentLength") == size


class _Copy:
    """One multipart upload in flight: workers fetch + upload parts, the caller's thread hashes them in order."""

    def __init__(self, req: CopyRequest, source: HubFile, s3, expected: str, progress: Callable[[int], None] | None) -> None:  # noqa: ANN001
        self.req = req
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
        info = self.source.info
        return {
            "sha256": self.expected,
            "hf-source": quote(f"{self.req.repo}/{self.req.file}@{info.commit or self.req.revision}", safe="/@"),
        }

    def _part(self, index: int) -> tuple[bytearray, dict[str, Any]]:
        try:
            start, end = self.ranges[index]
            data = self.source.read_range(start, end, stop=self.stop, on_bytes=self.progress)
            checksum = base64.b64encode(hashlib.sha256(data).digest()).decode()
            if self.stop.is_set():
                raise Cancelled()
            r = self.s3.upload_part(
                Bucket=self.req.bucket, Key=self.req.key, UploadId=self.upload_id, PartNumber=index + 1,
                Body=data, ChecksumSHA256=checksum,
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
) -> CopyResult:
    """Copy one Hub file to S3, verified. No-op when the object is already there with the same sha256.

    progress(n) is called from worker threads with each chunk's byte count; on_start(size, sha256) once the
    copy is about to begin."""
    req.validate()
    began = time.monotonic()
    s3 = s3 or s3_client(req.concurrency)
    given = req.sha256.lower() if req.sha256 else None

    # With a pinned sha256 the Hub is not even asked when the object is already in place.
    if given:
        head = existing_object(s3, req.bucket, req.key)
        if _already_there(head, given, None):
            return CopyResult(req.bucket, req.key, int(head["ContentLength"]), given, False, time.monotonic() - began)

    info = hub.info(req.ref)
    if given and info.sha256 and given != info.sha256:
        raise ChecksumMismatchError(
            f"sha256 mismatch for {req.ref}: expected {given}, the Hub reports {info.sha256}; nothing was copied"
        )
    expected = given or info.sha256
    if not expected:
        raise DownloadError(f"{req.ref}: the Hub reports no sha256 (not an LFS file); pass the expected sha256")
    if info.size == 0:
        raise DownloadError(f"{req.ref}: the Hub reports an empty file")
    if _already_there(existing_object(s3, req.bucket, req.key), expected, info.size):
        return CopyResult(req.bucket, req.key, info.size, expected, False, time.monotonic() - began)

    job = _Copy(req, hub.open(info), s3, expected, progress)
    if on_start is not None:
        on_start(info.size, expected)
    job.upload_id = s3.create_multipart_upload(
        Bucket=req.bucket, Key=req.key, ContentType="application/octet-stream",
        Metadata=job._metadata(), ChecksumAlgorithm="SHA256",
    )["UploadId"]
    try:
        digest, parts = job.run()
        if digest != expected:
            raise ChecksumMismatchError(
                f"sha256 mismatch for {req.ref}: expected {expected}, the downloaded bytes hash to {digest}; "
                f"nothing was written to s3://{req.bucket}/{req.key}"
            )
        done = s3.complete_multipart_upload(
            Bucket=req.bucket, Key=req.key, UploadId=job.upload_id, MultipartUpload={"Parts": parts},
        )
    except BaseException:
        _abort(s3, req.bucket, req.key, job.upload_id)
        raise
    return CopyResult(
        req.bucket, req.key, info.size, expected, True, time.monotonic() - began,
        parts=len(parts), version_id=done.get("VersionId"),
    )
