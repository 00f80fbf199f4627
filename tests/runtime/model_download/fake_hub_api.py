"""The fake Hub's model-info API (`GET /api/models/{owner}/{name}/revision/{revision}`), shaped like the Hub's:
`sha` (the commit the revision resolves to) and `siblings` [{rfilename, size, blobId, lfs?: {sha256, size,
pointerSize}}] — huggingface_hub hf_api.py `ModelInfo.sha` and `RepoSibling` (what `HfApi.model_info(...,
files_metadata=True)` parses; it sends `?blobs=true`). A gated repo's listing is public, as on the Hub; its files
need the token (fake_hub's resolve route)."""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING
from urllib.parse import unquote

from tests.runtime.model_download.fake_hub import lfs_pointer

if TYPE_CHECKING:
    from tests.runtime.model_download.fake_hub import FakeHub


def model_info(fake: FakeHub, path: str) -> tuple[int, dict[str, str], bytes]:
    """(status, headers, body) for one model-info request path."""
    m = re.match(r"^/api/models/([^/]+/[^/]+)/revision/([^/]+)$", path)
    if m and m.group(1) in fake.renamed:  # a renamed repo: a relative redirect, as the Hub answers
        return 307, {"Location": path.replace(m.group(1), fake.renamed[m.group(1)], 1)}, b""
    if not m or not any(r == m.group(1) for r, _ in fake.files):
        return 404, {"X-Error-Code": "RepoNotFound"}, b"Repository Not Found"
    repo, revision = m.group(1), unquote(m.group(2))
    found = fake.model_info(repo, revision)
    if found is None:
        return 404, {"X-Error-Code": "RevisionNotFound"}, b"Revision Not Found"
    commit, files = found
    siblings = []
    for f in sorted(files, key=lambda f: f.name):
        sibling: dict = {"rfilename": f.name, "size": f.size, "blobId": f.git_sha1}
        if f.lfs:
            sibling["lfs"] = {"sha256": f.sha256, "size": f.size, "pointerSize": len(lfs_pointer(f.sha256, f.size))}
        siblings.append(sibling)
    body = {"_id": "fake", "id": repo, "modelId": repo, "sha": commit, "private": False, "siblings": siblings}
    return 200, {}, json.dumps(body).encode()
