"""A small Hugging Face Hub file client: one HEAD for the file's metadata (size, sha256, commit, CDN location)
and ranged GETs that pick up where a dropped connection stopped.

Behaves like huggingface_hub's download path: the HEAD on `{endpoint}/{repo}/resolve/{revision}/{file}` is
not auto-redirected; relative redirects (renamed repos) are followed, an absolute one is the CDN location
whose response already carries `X-Linked-Etag` (the LFS sha256), `X-Linked-Size` and `X-Repo-Commit`.
The token goes only to the Hub's own origin, never to the CDN.

Rate limits: the Hub answers 429 with `RateLimit: "<bucket>";r=<remaining>;t=<seconds until the window resets>`
(and may send `Retry-After`); its limits are "defined over 5-minute windows" (https://huggingface.co/docs/hub/rate-limits).
Like huggingface_hub ≥1.2 (utils/_http.py `_http_backoff_base`: RateLimit `t` when a 429 says r=0, else
Retry-After delay-seconds, then +1 s) the client waits exactly that long, up to RetryPolicy.rate_limit_seconds
per request, instead of giving up after the ~1 minute of its ordinary backoff.
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
from typing import Any, Protocol
from urllib.parse import quote, urljoin, urlsplit

import urllib3

from .errors import HubAuthError, HubError, HubNotFoundError

DEFAULT_ENDPOINT = "https://huggingface.co"
# The revision when none is given: the Hub's default branch (huggingface_hub constants.DEFAULT_REVISION = "main").
DEFAULT_REVISION = "main"
USER_AGENT = "cpu-inference-model-download/0.1"
CHUNK = 1024 * 1024
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_TRANSIENT = frozenset({408, 425, 429, 500, 502, 503, 504})
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
# A git commit id as the Hub's X-Repo-Commit reports it (sha1 today; sha256 repositories would give 64).
COMMIT = re.compile(r"^[0-9a-f]{40}([0-9a-f]{24})?$")
# "All values are defined over 5-minute windows" (https://huggingface.co/docs/hub/rate-limits).
RATE_LIMIT_WINDOW_SECONDS = 300
# huggingface_hub utils/_http.py `_RATELIMIT_REGEX` (IETF draft-ietf-httpapi-ratelimit-headers-09): `"api";r=0;t=55`.
_RATELIMIT = re.compile(r"\"(?P<bucket>\w+)\"\s*;\s*r\s*=\s*(?P<r>\d+)\s*;\s*t\s*=\s*(?P<t>\d+)")
_LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})


@dataclass(frozen=True)
class FileRef:
    """One file of one Hub repo at one revision (branch, tag or commit)."""

    repo: str
    file: str
    revision: str = DEFAULT_REVISION

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
    """Backoff for transient failures; `attempts` counts consecutive failures that made no progress. A 429 does
    not count as an attempt: one request may instead spend up to `rate_limit_seconds` waiting out rate limits (and
    any Retry-After), a whole 5-minute window plus a margin."""

    attempts: int = 8
    backoff_seconds: float = 0.5
    max_backoff_seconds: float = 30.0
    rate_limit_seconds: float = RATE_LIMIT_WINDOW_SECONDS + 30

    def delay(self, failures: int) -> float:
        base = min(self.max_backoff_seconds, self.backoff_seconds * (2 ** (failures - 1)))
        return base * (0.5 + random.random() / 2)  # jitter: parallel ranges do not retry in lockstep


def _sleep(seconds: float, stop: threading.Event | None) -> bool:
    """Wait `seconds`; True when `stop` was set meanwhile (Hub(wait=...) replaces it in tests)."""
    if stop is None:
        time.sleep(seconds)
        return False
    return stop.wait(seconds)


class Cancelled(Exception):
    """Another part failed; this one stops quietly."""


class _Transient(Exception):
    """A failure worth retrying (dropped connection, timeout, 5xx, 429, expired CDN URL); `wait`: the seconds the
    server asked for (RateLimit / Retry-After), `why`: which header said so."""

    def __init__(
        self, detail: str, *, status: int | None = None, wait: float | None = None, why: str | None = None
    ) -> None:
        super().__init__(detail)
        self.rate_limited = status == 429
        self.wait = wait
        self.why = why


def transient(status: int, headers: Any) -> _Transient:  # noqa: ANN401 - urllib3 HTTPHeaderDict (case-insensitive)
    """A retryable HTTP status with the wait the server asked for, read as huggingface_hub reads it
    (utils/_http.py `_http_backoff_base`): a 429's `RateLimit` when it says r=0, else `Retry-After` delay-seconds
    (the HTTP-date form is not supported there either)."""
    if status == 429:
        m = _RATELIMIT.search(headers.get("RateLimit") or "")
        if m and int(m.group("r")) == 0:
            return _Transient(
                f"HTTP {status}", status=status, wait=float(m.group("t")), why=f"'{m.group('bucket')}' rate limit"
            )
    after = (headers.get("Retry-After") or "").strip()
    if after.isdigit():
        return _Transient(f"HTTP {status}", status=status, wait=float(after), why="Retry-After")
    return _Transient(f"HTTP {status}", status=status)


class _Retries:
    """The retry budget of one request: `attempts` consecutive failures without progress, plus up to
    `rate_limit_seconds` of waits the server asked for (or of backoff after a bare 429)."""

    def __init__(self, hub: Hub, what: str) -> None:
        self.hub, self.what = hub, what
        self.failures = 0
        self.limited = 0
        self.waited = 0.0

    def progress(self) -> None:
        self.failures = self.limited = 0
        self.waited = 0.0

    def delay(self, exc: _Transient) -> float | None:
        """Seconds to wait before the next try; None when the attempts are used up (the caller says so in its own
        words); HubError when the rate-limit budget is."""
        policy = self.hub.retry
        if not exc.rate_limited:
            self.failures += 1
            if self.failures >= policy.attempts:
                return None
            if exc.wait is None:
                return policy.delay(self.failures)
        if exc.wait is not None:
            wait = exc.wait + 1  # +1 s against rounding, as huggingface_hub does
        else:
            self.limited += 1
            wait = policy.delay(self.limited)
        if self.waited + wait > policy.rate_limit_seconds:
            told = f", {exc.why}: retry in {exc.wait:.0f} s" if exc.why else ""
            fix = (
                f"the account of the token from {self.hub.token_source} is over its limit: run again later"
                if self.hub._token
                else "give the copy a Hugging Face token secret (token_secret_name): authenticated limits are per "
                "account, anonymous ones per IP address, which the build may share — or run again later"
            )
            raise HubError(
                f"{self.what}: rate-limited by {self.hub.endpoint} ({exc}{told}) for longer than the job waits "
                f"({policy.rate_limit_seconds:.0f} s): {fix}"
            ) from None
        self.waited += wait
        return wait


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
    """Client for one Hub endpoint (`endpoint`, else HF_ENDPOINT, else DEFAULT_ENDPOINT) with an optional token."""

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
        wait: Callable[[float, threading.Event | None], bool] = _sleep,
    ) -> None:
        self.endpoint = (endpoint or os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")
        self._token = token or None
        self.token_source = token_source or ("a token" if token else None)
        self.retry = retry
        self.wait = wait  # (seconds, stop) -> stopped meanwhile; every retry delay goes through it
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
        retries = _Retries(self, str(ref))
        while True:
            try:
                return self._info_once(ref)
            except _Transient as exc:
                delay = retries.delay(exc)
                if delay is None:
                    raise HubError(
                        f"{ref}: {self.endpoint} kept failing ({exc}) after {retries.failures} attempts"
                    ) from None
                self.wait(delay, None)

    def _info_once(self, ref: FileRef) -> FileInfo:
        url = self.resolve_url(ref)
        for _ in range(10):
            try:
                r = self._http.request(
                    "HEAD", url, headers=self._headers(url), redirect=False, retries=False, timeout=self._timeout
                )
            except urllib3.exceptions.HTTPError as exc:
                raise _Transient(str(exc)) from None
            if r.status in _REDIRECTS:
                location = r.headers.get("Location")
                if not location:
                    raise HubError(f"{ref}: HTTP {r.status} from {self.endpoint} without a Location header")
                if not urlsplit(location).netloc:  # relative: a renamed repo; follow it on the Hub
                    url = urljoin(url, location)
                    continue
                return self._file_info(ref, r.headers, download_url=location, redirect=True)
            if r.status == 200:
                commit = self._commit(ref, r.headers)
                return self._file_info(ref, r.headers, download_url=self.resolve_url(ref, commit) if commit else url)
            self._raise_for(ref, r.status, r.headers)
        raise HubError(f"{ref}: too many redirects from {self.endpoint}")

    @staticmethod
    def _commit(ref: FileRef, headers: urllib3.HTTPHeaderDict) -> str | None:
        """X-Repo-Commit; a mirror that does not send it still serves a revision that is itself a full commit."""
        return headers.get("X-Repo-Commit") or (ref.revision if COMMIT.match(ref.revision) else None)

    def _file_info(
        self, ref: FileRef, headers: urllib3.HTTPHeaderDict, *, download_url: str, redirect: bool = False
    ) -> FileInfo:
        # A redirect's Content-Length is the length of its own body, not the file's: huggingface_hub file_download
        # get_hf_file_metadata takes `X-Linked-Size or (None if response.is_redirect else Content-Length)`.
        size = headers.get("X-Linked-Size") or (None if redirect else headers.get("Content-Length"))
        if size is None or not size.isdigit():
            why = " (its redirect carries no X-Linked-Size)" if redirect else ""
            raise HubError(f"{ref}: {self.endpoint} reported no size for the file{why}; check HF_ENDPOINT")
        linked = _etag(headers.get("X-Linked-Etag"))
        return FileInfo(
            ref=ref,
            size=int(size),
            sha256=linked if linked and _SHA256.match(linked) else None,
            commit=self._commit(ref, headers),
            download_url=download_url,
        )

    def _raise_for(self, ref: FileRef, status: int, headers: Any = None) -> None:  # noqa: ANN401 - HTTPHeaderDict
        headers = headers if headers is not None else {}
        code = headers.get("X-Error-Code")
        if status in _TRANSIENT:
            raise transient(status, headers)
        if status in (401, 403):
            if not self._token:
                raise HubAuthError(
                    f"{ref} needs a Hugging Face token (HTTP {status} from {self.endpoint}: gated or private): "
                    "set a token secret (token_secret_name / --token-secret) or HF_TOKEN"
                )
            if status == 401:
                raise HubAuthError(
                    f"the Hugging Face token from {self.token_source} was rejected for {ref} (HTTP 401): check that secret's value"
                )
            raise HubAuthError(
                f"the Hugging Face token from {self.token_source} has no access to {ref} (HTTP 403): "
                "accept the model's terms on the Hub with the token's account"
            )
        if status == 404:
            what = {
                "RepoNotFound": "repo not found",
                "RevisionNotFound": "revision not found",
                "EntryNotFound": "file not found",
            }
            raise HubNotFoundError(
                f"{ref.repo}/{ref.file}@{ref.revision} not found on {self.endpoint} (HTTP 404"
                f"{': ' + what.get(code or '', code or '') if code else ''}): check hf_repo, file and revision"
            )
        raise HubError(f"{ref}: unexpected HTTP {status} from {self.endpoint}")

    # -- data -----------------------------------------------------------------------------------------

    def open(self, info: FileInfo) -> HubFile:
        return HubFile(self, info)


class RangeSource(Protocol):
    """Bytes of one verified file by range: the Hub (HubFile) or an object already in S3 (tarball.S3Object)."""

    @property
    def size(self) -> int: ...

    @property
    def label(self) -> str: ...

    def read_range(
        self,
        start: int,
        end: int,
        *,
        stop: threading.Event | None = None,
        on_bytes: Callable[[int], None] | None = None,
    ) -> bytes | bytearray: ...


class HubFile:
    """Ranged reads of one resolved file; refreshes an expired CDN URL once per expiry (shared by all threads)."""

    def __init__(self, hub: Hub, info: FileInfo) -> None:
        self.hub = hub
        self.info = info
        self._lock = threading.Lock()

    @property
    def size(self) -> int:
        return self.info.size

    @property
    def label(self) -> str:
        return str(self.info.ref)

    def _refresh(self, stale_url: str) -> None:
        with self._lock:
            if self.info.download_url != stale_url:
                return  # another thread already refreshed it
            pinned = replace(self.info.ref, revision=self.info.commit) if self.info.commit else self.info.ref
            fresh = self.hub.info(pinned)
            if fresh.size != self.info.size or fresh.sha256 != self.info.sha256:
                raise HubError(
                    f"{self.info.ref} changed on the Hub during the copy (size or sha256 differs); run again"
                )
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
        retries = _Retries(self.hub, f"{self.info.ref}: bytes {start}-{end}")
        while start + len(out) <= end:
            if stop is not None and stop.is_set():
                raise Cancelled()
            offset = start + len(out)
            try:
                self._read_once(offset, end, out, on_bytes, stop)
            except _Transient as exc:
                if start + len(out) > offset:
                    retries.progress()  # progress resets the budget
                delay = retries.delay(exc)
                if delay is None:
                    raise HubError(
                        f"{self.info.ref}: bytes {offset}-{end} failed {retries.failures} times in a row ({exc})"
                    ) from None
                if self.hub.wait(delay, stop):
                    raise Cancelled() from None
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
                    "GET",
                    url,
                    headers=headers,
                    preload_content=False,
                    redirect=False,
                    retries=False,
                    timeout=self.hub._timeout,
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
                raise HubError(
                    f"{self.info.ref}: asked for bytes {offset}-{end}, got {got_range or 'no Content-Range'}"
                )
        elif r.status == 200:
            if offset != 0:
                r.drain_conn()
                raise HubError(
                    f"{self.info.ref}: the server ignored the Range header (HTTP 200 for bytes {offset}-{end})"
                )
        else:
            r.drain_conn()
            self.hub._raise_for(self.info.ref, r.status, r.headers)
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
