"""The configured GGUFs on this machine, for `cpu-inference local`: downloaded once from Hugging Face into a local
cache with the deployment's own downloader (`model_download`: one HEAD, ranged GETs, retries), sha256-verified
before they become visible, and refused up front when they cannot fit in this machine's memory.

Cache layout (the S3 layout's idea, keyed by the commit the Hub resolved, so a moved branch never mixes files):

    ${CPU_INFERENCE_CACHE:-~/.cache/cpu-inference}/models/<owner>/<name>/<commit>/<file>         verified file
                                                                    .../<commit>/<file>.sha256  `sha256sum -c` line
                                                                    .../<commit>/<file>.part    download in progress
                                                 models/<owner>/<name>/refs/<revision>          branch → commit
                                                 models/.locks/<owner>/<name>/<commit>/<file>.lock  one downloader

A file appears under its final name only after its bytes hashed to the expected sha256 (the config's, else the
Hub's), so a present file is a verified one. With a pinned commit or sha256 a cached file is used without any
network request; a branch costs one HEAD (to learn its commit), and offline the last commit seen for it is used.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from urllib.parse import quote, urlsplit

from cpu_inference import sizing
from cpu_inference._internal import resources as _resources
from cpu_inference.cli.main import UserError
from cpu_inference.config import Config, Model, model_spec, size_model
from model_download import DownloadError, FileInfo, FileRef, Hub, HubAuthError, read_token
from model_download.hub import HubFile

MIB = 1024 * 1024
DEFAULT_WINDOW = 16 * MIB  # bytes per ranged GET; also what an interruption can lose at most per GET in flight
DEFAULT_CONCURRENCY = 4  # parallel ranged GETs; the .part file is still appended strictly in order
PROBE_TIMEOUT_S = 5.0
GGUF_MAGIC = b"GGUF"  # llama.cpp ggml/include/gguf.h: #define GGUF_MAGIC "GGUF" (the file's first 4 bytes)
_COMMIT = re.compile(r"^[0-9a-f]{40}([0-9a-f]{24})?$")  # a git commit id: sha1, or sha256 in sha256 repositories
_LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})
FALLBACKS = "serve a local GGUF with --model-map NAME=PATH, or run the small stand-ins with --stand-ins"


def cache_root() -> Path:
    """`models/` of the cache (`_resources.cache_dir`: the stand-in Gemma and the engine build live there too)."""
    return _resources.cache_dir() / "models"


@dataclass(frozen=True)
class CachedModel:
    """A verified GGUF in the cache, ready for `llama-server -m path`."""

    name: str
    path: Path
    ref: FileRef
    commit: str | None  # None: the Hub (a mirror) reported no commit; the directory is then named after the revision
    sha256: str
    size: int
    how: str  # "downloaded" | "cached"
    offline: str | None = None  # why the Hub could not be asked (a branch's last cached commit was used)

    @property
    def note(self) -> str:
        at = f"commit {self.commit[:12]}" if self.commit else f"revision {self.ref.revision}"
        how = f"{self.how}; offline: {self.offline}" if self.offline else self.how
        return f"{self.name}: {self.ref.repo}/{self.ref.file}@{self.ref.revision} ({at}, {_size(self.size)}, {how}) {self.path}"


# --- --model-map ---------------------------------------------------------------------------------------------


def parse_model_map(
    items: Sequence[str], known: Sequence[str] | None = None, directories: Collection[str] = ()
) -> dict[str, Path]:
    """`["NAME=PATH", ...]` → {name: path}; each PATH must be an existing GGUF file — or, for a model of engine vllm
    (`directories`), a checkpoint directory — each NAME given once (and one of `known`, the config's model names,
    when given)."""
    out: dict[str, Path] = {}
    for item in items:
        name, sep, raw = item.partition("=")
        name, raw = name.strip(), raw.strip()
        if not sep or not name or not raw:
            raise UserError(
                f"--model-map {item!r}: expected NAME=PATH, e.g. --model-map smollm2-1-7b=./SmolLM2-1.7B-Instruct-Q4_K_M.gguf"
            )
        if known is not None and name not in known:
            raise UserError(f"--model-map {name}: no such model in the config — use one of {', '.join(known)}")
        if name in out:
            raise UserError(f"--model-map {name}: given twice ({out[name]} and {raw}) — map each model once")
        path = Path(raw).expanduser()
        if name in directories:
            if not (path / "config.json").is_file():
                raise UserError(
                    f"--model-map {name}: {path} is not a checkpoint directory — engine vllm serves a directory "
                    "with config.json, *.safetensors and the tokenizer files"
                )
            out[name] = path
            continue
        if not path.is_file():
            raise UserError(f"--model-map {name}: {path} is not a file — pass the path of a local .gguf")
        with open(path, "rb") as f:
            magic = f.read(len(GGUF_MAGIC))
        if magic != GGUF_MAGIC:
            raise UserError(
                f"--model-map {name}: {path} is not a GGUF file (it does not start with 'GGUF') — pass a llama.cpp .gguf"
            )
        out[name] = path
    return out


# --- this machine's memory -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MachineMemory:
    bytes: int
    kind: str  # "available" (Linux MemAvailable) | "in total" (macOS and the fallback: physical memory)

    def __str__(self) -> str:
        return f"{_size(self.bytes)} {self.kind}"


def machine_memory(
    meminfo: Path = Path("/proc/meminfo"), cgroup: Path = Path("/sys/fs/cgroup")
) -> MachineMemory | None:
    """Memory an engine may use here; None when it cannot be told (the fit check is then skipped).

    Linux: MemAvailable ("an estimate of how much memory is available for starting new applications, without
    swapping", kernel Documentation/filesystems/proc.rst): it counts reclaimable page cache, which is where the
    mmap'd weights live; inside a container with a cgroup v2 limit, at most memory.max - memory.current +
    inactive_file of memory.stat (Documentation/admin-guide/cgroup-v2.rst). macOS: `sysctl -n hw.memsize`
    (physical memory). Else: POSIX physical pages."""
    available = None
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                value, unit = line.split()[1:3]
                available = int(value) * (1024 if unit.lower() == "kb" else 1)
    except (OSError, ValueError, IndexError):
        pass
    if available is not None:
        limited = _cgroup_headroom(cgroup)
        if limited is not None and limited < available:
            return MachineMemory(limited, "available under this container's memory limit")
        return MachineMemory(available, "available")
    if sys.platform == "darwin":
        try:
            out = subprocess.run(["sysctl", "-n", "hw.memsize"], capture_output=True, text=True, timeout=5, check=True)
            return MachineMemory(int(out.stdout.strip()), "in total")
        except (OSError, ValueError, subprocess.SubprocessError):
            pass
    try:
        return MachineMemory(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"), "in total")
    except (AttributeError, ValueError, OSError):
        return None


def _cgroup_headroom(cgroup: Path) -> int | None:
    """cgroup v2 (a container's view of its own group): limit - usage + reclaimable file cache; None when unlimited."""
    try:
        text = (cgroup / "memory.max").read_text().strip()
        if text == "max":
            return None
        limit = int(text)
        used = int((cgroup / "memory.current").read_text())
    except (OSError, ValueError):
        return None
    try:  # flat-keyed, in bytes, entries may move: look the key up
        stat = dict(line.split(" ", 1) for line in (cgroup / "memory.stat").read_text().splitlines() if " " in line)
        reclaimable = int(stat.get("inactive_file", "0"))
    except (OSError, ValueError):
        reclaimable = 0
    return max(0, limit - used + reclaimable)


@dataclass(frozen=True)
class EngineMemory:
    """What one engine needs, in sizing's own terms (sizing.memory_needed is the number; the parts explain it)."""

    label: str  # models[0] (smollm2-1-7b)
    name: str
    weights: int
    kv_cache: int
    slots: int
    ctx_per_slot: int
    runtime: int  # process + compute buffers
    needed: int

    def explain(self) -> str:
        parts = (
            f"weights {_size(self.weights)} + KV cache {_size(self.kv_cache)} for {self.slots} slot(s) × "
            f"{self.ctx_per_slot} tokens + runtime {_size(self.runtime)}"
        )
        if self.needed > self.weights + self.kv_cache + self.runtime:
            return f"{sizing.RAM_TO_FILE_RATIO:g} × the weights, more than {parts}"
        return parts


def engine_memory(label: str, model: Model, *, file_size: int | None, slots: int, ctx_per_slot: int) -> EngineMemory:
    spec = model_spec(model)
    if file_size:
        spec = replace(spec, file_size_bytes=file_size)  # the real file beats the parameter-count estimate
    weights = sizing.weights_bytes(spec)
    kv = slots * ctx_per_slot * sizing.kv_bytes_per_token(spec)
    runtime = sizing.RUNTIME_OVERHEAD_BYTES + int(sizing.COMPUTE_BUFFER_FRACTION * weights)
    return EngineMemory(
        label, model.name, weights, kv, slots, ctx_per_slot, runtime, sizing.memory_needed(spec, slots, ctx_per_slot)
    )


def deployment_shape(config: Config, model: Model) -> tuple[int, int]:
    """(slots, context per slot) the deployment sizes for this model — what `local` runs unless told otherwise."""
    planned = size_model(config, model)
    if planned is not None:
        return planned.slots, planned.ctx_per_slot
    spec = model_spec(model)
    return spec.parallel_slots or 1, sizing.context_per_slot(spec)


def check_fits(needs: Sequence[EngineMemory], memory: MachineMemory | None) -> None:
    """Refuse, with sizing's numbers, a model (or the set of engines together) larger than this machine's memory."""
    if memory is None or not needs:
        return
    for need in needs:
        if need.needed > memory.bytes:
            raise UserError(
                f"{need.label}: needs {_size(need.needed)} ({need.explain()}) but this machine has {memory} — "
                f"use --model-map {need.name}=PATH with a smaller quantization, or --stand-ins"
            )
    total = sum(n.needed for n in needs)
    if len(needs) > 1 and total > memory.bytes:
        each = " + ".join(f"{n.name} {_size(n.needed)}" for n in needs)
        raise UserError(
            f"the {len(needs)} engines together need {_size(total)} ({each}) but this machine has {memory} — "
            "start fewer (--models), map smaller files with --model-map NAME=PATH, or use --stand-ins"
        )


# --- the cache -------------------------------------------------------------------------------------------------


def _repo_dir(root: Path, repo: str) -> Path:
    return root.joinpath(*repo.split("/"))


def _ref_file(root: Path, ref: FileRef) -> Path:
    return _repo_dir(root, ref.repo) / "refs" / quote(ref.revision, safe="")


def _entry(root: Path, name: str, ref: FileRef, folder: str, how: str = "cached") -> CachedModel | None:
    """The verified file in `<repo>/<folder>/`, if complete: the file and its sha256 line, sizes agreeing."""
    path = _repo_dir(root, ref.repo) / folder / ref.file
    try:
        sha = path.with_name(path.name + ".sha256").read_text().split()[0]
        size = path.stat().st_size
    except (OSError, IndexError):
        return None
    commit = folder if _COMMIT.match(folder) else None
    return CachedModel(name, path, ref, commit, sha, size, how)


def _gguf_file(model: Model) -> str:
    if model.source.file is None:  # engine vllm: local_plan serves it from --model-map or a stand-in, never fetches
        raise UserError(
            f"{model.name}: engine vllm has no GGUF file to download — use --model-map {model.name}=DIR or --stand-ins"
        )
    return model.source.file


def _cached_without_network(root: Path, model: Model) -> CachedModel | None:
    """A cache hit that needs no request: the pinned commit's file, or any cached copy with the pinned sha256."""
    src = model.source
    ref = FileRef(src.hf_repo, _gguf_file(model), src.revision)
    if _COMMIT.match(src.revision):
        hit = _entry(root, model.name, ref, src.revision, "cached")
        if hit is not None and (src.sha256 is None or hit.sha256 == src.sha256):
            return hit
    if src.sha256:
        repo = _repo_dir(root, src.hf_repo)
        preferred = _last_commit(root, ref)
        folders = (
            sorted((p.name for p in repo.iterdir() if p.is_dir() and p.name != "refs"), key=lambda f: f != preferred)
            if repo.is_dir()
            else []
        )
        for folder in folders:
            hit = _entry(root, model.name, ref, folder, "cached")
            if hit is not None and hit.sha256 == src.sha256:
                return hit
    return None


def _last_commit(root: Path, ref: FileRef) -> str | None:
    try:
        return _ref_file(root, ref).read_text().strip() or None
    except OSError:
        return None


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


@contextmanager
def _lock(path: Path, on_wait: Callable[[], None] | None) -> Iterator[None]:
    """One downloader per file across processes (two `local` runs must not append to one .part)."""
    try:
        import fcntl
    except ImportError:  # not POSIX: no cross-process lock
        yield
        return
    with open(path, "a+b") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if on_wait is not None:
                on_wait()
            fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


# --- the network -----------------------------------------------------------------------------------------------


def unreachable(endpoint: str, timeout: float = PROBE_TIMEOUT_S) -> str | None:
    """Why the endpoint (or the proxy in front of it) cannot be reached — DNS failure, refused or timed-out
    connection — or None when a TCP connection opens. Hub.info would retry such failures for a minute; this
    tells "no network" in one attempt. HTTP answers (401, 404) are not looked at here: model_download words them."""
    parts = urlsplit(endpoint)
    host, port = parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80)
    via = ""
    # The same proxy rule as model_download.hub's connection pool: HTTPS_PROXY/NO_PROXY, never for loopback.
    proxy = urllib.request.getproxies().get(parts.scheme)
    if proxy and host not in _LOOPBACK and not urllib.request.proxy_bypass(host):
        p = urlsplit(proxy if "://" in proxy else f"http://{proxy}")
        host, port, via = (
            p.hostname or "",
            p.port or (443 if p.scheme == "https" else 80),
            f" (proxy for {parts.hostname})",
        )
    try:
        socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        return f"cannot resolve {host}{via} ({getattr(exc, 'strerror', None) or exc})"
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return None
    except TimeoutError:
        return f"no answer from {host}:{port}{via} within {timeout:g} s"
    except OSError as exc:
        return f"cannot connect to {host}:{port}{via} ({exc.strerror or type(exc).__name__})"


def default_hub(endpoint: str | None = None, concurrency: int = DEFAULT_CONCURRENCY) -> Hub:
    """The Hub client `cpu-inference download` uses: HF_ENDPOINT (a mirror) or huggingface.co, token from HF_TOKEN."""
    token, source = read_token(None)
    return Hub(endpoint, token, token_source=source, pool_size=concurrency + 2)


# --- one model -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Resolved:
    """A model whose bytes are known: either in the cache, or described by the Hub's HEAD (to download)."""

    index: int  # in config.models
    model: Model
    cached: CachedModel | None = None
    info: FileInfo | None = None

    @property
    def label(self) -> str:
        return _label(self.index, self.model)

    @property
    def size(self) -> int:
        return self.cached.size if self.cached is not None else self.info.size  # type: ignore[union-attr]


class _Offline(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _label(index: int, model: Model) -> str:
    return f"models[{index}] ({model.name})"


def _resolve(index: int, model: Model, hub: Hub, root: Path, probe: Callable[[], str | None]) -> _Resolved:
    """Cache first (no request when pinned); else one HEAD; offline, the last cached commit of a branch."""
    label = _label(index, model)
    hit = _cached_without_network(root, model)
    if hit is not None:
        return _Resolved(index, model, cached=hit)
    src = model.source
    ref = FileRef(src.hf_repo, _gguf_file(model), src.revision)
    reason = probe()
    if reason is not None:
        # The last commit seen for this branch; a mirror that reports no commit keeps files under the revision name.
        hit = _entry(root, model.name, ref, _last_commit(root, ref) or quote(src.revision, safe=""))
        if hit is not None and (src.sha256 is None or hit.sha256 == src.sha256):
            return _Resolved(index, model, cached=replace(hit, offline=reason))
        raise _Offline(reason)
    try:
        info = hub.info(ref)
    except HubAuthError as exc:  # model_download's words name the deployment's token secret; locally it is HF_TOKEN
        hint = "" if hub.token_source else " (`cpu-inference local` reads the token from HF_TOKEN)"
        raise UserError(f"{label}: {exc}{hint}") from None
    except DownloadError as exc:  # 404 and exhausted retries: model_download's own one-line words
        raise UserError(f"{label}: {exc}") from None
    given = src.sha256
    if given and info.sha256 and given != info.sha256:
        raise UserError(
            f"{label}: sha256 mismatch for {ref}: expected {given} (models[{index}].source.sha256), the Hub reports "
            f"{info.sha256}; nothing was downloaded — fix the sha256 or the revision"
        )
    if not (given or info.sha256):
        raise UserError(
            f"{label}: {ref}: the Hub reports no sha256 (not an LFS file) — set models[{index}].source.sha256"
        )
    if info.size == 0:
        raise UserError(f"{label}: {ref}: the Hub reports an empty file")
    folder = info.commit or quote(src.revision, safe="")
    hit = _entry(root, model.name, ref, folder, "cached")
    if hit is not None and hit.sha256 == (given or info.sha256) and hit.size == info.size:
        _remember(root, ref, info)
        return _Resolved(index, model, cached=hit)
    return _Resolved(index, model, info=info)


def _remember(root: Path, ref: FileRef, info: FileInfo) -> None:
    if info.commit and ref.revision != info.commit:
        _write_atomic(_ref_file(root, ref), info.commit + "\n")


def _download(
    resolved: _Resolved,
    hub: Hub,
    root: Path,
    *,
    on_start: Callable[[int, int], None] | None,
    on_bytes: Callable[[int], None] | None,
    on_wait: Callable[[], None] | None = None,
    concurrency: int = DEFAULT_CONCURRENCY,
    window: int = DEFAULT_WINDOW,
) -> CachedModel:
    """Download into `<file>.part` (continuing one left by an interrupted run with a Range from its size), hash,
    and rename onto the final name only when the sha256 matches; a mismatch deletes the .part."""
    info, model, label = resolved.info, resolved.model, resolved.label
    assert info is not None
    ref = info.ref
    expected = model.source.sha256 or info.sha256
    assert expected is not None
    folder = info.commit or quote(ref.revision, safe="")
    final = _repo_dir(root, ref.repo) / folder / ref.file
    final.parent.mkdir(parents=True, exist_ok=True)
    part = final.with_name(final.name + ".part")
    lock = root / ".locks" / final.relative_to(root).parent / f"{final.name}.lock"  # kept: unlinking a lock races
    lock.parent.mkdir(parents=True, exist_ok=True)
    with _lock(lock, on_wait):
        done = _entry(root, model.name, ref, folder, "cached")  # another process may have finished it meanwhile
        if done is not None and done.sha256 == expected and done.size == info.size:
            _remember(root, ref, info)
            return done
        hasher = hashlib.sha256()
        have = part.stat().st_size if part.exists() else 0
        if have > info.size:  # not a prefix of this file: start over
            part.unlink()
            have = 0
        free = shutil.disk_usage(final.parent).free
        if free < info.size - have:
            raise UserError(
                f"{label}: {_size(info.size - have)} to download but only {_size(free)} free in {final.parent} — "
                "free some space or point CPU_INFERENCE_CACHE at a larger disk"
            )
        with open(part, "ab") as out:
            if have:
                with open(part, "rb") as old:
                    for block in iter(lambda: old.read(4 * MIB), b""):
                        hasher.update(block)
            if on_start is not None:
                on_start(info.size, have)
            try:
                _append_ranges(
                    hub.open(info),
                    have,
                    info.size,
                    out,
                    hasher,
                    concurrency=concurrency,
                    window=window,
                    on_bytes=on_bytes,
                )
            except DownloadError as exc:
                out.flush()
                kept = out.tell()
                raise UserError(
                    f"{label}: download interrupted: {exc} — {_size(kept)} of {_size(info.size)} kept in {part}; "
                    "run again to resume"
                ) from None
            out.flush()
            os.fsync(out.fileno())
        digest = hasher.hexdigest()
        if digest != expected:
            part.unlink(missing_ok=True)
            raise UserError(
                f"{label}: sha256 mismatch for {ref}: expected {expected}, got {digest} from the downloaded "
                f"bytes; nothing was kept in the cache — run again, or check models[{resolved.index}].source.sha256"
            )
        _write_atomic(final.with_name(final.name + ".sha256"), f"{expected}  {final.name}\n")
        os.replace(part, final)  # the file appears only now, verified
        _fsync_dir(final.parent)
        _remember(root, ref, info)
    return CachedModel(model.name, final, ref, info.commit, expected, info.size, "downloaded")


def _append_ranges(
    source: HubFile,
    start: int,
    size: int,
    out,
    hasher,
    *,
    concurrency: int,
    window: int,  # noqa: ANN001 - file, hash
    on_bytes: Callable[[int], None] | None,
) -> None:
    """Ranged GETs of `window` bytes, `concurrency` in flight, appended and hashed strictly in file order, so the
    .part is always a prefix of the file (what a later run resumes from)."""
    ranges = [(s, min(s + window, size) - 1) for s in range(start, size, window)]
    stop = threading.Event()
    with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="model-cache") as pool:
        futures: dict[int, Future] = {}
        submitted = 0
        try:
            for index in range(len(ranges)):
                while submitted < len(ranges) and submitted <= index + concurrency:
                    lo, hi = ranges[submitted]
                    futures[submitted] = pool.submit(source.read_range, lo, hi, stop=stop, on_bytes=on_bytes)
                    submitted += 1
                data = futures.pop(index).result()
                out.write(data)
                hasher.update(data)
        except BaseException:
            stop.set()  # the other ranges stop at their next chunk
            for future in futures.values():
                future.cancel()
            raise


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def fetch_model(
    model: Model,
    *,
    index: int = 0,
    hub: Hub | None = None,
    cache_dir: Path | None = None,
    on_start: Callable[[int, int], None] | None = None,
    on_bytes: Callable[[int], None] | None = None,
    concurrency: int = DEFAULT_CONCURRENCY,
    window: int = DEFAULT_WINDOW,
) -> CachedModel:
    """One configured model's GGUF in the cache, downloading it if needed (no fit check: see fetch_models).

    on_start(total_bytes, resumed_from) once before the bytes flow; on_bytes(n) per chunk, from worker threads."""
    hub = hub or default_hub(concurrency=concurrency)
    root = cache_dir or cache_root()
    try:
        resolved = _resolve(index, model, hub, root, lambda: unreachable(hub.endpoint))
    except _Offline as off:
        raise UserError(_offline_line([(_label(index, model), model)], hub.endpoint, off.reason)) from None
    if resolved.cached is not None:
        return resolved.cached
    return _download(resolved, hub, root, on_start=on_start, on_bytes=on_bytes, concurrency=concurrency, window=window)


def _offline_line(missing: list[tuple[str, Model]], endpoint: str, reason: str) -> str:
    what = ", ".join(
        f"{label} {m.source.hf_repo}/{m.source.file or ''}@{m.source.revision}".replace("/@", "@")
        for label, m in missing
    )
    names = ", ".join(m.name for _, m in missing)
    return (
        f"no network: {reason}, so {endpoint} cannot send {what}, and the cache has no copy — "
        f"serve a local GGUF with --model-map NAME=PATH (for {names}), or run the small stand-ins with --stand-ins"
    )


# --- all models of a local run ---------------------------------------------------------------------------------


def fetch_models(
    config: Config,
    names: Sequence[str] | None = None,
    *,
    hub: Hub | None = None,
    cache_dir: Path | None = None,
    memory: MachineMemory | None = None,
    shapes: Mapping[str, tuple[int, int]] | None = None,
    progress=None,  # noqa: ANN001 - a rich.progress.Progress; default: a bar on stderr
    notes: Callable[[str], None] | None = None,
    concurrency: int = DEFAULT_CONCURRENCY,
    window: int = DEFAULT_WINDOW,
    sized_elsewhere: Collection[str] = (),
) -> dict[str, CachedModel]:
    """The GGUFs of `names` (default: every model of the config), all checked before any byte is downloaded:
    reachable or cached, and fitting together in `memory` (default: this machine's, see machine_memory) with
    `shapes` {name: (slots, context per slot)} (default: what the deployment sizes). `sized_elsewhere`: models
    left out of that sum because the caller checks their memory (pooled models: at most models_max of them are
    loaded at once, local_plan.cap_pools). Returns {name: CachedModel}."""
    hub = hub or default_hub(concurrency=concurrency)
    root = cache_dir or cache_root()
    say = notes or (lambda line: print(line, file=sys.stderr, flush=True))
    wanted = [(i, m) for i, m in enumerate(config.models) if names is None or m.name in names]
    unknown = sorted(set(names or ()) - {m.name for _, m in wanted})
    if unknown:
        raise UserError(
            f"no model named {', '.join(unknown)} in the config — use names from {', '.join(m.name for m in config.models)}"
        )

    probed: list[str | None] = []

    def probe() -> str | None:  # at most one connection attempt per run, and only when a request is needed
        if not probed:
            probed.append(unreachable(hub.endpoint))
        return probed[0]

    resolved: list[_Resolved] = []
    offline: list[tuple[str, Model]] = []
    for i, m in wanted:
        try:
            r = _resolve(i, m, hub, root, probe)
        except _Offline:
            offline.append((_label(i, m), m))
            continue
        resolved.append(r)
        if r.cached is not None and r.cached.offline:
            say(
                f"{m.name}: no network ({r.cached.offline}) — using the cached copy of {r.cached.ref} "
                f"from commit {(r.cached.commit or '?')[:12]}, the last one seen for {m.source.revision}"
            )
    if offline:
        raise UserError(_offline_line(offline, hub.endpoint, probed[0] or "unreachable"))

    memory = memory or machine_memory()
    needs = []
    for r in resolved:
        if r.model.name in sized_elsewhere:
            continue
        slots, ctx = (shapes or {}).get(r.model.name) or deployment_shape(config, r.model)
        needs.append(engine_memory(r.label, r.model, file_size=r.size, slots=slots, ctx_per_slot=ctx))
    check_fits(needs, memory)

    out = {r.model.name: r.cached for r in resolved if r.cached is not None}
    missing = [r for r in resolved if r.cached is None]
    if not missing:
        return out
    bar = progress if progress is not None else _progress_bar()
    with bar:
        for r in missing:
            task = bar.add_task(r.model.name, total=None, start=False)

            def on_start(total: int, resumed: int, task=task, r: _Resolved = r) -> None:  # noqa: ANN001
                bar.update(task, total=total, completed=resumed)
                bar.start_task(task)
                if resumed:
                    say(f"{r.model.name}: resuming {r.info.ref} at {_size(resumed)} of {_size(total)}")  # type: ignore[union-attr]
                else:  # a line a log keeps, whatever the bar does
                    say(f"{r.model.name}: downloading {r.info.ref} ({_size(total)}) from {hub.endpoint} into {root}")  # type: ignore[union-attr]

            out[r.model.name] = _download(
                r,
                hub,
                root,
                on_start=on_start,
                on_bytes=functools.partial(bar.advance, task),
                on_wait=functools.partial(
                    say, f"{r.model.name}: waiting for another cpu-inference downloading the same file"
                ),
                concurrency=concurrency,
                window=window,
            )
    return {m.name: out[m.name] for _, m in wanted}  # config order


def _progress_bar():  # noqa: ANN202 - rich.progress.Progress
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn

    console = Console(stderr=True)
    # A terminal redraws the bar and clears it when done; a log or pipe (no redraws) gets its final state once.
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=console.is_terminal,
    )


def _size(n: int) -> str:
    return f"{n / sizing.GIB:.1f} GiB" if n >= sizing.GIB else f"{n / MIB:.0f} MiB"
