"""Run the real `entrypoint.py pool` (supervisor + the pinned router) for the pool landing / status / metrics tests."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.runtime.engine.serving import ENGINE_DIR
from tests.support.engine import child_pids, free_port, stop_process, wait_healthy

ENTRYPOINT = ENGINE_DIR / "entrypoint.py"
POLL = 0.5  # LLAMA_PRESET_POLL_SECONDS in these tests (default 5)
MARKER = "copy-failed.json"  # the catalog's failure marker name (INTERFACE §1: catalog.COPY_FAILED_NAME)


def pool_env(binary: Path, preset: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LLAMA_", "MODEL_", "SAGEMAKER_"))}
    return env | {
        "LLAMA_SERVER_BIN": str(binary),
        "LLAMA_MODELS_PRESET": str(preset),
        "LLAMA_MODELS_MAX": "2",
        "LLAMA_HOST": "127.0.0.1",
        "LLAMA_PORT": str(free_port()),
        "LLAMA_POOL_STATUS_PORT": str(free_port()),
        "LLAMA_PRESET_POLL_SECONDS": str(POLL),
        **extra,
    }


def write_preset(path: Path, models: dict[str, Path], *, ctx: int = 256) -> Path:
    lines = ["version = 1", "[*]", "threads = 1", "parallel = 1", f"ctx-size = {ctx}"]
    for name, model in models.items():
        lines += [f"[{name}]", f"model = {model}"]
    path.write_text("\n".join(lines) + "\n")
    return path


def land(source: Path, dest: Path) -> None:
    """Make `dest` appear whole at once, as Mountpoint shows an object whose upload finished: copy beside, rename."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.parent / f".{dest.name}.part"
    shutil.copyfile(source, tmp)
    os.replace(tmp, dest)


def call(base: str, path: str, body: dict | None = None, timeout: float = 120) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            raw = r.read().decode()
            return r.status, json.loads(raw) if raw[:1] in "{[" else raw
    except urllib.error.HTTPError as e:
        raw = e.read().decode()
        return e.code, json.loads(raw) if raw[:1] in "{[" else raw


def chat(base: str, model: str) -> tuple[int, Any]:
    body = {"model": model, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2, "ignore_eos": True}
    return call(base, "/v1/chat/completions", body)


def router_models(base: str) -> dict[str, str]:
    status, body = call(base, "/models")
    assert status == 200, body
    return {m["id"]: m["status"]["value"] for m in body["data"]}


def child_serving(router: int, model_file: Path) -> int:
    (pid,) = [p for p in child_pids(router) if str(model_file) in Path(f"/proc/{p}/cmdline").read_bytes().decode()]
    return pid


def follow_events(base: str, into: list[dict]) -> None:
    """Every event of the router's /models/sse stream (server-models.cpp notify_sse), until it closes."""
    try:
        with urllib.request.urlopen(base + "/models/sse", timeout=600) as stream:
            for line in stream:
                if line.startswith(b"data: "):
                    into.append(json.loads(line[6:]))
    except OSError:
        pass


def until(what: Callable[[], Any], timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = what()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError(f"not within {timeout}s: {what.__doc__ or what}")


@dataclass
class Pool:
    proc: subprocess.Popen
    base: str  # the router
    status: str  # the side port
    log: Path

    @property
    def router(self) -> int:
        (pid,) = child_pids(self.proc.pid)
        return pid

    def text(self) -> str:
        return self.log.read_text(errors="replace")


@contextmanager
def run_pool(env: dict[str, str], cwd: Path) -> Iterator[Pool]:
    log = cwd / "pool.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, str(ENTRYPOINT), "pool"], env=env, stdout=out, stderr=subprocess.STDOUT, cwd=cwd
        )
    pool = Pool(proc, f"http://127.0.0.1:{env['LLAMA_PORT']}", f"http://127.0.0.1:{env['LLAMA_POOL_STATUS_PORT']}", log)
    try:
        wait_healthy(pool.base, proc, timeout=60)
        wait_healthy(pool.status, proc, timeout=30, path="/status")
        # The supervisor's event follower subscribes within RECONNECT_SECONDS (0.1 s) of the router listening; a
        # load before that is served but not timed (pool_status_server.py).
        time.sleep(0.3)
        yield pool
    finally:
        stop_process(proc, timeout=30)
