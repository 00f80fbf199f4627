"""Run the llama-server container's SageMaker mode (`entrypoint.py serve`) on loopback, as a test helper.

The process is the container's real entrypoint and adapter (containers/llama-server) in front of the real
llama-server binary (the engine pin) serving a real GGUF file, configured through the container's env
contract exactly as SageMaker would run it, only with loopback ports and the model in a temp directory.

Reuse (tests, benchmarks, other subsystems' tests that need a live SageMaker-style container):

    from tests.runtime.engine.serving import chat_body, sagemaker_endpoint

    def test_x(llama_server_bin, smollm2_gguf, tmp_path):
        with sagemaker_endpoint(llama_server_bin, smollm2_gguf, tmp_path) as ep:
            r = httpx.post(f"{ep.url}/invocations", json=chat_body("Hi"), timeout=60)

`ep.url` is the adapter (what SageMaker calls: GET /ping, POST /invocations); `ep.engine_url` is
llama-server itself on loopback (/health, /metrics, the OpenAI API), which only tests may reach.
Defaults suit the shared 2-vCPU test machine: 1 engine thread, SLOTS slots, QUEUE_DEPTH queued,
512 tokens of context per slot. Override any variable of the env contract (containers/llama-server/README.md)
as a keyword: `start_endpoint(..., LLAMA_PARALLEL="4", ADAPTER_RETRY_AFTER_SECONDS="2")`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from tests.support.engine import child_pids, free_port

ENGINE_DIR = Path(__file__).resolve().parents[3] / "containers" / "llama-server"

SLOTS = 2  # default LLAMA_PARALLEL
QUEUE_DEPTH = 2  # default LLAMA_QUEUE_DEPTH: the adapter admits SLOTS + QUEUE_DEPTH requests, then 429


@dataclass
class Endpoint:
    """A running `entrypoint.py serve` process (adapter + llama-server child) on loopback."""

    url: str  # the adapter: GET /ping, POST /invocations
    engine_url: str  # llama-server on loopback: /health, /metrics, /v1/... (not reachable through the adapter)
    proc: subprocess.Popen  # the entrypoint; llama-server is its only child
    log: Path  # the entrypoint's and llama-server's combined stdout/stderr
    startup_pings: list[int] = field(default_factory=list)  # /ping statuses from first answer until 200
    startup_health: list[int | None] = field(
        default_factory=list
    )  # engine /health at each of those pings (None: not listening)

    def log_tail(self, n: int = 30) -> str:
        """The last `n` lines of the log (for assertion messages)."""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])

    def engine_pid(self) -> int:
        """The llama-server process id (the entrypoint's only child)."""
        children = child_pids(self.proc.pid)
        if len(children) != 1:
            raise RuntimeError(f"expected one llama-server child of {self.proc.pid}, found {children}")
        return int(children[0])


def serve_env(binary: Path, model_dir: Path, port: int, engine_port: int, **extra: str) -> dict[str, str]:
    """The environment for `entrypoint.py serve`: this process's environment without any inherited
    engine/adapter variables, the test defaults, then `extra` (any env-contract variable)."""
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("LLAMA_", "SAGEMAKER_", "ADAPTER_", "MODEL_", "SM_"))
    }
    # One engine thread: on the shared 2-vCPU test machine a 2-thread engine stalls at every barrier
    # whenever another process holds a core (measured: 16 tokens in 55 s instead of 0.2 s).
    env.update(
        LLAMA_SERVER_BIN=str(binary),
        SM_MODEL_DIR=str(model_dir),
        SAGEMAKER_BIND_TO_PORT=str(port),
        LLAMA_ENGINE_PORT=str(engine_port),
        ADAPTER_HOST="127.0.0.1",
        LLAMA_THREADS="1",
        LLAMA_PARALLEL=str(SLOTS),
        LLAMA_QUEUE_DEPTH=str(QUEUE_DEPTH),
        LLAMA_CTX_PER_SLOT="512",
        LLAMA_CACHE_RAM_MIB="64",
        # Serve as whoever runs the tests: the engine binary and models live in this user's cache, which the
        # image's 65532 may not reach. test_privileges.py runs the default (drop root to 65532:65532).
        LLAMA_RUN_AS=f"{os.getuid()}:{os.getgid()}",
    )
    env.update(extra)
    return env


def _status(client: httpx.Client, url: str) -> int | None:
    try:
        return client.get(url).status_code
    except httpx.TransportError:
        return None


def start_endpoint(binary: Path, model: Path, workdir: Path, timeout: float = 120, **extra: str) -> Endpoint:
    """Start `entrypoint.py serve` with `model` linked into `workdir`/opt-ml-model (its SM_MODEL_DIR) and
    return once /ping is 200. Every /ping status from the adapter's first answer on is recorded in
    `startup_pings`, with the engine's own /health status at that moment in `startup_health`.
    Raises RuntimeError if the entrypoint exits, TimeoutError if /ping is not 200 within `timeout` s
    (the process is stopped then). Call stop_endpoint() when done (or use sagemaker_endpoint())."""
    model_dir = workdir / "opt-ml-model"
    model_dir.mkdir(parents=True, exist_ok=True)
    link = model_dir / model.name
    if not link.exists():
        link.symlink_to(model)
    port, engine_port = free_port(), free_port()
    log = workdir / "serve.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, str(ENGINE_DIR / "entrypoint.py"), "serve"],
            env=serve_env(binary, model_dir, port, engine_port, **extra),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    ep = Endpoint(f"http://127.0.0.1:{port}", f"http://127.0.0.1:{engine_port}", proc, log)
    deadline = time.monotonic() + timeout
    with httpx.Client(timeout=5) as client:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"entrypoint exited with {proc.returncode}:\n{ep.log_tail()}")
            status = _status(client, f"{ep.url}/ping")
            if status is None:  # the adapter is not listening yet
                time.sleep(0.005)
                continue
            ep.startup_pings.append(status)
            ep.startup_health.append(_status(client, f"{ep.engine_url}/health"))
            if status == 200:
                return ep
            time.sleep(0.005)
    stop_endpoint(ep)
    raise TimeoutError(f"/ping not 200 after {timeout}s:\n{ep.log_tail()}")


def stop_endpoint(ep: Endpoint, timeout: float = 40) -> int:
    """SIGTERM the entrypoint (it drains, then stops llama-server), SIGKILL after `timeout` s; its exit code."""
    if ep.proc.poll() is None:
        ep.proc.send_signal(signal.SIGTERM)
        try:
            ep.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            ep.proc.kill()
            ep.proc.wait()
    return ep.proc.returncode


@contextmanager
def sagemaker_endpoint(
    binary: Path, model: Path, workdir: Path, timeout: float = 120, **extra: str
) -> Iterator[Endpoint]:
    """start_endpoint() ... stop_endpoint() as a context manager."""
    ep = start_endpoint(binary, model, workdir, timeout, **extra)
    try:
        yield ep
    finally:
        stop_endpoint(ep)


def chat_body(content: str = "Say hello.", max_tokens: int = 16, **extra) -> dict:
    """An OpenAI chat request body for POST /invocations (greedy unless `temperature` is given)."""
    return {"messages": [{"role": "user", "content": content}], "max_tokens": max_tokens, "temperature": 0, **extra}


def metric(text: str, name: str) -> float:
    """The value of Prometheus sample `name` in a /metrics text (first series); KeyError if absent."""
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    raise KeyError(name)
