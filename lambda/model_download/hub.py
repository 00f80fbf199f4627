"""A small Hugging Face Hub file client: one HEAD for the file's metadata (size, sha256, commit, CDN location)
and ranged GETs that pick up where a dropped connection stopped.

Behaves like huggingface_hub's download path: the HEAD on `{endpoint}/{repo}/resolve/{revision}/{file}` is
not auto-redirected; relative redirects (renamed repos) are followed, an absolute one is the CDN location
whose response already carries `X-Linked-Etag` (the LFS sha256), `X-Linked-Size` and `X-Repo-Commit`.
The token goes only to the Hub's own origin, never to the CDN.
"""

from __future__ import annotations

import os
import random
import re
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import quote, urljoin, urlsplit

import urllib3

from .errors import HubAuthError, HubError, HubNotFoundError

DEFAULT_ENDPOINT = "https://huggingface.co"
USER_AGENT = "cpu-inference-model-download/0.1"
CHUNK = 1024 * 1024
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_TRANSIENT = frozenset({408, 425, 429, 500, 502, 503, 504})
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})


@dataclass(frozen=True)
class FileRef:
    """One file of one Hub repo at one revision (branch, tag or commit)."""

    repo: str
    file: str
    revision: str = "main"

    def __str__(self) -> str:
        return f"{self.repo}/{self.file}@{self.revision}"


@dataclass(frozen=True)
class FileInfo:
    """What the Hub's HEAD says about a file."""

    ref: FileRef
    size: int
    sha256: str | None  # the LFS object's sha256 (X-Linked-Etag); None for plain git files
    commit: str | None  # X-Repo-Commit: ranged GETs stay on this commit even if the branch moves
    download_url: str


@dataclass(frozen=True)
class RetryPolicy:
    """Backoff for transient failures; `attempts` counts consecutive failures that made no progress."""

    attempts: int = 8
    backoff_seconds: float = 0.5
    max_backoff_seconds: float = 30.0

    def delay(self, failures: int) -> float:
        base = min(self.max_backoff_seconds, self.backoff_seconds * (2 ** (failures - 1)))
        return base * (0.5 + random.random() / 2)  # jitter: parallel ranges do not retry in lockstep


class Cancelled(Exception):
    """Another part failed; this one stops quietly."""


class _Transient(Exception):
    """A failure worth retrying (dropped connection, timeout, 5xx, 429, expired CDN URL)."""


def _origin(url: str) -> tuple[str, str]:
    parts = urlsplit(url)
    return parts.scheme, parts.netloc


def _etag(value: str | None) -> str | None:
    if not value:
        return None
    value = value.strip()
    if value.startswith("W/"):
        value = value[2:]
    return value.strip('"').lower()


def _pool(endpoint: str, size: int) -> urllib3.PoolManager:
    """A connection pool that honours HTTPS_PROXY/NO_PROXY like the rest of the AWS tooling (never for loopback)."""
    host = urlsplit(endpoint).hostname or ""
    scheme = urlsplit(endpoint).scheme
    proxy = urllib.request.getproxies().get(scheme)
    common: dict[str, Any] = {"maxsize": size, "headers": {"User-Agent": USER_AGENT}}
    if proxy and host not in _LOOPBACK and not urllib.request.proxy_bypass(host):
        return urllib3.ProxyManager(proxy, **common)
    return urllib3.PoolManager(**common)


class Hub:
    """Client for one Hub endpoint (HF_ENDPOINT or https://huggingface.co) with an optional token."""

    def __init__(
        self,
        endpoint: str | None = None,
        token: str | None = None,
        *,
        token_source: str | None = None,
        retry: RetryPolicy = RetryPolicy(),
        connect_timeout: float = 10.0,
        read_timeout: float = 60.0,
        pool_size: int = 16,
    ) -> None:
        self.endpoint = (endpoint or os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")
        self._token = token or None
        self.token_source = token_source or ("a token" if token else None)
        self.retry = retry
        self._timeout = urllib3.Timeout(connect=connect_timeout, read=read_timeout)
        self._http = _pool(self.endpoint, pool_size)

    # -- metadata -------------------------------------------------------------------------------------

    def resolve_url(self, ref: FileRef, revision: str | None = None) -> str:
        rev = quote(revision or ref.revision, safe="")  # refs/pr/1 -> refs%2Fpr%2F1, as the Hub expects
        return f"{self.endpoint}/{ref.repo}/resolve/{rev}/{quote(ref.file)}"

    def _headers(self, url: str) -> dict[str, str]:
        headers = {"Accept-Encoding": "identity"}
        if self._token and _origin(url) == _origin(self.endpoint):
            headers["Authorization"] = f"Bearer {self._token}"
        return headers

    def info(self, ref: FileRef) -> FileInfo:
        """HEAD the file: size, sha256 (LFS files), commit and where to download it from."""
        failures = 0
        while True:
            try:
                return self._info_once(ref)
            except _Transient as exc:
                failures += 1
                if failures >= self.retry.attempts:
                    raise HubError(f"{ref}: {self.endpoint} kept failing ({exc}) after {failures} attempts") from None
                time.sleep(self.retry.delay(failures))

    def _info_once(self, ref: FileRef) -> FileInfo:
        url = self.resolve_url(ref)
        for _ in range(10):
            try:
                r = self._http.request("HEAD", url, headers=self._headers(url), redirect=False, retries=False, timeout=self._timeout)
            except urllib3.exceptions.HTTPError as exc:
                raise _Transient(str(exc)) from None
            if r.status in _REDIRECTS:
                location = r.headers.get("Location")
                if not location:
                    raise HubError(f"{ref}: HTTP {r.status} from {self.endpoint} without a Location header")
                if not urlsplit(location).netloc:  # relative: a renamed repo; follow it on the Hub
                    url = urljoin(url, location)
                    continue
                return self._file_info(ref, r.headers, download_url=location)
            if r.status == 200:
                commit = r.headers.get("X-Repo-Commit")
                return self._file_info(ref, r.headers, download_url=self.resolve_url(ref, commit) if commit else url)
            self._raise_for(ref, r.status, r.headers.get("X-Error-Code"))
        raise HubError(f"{ref}: too many redirects from {self.endpoint}")

    def _file_info(self, ref: FileRef, headers: urllib3.HTTPHeaderDict, *, download_url: str) -> FileInfo:
        size = headers.get("X-Linked-Size") or headers.get("Content-Length")
        if size is None or not size.isdigit():
            raise HubError(f"{ref}: {self.endpoint} reported no size for the file")
        linked = _etag(headers.get("X-Linked-Etag"))
        return FileInfo(
            ref=ref,
            size=int(size),
            sha256=linked if linked and _SHA256.match(linked) else None,
            commit=headers.get("X-Repo-Commit"),
            download_url=download_url,
        )

    def _raise_for(self, ref: FileRef, status: int, code: str | None = None) -> None:
        if status in _TRANSIENT:
            raise _Transient(f"HTTP {status}")
        if status in (401, 403):
            if not self._token:
                raise HubAuthError(
                    f"{ref} needs a Hugging Face token (HTTP {status} from {self.endpoint}: gated or private): "
                    "set a token secret (token_secret_name / --token-secret) or HF_TOKEN"
                )
            if status == 401:
                raise HubAuthError(f"the Hugging Face token from {self.token_source} was rejected for {ref} (HTTP 401): check that secret's value")
            raise HubAuthError(
                f"the Hugging Face token from {self.token_source} has no access to {ref} (HTTP 403): "
                "accept the model's terms on the Hub with the token's account"
            )
        if status == 404:
            what = {"RepoNotFound": "repo not found", "RevisionNotFound": "revision not found", "EntryNotFound": "file not found"}
            raise HubNotFoundError(
                f"{ref.repo}/{ref.file}@{ref.revision} not found on {self.endpoint} (HTTP 404"
                f"{': ' + what.get(code or '', code or '') if code else ''}): check hf_repo, file and revision"
            )
        raise HubError(f"{ref}: unexpected HTTP {status} from {self.endpoint}")

    # -- data -----------------------------------------------------------------------------------------

    def open(self, info: FileInfo) -> HubFile:
        return HubFile(self, info)


class HubFile:
    """Ranged reads of one resolved file; refreshes an expired CDN URL once per expiry (shared by all threads)."""

    def __init__(self, hub: Hub, info: FileInfo) -> None:
        self.hub = hub
        self.info = info
        self._lock = threading.Lock()

    def _refresh(self, stale_url: str) -> None:
        with self._lock:
            if self.info.download_url != stale_url:
                return  # another thread already refreshed it
            pinned = replace(self.info.ref, revision=self.info.commit) if self.info.commit else self.info.ref
            fresh = self.hub.info(pinned)
            if fresh.size != self.info.size or fresh.sha256 != self.info.sha256:
                raise HubError(f"{self.info.ref} changed on the Hub during the copy (size or sha256 differs); run again")
            self.info = replace(self.info, download_url=fresh.download_url)

    def read_range(
        self,
        start: int,
        end: int,
        *,
        stop: threading.Event | None = None,
        on_bytes: Callable[[int], None] | None = None,
    ) -> bytearray:
        """Bytes start..end (inclusive). A transient failure re-requests `Range: bytes=<where it stopped>-end`."""
        out = bytearray()
        failures = 0
        retry = self.hub.retry
        while start + len(out) <= end:
            if stop is not None and stop.is_set():
                raise Cancelled()
            offset = start + len(out)
            try:
                self._read_once(offset, end, out, on_bytes, stop)
            except _Transient as exc:
                failures = 1 if start + len(out) > offset else failures + 1  # progress resets the budget
                if failures >= retry.attempts:
                    raise HubError(
                        f"{self.info.ref}: bytes {offset}-{end} failed {failures} times in a row ({exc})"
                    ) from None
                delay = retry.delay(failures)
                if stop is not None:
                    if stop.wait(delay):
                        raise Cancelled() from None
                else:
                    time.sleep(delay)
        return out

    def _read_once(
        self,
        offset: int,
        end: int,
        out: bytearray,
        on_bytes: Callable[[int], None] | None,
        stop: threading.Event | None,
    ) -> None:
        url = self.info.download_url
        for _ in range(5):
            headers = self.hub._headers(url)
            headers["Range"] = f"bytes={offset}-{end}"
            try:
                r = self.hub._http.request(
                    "GET", url, headers=headers, preload_content=False, redirect=False, retries=False, timeout=self.hub._timeout
                )
            except urllib3.exceptions.HTTPError as exc:
                raise _Transient(str(exc)) from None
            if r.status in _REDIRECTS and r.headers.get("Location"):
                r.drain_conn()
                url = urljoin(url, r.headers["Location"])
                continue
            try:
                self._consume(r, url, offset, end, out, on_bytes, stop)
            except BaseException:
                r.close()  # a half-read connection must not go back to the pool
                raise
            finally:
                r.release_conn()
            return
        raise HubError(f"{self.info.ref}: too many redirects for {url.split('?')[0]}")

    def _consume(self, r, url, offset, end, out, on_bytes, stop) -> None:  # noqa: ANN001 - urllib3 response
        if r.status in (403, 410) and _origin(url) != _origin(self.hub.endpoint):
            r.drain_conn()
            self._refresh(self.info.download_url)  # signed CDN URLs expire during long copies
            raise _Transient(f"CDN answered HTTP {r.status} (expired URL), re-resolved")
        if r.status == 206:
            got_range = r.headers.get("Content-Range", "")
            if not got_range.startswith(f"bytes {offset}-"):
                r.drain_conn()
                raise HubError(f"{self.info.ref}: asked for bytes {offset}-{end}, got {got_range or 'no Content-Range'}")
        elif r.status == 200:
            if offset != 0:
                r.drain_conn()
                raise HubError(f"{self.info.ref}: the server ignored the Range header (HTTP 200 for bytes {offset}-{end})")
        else:
            r.drain_conn()
            self.hub._raise_for(self.info.ref, r.status, r.headers.get("X-Error-Code"))
        want = end - offset + 1
        got = 0
        try:
            while got < want:
                if stop is not None and stop.is_set():
                    raise Cancelled()
                chunk = r.read(min(CHUNK, want - got), decode_content=False)
                if not chunk:
                    break
                out += chunk
                got += len(chunk)
                if on_bytes is not None:
                    on_bytes(len(chunk))
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise _Transient(f"connection dropped after {got} of {want} bytes: {type(exc).__name__}") from None
        if got < want:
            raise _Transient(f"connection closed after {got} of {want} bytes")
        if r.status == 200:
            r.close()  # a full-body response we stopped reading early must not go back to the pool
