"""The Hub's model-info API: which files a repo holds at one revision, and the commit that revision is.

`GET {endpoint}/api/models/{repo}/revision/{quote(revision, safe='')}?blobs=true` — what huggingface_hub's
`HfApi.model_info(repo_id, revision=..., files_metadata=True)` sends (hf_api.py: `params["blobs"] = True`). The
JSON carries `sha` (the commit the revision resolves to) and `siblings`: `{rfilename, size, blobId, lfs?: {sha256,
size, pointerSize}}` (hf_api.py `RepoSibling`: blob_id is "the file's git OID"; lfs is set only for LFS files).
LFS files are verified by their sha256; plain git files by their git blob OID (`sha1("blob <size>\\0" + bytes)`,
huggingface_hub.utils.sha.git_hash — what git itself computes). The token goes only to the Hub's own origin.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from urllib.parse import quote, urljoin

import urllib3

from .errors import HubAuthError, HubError, HubNotFoundError
from .hub import _REDIRECTS, _TRANSIENT, COMMIT, Hub, _Retries, _Transient, transient

_HEX40 = frozenset("0123456789abcdef")


@dataclass(frozen=True)
class RepoFile:
    """One file of a repo at a commit, as the model-info API lists it."""

    path: str  # rfilename, relative to the repo root
    size: int
    sha256: str | None  # the LFS object's sha256; None for a plain git file
    blob_id: str | None  # the git OID (for an LFS file: its pointer's)

    @property
    def lfs(self) -> bool:
        return self.sha256 is not None


@dataclass(frozen=True)
class RepoListing:
    repo: str
    revision: str
    commit: str
    files: tuple[RepoFile, ...]


def git_blob_id(data: bytes) -> str:
    """The git OID of a regular file's bytes (`git hash-object`)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


def _sibling(raw: dict, where: str) -> RepoFile:
    path = raw.get("rfilename")
    lfs = raw.get("lfs") or None
    size = (lfs or {}).get("size", raw.get("size"))
    if not isinstance(path, str) or not isinstance(size, int):
        raise HubError(f"{where}: the Hub listed a file without a name or size ({json.dumps(raw)[:200]}); run again")
    sha256 = str(lfs["sha256"]).lower() if lfs else None
    if sha256 is not None and (len(sha256) != 64 or not set(sha256) <= _HEX40):
        raise HubError(f"{where}: the Hub reports a malformed sha256 for {path!r}")
    blob = raw.get("blobId")
    return RepoFile(path=path, size=size, sha256=sha256, blob_id=str(blob).lower() if blob else None)


def list_repo(hub: Hub, repo: str, revision: str) -> RepoListing:
    """The repo's files at `revision` (with sizes and hashes) and the commit it resolved to; retries transient
    failures (and rate limits: the Hub API bucket's 429s) with the hub's policy; 401/403/404 as one actionable line."""
    url = f"{hub.endpoint}/api/models/{repo}/revision/{quote(revision, safe='')}?blobs=true"
    where = f"{repo}@{revision}"
    retries = _Retries(hub, where)
    redirects = 0
    while True:
        try:
            r = hub._http.request(
                "GET", url, headers=hub._headers(url), redirect=False, retries=False, timeout=hub._timeout
            )
        except urllib3.exceptions.HTTPError as exc:
            failure = _Transient(str(exc))
        else:
            if r.status in _REDIRECTS and r.headers.get("Location") and redirects < 5:  # a renamed repo
                url, redirects = (
                    urljoin(url, r.headers["Location"]),
                    redirects + 1,
                )  # the token only to the Hub's origin
                continue
            if r.status == 200:
                return _listing(repo, revision, r.data, where)
            if r.status not in _TRANSIENT:
                _raise_for(hub, where, r.status, r.headers.get("X-Error-Code"))
            failure = transient(r.status, r.headers)
        delay = retries.delay(failure)
        if delay is None:
            raise HubError(
                f"{where}: {hub.endpoint} kept failing ({failure}) after {retries.failures} attempts"
            ) from None
        hub.wait(delay, None)


def _listing(repo: str, revision: str, body: bytes, where: str) -> RepoListing:
    try:
        data = json.loads(body)
    except ValueError:
        raise HubError(f"{where}: the Hub's model info is not JSON; check the endpoint") from None
    commit = data.get("sha")
    if not isinstance(commit, str) or not COMMIT.match(commit):
        raise HubError(
            f"{where}: the Hub reported no commit (sha: {commit!r}) for the revision; give it as a full commit sha"
        )
    siblings = data.get("siblings")
    if not isinstance(siblings, list):
        raise HubError(f"{where}: the Hub's model info lists no files (siblings); check the endpoint")
    return RepoListing(repo, revision, commit, tuple(_sibling(s, where) for s in siblings))


def _raise_for(hub: Hub, where: str, status: int, code: str | None) -> None:
    if status in (401, 403):
        if not hub._token:
            raise HubAuthError(
                f"{where} needs a Hugging Face token (HTTP {status} from {hub.endpoint}: gated or private): "
                "set a token secret (token_secret_name / --token-secret) or HF_TOKEN"
            )
        raise HubAuthError(
            f"the Hugging Face token from {hub.token_source} was refused for {where} (HTTP {status}): "
            "check that secret's value and accept the model's terms on the Hub with the token's account"
        )
    if status == 404:
        what = {"RepoNotFound": "repo not found", "RevisionNotFound": "revision not found"}.get(code or "", code or "")
        raise HubNotFoundError(
            f"{where} not found on {hub.endpoint} (HTTP 404{': ' + what if what else ''}): check hf_repo and revision"
        )
    raise HubError(f"{where}: unexpected HTTP {status} from {hub.endpoint} for the model info")
