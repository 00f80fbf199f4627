"""A loopback HTTP server that behaves like the Hugging Face Hub's file endpoint, serving real files from disk.

`HEAD|GET /{owner}/{name}/resolve/{revision}/{file}`:
  LFS files   -> 302 to an absolute CDN URL (`/cdn/<sha256>?Expires=...`) with `X-Linked-Etag` (the sha256),
                 `X-Linked-Size`, `X-Repo-Commit` and the git `ETag`, as the Hub does;
  plain files -> 200/206 served directly;
  gated files -> 401 without `Authorization: Bearer <token>` or with an unknown token (X-Error-Code GatedRepo);
  unknown repo / revision / file -> 404 with X-Error-Code RepoNotFound / RevisionNotFound / EntryNotFound.
`GET /api/models/{owner}/{name}/revision/{revision}[?blobs=true]`: the model-info API — `sha` (the commit) and
`siblings` [{rfilename, size, blobId, lfs: {sha256, size, pointerSize}}] (huggingface_hub hf_api.py RepoSibling),
for the branch or any past commit (public for gated repos, whose files need the token).
`GET|HEAD /cdn/<sha256>` on a second port (another origin, as the real CDN is): Range requests (206 +
Content-Range, 416), keep-alive.

Branches move: `push(repo, name, path, commit)` makes `main` of that repo resolve to a new commit holding new
bytes; the earlier commits keep resolving to what they held (as the Hub serves any past commit).

Fault injection: `drop_once(offset, after)` cuts the connection after `after` bytes of the first GET whose
range starts at `offset`; `fail(offset, status, times[, headers])` answers such GETs with an error status;
`corrupt(offset)` flips one served byte; `per_connection_rate` throttles each response like a CDN's
per-connection limit; `throttle(kind, *headers)` answers the next Hub requests of that kind (`resolve` or `api`,
two of the Hub's rate-limit buckets) with 429 and the given headers (`RateLimit`, `Retry-After`); `omit_headers`
drops Hub response headers a mirror may not send (`X-Repo-Commit`, `X-Linked-Size`). Counters: GETs and bytes
served per path kind, 429s, and whether an Authorization header ever reached the CDN.
"""

from __future__ import annotations

import hashlib
import os
import re
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

CHUNK = 256 * 1024
_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")


def git_blob_id(data: bytes) -> str:
    """`git hash-object` of a regular file's bytes (huggingface_hub.utils.sha.git_hash)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def lfs_pointer(sha256: str, size: int) -> bytes:
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode()


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(4 * 1024 * 1024), b""):
            h.update(block)
    return h.hexdigest()


@dataclass
class ServedFile:
    repo: str
    name: str
    path: Path
    sha256: str
    size: int
    gated: bool = False
    lfs: bool = True
    git_sha1: str = "0" * 40


@dataclass
class Stats:
    heads: int = 0
    model_infos: int = 0
    gets: int = 0  # GETs that returned file bytes (resolve 200/206 + CDN)
    bytes_served: int = 0
    drops: int = 0
    throttled: int = 0  # 429s answered by throttle()
    auth_seen_by_cdn: int = 0
    ranges: list[str] = field(default_factory=list)


class FakeHub:
    def __init__(
        self, *, commit: str = "3f1d0c2b9a8e7d6c5b4a39281706f5e4d3c2b1a0", tokens: set[str] | None = None
    ) -> None:
        self.commit = commit
        self.tokens = set(tokens or {"hf_valid_token"})
        self.files: dict[tuple[str, str], ServedFile] = {}
        self.renamed: dict[str, str] = {}  # old repo name -> new: the Hub answers 307 to the new name (relative)
        self.heads_of: dict[str, str] = {}  # repo -> its main's commit, when it moved off the hub-wide one
        self.history: dict[tuple[str, str, str], ServedFile] = {}  # (repo, commit, name) of past commits
        self.stats = Stats()
        self.per_connection_rate: float | None = None  # bytes/s per response, None = unthrottled
        self._drops: dict[int, int] = {}
        self._fails: dict[int, tuple[int, int, dict[str, str]]] = {}
        self._throttles: dict[str, list[dict[str, str]]] = {"resolve": [], "api": []}
        self.omit_headers: set[str] = set()
        self._corrupt: set[int] = set()
        self._lock = threading.Lock()
        # Response bodies being written: an aborted download's server thread may still write (and count) a chunk
        # after its client has gone, so reset() waits for them before it zeroes the stats.
        self._bodies = 0
        self._idle = threading.Condition(self._lock)
        self._server: ThreadingHTTPServer | None = None
        self._cdn: ThreadingHTTPServer | None = None
        self._servers: list[tuple[ThreadingHTTPServer, threading.Thread]] = []

    # -- setup ----------------------------------------------------------------------------------------

    def add_file(
        self, repo: str, name: str, path: Path, *, gated: bool = False, lfs: bool = True, sha256: str | None = None
    ) -> ServedFile:
        served = ServedFile(repo, name, Path(path), sha256 or sha256_file(path), os.path.getsize(path), gated, lfs)
        # The git OID the Hub lists as blobId: of the bytes for a git file, of the pointer file for an LFS one.
        served.git_sha1 = git_blob_id(lfs_pointer(served.sha256, served.size) if lfs else Path(path).read_bytes())
        self.files[(repo, name)] = served
        return served

    def commit_of(self, repo: str) -> str:
        return self.heads_of.get(repo, self.commit)

    def push(self, repo: str, name: str, path: Path, commit: str) -> ServedFile:
        """A new commit on `main` of repo that changes `name` to the bytes of path."""
        with self._lock:
            for (r, n), f in self.files.items():
                if r == repo:
                    self.history[(r, self.commit_of(r), n)] = f
            self.heads_of[repo] = commit
        return self.add_file(repo, name, path)

    def drop_once(self, offset: int, after: int) -> None:
        with self._lock:
            self._drops[offset] = after

    def fail(self, offset: int, status: int, times: int, headers: dict[str, str] | None = None) -> None:
        with self._lock:
            self._fails[offset] = (status, times, dict(headers or {}))

    def throttle(self, kind: str, *answers: dict[str, str]) -> None:
        """The next len(answers) Hub requests of `kind` ("resolve": /resolve/ HEAD|GET; "api": model info) get
        HTTP 429 with those headers, one answer each, in order."""
        with self._lock:
            self._throttles[kind].extend(dict(a) for a in answers)

    def corrupt(self, offset: int | None) -> None:
        with self._lock:
            self._corrupt = set() if offset is None else {offset}

    def reset(self) -> None:
        with self._idle:
            self._idle.wait_for(lambda: self._bodies == 0, timeout=10)
            self.stats = Stats()
            self._drops.clear()
            self._fails.clear()
            self._throttles = {"resolve": [], "api": []}
            self.omit_headers = set()
            self._corrupt.clear()
            self.per_connection_rate = None

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> FakeHub:
        hub = self

        class Handler(_Handler):
            fake = hub

        # Two origins, like the real thing: the Hub and its CDN (the token must never reach the CDN).
        for _ in range(2):
            server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
            server.daemon_threads = True
            thread = threading.Thread(target=server.serve_forever, name="fake-hub", daemon=True)
            thread.start()
            self._servers.append((server, thread))
        self._server, self._cdn = self._servers[0][0], self._servers[1][0]
        return self

    @property
    def cdn_url(self) -> str:
        assert self._cdn is not None
        host, port = self._cdn.server_address[:2]
        return f"http://{host!s}:{port}"

    def stop(self) -> None:
        for server, thread in self._servers:
            server.shutdown()
            server.server_close()
            thread.join(timeout=5)
        self._servers.clear()

    def __enter__(self) -> FakeHub:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- used by the handler ----------------------------------------------------------------------------

    def _take_drop(self, offset: int) -> int | None:
        with self._lock:
            return self._drops.pop(offset, None)

    def _take_fail(self, offset: int) -> tuple[int, dict[str, str]] | None:
        with self._lock:
            status, times, headers = self._fails.get(offset, (0, 0, {}))
            if times <= 0:
                return None
            self._fails[offset] = (status, times - 1, headers)
            return status, headers

    def _take_throttle(self, kind: str) -> dict[str, str] | None:
        with self._lock:
            if not self._throttles[kind]:
                return None
            self.stats.throttled += 1
            return self._throttles[kind].pop(0)

    def model_info(self, repo: str, revision: str) -> tuple[str, list[ServedFile]] | None:
        """(commit, files) of repo at a branch (`main`) or past commit; None for an unknown revision."""
        head = self.commit_of(repo)
        if revision in ("main", head):
            return head, [f for (r, _), f in self.files.items() if r == repo]
        past = [f for (r, c, _), f in self.history.items() if r == repo and c == revision]
        return (revision, past) if past else None

    def _by_sha(self, sha: str) -> ServedFile | None:
        return next((f for f in [*self.files.values(), *self.history.values()] if f.sha256 == sha), None)


class _Handler(BaseHTTPRequestHandler):
    fake: FakeHub
    protocol_version = "HTTP/1.1"  # keep-alive, like the real CDN

    def log_message(self, *args: object) -> None:  # quiet
        pass

    def do_HEAD(self) -> None:  # noqa: N802
        with self.fake._lock:
            self.fake.stats.heads += 1
        self._route(head=True)

    def do_GET(self) -> None:  # noqa: N802
        self._route(head=False)

    def _simple(self, status: int, body: str = "", headers: dict[str, str] | None = None, head: bool = False) -> None:
        data = body.encode()
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if not head:
            self.wfile.write(data)

    def _route(self, head: bool) -> None:
        path = urlsplit(self.path).path
        if path.startswith("/cdn/"):
            if self.headers.get("Authorization"):
                with self.fake._lock:
                    self.fake.stats.auth_seen_by_cdn += 1
            served = self.fake._by_sha(path.removeprefix("/cdn/"))
            if served is None:
                return self._simple(404, "Not Found", head=head)
            return self._serve(served, head)
        if path.startswith("/api/models/"):
            if (limited := self.fake._take_throttle("api")) is not None:
                return self._simple(429, "Too Many Requests", limited, head)
            return self._model_info(path, head)
        m = re.match(r"^/([^/]+/[^/]+)/resolve/([^/]+)/(.+)$", path)
        if not m:
            return self._simple(404, "Not Found", {"X-Error-Code": "RepoNotFound"}, head)
        if m.group(1) in self.fake.renamed:
            return self._simple(307, "", {"Location": path.replace(m.group(1), self.fake.renamed[m.group(1)], 1)}, head)
        if (limited := self.fake._take_throttle("resolve")) is not None:
            return self._simple(429, "Too Many Requests", limited, head)
        repo, revision, name = m.group(1), unquote(m.group(2)), unquote(m.group(3))
        if not any(r == repo for r, _ in self.fake.files):
            return self._simple(404, "Repository Not Found", {"X-Error-Code": "RepoNotFound"}, head)
        commit = self.fake.commit_of(repo)
        if revision in ("main", commit):
            served = self.fake.files.get((repo, name))
        elif any(r == repo and c == revision for r, c, _ in self.fake.history):
            commit = revision
            served = self.fake.history.get((repo, revision, name))
        else:
            return self._simple(404, "Revision Not Found", {"X-Error-Code": "RevisionNotFound"}, head)
        if served is None:
            return self._simple(404, "Entry not found", {"X-Error-Code": "EntryNotFound"}, head)
        if served.gated:
            auth = self.headers.get("Authorization", "")
            if not auth:
                return self._simple(
                    401,
                    f"Access to model {repo} is restricted. You must have access to it and be authenticated.",
                    {"X-Error-Code": "GatedRepo"},
                    head,
                )
            if auth.removeprefix("Bearer ") not in self.fake.tokens:
                return self._simple(
                    401, "Invalid credentials in Authorization header", {"X-Error-Code": "GatedRepo"}, head
                )
        common = {"X-Repo-Commit": commit, "ETag": f'"{served.git_sha1}"'}
        if served.lfs:
            location = f"{self.fake.cdn_url}/cdn/{served.sha256}?Expires={int(time.time()) + 3600}&Signature=fake"
            redirect = {
                **common,
                "Location": location,
                "X-Linked-Etag": f'"{served.sha256}"',
                "X-Linked-Size": str(served.size),
            }
            return self._simple(
                302,
                f"Found. Redirecting to {location}",
                {k: v for k, v in redirect.items() if k not in self.fake.omit_headers},
                head,
            )
        return self._serve(served, head, {k: v for k, v in common.items() if k not in self.fake.omit_headers})

    def _model_info(self, path: str, head: bool) -> None:
        from tests.runtime.model_download.fake_hub_api import model_info

        status, headers, body = model_info(self.fake, path)
        if status != 200:
            return self._simple(status, body.decode(), headers, head)
        with self.fake._lock:
            self.fake.stats.model_infos += 1
        self.send_response(200)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _serve(self, served: ServedFile, head: bool, extra: dict[str, str] | None = None) -> None:
        size = served.size
        start, end, status = 0, size - 1, 200
        spec = self.headers.get("Range")
        if spec:
            m = _RANGE.match(spec.strip())
            if not m or (not m.group(1) and not m.group(2)):
                return self._simple(416, "bad range", {"Content-Range": f"bytes */{size}"}, head)
            if m.group(1):
                start = int(m.group(1))
                end = min(int(m.group(2)), size - 1) if m.group(2) else size - 1
            else:
                start, end = max(0, size - int(m.group(2))), size - 1
            if start >= size or start > end:
                return self._simple(416, "range not satisfiable", {"Content-Range": f"bytes */{size}"}, head)
            status = 206
            failure = None if head else self.fake._take_fail(start)
            if failure:
                return self._simple(failure[0], "injected failure", failure[1], head=head)
        self.send_response(status)
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(end - start + 1))
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        self.end_headers()
        if head:
            return
        with self.fake._lock:
            self.fake.stats.gets += 1
            self.fake.stats.ranges.append(f"{start}-{end}")
            corrupt = set(self.fake._corrupt)
        drop_after = self.fake._take_drop(start) if status == 206 else None
        rate = self.fake.per_connection_rate
        sent = 0
        began = time.monotonic()
        with self.fake._idle:
            self.fake._bodies += 1
        fd = os.open(served.path, os.O_RDONLY)
        try:
            pos = start
            while pos <= end:
                n = min(CHUNK, end - pos + 1)
                if drop_after is not None:
                    n = min(n, drop_after - sent)
                    if n <= 0:
                        with self.fake._lock:
                            self.fake.stats.drops += 1
                        self.close_connection = True
                        self.connection.shutdown(socket.SHUT_RDWR)  # mid-body: the client sees a short read
                        return
                chunk = os.pread(fd, n, pos)
                for off in corrupt:
                    if pos <= off < pos + len(chunk):
                        b = bytearray(chunk)
                        b[off - pos] ^= 0xFF
                        chunk = bytes(b)
                try:
                    self.wfile.write(chunk)
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True
                    return
                pos += len(chunk)
                sent += len(chunk)
                with self.fake._lock:
                    self.fake.stats.bytes_served += len(chunk)
                if rate:
                    ahead = sent / rate - (time.monotonic() - began)
                    if ahead > 0:
                        time.sleep(ahead)
        finally:
            os.close(fd)
            with self.fake._idle:
                self.fake._bodies -= 1
                self.fake._idle.notify_all()
