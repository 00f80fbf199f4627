"""Serve as the image's unprivileged user even when the platform starts the container as root (stdlib only).

SageMaker starts every container as root ("SageMaker AI expects all containers to run with root users",
https://docs.aws.amazon.com/sagemaker/latest/dg/your-algorithms-inference-code.html), so the image's USER is
root. Before anything listens, the entrypoint checks that the model is readable, then drops to
LLAMA_RUN_AS (default 65532:65532, the distroless "nonroot" ids that EKS pods run as through their
securityContext) for good: setgroups([]), setgid, setuid. The adapter and llama-server (its child) then run
unprivileged. Started as non-root (an EKS pod), there is nothing to drop.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Mapping
from pathlib import Path

from .env import EngineConfigError, env_str

DEFAULT_RUN_AS = (65532, 65532)
_IDS = re.compile(r"^(\d+):(\d+)$")


def run_as(env: Mapping[str, str]) -> tuple[int, int]:
    raw = env_str(env, "LLAMA_RUN_AS", "")
    if not raw:
        return DEFAULT_RUN_AS
    m = _IDS.match(raw)
    if not m:
        raise EngineConfigError(
            f"LLAMA_RUN_AS must be UID:GID (default {DEFAULT_RUN_AS[0]}:{DEFAULT_RUN_AS[1]}; 0:0 keeps root), got {raw!r}"
        )
    return int(m.group(1)), int(m.group(2))


def model_files(model: str) -> list[Path]:
    """The model file and every GGUF next to it (the other shards of a split model, an mmproj)."""
    path = Path(model)
    siblings = sorted(p for p in path.parent.glob("*.gguf") if p.is_file()) if path.parent.is_dir() else []
    return [path, *(p for p in siblings if p != path)]


def _allowed(st: os.stat_result, uid: int, gid: int, bits: tuple[int, int, int]) -> bool:
    owner, group, other = bits
    if st.st_uid == uid:
        return bool(st.st_mode & owner)
    if st.st_gid == gid:
        return bool(st.st_mode & group)
    return bool(st.st_mode & other)


def writable_by(directory: Path, uid: int, gid: int) -> bool:
    """Whether uid:gid may create files in `directory`, by its owner and mode (checked as root, before the drop)."""
    st = directory.stat()
    return _allowed(st, uid, gid, (stat.S_IWUSR, stat.S_IWGRP, stat.S_IWOTH)) and _allowed(
        st, uid, gid, (stat.S_IXUSR, stat.S_IXGRP, stat.S_IXOTH)
    )


def why_not_readable(path: Path, uid: int, gid: int) -> str:
    """Which path component keeps uid:gid from reading `path`, by its owner and mode (checked as root)."""
    search = (stat.S_IXUSR, stat.S_IXGRP, stat.S_IXOTH)
    read = (stat.S_IRUSR, stat.S_IRGRP, stat.S_IROTH)
    absolute = path.resolve()
    for directory in reversed(absolute.parents):
        st = directory.stat()
        if not _allowed(st, uid, gid, search):
            return f"directory {directory} is {st.st_uid}:{st.st_gid} mode {stat.S_IMODE(st.st_mode):04o} (no search permission for {uid}:{gid})"
    st = absolute.stat()
    if not _allowed(st, uid, gid, read):
        return f"{absolute} is {st.st_uid}:{st.st_gid} mode {stat.S_IMODE(st.st_mode):04o} (no read permission for {uid}:{gid})"
    return "the mode bits allow it, so an ACL or security module denies it"


def drop_privileges(env: Mapping[str, str], *, model: str | None, binary: str) -> str:
    """As root: switch to LLAMA_RUN_AS for good, then prove the engine binary runs and the model reads
    (`model` None: a multi-model endpoint, whose models arrive later and are checked as each loads).
    Returns a line for the log; raises EngineConfigError (one line naming the file and the fix)."""
    uid, gid = run_as(env)
    if os.geteuid() != 0:
        return f"running as uid {os.geteuid()} gid {os.getegid()} (not root: nothing to drop)"
    if uid == 0:
        return "LLAMA_RUN_AS=0:0: serving as root"
    files = model_files(model) if model else []
    reasons = {f: why_not_readable(f, uid, gid) for f in files if f.exists()}  # stat as root, before the drop
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)
    if os.getuid() != uid or os.geteuid() != uid or os.getgid() != gid:
        raise EngineConfigError(f"could not switch to {uid}:{gid}")
    fix = (
        f"SageMaker starts the container as root and it serves as {uid}:{gid}: make the model files readable by "
        f"others (files 0644, directories 0755) or set LLAMA_RUN_AS=0:0 to serve as root"
    )
    for f in files:
        try:
            with open(f, "rb") as fh:
                fh.read(1)
        except OSError as e:
            reason = reasons.get(f, e.strerror or type(e).__name__)
            raise EngineConfigError(f"model {f} is not readable by uid {uid} gid {gid}: {reason}. {fix}") from None
    if not os.access(binary, os.X_OK):
        raise EngineConfigError(f"engine binary {binary} is not executable by uid {uid} gid {gid}")
    return f"dropped root: serving as uid {uid} gid {gid}"
