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
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from inference_runtime.env import EngineConfigError
from inference_runtime.llama_flags import LORA, MODELS_PRESET
from inference_runtime.lora import split_paths
from inference_runtime.pool_status import COPY_FAILED, COPYING, LANDED
from pool_mode import GLOBAL_SECTION, TOP_SECTION, PresetModel, read_preset

MARKER_MAX_BYTES = 64 * 1024  # a marker is one small JSON object; never read more than this
REASON_MAX_CHARS = 300  # the reason reaches a client's error message: one short line
# A section header as the engine reads it (common/preset.cpp parse_ini_from_file: "[" ws [^]]+ ws "]" eol, where
# eol may carry a ;/# comment); configparser (pool_mode.read_preset) names the section by the same characters.
_HEADER = re.compile(r"^[ \t]*\[([^\]\r\n]+)\][ \t]*(?:[;#].*)?$")
# A section's adapter list (`lora = a,b`; LORA.keys: the option has no other name): rewritten to the landed ones.
_LORA_LINE = re.compile(r"^[ \t]*(?:" + "|".join(re.escape(k) for k in LORA.keys) + r")[ \t]*=")


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
        return self.file_status(model.path)

    def file_status(self, path: Path, what: str = "model") -> ModelStatus:
        """A model's (or an adapter's: `what`) file: landed, copying, or copy failed."""
        try:
            st = os.stat(path)
        except OSError:  # not there yet (ENOENT), or the mount cannot say now (EIO): the next poll asks again
            return self._missing(path)
        if not stat.S_ISREG(st.st_mode):
            return ModelStatus(COPY_FAILED, f"{path} is not a regular file")
        if not os.access(path, os.R_OK):
            # A mount option problem (Mountpoint's uid/gid/allow-other), not a copy in progress: say so.
            return ModelStatus(
                COPY_FAILED, f"{what} file {path} is not readable by uid {os.geteuid()} gid {os.getegid()}"
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


# One adapter of a base's section: its path as written (what the child's GET /lora-adapters echoes and the gateway's
# config names) and the file it names.
AdapterFile = tuple[str, Path]


def preset_adapters(path: Path, text: str, cwd: Path | None = None) -> dict[str, tuple[AdapterFile, ...]]:
    """Each section's LoRA adapters (its `lora` key, in id order; inference_runtime/lora.py), for the sections that
    have some. A relative path is the router's working directory's, as for `model` (pool_mode.check_preset). `lora`
    in `[*]` is refused in one line: a base's ids are positions in its own list, kept to its landed prefix here."""
    sections = read_preset(path, text)
    if any(k in sections.get(GLOBAL_SECTION, {}) for k in LORA.keys):
        raise EngineConfigError(
            f"{MODELS_PRESET.image_env} {path}: [{GLOBAL_SECTION}] sets `{LORA.key}`; give each base its adapters in "
            "its own section"
        )
    base = cwd or Path.cwd()
    out = {}
    for name, section in sections.items():
        value = next((section[k] for k in LORA.keys if k in section), "")
        files = tuple((a, Path(a) if Path(a).is_absolute() else base / a) for a in split_paths(value))
        if files and name not in (GLOBAL_SECTION, TOP_SECTION):
            out[name] = files
    return out


def landed_prefix(files: Sequence[AdapterFile], landed: Callable[[str], bool]) -> tuple[str, ...]:
    """The adapters a base's router gets: the longest prefix of its list whose files have landed. Not every landed
    one: ids are positions, and the gateway reuses a backend's list for a few seconds (slm_router/gateway.py), so a
    list may only grow at its end while adapters land — an adapter behind one still copying waits for it."""
    out: list[str] = []
    for written, _ in files:
        if not landed(written):
            break
        out.append(written)
    return tuple(out)


def effective_preset(text: str, drop: Iterable[str], adapters: Mapping[str, Sequence[str]] | None = None) -> str:
    """The configured preset's text without the sections named in `drop` (every other line as written: the router
    compares each running model's options on reload, so a kept section must reach it unchanged), and in each section
    named in `adapters` its `lora` line listing only those adapters (as written, in their order; no line for none:
    an adapter file that is not there would stop the base's child from loading). Lines before the first header are
    the TOP_SECTION's."""
    dropped = set(drop)
    lists = adapters or {}
    out: list[str] = []
    section = TOP_SECTION
    keep = TOP_SECTION not in dropped
    for line in text.splitlines(keepends=True):
        header = _HEADER.match(line.rstrip("\r\n"))
        if header:
            section = header.group(1)
            keep = section not in dropped
        if not keep:
            continue
        if section in lists and _LORA_LINE.match(line):
            if lists[section]:
                out.append(f"{LORA.key} = {','.join(lists[section])}\n")
            continue
        out.append(line)
    return "".join(out)


def write_atomically(path: Path, text: str) -> None:
    """Readers (the router on reload) see the old file or the new one, never a part (rename(2) in one directory)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
