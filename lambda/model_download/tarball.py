"""A SageMaker multi-model artifact streamed into S3: `<key>.tar.gz` holding `engine.json` and the GGUF, with no
local copy and never a partial object. The GGUF's bytes come from the Hub (HubFile), or — when the catalog has just
written (or already holds) the same GGUF at its `gguf` key — from that S3 object (S3Object: same-region ranged GETs,
so a catalog with both layouts downloads each model from the Hub once).

SageMaker's ModelDataUrl "must point to a single gzip compressed tar archive (.tar.gz suffix)" (botocore
sagemaker ContainerDefinition.ModelDataUrl), and a multi-model endpoint downloads and extracts
`<ModelDataUrl><TargetModel>` when a model is first invoked. So the bytes are: a PAX tar header + engine.json,
a PAX tar header + the GGUF's bytes (parallel ranged GETs, consumed in file order), the tar end-of-archive
blocks; all through one gzip stream at level 0 (GZIP_LEVEL: quantized weights hardly compress, a level only costs
CPU here and at every cold load), cut into multipart-upload parts uploaded by a pool of UPLOAD_WORKERS.
The GGUF is hashed in order and CompleteMultipartUpload (`If-None-Match: *`) runs only when its sha256 is the
expected one; any failure aborts the upload. Metadata: `sha256` (of the GGUF member, as the plain copy's),
`hf-source`, `size` (the GGUF's bytes)."""

from __future__ import annotations

import base64
import hashlib
import tarfile
import threading
import zlib
from collections import deque
from collections.abc import Callable, Generator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import closing
from typing import Any

from .catalog import ENGINE_JSON
from .copy import MIB, _abort, _complete_if_absent, part_size_for, plan_parts
from .errors import ChecksumMismatchError, DownloadError
from .hub import Cancelled, RangeSource

# Level 0: DEFLATE's stored blocks inside a gzip container (RFC 1951 BTYPE 00, RFC 1952) — still the gzip
# stream SageMaker asks for. Measured on the SmolLM2 Q4_1 GGUF (98 MB, this repo's stand-in): level 1 saves 5.7%
# of the bytes but compresses at 23 MB/s vs 396 MB/s and inflates at 114 vs 415 MB/s — slower copies, and slower
# cold loads on the endpoint (SageMaker extracts the archive on a model's first invocation), for almost nothing.
GZIP_LEVEL = 0
_GZIP_WBITS = 16 + zlib.MAX_WBITS  # zlib writes the gzip container (RFC 1952), header mtime 0: reproducible
_BLOCK = tarfile.BLOCKSIZE  # 512
_RECORD = tarfile.RECORDSIZE  # 20 blocks, what tar(1) pads an archive to
# Parts uploading at once per tarball: the upload no longer waits on one stream; memory beyond the reads is at
# most UPLOAD_WORKERS parts in flight + the one being filled.
UPLOAD_WORKERS = 4
_S3_READ_ATTEMPTS = 3  # a ranged GET whose body stream breaks is asked again (botocore retries the request only)


class S3Object:
    """Ranged reads of one object already in the model bucket (the gguf layout's key), pinned to the ETag its
    HEAD saw (`If-Match`, so the bytes cannot change underneath; the sha256 is checked again at the end anyway)."""

    def __init__(self, s3, bucket: str, key: str, head: dict[str, Any]) -> None:  # noqa: ANN001
        self.s3, self.bucket, self.key = s3, bucket, key
        self._size = int(head["ContentLength"])
        self._etag = str(head["ETag"])

    @property
    def size(self) -> int:
        return self._size

    @property
    def label(self) -> str:
        return f"s3://{self.bucket}/{self.key}"

    def read_range(
        self,
        start: int,
        end: int,
        *,
        stop: threading.Event | None = None,
        on_bytes: Callable[[int], None] | None = None,
    ) -> bytes:
        from botocore.exceptions import BotoCoreError

        for attempt in range(1, _S3_READ_ATTEMPTS + 1):
            if stop is not None and stop.is_set():
                raise Cancelled()
            r = self.s3.get_object(Bucket=self.bucket, Key=self.key, Range=f"bytes={start}-{end}", IfMatch=self._etag)
            try:
                data = r["Body"].read()
            except (BotoCoreError, OSError) as exc:
                if attempt == _S3_READ_ATTEMPTS:
                    raise DownloadError(
                        f"{self.label}: bytes {start}-{end} failed {attempt} times ({type(exc).__name__})"
                    ) from None
                continue
            finally:
                r["Body"].close()
            if len(data) != end - start + 1:
                raise DownloadError(f"{self.label}: asked for bytes {start}-{end}, got {len(data)} bytes")
            if on_bytes is not None:
                on_bytes(len(data))
            return data
        raise AssertionError("unreachable")


def tar_header(name: str, size: int) -> bytes:
    """A PAX header (POSIX.1-2001: sizes past USTAR's 8 GiB go into an extended record), fixed owner, mode and
    mtime so equal inputs give equal archives."""
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime, info.type = size, 0o644, 0, tarfile.REGTYPE
    return info.tobuf(format=tarfile.PAX_FORMAT, encoding="utf-8", errors="strict")


def _padding(size: int) -> bytes:
    return b"\0" * (-size % _BLOCK)


def ordered_ranges(
    source: RangeSource, part_size: int, concurrency: int, stop: threading.Event
) -> Generator[bytes | bytearray, None, None]:
    """The file's bytes in order, as ranged GETs running `concurrency` ahead (from the Hub: the copy engine's reads,
    resumed after a drop, refreshed CDN URLs, token only to the Hub). Closing the generator early stops the reads
    in flight at their next chunk; `stop` set from outside stops the copy at the next range."""
    ranges = plan_parts(source.size, part_size)
    window = concurrency + 2
    mine = threading.Event()  # this file's reads only: other models of the catalog keep going
    with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="mme-range") as pool:
        futures: dict[int, Future[bytes | bytearray]] = {}
        submitted = 0
        try:
            for index in range(len(ranges)):
                if stop.is_set():
                    raise DownloadError(f"{source.label}: stopped before the copy finished")
                while submitted < len(ranges) and submitted < index + window:
                    start, end = ranges[submitted]
                    futures[submitted] = pool.submit(source.read_range, start, end, stop=mine)
                    submitted += 1
                yield futures.pop(index).result()
        finally:
            mine.set()
            for future in futures.values():
                future.cancel()


class _PartWriter:
    """Compressed bytes → multipart parts of exactly `part_size` (the last one shorter), each with its SHA-256,
    uploaded by a pool of `workers`; a part waits for a free worker, so at most `workers` parts are in memory."""

    def __init__(
        self, s3, bucket: str, key: str, upload_id: str, part_size: int, workers: int = UPLOAD_WORKERS
    ) -> None:  # noqa: ANN001
        self.s3, self.bucket, self.key, self.upload_id, self.part_size = s3, bucket, key, upload_id, part_size
        self.compressor = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, _GZIP_WBITS)
        self.buffer = bytearray()
        self.parts: list[dict[str, Any]] = []
        self.raw = 0  # tar bytes in
        self.written = 0  # gzip bytes out
        self.workers = workers
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="mme-part")
        self._pending: deque[Future[dict[str, Any]]] = deque()
        self._numbered = 0

    def write(self, data: bytes | bytearray) -> None:
        self.raw += len(data)
        self.buffer += self.compressor.compress(data)
        while len(self.buffer) >= self.part_size:
            chunk = bytes(self.buffer[: self.part_size])
            del self.buffer[: self.part_size]
            self._upload(chunk)

    def close(self) -> list[dict[str, Any]]:
        """Flush, wait for every upload; the parts in order."""
        self.buffer += self.compressor.flush()
        if self.buffer or not self._numbered:
            self._upload(bytes(self.buffer))
            self.buffer.clear()
        while self._pending:
            self.parts.append(self._pending.popleft().result())
        self._pool.shutdown()
        return self.parts

    def shutdown(self) -> None:
        """After a failure: drop the parts not started and wait for those uploading (before the upload is aborted,
        so no part lands after the abort)."""
        for future in self._pending:
            future.cancel()
        self._pool.shutdown(wait=True)

    def _upload(self, chunk: bytes) -> None:
        for future in self._pending:  # a failed upload stops the copy now, not at the end
            if future.done() and future.exception() is not None:
                raise future.exception()  # type: ignore[misc]
        while len(self._pending) >= self.workers:  # bounded: wait for the oldest (parts finish roughly in order)
            self.parts.append(self._pending.popleft().result())
        self._numbered += 1
        self._pending.append(self._pool.submit(self._put, self._numbered, chunk))
        self.written += len(chunk)

    def _put(self, number: int, chunk: bytes) -> dict[str, Any]:
        checksum = base64.b64encode(hashlib.sha256(chunk).digest()).decode()
        r = self.s3.upload_part(
            Bucket=self.bucket,
            Key=self.key,
            UploadId=self.upload_id,
            PartNumber=number,
            Body=chunk,
            ChecksumSHA256=checksum,
        )
        return {"PartNumber": number, "ETag": r["ETag"], "ChecksumSHA256": checksum}


def write_mme_tarball(
    s3,  # noqa: ANN001
    *,
    bucket: str,
    key: str,
    source: RangeSource,
    member: str,
    engine_json: bytes,
    expected_sha256: str,
    hf_source: str,
    concurrency: int,
    part_size: int | None = None,
    stop: threading.Event | None = None,
) -> int | None:
    """Stream `source` into `s3://bucket/key` as a .tar.gz of engine.json + `member`; the archive's size, or None
    when another run completed (or was completing) the same key (the caller checks what it holds). hf_source: the
    `hf-source` metadata (copy.hf_source of the commit the bytes are from)."""
    stop = stop or threading.Event()
    size = source.size
    read_size = part_size_for(size, part_size)
    # Upload parts: the same size rule with headroom for tar framing and gzip's worst-case expansion (~0.03%).
    upload_size = part_size_for(size + size // 1000 + MIB, part_size)
    metadata = {"sha256": expected_sha256, "hf-source": hf_source, "size": str(size)}
    upload_id = s3.create_multipart_upload(
        Bucket=bucket,
        Key=key,
        ContentType="application/gzip",
        Metadata=metadata,
        ChecksumAlgorithm="SHA256",
    )["UploadId"]
    writer = _PartWriter(s3, bucket, key, upload_id, upload_size)
    try:
        writer.write(tar_header(ENGINE_JSON, len(engine_json)) + engine_json + _padding(len(engine_json)))
        writer.write(tar_header(member, size))
        hasher = hashlib.sha256()
        with closing(ordered_ranges(source, read_size, concurrency, stop)) as chunks:
            for data in chunks:
                hasher.update(data)
                writer.write(data)
        writer.write(_padding(size) + b"\0" * (2 * _BLOCK))  # end of archive: two zero blocks
        writer.write(b"\0" * (-writer.raw % _RECORD))  # and whole records, as tar(1) writes them
        digest = hasher.hexdigest()
        if digest != expected_sha256:
            raise ChecksumMismatchError(
                f"sha256 mismatch for {source.label}: expected {expected_sha256}, the downloaded bytes hash to {digest}; "
                f"nothing was written to s3://{bucket}/{key}"
            )
        parts = writer.close()
        done = _complete_if_absent(s3, bucket, key, upload_id, parts)
    except BaseException:
        writer.shutdown()
        _abort(s3, bucket, key, upload_id)
        raise
    return None if done is None else writer.written
