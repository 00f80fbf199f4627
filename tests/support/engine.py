"""Start the real llama-server on loopback and wait until its model is loaded."""

from __future__ import annotations

import os
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def llama_server_path() -> Path:
    """$LLAMA_SERVER_BIN, or llama-server built from the one engine pin (cached; one build at a time)."""
    explicit = os.environ.get("LLAMA_SERVER_BIN")
    if explicit:
        return Path(explicit)
    out = subprocess.run(
        ["bash", str(ROOT / "scripts" / "build_llama_server.sh")], check=True, capture_output=True, text=True
    )
    return Path(out.stdout.strip().splitlines()[-1])


def pinned_sdist() -> Path:
    """The pinned llama-cpp-python sdist (engine-pin.env) in the cache, sha256-checked: the same file the engine
    build and the image start from (scripts/pinned_sdist.sh downloads it from PyPI once)."""
    out = subprocess.run(
        ["bash", str(ROOT / "scripts" / "pinned_sdist.sh")], check=True, capture_output=True, text=True
    )
    return Path(out.stdout.strip().splitlines()[-1])


def process_gone(pid: int) -> bool:
    """No such process, or a zombie waiting for its reaper (it runs nothing)."""
    try:
        return "zombie" in Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True


def child_pids(pid: int) -> list[int]:
    """The live processes whose parent is `pid`, found by each one's PPid in /proc/*/stat.

    Not /proc/PID/task/TID/children: the kernel documents it as unreliable unless the children are stopped or
    frozen (Documentation/filesystems/proc.rst), and a child spawned by a thread that has since exited moves to
    another thread's list, so a reader walking the threads can miss it (a CI failure in test_pool_landing).
    """
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # exited while we looked
            continue
        # pid (comm) state ppid ...: comm may hold spaces or parentheses, so split after its last ')'.
        if int(text[text.rindex(")") + 2 :].split()[1]) == pid:
            found.append(int(stat.parent.name))
    return sorted(found)


def stop_process(proc: subprocess.Popen, timeout: float = 15) -> None:
    """SIGTERM, then SIGKILL if it has not exited within `timeout` seconds; always reaped."""
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(
    base_url: str, proc: subprocess.Popen | None = None, timeout: float = 120, path: str = "/health"
) -> None:
    """Poll `base_url + path` until it answers 200 (llama-server: /health; a SageMaker container: /ping)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode} before it was healthy")
        try:
            with urllib.request.urlopen(f"{base_url}{path}", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"{base_url} not healthy after {timeout}s")


@contextmanager
def llama_server(
    binary: Path, model: Path, *args: str, port: int | None = None, log: Path | None = None
) -> Iterator[str]:
    """Run `llama-server -m model --host 127.0.0.1 --port N args...`; yields the base URL."""
    port = port or free_port()
    out = open(log, "wb") if log else subprocess.DEVNULL  # noqa: SIM115 - the server's log stays open while it runs
    proc = subprocess.Popen(
        [str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(port), *args],
        stdout=out,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(base, proc)
        yield base
    finally:
        stop_process(proc)
        if log:
            out.close()  # type: ignore[union-attr]
