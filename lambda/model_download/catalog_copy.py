"""Catalog mode of the copy job: the entries of a farm's catalog (all of them, or one batch's subset) into the
model bucket; each failed entry leaves its failure marker.

Per entry, for each layout of the catalog (catalog.KEY_OF): HEAD the key; a key that holds the job's object
(metadata `sha256`, equal to the entry's pinned sha256 if it has one) is kept as it is — no Hub request, never
overwritten; a key that holds anything else fails that entry. Missing keys are copied from the revision
resolved ONCE per entry — one Hub HEAD, whose FileInfo the copy engine reuses — (or from the commit an existing
key of the entry already holds, so the gguf and the mme object of one model always carry the same bytes): `gguf`
first, by the copy engine (copy.copy_model), then `mme` by tarball.write_mme_tarball, reading the GGUF back from
its `gguf` key in S3 when the catalog has that layout (same-region ranged GETs: each model leaves the Hub once),
else from the Hub. A bounded number of entries run in parallel; a failed entry does not stop the others.

An adapter entry (`base` set) is checked before anything of it is written, and again on every run: its GGUF header
(from its landed key, else the Hub) must be what the engine loads over its base's (gguf_meta.adapter_problem:
general.type adapter, adapter.type lora, the base's general.architecture, and every lora_a/lora_b pair naming a base
tensor of the shape the engine requires — the base's header and tensor infos read from its landed key or the Hub, once
per run and base); a mismatch fails that entry alone, with the reason in its marker.

An entry with `adapters` is one `lora` bundle (catalog.lora_prefix): the base GGUF, each adapter as
`lora/<name>.gguf`, and lora.json LAST — the seal the deploy's waiter HEADs. Every member is resolved (a PEFT adapter,
CatalogAdapter.peft, converted to GGUF by peft_convert.convert_peft, the code a PEFT adapter entry is converted by) and
every adapter header-checked against the base before anything of the bundle is written; a failing member fails the
entry (its marker names the adapter). A sealed bundle is kept without a Hub request; an unsealed one (an interrupted
run) keeps the members in place and copies the rest before sealing it.

A failed entry gets `catalog.failure_key(entry)` (`farm/<name>/<idhash>/copy-failed.json`, JSON {"model",
"reason", "attempt", "at"}; attempt = the previous marker's + 1), overwritten by each failed attempt and never
deleted: the model's own key, once it lands, wins over it (docs/INTERFACE §1). Entries cut short by a stop
(CodeBuild timeout, StopBuild) get no marker — they did not fail, the run did, and the batch is retried. The run
reports every failed model; the job exits non-zero so the batch counts as failed and is retried."""

from __future__ import annotations

import hashlib
import json
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from .args import one_line
from .catalog import (
    Catalog,
    CatalogAdapter,
    CatalogEntry,
    CatalogError,
    engine_json,
    failure_key,
    lora_manifest,
    lora_manifest_key,
    lora_member_keys,
)
from .copy import (
    _HEX64,
    COMMIT,
    CopyRequest,
    CopyResult,
    _client_error_code,
    copy_model,
    existing_object,
    hf_source,
    put_if_absent,
    require_object,
)
from .credentials import read_token as _read_token
from .errors import ChecksumMismatchError, DownloadError, ImmutableKeyError
from .gguf_meta import ADAPTER_KEYS, ARCHITECTURE, GgufHeader, adapter_problem, read_header
from .hub import FileInfo, FileRef, Hub, RangeSource, RetryPolicy
from .peft_convert import ConvertedPeft, LocalFile, convert_peft, land_peft
from .tarball import S3Object, write_mme_tarball

DEFAULT_PARALLEL_MODELS = 4
DEFAULT_CONCURRENCY = 4  # ranged GETs per model: parallel models × this ≈ the single copy's 8 × 2
_REASONS_IN_ERROR_LINE = 20
_MARKER_REASON_CHARS = 2000  # one line, bounded: the gateway quotes it in a 500's message
_RETRY = RetryPolicy()


@dataclass(frozen=True)
class EntryReceipt:
    name: str
    commit: str
    sha256: str
    size: int | None
    keys: dict[str, str]
    copied: tuple[str, ...] = ()  # layouts this run wrote (the rest were already in place)


@dataclass(frozen=True)
class EntryFailure:
    name: str
    reason: str
    marker: str | None = None  # the failure marker's key, when one was written


@dataclass
class CatalogRun:
    fingerprint: str
    total: int
    receipts: list[EntryReceipt] = field(default_factory=list)
    failures: list[EntryFailure] = field(default_factory=list)

    @property
    def copied(self) -> list[EntryReceipt]:
        return [r for r in self.receipts if r.copied]

    def error_line(self) -> str:
        """One line: every failed model by name first (the batch's build log and Step Functions' failure cause end
        with it), then the first reasons (each failed model's reason is also logged on its own line)."""
        failed = sorted(self.failures, key=lambda f: f.name)
        names = ", ".join(f.name for f in failed)
        reasons = "; ".join(f"{f.name}: {f.reason}" for f in failed[:_REASONS_IN_ERROR_LINE])
        more = (
            f"; … {len(failed) - _REASONS_IN_ERROR_LINE} more reasons in the log"
            if len(failed) > _REASONS_IN_ERROR_LINE
            else ""
        )
        return f"{len(failed)} of {self.total} models failed: {names} — {reasons}{more}"


class Hubs:
    """One Hub client per token secret; each secret is read once, on first use, and its failure (if any) is
    kept and reported for every entry that names it."""

    def __init__(
        self,
        endpoint: str | None,
        *,
        pool_size: int = 16,
        retry: RetryPolicy = _RETRY,
        read_token: Callable[[str | None], tuple[str | None, str | None]] = _read_token,
    ) -> None:
        self.endpoint, self.pool_size, self.retry, self._read_token = endpoint, pool_size, retry, read_token
        self._hubs: dict[str | None, Hub | DownloadError] = {}
        self._lock = threading.Lock()

    def for_secret(self, secret_name: str | None) -> Hub:
        with self._lock:
            if secret_name not in self._hubs:
                try:
                    token, source = self._read_token(secret_name)
                    self._hubs[secret_name] = Hub(
                        self.endpoint, token, token_source=source, retry=self.retry, pool_size=self.pool_size
                    )
                except DownloadError as exc:
                    self._hubs[secret_name] = exc
            found = self._hubs[secret_name]
        if isinstance(found, DownloadError):
            raise found
        return found


@dataclass(frozen=True)
class _Held:
    sha256: str
    commit: str | None
    size: int | None


def _held(head: dict[str, Any], entry: CatalogEntry, bucket: str, key: str) -> _Held:
    """What an existing key holds, from the metadata the copy wrote; refuses (never overwrites) anything else."""
    meta = head.get("Metadata") or {}
    sha = meta.get("sha256", "")
    if not _HEX64.match(sha):
        raise ImmutableKeyError(
            f"s3://{bucket}/{key} exists but was not written by the copy job (no sha256 metadata); nothing was "
            "overwritten — delete that object or rename the model"
        )
    # A converted PEFT adapter's pin is its source's (peft_convert.SOURCE_SHA256_META), not the landed GGUF's.
    if entry.sha256 and (meta.get("source-sha256") if entry.peft else sha) != entry.sha256:
        raise ImmutableKeyError(
            f"s3://{bucket}/{key} holds sha256 {sha}, not the pinned {entry.sha256}; model keys are immutable and "
            "nothing was overwritten — delete that object first"
        )
    source = unquote(meta.get("hf-source", ""))
    commit = source.rsplit("@", 1)[1] if "@" in source else None
    size = meta.get("size") or (str(head["ContentLength"]) if key.endswith(entry.basename) else None)
    return _Held(
        sha, commit if commit and COMMIT.match(commit) else None, int(size) if size and size.isdigit() else None
    )


def _require_commit(hub: Hub, info: FileInfo) -> str:
    """The commit the Hub names (X-Repo-Commit), which a copy is pinned to; without one the copy is refused."""
    if not (info.commit and COMMIT.match(info.commit)):
        raise DownloadError(f"{info.ref}: {hub.endpoint} reported no commit (X-Repo-Commit) to pin the copy to")
    return info.commit


def expected_sha256(info: FileInfo, pinned_sha256: str | None) -> str:
    """The sha256 a Hub file's bytes must hash to: the pinned one, else the Hub's; refused when there is none, when
    the Hub reports an empty file, or when the Hub's differs from the pinned one (before anything is written)."""
    expected = pinned_sha256 or info.sha256
    if not expected:
        raise DownloadError(f"{info.ref}: the Hub reports no sha256 (not an LFS file); pin its sha256")
    if info.size == 0:
        raise DownloadError(f"{info.ref}: the Hub reports an empty file")
    if info.sha256 and info.sha256 != expected:
        raise ChecksumMismatchError(
            f"sha256 mismatch for {info.ref}: expected {expected}, the Hub reports {info.sha256}; nothing was copied"
        )
    return expected


def _resolve(hub: Hub, ref: FileRef, pinned_sha256: str | None) -> tuple[FileInfo, str]:
    """One Hub resolution of a bundle member: what the Hub says of it (commit, size, sha256) and the sha256 its
    bytes must hash to (expected_sha256)."""
    info = hub.info(ref)
    _require_commit(hub, info)
    return info, expected_sha256(info, pinned_sha256)


@dataclass(frozen=True)
class _ConvertedMember:
    """A bundle's PEFT adapter converted to a local GGUF, to be written at `key` (as `adapter`, its bundle entry)."""

    adapter: CatalogEntry
    converted: ConvertedPeft
    key: str


# A bundle member to write: copied from the Hub (hub, info, sha256, key), or a converted PEFT adapter.
_Planned = tuple[Hub, FileInfo, str, str] | _ConvertedMember


class CatalogCopy:
    """Copies one catalog; `run()` returns what landed and what failed (it raises only for bugs)."""

    def __init__(
        self,
        catalog: Catalog,
        *,
        bucket: str,
        s3,
        hubs: Hubs,  # noqa: ANN001
        parallel_models: int = DEFAULT_PARALLEL_MODELS,
        concurrency: int = DEFAULT_CONCURRENCY,
        part_size: int | None = None,
        stop: threading.Event | None = None,
        log: Callable[[str], None] = lambda line: print(line, flush=True),
        bases: Catalog | None = None,
    ) -> None:
        """bases: the whole catalog when `catalog` is one batch of it (an adapter's base may be in another batch)."""
        catalog.validate(whole=bases is None)
        self.bases = bases or catalog
        self._base_meta: dict[str, GgufHeader] = {}
        self._base_lock = threading.Lock()
        if not 1 <= parallel_models <= 64:
            raise DownloadError(f"parallel models must be 1..64, got {parallel_models}")
        self.catalog, self.bucket, self.s3, self.hubs = catalog, bucket, s3, hubs
        self.parallel_models, self.concurrency, self.part_size = parallel_models, concurrency, part_size
        self.stop = stop or threading.Event()
        self.log = log

    # -- one entry ------------------------------------------------------------------------------------

    def _stop_check(self, _n: int) -> None:
        if self.stop.is_set():  # raised in a range reader: the copy engine aborts its multipart upload
            raise DownloadError("the job was told to stop (CodeBuild timeout or StopBuild) before this copy finished")

    def copy_entry(self, entry: CatalogEntry) -> EntryReceipt:
        if entry.adapters is not None:  # the `lora` layout: a bundle of the base and its adapters
            return self._copy_bundle(entry)
        keys = self.catalog.keys(entry)
        held: dict[str, _Held] = {}
        for layout, key in keys.items():
            head = existing_object(self.s3, self.bucket, key)
            if head is not None:
                held[layout] = _held(head, entry, self.bucket, key)
        digests = {h.sha256 for h in held.values()}
        if len(digests) > 1:
            raise ImmutableKeyError(
                f"the keys of {entry.name} hold different bytes ({', '.join(sorted(digests))}); delete them to re-copy"
            )
        pinned = next((h for h in held.values() if h.commit), None)
        if len(held) == len(keys) and pinned is not None:
            if entry.base is not None:
                self._check_adapter(entry, None)
            size = next((h.size for h in held.values() if h.size is not None), None)
            return EntryReceipt(entry.name, pinned.commit or "", pinned.sha256, size, keys)

        if self.stop.is_set():
            raise DownloadError("not started: the job was told to stop (CodeBuild timeout or StopBuild)")
        hub = self.hubs.for_secret(entry.token_secret_name)
        # One resolution per entry: every layout copies the same commit (the one a key already holds, if any).
        info = hub.info(
            FileRef(entry.hf_repo, entry.file, pinned.commit if pinned and pinned.commit else entry.revision)
        )
        commit = _require_commit(hub, info)
        if entry.peft:  # its bytes are made, not copied: the pin's converter, then the same landing and header check
            return land_peft(self, entry, keys, hub, info)
        expected = expected_sha256(info, entry.sha256 or (pinned.sha256 if pinned else None))
        if entry.base is not None:  # before anything is written: a wrong adapter never lands
            self._check_adapter(entry, lambda: hub.open(info))
        copied: list[str] = []
        for layout, key in sorted(keys.items(), key=lambda item: item[0] != "gguf"):  # gguf first: mme reads it back
            if layout in held:
                continue
            if layout == "gguf":
                result = self._copy_file(hub, info, commit, expected, key)
                if result.copied:
                    copied.append(layout)
            else:
                source: RangeSource = self._gguf_in_s3(keys, entry, expected, info.size) or hub.open(
                    info
                )  # pinned to that commit
                written = write_mme_tarball(
                    self.s3,
                    bucket=self.bucket,
                    key=key,
                    source=source,
                    member=entry.basename,
                    engine_json=engine_json(entry),
                    expected_sha256=expected,
                    hf_source=hf_source(entry.hf_repo, entry.file, commit),
                    concurrency=self.concurrency,
                    part_size=self.part_size,
                    stop=self.stop,
                )
                if written is None:  # another run completed (or was completing) it: it must hold these bytes
                    require_object(self.s3, self.bucket, key, expected, None, source=f"hf://{info.ref}")
                else:
                    copied.append(layout)
        return EntryReceipt(entry.name, commit, expected, info.size, keys, tuple(copied))

    def _gguf_in_s3(self, keys: dict[str, str], entry: CatalogEntry, expected: str, size: int) -> S3Object | None:
        """The entry's `gguf` object when the catalog writes that layout and it holds these bytes (just copied, or
        kept from an earlier run): the tarball then reads it in-region instead of downloading the model again."""
        if "gguf" not in keys:
            return None
        head = existing_object(self.s3, self.bucket, keys["gguf"])
        if (
            head is None
            or _held(head, entry, self.bucket, keys["gguf"]).sha256 != expected
            or head.get("ContentLength") != size
        ):
            return None
        return S3Object(self.s3, self.bucket, keys["gguf"], head)

    def _landed(self, entry: CatalogEntry) -> S3Object | None:
        """The entry's `gguf` object when it holds bytes the copy wrote (its header can be read in-region)."""
        key = self.bases.keys(entry).get("gguf")
        head = existing_object(self.s3, self.bucket, key) if key else None
        if head is None or key is None:
            return None
        _held(head, entry, self.bucket, key)  # refuses an object the copy did not write
        return S3Object(self.s3, self.bucket, key, head)

    def _header(self, source: RangeSource, keys: frozenset[str]) -> GgufHeader:
        """The keys and every tensor's shape (gguf_meta.read_header: the header and tensor infos, no tensor data)."""
        return read_header(
            lambda start, end: source.read_range(start, end, stop=self.stop), source.size, keys, label=source.label
        )

    def _base_header(self, name: str) -> tuple[GgufHeader, str]:
        """The base model's general.architecture and tensor shapes (its landed gguf key, else the Hub), read once per
        run and base."""
        try:
            base = self.bases.entry(name)
        except KeyError:
            raise CatalogError(f"base {name!r} is not a model of the catalog") from None
        with self._base_lock:
            if name not in self._base_meta:
                source: RangeSource | None = self._landed(base)
                if source is None:
                    hub = self.hubs.for_secret(base.token_secret_name)
                    info: FileInfo = hub.info(FileRef(base.hf_repo, base.file, base.revision))
                    source = hub.open(info)
                self._base_meta[name] = self._header(source, frozenset({ARCHITECTURE}))
            return self._base_meta[name], f"{name} ({base.hf_repo}/{base.file})"

    def _check_adapter(self, entry: CatalogEntry, from_hub: Callable[[], RangeSource] | None) -> None:
        """The adapter's header against its base's (gguf_meta.adapter_problem); a mismatch fails the entry."""
        assert entry.base is not None
        base_meta, base_label = self._base_header(entry.base)
        source = self._landed(entry) or (from_hub() if from_hub is not None else None)
        if source is None:
            raise DownloadError(f"{entry.name}: no landed object nor Hub file to read the adapter's header from")
        problem = adapter_problem(
            self._header(source, ADAPTER_KEYS),
            base_meta,
            adapter_label=f"adapter {entry.name} ({entry.hf_repo}/{entry.file})",
            base_label=base_label,
        )
        if problem:
            raise DownloadError(problem)

    # -- a `lora` bundle (catalog.lora_prefix) -------------------------------------------------------

    def _copy_bundle(self, entry: CatalogEntry) -> EntryReceipt:
        """The base GGUF and its adapters under lora_prefix(entry), then lora.json LAST (the seal). A sealed bundle is
        kept as it is (its manifest must be this catalog's; no Hub request). Otherwise every member is resolved and
        every adapter's header checked against the base's BEFORE a byte is written (a wrong adapter fails the entry
        and nothing of the bundle lands), members already in place (an interrupted run) are kept, the missing ones
        copied, and the manifest written if absent (If-None-Match). A PEFT adapter is converted while the bundle is
        planned (into a local directory kept until its member is written), so its converted GGUF is checked too."""
        manifest_key, manifest = lora_manifest_key(entry), lora_manifest(entry)
        keys = {"lora": manifest_key}
        members = lora_member_keys(entry)
        if existing_object(self.s3, self.bucket, manifest_key) is not None:
            self._require_manifest(manifest_key, manifest)
            sealed = self._member(entry, members[""])
            if sealed is None:
                raise ImmutableKeyError(
                    f"s3://{self.bucket}/{manifest_key} seals a bundle without its base GGUF {members['']}; nothing "
                    "was overwritten — delete the manifest to copy the bundle again"
                )
            held = sealed[0]
            return EntryReceipt(entry.name, held.commit or "", held.sha256, held.size, keys)
        if self.stop.is_set():
            raise DownloadError("not started: the job was told to stop (CodeBuild timeout or StopBuild)")

        with tempfile.TemporaryDirectory(prefix="lora-bundle-") as work:
            return self._fill_bundle(entry, members, manifest_key, manifest, Path(work))

    def _fill_bundle(
        self, entry: CatalogEntry, members: dict[str, str], manifest_key: str, manifest: bytes, work: Path
    ) -> EntryReceipt:
        """_copy_bundle's copy of an unsealed bundle; `work`: where PEFT adapters are converted."""
        keys = {"lora": manifest_key}
        base = self._member(entry, members[""])
        todo: list[_Planned] = []  # each member to write, the base first
        if base is not None and base[0].commit:  # an interrupted run landed it: its header is read in-region
            commit, expected, size = base[0].commit, base[0].sha256, base[0].size
            base_source: RangeSource = S3Object(self.s3, self.bucket, members[""], base[1])
        else:
            hub = self.hubs.for_secret(entry.token_secret_name)
            info, expected = _resolve(hub, FileRef(entry.hf_repo, entry.file, entry.revision), entry.sha256)
            commit, size, base_source = info.commit or "", info.size, hub.open(info)
            todo.append((hub, info, expected, members[""]))
        base_meta = self._header(base_source, frozenset({ARCHITECTURE}))
        for adapter in entry.adapters or ():
            try:
                planned = self._plan_adapter(entry, adapter, members[adapter.name], base_meta, work)
            except DownloadError as exc:
                raise DownloadError(f"adapter {adapter.name} of the lora bundle: {exc}") from exc
            if planned is not None:
                todo.append(planned)

        for planned in todo:  # the base first, then the adapters in order
            if isinstance(planned, _ConvertedMember):
                self._put_converted(planned)
                continue
            hub, info, sha, key = planned
            self._copy_file(hub, info, info.commit or info.ref.revision, sha, key)
        if self.stop.is_set():  # every member is in place, but a stopped run does not seal the bundle
            raise DownloadError(
                "the job was told to stop (CodeBuild timeout or StopBuild) before the bundle was sealed"
            )
        written = put_if_absent(
            self.s3,
            bucket=self.bucket,
            key=manifest_key,
            Body=manifest,
            ContentType="application/json",
            Metadata={"sha256": hashlib.sha256(manifest).hexdigest()},
        )
        if not written:  # another run sealed it meanwhile: it must be this manifest
            self._require_manifest(manifest_key, manifest)
        return EntryReceipt(entry.name, commit, expected, size, keys, ("lora",) if todo or written else ())

    def _copy_file(self, hub: Hub, info: FileInfo, revision: str, sha256: str, key: str) -> CopyResult:
        """One Hub file (resolved as `info`, pinned to `revision`) to `key`, never overwritten, verified by sha256."""
        request = CopyRequest(
            repo=info.ref.repo,
            file=info.ref.file,
            revision=revision,
            bucket=self.bucket,
            key_prefix="",
            sha256=sha256,
            concurrency=self.concurrency,
            part_size=self.part_size,
            dest_key=key,
        )
        return copy_model(request, hub=hub, s3=self.s3, progress=self._stop_check, info=info)

    def _member(self, entry: CatalogEntry, key: str) -> tuple[_Held, dict[str, Any]] | None:
        """What a bundle member's key holds (refusing an object the copy did not write, or other pinned bytes)."""
        head = existing_object(self.s3, self.bucket, key)
        return None if head is None else (_held(head, entry, self.bucket, key), head)

    def _plan_adapter(
        self, entry: CatalogEntry, adapter: CatalogAdapter, key: str, base_meta: GgufHeader, work: Path
    ) -> _Planned | None:
        """Check one adapter's header against the base's (its landed member, else the Hub file — a PEFT adapter's: its
        GGUF converted into `work`); what to write, or None when it is in place already."""
        as_entry = adapter.as_entry(entry.name)
        held = self._member(as_entry, key)
        planned: _Planned | None = None
        if held is not None:
            source: RangeSource = S3Object(self.s3, self.bucket, key, held[1])
        else:
            hub = self.hubs.for_secret(adapter.token_secret_name)
            info, sha = _resolve(hub, FileRef(adapter.hf_repo, adapter.file, adapter.revision), adapter.sha256)
            if adapter.peft:  # made, not copied: the same conversion as a PEFT adapter entry's (land_peft)
                label = f"adapter {adapter.name} ({adapter.hf_repo}/{adapter.file}@{info.commit})"
                converted = convert_peft(hub, info, sha, work / adapter.name, label=label, stop=self.stop)
                source, planned = LocalFile(converted.path), _ConvertedMember(as_entry, converted, key)
            else:
                source, planned = hub.open(info), (hub, info, sha, key)
        problem = adapter_problem(
            self._header(source, ADAPTER_KEYS),
            base_meta,
            adapter_label=f"adapter {adapter.name} ({adapter.hf_repo}/{adapter.file})",
            base_label=f"{entry.name} ({entry.hf_repo}/{entry.file})",
        )
        if problem:
            raise DownloadError(problem)
        return planned

    def _put_converted(self, member: _ConvertedMember) -> None:
        """Land a converted PEFT member (If-None-Match); a key another run landed meanwhile must hold the copy's
        object of this source (_held: its SOURCE_SHA256_META against a pinned sha256), never replaced."""
        if member.converted.put(self.s3, self.bucket, member.key):
            return
        if self._member(member.adapter, member.key) is None:
            raise DownloadError(
                f"s3://{self.bucket}/{member.key} was being written by another run at the same time; run again"
            )

    def _require_manifest(self, key: str, manifest: bytes) -> None:
        """A bundle's lora.json must be the one this catalog writes (its prefix names the adapters and scales)."""
        body = self.s3.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        if body != manifest:
            raise ImmutableKeyError(
                f"s3://{self.bucket}/{key} holds another lora.json than this catalog's ({body[:120]!r}); nothing was "
                "overwritten — delete that bundle's objects to copy it again"
            )

    # -- the catalog ----------------------------------------------------------------------------------

    def _one(self, entry: CatalogEntry) -> EntryReceipt | EntryFailure:
        began = time.monotonic()
        try:
            receipt = self.copy_entry(entry)
        except Exception as exc:  # noqa: BLE001 - every failure is reported by model; bugs keep their type
            line = one_line(exc) or f"{type(exc).__name__}: {exc}"
            self.log(f"model_download: catalog: failed: {entry.name}: {line}")
            marker = None if self.stop.is_set() else self.mark_failed(entry, line)
            return EntryFailure(entry.name, line, marker)
        what = f"copied {', '.join(receipt.copied)}" if receipt.copied else "already present"
        self.log(
            f"model_download: catalog: {entry.name}: {what} (commit {receipt.commit}, sha256 {receipt.sha256}, "
            f"{time.monotonic() - began:.1f} s)"
        )
        return receipt

    def run(self) -> CatalogRun:
        fingerprint = self.catalog.fingerprint()
        run = CatalogRun(fingerprint, len(self.catalog.entries))
        pending = list(reversed(self.catalog.entries))
        with ThreadPoolExecutor(max_workers=self.parallel_models, thread_name_prefix="catalog-model") as pool:
            running: set[Future[EntryReceipt | EntryFailure]] = set()
            while pending or running:
                while pending and len(running) < self.parallel_models and not self.stop.is_set():
                    running.add(pool.submit(self._one, pending.pop()))
                if self.stop.is_set() and not running:
                    break
                done, running = wait(running, timeout=1.0, return_when=FIRST_COMPLETED)
                for future in done:
                    outcome = future.result()
                    if isinstance(outcome, EntryFailure):
                        run.failures.append(outcome)
                    else:
                        run.receipts.append(outcome)
        for entry in reversed(pending):  # never started: the job was stopped
            run.failures.append(
                EntryFailure(entry.name, "not started: the job was told to stop (CodeBuild timeout or StopBuild)")
            )
        return run

    def mark_failed(self, entry: CatalogEntry, reason: str) -> str | None:
        """Write (overwrite) the entry's failure marker; its key, or None when it could not be written (logged:
        the run's exit code already reports the failure)."""
        key = failure_key(entry)
        attempt = 1
        try:
            previous = json.loads(self.s3.get_object(Bucket=self.bucket, Key=key)["Body"].read())
            attempt = int(previous.get("attempt", 0)) + 1
        except Exception:  # noqa: BLE001 - no marker yet (404), or an unreadable one: this is attempt 1
            attempt = 1
        body = {
            "model": entry.name,
            "reason": reason.replace("\n", " ")[:_MARKER_REASON_CHARS],
            "attempt": attempt,
            "at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
        try:
            self.s3.put_object(
                Bucket=self.bucket,
                Key=key,
                Body=(json.dumps(body, sort_keys=True) + "\n").encode(),
                ContentType="application/json",
            )
        except Exception as exc:  # noqa: BLE001 - a marker is a courtesy to readers; the exit code is the contract
            self.log(
                f"model_download: catalog: {entry.name}: could not write s3://{self.bucket}/{key}: {one_line(exc) or exc}"
            )
            return None
        return key


def load_catalog(s3, uri: str, fingerprint: str | None = None) -> Catalog:  # noqa: ANN001
    """The catalog JSON from `s3://bucket/key` (the construct's asset), checked against the fingerprint the
    state machine passes each batch: the job copies exactly the catalog CloudFormation deployed."""
    if not uri.startswith("s3://") or "/" not in uri[5:]:
        raise DownloadError(f"the catalog must be an s3://bucket/key URI, got {uri!r}")
    bucket, key = uri[5:].split("/", 1)
    from botocore.exceptions import ClientError

    try:
        body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    except ClientError as exc:
        raise DownloadError(f"cannot read the catalog {uri}: {_client_error_code(exc)}") from None
    catalog = Catalog.from_json(body)
    if fingerprint and catalog.fingerprint() != fingerprint:
        raise DownloadError(
            f"the catalog {uri} has fingerprint {catalog.fingerprint()}, not {fingerprint}: redeploy the stack"
        )
    return catalog
