"""`entrypoint.py pool` at run time: the router as a child, and the preset applied in place when it changes
(stdlib only: one Python process, no threads, a few MB; it wakes every LLAMA_PRESET_POLL_SECONDS).

Why not exec: a pool's model list lives in a ConfigMap. Rolling every replica to change it would throw away every
loaded model on every replica; the pinned router can reconcile in place instead. `GET /models?reload=1` re-reads
the model sources (tools/server/server-models.cpp get_router_models: `req.get_param("reload")` -> load_models())
and load_models' RELOAD branch unloads only the running models whose preset changed or that left the source, drops
the removed ones, adds the new ones unloaded, and leaves every other running model as it is (`(reload) unloading
model name=... (source updated or removed)` is logged for each one it stops; requests that need a model wait on
`is_reloading`, so nothing is routed to a half-applied list).

Why a poll of the content hash: a ConfigMap mounted as a directory (no subPath) is updated in place by the kubelet
through an atomic symlink swap (`..data` -> a new timestamped directory; kubernetes pkg/volume/util/atomic_writer.go),
so reading `<dir>/preset.ini` always yields one whole version; the swap replaces the symlink, not the file, so an
inotify watch on the file would miss it, while a hash of the content every few seconds cannot.

The router reads the preset path itself on reload, so the new file goes through the same fail-fast check as at
start first: a preset naming a model file that is not there is refused (one line naming the section) and the
running set keeps serving; the next change is checked again.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import shlex
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path

from inference_runtime.env import EngineConfigError, env_float
from pool_mode import PoolCommand, check_preset

POLL_SECONDS_DEFAULT = 5.0  # on top of the kubelet's own delay (sync period, 1 min by default) this is noise
# The router unloads every changed/removed running model before it answers (each waits up to its stop-timeout,
# DEFAULT_STOP_TIMEOUT 10 s in server-models.cpp); a few at once fit in this.
RELOAD_TIMEOUT_SECONDS = 120.0


def _log(message: str) -> None:
    print(f"entrypoint: {message}", file=sys.stderr, flush=True)


def poll_seconds(env: Mapping[str, str]) -> float:
    return env_float(
        env, "LLAMA_PRESET_POLL_SECONDS", POLL_SECONDS_DEFAULT, minimum=0, hint="seconds; 0 = do not watch"
    )


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
    """The preset's last applied content hash; `tick()` applies a new valid version through the router."""

    def __init__(self, plan: PoolCommand, env: Mapping[str, str], applied: str | None) -> None:
        self.path = plan.preset
        self.url = local_base_url(plan.command) + "/models?reload=1"
        self.key = _api_key(plan.command, env)
        self.applied = applied  # the version the router runs with
        self.refused: str | None = None  # the last version (or read error) that failed: logged once

    def tick(self) -> None:
        read = _read(self.path)
        if isinstance(read, str):
            if read != self.refused:
                self.refused = read
                _log(f"warning: {read}; the running set keeps serving")
            return
        digest, text = read
        if digest in (self.applied, self.refused):
            return
        try:
            models = check_preset(self.path, text=text)
        except EngineConfigError as e:
            self.refused = digest
            _log(f"error: new preset refused, the running set keeps serving: {e}")
            return
        outcome = self._reload()
        if outcome == "applied":
            self.applied, self.refused = digest, None
            _log(f"preset {digest[:12]} applied in place: {len(models)} models")
        elif outcome == "refused":
            self.refused = digest

    def _reload(self) -> str:
        """ "applied", "refused" (the router answered with an error) or "retry" (it did not answer)."""
        request = urllib.request.Request(self.url, headers={"Authorization": f"Bearer {self.key}"} if self.key else {})
        try:
            with urllib.request.urlopen(request, timeout=RELOAD_TIMEOUT_SECONDS) as response:
                response.read()
            return "applied"
        except urllib.error.HTTPError as e:
            # The router's own INI parser failed before it touched its model list (load_models phase 1), so the
            # running set is unchanged; the same version would fail the same way again.
            _log(
                f"error: the router refused the new preset ({e.code} {e.read()[:200]!r}); the running set keeps serving"
            )
            return "refused"
        except (OSError, http.client.HTTPException) as e:  # not up yet, or stopping: the next tick tries again
            _log(f"warning: {self.url} failed ({e}); retrying on the next poll")
            return "retry"


def _exit_code(status: int) -> int:
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code  # killed by signal N: 128 + N, as a shell reports it


def supervise(plan: PoolCommand, env: Mapping[str, str], interval: float) -> int:
    """Run the router until it exits and return its status. SIGTERM/SIGINT go to the router (it stops its model
    children itself). As PID 1 of the container this process also reaps any orphan re-parented to it (a model
    child whose router died), so nothing is left a zombie. `interval`: seconds between preset polls (0: none)."""
    router: subprocess.Popen | None = None

    def forward(signum: int, _frame: object) -> None:
        if router is not None and router.returncode is None:
            router.send_signal(signum)
        elif router is None:  # before the router exists: stop here, nothing to forward to
            sys.exit(128 + signum)

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, forward)
    first = _read(plan.preset)
    _log(f"starting {shlex.join(plan.command)}")
    router = subprocess.Popen(plan.command)  # inherits stdout/stderr: the router's log is the container's
    watch = PresetWatch(plan, env, None if isinstance(first, str) else first[0])
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
