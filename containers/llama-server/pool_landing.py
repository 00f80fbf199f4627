"""Which models of a pool's preset have landed on its volume, and the preset the router gets (stdlib only).

The catalog copies a farm's models one by one after the deploy (INTERFACE: a model is LANDED once its GGUF key
exists; keys are written once, whole), so the configured preset names files that appear later, or whose copy
failed. The router is given an EFFECTIVE preset: the configured one minus the sections whose file is not there
(a section the router lists is a model it will try to spawn; a missing file would fail every such request with a
500 "failed to load"). A model whose file is missing is COPYING, or COPY_FAILED when the catalog left a failure
marker beside it (`<the model file's directory>/<LLAMA_POOL_COPY_FAILED_FILE>`, JSON with a one-line "reason");
the GGUF's presence wins over a marker (a later attempt landed).

Only exact paths are stat'ed, never a directory listed: the volume is a Mountpoint for S3 mount, where a stat is a
HeadObject (+ a ListObjectsV2 for a name it has not seen; mountpoint-s3 doc/CONFIGURATION.md) and a listing of a
farm's prefix would be thousands of objects. A marker is read only when its size or mtime changed.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from inference_runtime.pool_status import COPY_FAILED, COPYING, LANDED
from pool_mode import TOP_SECTION, PresetModel

MARKER_MAX_BYTES = 64 * 1024  # a marker is one small JSON object; never read more than this
REASON_MAX_CHARS = 300  # the reason reaches a client's error message: one short line
# A section header as the engine reads it (common/preset.cpp parse_ini_from_file: "[" ws [^]]+ ws "]" eol, where
# eol may carry a ;/# comment); configparser (pool_mode.read_preset) names the section by the same characters.
_HEADER = re.compile(r"^[ \t]*\[([^\]\r\n]+)\][ \t]*(?:[;#].*)?$")


@dataclass(frozen=True)
class ModelStatus:
    state: str  # pool_status.COPYING / COPY_FAILED / LANDED
    reason: str | None = None  # why a copy failed (the marker's "reason"), else None


def _one_line(text: str) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= REASON_MAX_CHARS else line[: REASON_MAX_CHARS - 3] + "..."


class Landing:
    """Stats the model files of a preset. `copy_failed_name`: the failure marker's file name, None = no markers."""

    def __init__(self, copy_failed_name: str | None) -> None:
        self.copy_failed_name = copy_failed_name or None
        self._markers: dict[Path, tuple[tuple[int, int], str]] = {}  # marker -> ((mtime_ns, size), its reason)

    def status(self, model: PresetModel) -> ModelStatus:
        try:
            st = os.stat(model.path)
        except OSError:  # not there yet (ENOENT), or the mount cannot say now (EIO): the next poll asks again
            return self._missing(model.path)
        if not stat.S_ISREG(st.st_mode):
            return ModelStatus(COPY_FAILED, f"{model.path} is not a regular file")
        if not os.access(model.path, os.R_OK):
            # A mount option problem (Mountpoint's uid/gid/allow-other), not a copy in progress: say so.
            return ModelStatus(
                COPY_FAILED, f"model file {model.path} is not readable by uid {os.geteuid()} gid {os.getegid()}"
            )
        return ModelStatus(LANDED)

    def _missing(self, path: Path) -> ModelStatus:
        if self.copy_failed_name is None:
            return ModelStatus(COPYING)
        marker = path.parent / self.copy_failed_name
        try:
            st = os.stat(marker)
        except OSError:
            self._markers.pop(marker, None)
            return ModelStatus(COPYING)
        version = (st.st_mtime_ns, st.st_size)
        cached = self._markers.get(marker)
        if cached is not None and cached[0] == version:
            return ModelStatus(COPY_FAILED, cached[1])
        try:
            with open(marker, "rb") as f:
                raw = f.read(MARKER_MAX_BYTES)
            reason = json.loads(raw).get("reason")
            reason = _one_line(reason) if reason else f"copy failed ({marker} gives no reason)"
        except (OSError, ValueError, AttributeError) as e:
            reason = f"copy failed ({marker} cannot be read: {e})"
        self._markers[marker] = (version, reason)
        return ModelStatus(COPY_FAILED, reason)

    def survey(
        self, models: Iterable[PresetModel], previous: Mapping[str, ModelStatus] | None = None
    ) -> dict[str, ModelStatus]:
        """Each model's status, in preset order. With `previous` (same preset), a landed model is not stat'ed again:
        keys are identity keys, never overwritten (INTERFACE §1), so a landed file stays."""
        out = {}
        for m in models:
            known = previous.get(m.name) if previous is not None else None
            out[m.name] = known if known is not None and known.state == LANDED else self.status(m)
        return out


def effective_preset(text: str, drop: Iterable[str]) -> str:
    """The configured preset's text without the sections named in `drop` (every other line as written: the router
    compares each running model's options on reload, so a kept section must reach it unchanged). Lines before the
    first header are the TOP_SECTION's."""
    dropped = set(drop)
    out: list[str] = []
    keep = TOP_SECTION not in dropped
    for line in text.splitlines(keepends=True):
        header = _HEADER.match(line.rstrip("\r\n"))
        if header:
            keep = header.group(1) not in dropped
        if keep:
            out.append(line)
    return "".join(out)


def write_atomically(path: Path, text: str) -> None:
    """Readers (the router on reload) see the old file or the new one, never a part (rename(2) in one directory)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
