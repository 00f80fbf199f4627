"""Helpers for the router tests: run `python -m slm_router` (the image's command) on loopback between real engines."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.support.engine import free_port, stop_process

ROUTER_DIR = Path(__file__).resolve().parents[3] / "containers" / "router"
if str(ROUTER_DIR) not in sys.path:
    sys.path.insert(0, str(ROUTER_DIR))

LABELS = ("simple", "complex")
# Engines share 2 cores with each other and with other test modules: one thread each, few slots.
SLM_ARGS = ("--metrics", "-np", "4", "-t", "1", "-c", "4096")
LLM_ARGS = ("-np", "2", "-t", "1", "-c", "2048")
SLM_ALIAS, LLM_ALIAS = "slm-smollm2", "llm-gemma"

# Chosen from the shipped few-shot prompt's decisions with SmolLM2-135M (confidences measured ≥ 0.96 for
# the simple ones, label "complex" for the others), far from the 0.9 threshold on either side.
SIMPLE = ("Hello!", "Thanks a lot!", "How are you today?", "Say hello in German.")
COMPLEX = (
    "Write a Rust web server with authentication, rate limiting and integration tests.",
    "Prove that the square root of 2 is irrational, step by step.",
    "Implement a red-black tree in C++ with deletion and write unit tests for it.",
)


def router_config(slm_url: str, llm_url: str, **overrides: Any) -> dict[str, Any]:
    """The shipped defaults (labels, few-shot, threshold) with loopback upstreams and timeouts for a busy 2-core box."""
    cfg: dict[str, Any] = {
        "slm_url": slm_url,
        "escalation": {"kind": "openai", "url": f"{llm_url}/v1"},
        "listen_host": "127.0.0.1",
        "listen_port": free_port(),
        "timeouts": {"connect_s": 2, "classify_s": 60, "first_byte_s": 120, "idle_s": 60, "total_s": 180},
        "retries": {"classify_attempts": 2, "backoff_base_s": 0.05, "backoff_max_s": 0.2},
        "breaker": {"failure_threshold": 2, "reset_after_s": 2},
        "log_level": "DEBUG",
    }
    cfg.update(overrides)
    return cfg


@dataclass
class RouterProcess:
    url: str
    proc: subprocess.Popen
    log: Path

    def log_tail(self, n: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])


def start_router(
    cfg: dict[str, Any],
    workdir: Path,
    timeout: float = 30,
    env: dict[str, str] | None = None,
    args: tuple[str, ...] = (),
) -> RouterProcess:
    """`python -m slm_router [args]` with the config in a file; `args=("serve",)` is SageMaker's start (the port
    then comes from ROUTER_PORT in `env`, else cfg's listen_port)."""
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / "router.json"
    path.write_text(json.dumps(cfg))
    extra = env or {}
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ROUTER_", "AWS_"))}
    env.update(ROUTER_CONFIG=str(path), PYTHONPATH=str(ROUTER_DIR), **extra)
    log = workdir / "router.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "slm_router", *args], cwd=workdir, env=env, stdout=out, stderr=subprocess.STDOUT
        )
    url = f"http://127.0.0.1:{extra.get('ROUTER_PORT', cfg['listen_port'])}"
    r = RouterProcess(url, proc, log)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"router exited with {proc.returncode}:\n{r.log_tail()}")
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return r
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    stop_router(r)
    raise TimeoutError(f"router not healthy after {timeout}s:\n{r.log_tail()}")


def stop_router(r: RouterProcess) -> None:
    stop_process(r.proc, timeout=30)


@contextmanager
def running_router(
    cfg: dict[str, Any], workdir: Path, env: dict[str, str] | None = None, args: tuple[str, ...] = ()
) -> Iterator[RouterProcess]:
    r = start_router(cfg, workdir, env=env, args=args)
    try:
        yield r
    finally:
        stop_router(r)


def chat(url: str, text: str, *, max_tokens: int = 8, timeout: float = 240, **extra: Any) -> httpx.Response:
    body = {"messages": [{"role": "user", "content": text}], "max_tokens": max_tokens, "temperature": 0, **extra}
    return httpx.post(f"{url}/v1/chat/completions", json=body, timeout=timeout)


def metric(url: str, name: str, **labels: str) -> float:
    """The value of one sample of the router's (or an engine's) /metrics; 0.0 if the sample is absent."""
    text = httpx.get(f"{url}/metrics", timeout=10).text
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return s.value
    return 0.0
