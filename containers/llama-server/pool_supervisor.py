"""`entrypoint.py pool` at run time: the router as a child, the landed models of the preset served in place as they
land or as the preset changes, and a small side port (stdlib only: one Python process, a few threads, a few MB; the
main loop wakes every LLAMA_PRESET_POLL_SECONDS).

Why not exec: a pool's model list lives in a ConfigMap, and its models are copied after the deploy. Rolling every
replica to change the list would throw away every loaded model on every replica; the pinned router can reconcile
in place instead. `GET /models?reload=1` re-reads the model sources (tools/server/server-models.cpp
get_router_models: `req.get_param("reload")` -> load_models()) and load_models' RELOAD branch unloads only the
running models whose preset changed or that left the source, drops the removed ones, adds the new ones unloaded,
and leaves every other running model as it is (`(reload) unloading model name=... (source updated or removed)` is
logged for each one it stops; requests that need a model wait on `is_reloading`, so nothing is routed to a
half-applied list).

The router reads an EFFECTIVE preset (pool_landing.py): the configured one (LLAMA_MODELS_PRESET, read-only) minus
the sections whose model file has not landed yet, written atomically into LLAMA_POOL_STATE_DIR. Each poll re-stats
the files still missing (exact paths: the volume is a Mountpoint for S3 mount) and re-hashes the configured preset;
when a file lands or the preset changes, the effective preset is rewritten and the router reloaded. A preset with
no landed model yet still starts the router (it lists no model; tests/runtime/engine/test_pool_landing.py pins
that against the binary).

Why a poll of the content hash: a ConfigMap mounted as a directory (no subPath) is updated in place by the kubelet
through an atomic symlink swap (`..data` -> a new timestamped directory; kubernetes pkg/volume/util/atomic_writer.go),
so reading `<dir>/preset.ini` always yields one whole version; the swap replaces the symlink, not the file, so an
inotify watch on the file would miss it, while a hash of the content every few seconds cannot.

A new configured version goes through the same user-error check as at start (pool_mode.check_preset): a bad one is
refused (one line naming the section, logged once) and the running set keeps serving. A missing model file is no
error: that model is "copying" until it lands.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from inference_runtime.env import EngineConfigError, env_float, env_int, env_str
from inference_runtime.pool_status import (
    COPY_FAILED,
    COPY_FAILED_FILE_ENV,
    COPYING,
    DEFAULT_STATUS_PORT,
    LANDED,
    STATE_DIR_ENV,
    STATUS_PORT_ENV,
)
from pool_landing import (
    AdapterFile,
    Landing,
    ModelStatus,
    effective_preset,
    landed_prefix,
    preset_adapters,
    write_atomically,
)
from pool_mode import PoolCommand, PresetModel, check_preset
from pool_status_server import ColdLoads, Published, follow_router, serve_status

POLL_SECONDS_DEFAULT = 5.0  # on top of the kubelet's own delay (sync period, 1 min by default) this is noise
# The router unloads every changed/removed running model before it answers (each waits up to its stop-timeout,
# DEFAULT_STOP_TIMEOUT 10 s in server-models.cpp); a few at once fit in this.
RELOAD_TIMEOUT_SECONDS = 120.0
EFFECTIVE_PRESET = "preset.ini"  # the router's preset, in the state directory
# Missing files are stat'ed this many at a time: on Mountpoint a stat of a name it has not cached is a HeadObject
# (+ a ListObjectsV2), tens of milliseconds, and a farm just deployed has hundreds of models still copying.
STAT_WORKERS = 8
# The router's INI loader names the section it rejects (common/preset.cpp load_from_ini: "option '%s' not
# recognized in preset '%s'").
_REJECTED_SECTION = re.compile(r"in preset '([^']+)'")


def _log(message: str) -> None:
    print(f"entrypoint: {message}", file=sys.stderr, flush=True)


def poll_seconds(env: Mapping[str, str]) -> float:
    return env_float(
        env, "LLAMA_PRESET_POLL_SECONDS", POLL_SECONDS_DEFAULT, minimum=0, hint="seconds; 0 = do not watch"
    )


@dataclass(frozen=True)
class PoolSettings:
    interval: float  # seconds between polls of the preset and the missing files (0: none)
    status_port: int  # the side port (0: off)
    state_dir: Path | None  # where the effective preset is written (None: a new directory under the temp dir)
    copy_failed_name: str | None  # the failure marker's file name (None: markers are not looked for)


def pool_settings(env: Mapping[str, str]) -> PoolSettings:
    """The supervisor's variables, checked before anything starts (one line naming the variable)."""
    port = env_int(env, STATUS_PORT_ENV, DEFAULT_STATUS_PORT, minimum=0, hint="port; 0 = off")
    if port > 65535:
        raise EngineConfigError(f"{STATUS_PORT_ENV} must be in 0..65535 (0 = off), got {port}")
    marker = env_str(env, COPY_FAILED_FILE_ENV, "") or None
    if marker is not None and (marker in (".", "..") or "/" in marker):
        raise EngineConfigError(f"{COPY_FAILED_FILE_ENV} must be a file name (e.g. copy-failed.json), got {marker!r}")
    state_dir = env_str(env, STATE_DIR_ENV, "")
    return PoolSettings(poll_seconds(env), port, Path(state_dir) if state_dir else None, marker)


def effective_path(settings: PoolSettings) -> Path:
    if settings.state_dir is None:
        return Path(tempfile.mkdtemp(prefix="llama-pool-")) / EFFECTIVE_PRESET
    try:
        settings.state_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise EngineConfigError(
            f"{STATE_DIR_ENV} {settings.state_dir} cannot be created ({e.strerror or e}); give a writable directory"
        ) from None
    if not os.access(settings.state_dir, os.W_OK | os.X_OK):
        raise EngineConfigError(f"{STATE_DIR_ENV} {settings.state_dir} is not writable by uid {os.geteuid()}")
    return settings.state_dir / EFFECTIVE_PRESET


def _option(command: list[str], flag: str) -> str | None:
    return command[command.index(flag) + 1] if flag in command[:-1] else None


def local_base_url(command: list[str]) -> str:
    """The router as this container reaches it: loopback when it listens on every address."""
    host = _option(command, "--host") or "127.0.0.1"
    port = _option(command, "--port") or "8080"
    if host in ("0.0.0.0", ""):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def _api_key(command: list[str], env: Mapping[str, str]) -> str | None:
    # common/arg.cpp: --api-key KEY[,KEY...], env LLAMA_API_KEY; any one of them is accepted.
    raw = _option(command, "--api-key") or env.get("LLAMA_API_KEY", "")
    return raw.split(",")[0].strip() or None


def _read(path: Path) -> tuple[str, str] | str:
    """(sha256, text) of the preset, or why it cannot be read."""
    try:
        data = path.read_bytes()
    except OSError as e:
        return f"LLAMA_MODELS_PRESET {path} cannot be read ({e.strerror or e})"
    return hashlib.sha256(data).hexdigest(), data.decode(errors="replace")


class PresetWatch:
    """The configured preset's version in use, each model's copy state, and the effective preset the router runs
    with; `tick()` takes in a new configured version and newly landed files through one reload."""

    def __init__(self, plan: PoolCommand, env: Mapping[str, str], landing: Landing, effective: Path) -> None:
        self.path = plan.preset
        self.url = local_base_url(plan.command) + "/models?reload=1"
        self.key = _api_key(plan.command, env)
        self.landing = landing
        self.effective = effective
        self.digest: str | None = None  # the configured version in use
        self.text = ""
        self.models: list[PresetModel] = []
        self.states: dict[str, ModelStatus] = {}  # the last survey
        self.adapter_files: dict[str, tuple[AdapterFile, ...]] = {}  # base -> its section's adapters, in id order
        self.adapter_states: dict[str, ModelStatus] = {}  # adapter file (as its section writes it) -> its survey
        self.applied: str | None = None  # the effective text the router runs with
        self.served: set[str] = set()  # the landed models of that text
        self.served_adapters: dict[str, tuple[str, ...]] = {}  # base -> the adapters of that text, in id order
        self.refused: str | None = None  # the last configured version (or read error) refused: logged once
        self.refused_effective: str | None = None  # the last effective text the router refused
        self.rejected: dict[str, str] = {}  # landed sections the router refused, and its reason (this version)
        self.published = Published()  # what the side port answers (replaced whole: read from another thread)

    def start(self) -> None:
        """Before the router starts: the configured preset (a user error raises EngineConfigError), the first
        survey and the effective preset."""
        read = _read(self.path)
        if isinstance(read, str):
            raise EngineConfigError(read)
        self.digest, self.text = read
        self.models = check_preset(self.path, text=self.text)
        self.adapter_files = preset_adapters(self.path, self.text)
        self.states = self._survey(None)
        self.applied = self._effective()
        write_atomically(self.effective, self.applied)
        self.served, self.served_adapters = self._landed(), self._landed_adapters()
        self._publish()
        self._log_states({}, start=True)

    def _survey(self, previous: Mapping[str, ModelStatus] | None) -> dict[str, ModelStatus]:
        """Each model's state; with `previous`, its landed models are not stat'ed again (keys are identity keys,
        written once and never overwritten: INTERFACE §1)."""
        known = previous or {}
        missing = [m for m in self.models if m.name not in known or known[m.name].state != LANDED]
        files = {w: p for listed in self.adapter_files.values() for w, p in listed}
        waiting = [w for w in files if self.adapter_states.get(w, ModelStatus(COPYING)).state != LANDED]
        fresh: dict[str, ModelStatus] = {}
        fresh_adapters: dict[str, ModelStatus] = {}
        if missing or waiting:
            with ThreadPoolExecutor(max_workers=min(STAT_WORKERS, len(missing) + len(waiting))) as pool:
                fresh = dict(zip((m.name for m in missing), pool.map(self.landing.status, missing), strict=True))
                adapter_status = lambda w: self.landing.file_status(files[w], "adapter")  # noqa: E731
                fresh_adapters = dict(zip(waiting, pool.map(adapter_status, waiting), strict=True))
        self.adapter_states = {w: fresh_adapters.get(w) or self.adapter_states[w] for w in files}
        return {m.name: fresh[m.name] if m.name in fresh else known[m.name] for m in self.models}

    def _landed(self) -> set[str]:
        return {n for n, s in self.states.items() if s.state == LANDED and n not in self.rejected}

    def _landed_adapters(self) -> dict[str, tuple[str, ...]]:
        """Each landed base with adapters -> what its router gets: its landed prefix (pool_landing.landed_prefix)."""
        landed = self._landed()
        return {
            name: landed_prefix(files, lambda w: self.adapter_states[w].state == LANDED)
            for name, files in self.adapter_files.items()
            if name in landed
        }

    def _effective(self) -> str:
        landed = self._landed()
        drop = [m.name for m in self.models if m.name not in landed]
        return effective_preset(self.text, drop, self._landed_adapters())

    def _publish(self) -> None:
        out = {}
        for name, s in self.states.items():
            if name in self.rejected:
                out[name] = ModelStatus(COPY_FAILED, self.rejected[name])
            elif s.state == LANDED and name not in self.served:
                out[name] = ModelStatus(COPYING)  # on the volume, not in the router's list yet: ask again shortly
            else:
                out[name] = s
        pending: dict[str, dict[str, ModelStatus]] = {}
        for name, files in self.adapter_files.items():
            served = self.served_adapters.get(name, ())
            waits: dict[str, ModelStatus] = {}
            for w, _ in files:
                if w in served:
                    continue
                s = self.adapter_states[w]
                ahead = next(iter(waits), None)
                if s.state == LANDED:  # landed, not served yet: behind one still copying, or the reload is pending
                    s = ModelStatus(COPYING, f"waits for {ahead}, ahead of it in the list" if ahead else None)
                waits[w] = s
            pending[name] = waits
        self.published = Published(out, dict(self.served_adapters), pending)

    def _log_states(self, before: Mapping[str, ModelStatus], start: bool = False) -> None:
        landed, total = sum(1 for s in self.states.values() if s.state == LANDED), len(self.states)
        if start:
            _log(f"{landed} of {total} models landed; the rest are served as they land")
        for name, s in self.states.items():
            if before.get(name) == s:
                continue
            if s.state == LANDED and not start:
                _log(f"model {name} landed ({landed} of {total})")
            elif s.state == COPY_FAILED:
                _log(f"warning: model {name} failed to copy: {s.reason}")

    def tick(self) -> None:
        read = _read(self.path)
        before = self.states
        if isinstance(read, str):
            if read != self.refused:
                self.refused = read
                _log(f"warning: {read}; the running set keeps serving")
            self.states = self._survey(before)
        elif read[0] not in (self.digest, self.refused):
            digest, text = read
            try:
                models = check_preset(self.path, text=text)
                adapter_files = preset_adapters(self.path, text)
            except EngineConfigError as e:
                self.refused = digest
                _log(f"error: new preset refused, the running set keeps serving: {e}")
                self.states = self._survey(before)
            else:
                # A landed file stays landed if its section still names the same file.
                paths = {m.name: m.path for m in self.models}
                keep = {m.name: before[m.name] for m in models if m.name in before and paths.get(m.name) == m.path}
                self.digest, self.text, self.models, self.refused = digest, text, models, None
                self.adapter_files = adapter_files
                self.rejected = {}
                self.refused_effective = None
                self.states = self._survey(keep)
                _log(f"preset {digest[:12]} read: {len(models)} models")
        else:
            self.states = self._survey(before)
        self._log_states(before)
        self._apply()
        self._publish()

    def _apply(self) -> None:
        """Reload the router when the effective preset changed; a section it rejects is left out, named."""
        for _ in range(len(self.models) + 1):
            text = self._effective()
            if text in (self.applied, self.refused_effective):
                return
            try:
                write_atomically(self.effective, text)
            except OSError as e:
                _log(f"error: {self.effective} cannot be written ({e.strerror or e}); retrying on the next poll")
                return
            outcome, message = self._reload()
            if outcome == "applied":
                self.applied, self.served, self.served_adapters = text, self._landed(), self._landed_adapters()
                _log(
                    f"preset {self.digest and self.digest[:12]} applied in place: {len(self.served)} of "
                    f"{len(self.models)} models served"
                )
                return
            if outcome == "retry":
                return
            section = _REJECTED_SECTION.search(message)
            name = section.group(1) if section else None
            if name is None or name not in self._landed():
                # Not one section's fault: logged once; the files are there, so they are reported landed.
                self.refused_effective, self.served = text, self._landed()
                self.served_adapters = self._landed_adapters()
                return
            self.rejected[name] = f"the engine refused its preset section: {message}"
            _log(f"error: preset section [{name}] left out, fix it in {self.path}: {message}")

    def _reload(self) -> tuple[str, str]:
        """("applied" | "refused" (the router answered with an error) | "retry" (it did not answer), its message)."""
        request = urllib.request.Request(self.url, headers={"Authorization": f"Bearer {self.key}"} if self.key else {})
        try:
            with urllib.request.urlopen(request, timeout=RELOAD_TIMEOUT_SECONDS) as response:
                response.read()
            return "applied", ""
        except urllib.error.HTTPError as e:
            # The router's own INI parser failed before it touched its model list (load_models phase 1), so the
            # running set is unchanged; the same version would fail the same way again.
            raw = e.read()[:500]
            try:
                message = str(json.loads(raw)["error"]["message"])
            except (ValueError, KeyError, TypeError):
                message = raw.decode(errors="replace")
            _log(f"error: the router refused the new preset ({e.code} {message}); the running set keeps serving")
            return "refused", message
        except (OSError, http.client.HTTPException) as e:  # not up yet, or stopping: the next tick tries again
            _log(f"warning: {self.url} failed ({e}); retrying on the next poll")
            return "retry", ""


def _start_side_port(plan: PoolCommand, env: Mapping[str, str], settings: PoolSettings, watch: PresetWatch) -> None:
    """The event follower (cold-load metrics) and, unless LLAMA_POOL_STATUS_PORT=0, the side port. A port that
    cannot be bound is logged, not fatal: the models keep serving (the gateway then answers as for a stale list)."""
    loads = ColdLoads()
    follower = threading.Thread(
        target=follow_router,
        args=(local_base_url(plan.command), _api_key(plan.command, env), loads, threading.Event()),
        name="pool-events",
        daemon=True,
    )
    follower.start()
    if not settings.status_port:
        return
    host = _option(plan.command, "--host") or "127.0.0.1"
    try:
        serve_status(host, settings.status_port, lambda: watch.published, loads)
    except OSError as e:
        _log(
            f"error: {STATUS_PORT_ENV} {host}:{settings.status_port} cannot be bound ({e.strerror or e}); "
            "no /status or /metrics on this replica"
        )
        return
    _log(f"status on {host}:{settings.status_port} (GET /status, /status?model=<name>, /metrics)")


def _exit_code(status: int) -> int:
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code  # killed by signal N: 128 + N, as a shell reports it


def supervise(plan: PoolCommand, env: Mapping[str, str], settings: PoolSettings) -> int:
    """Run the router until it exits and return its status. SIGTERM/SIGINT go to the router (it stops its model
    children itself). As PID 1 of the container this process also reaps any orphan re-parented to it (a model
    child whose router died), so nothing is left a zombie. A user error in the preset raises EngineConfigError
    before the router starts; after that errors are logged, never raised."""
    router: subprocess.Popen | None = None

    def forward(signum: int, _frame: object) -> None:
        if router is not None and router.returncode is None:
            router.send_signal(signum)
        elif router is None:  # before the router exists: stop here, nothing to forward to
            sys.exit(128 + signum)

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, forward)
    effective = effective_path(settings)
    try:
        watch = PresetWatch(plan, env, Landing(settings.copy_failed_name), effective)
        watch.start()
        command = plan.router_command(watch.effective)
        _log(f"starting {shlex.join(command)}")
        router = subprocess.Popen(command)  # inherits stdout/stderr: the router's log is the container's
        _start_side_port(plan, env, settings, watch)
        return _run(router, watch, settings.interval)
    finally:
        if settings.state_dir is None:  # the temporary directory is this process's own
            shutil.rmtree(effective.parent, ignore_errors=True)


def _run(router: subprocess.Popen, watch: PresetWatch, interval: float) -> int:
    next_poll = time.monotonic() + interval
    while True:
        # Reap every exited child (the router and any adopted orphan) without blocking.
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:  # no child at all: the router was reaped elsewhere (not by this loop)
                return router.wait()
            if pid == 0:
                break
            if pid == router.pid:
                router.returncode = _exit_code(status)  # reaped here: Popen must not wait for it again
                _log(f"llama-server exited with {router.returncode}")
                return router.returncode
        if interval and time.monotonic() >= next_poll:
            watch.tick()
            next_poll = time.monotonic() + interval
        time.sleep(0.2)
