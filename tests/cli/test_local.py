"""`cpu-inference local CONFIG` end to end: the CLI starts real llama-servers and the real router/gateway,
the test curls the printed URL, then sends SIGINT/SIGTERM and checks that every child process is gone."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.support.engine import free_port

ROOT = Path(__file__).resolve().parents[2]
# The engines inherit it: see tests/runtime/router/conftest.py (AMX repacking faults on this machine).
os.environ.setdefault("LLAMA_ARG_REPACK", "0")
# The console script, as users run it (`python -m cpu_inference.cli.main` would make main.py `__main__`, whose
# UserError is not the class the subcommands raise).
CLI = str(Path(sys.executable).parent / "cpu-inference")

SLM_SOURCE = "source: {hf_repo: bartowski/SmolLM2-1.7B-Instruct-GGUF, file: SmolLM2-1.7B-Instruct-Q4_K_M.gguf}"
PREFILTER = f"""
pattern: slm-prefilter
models:
  - name: smollm2-1-7b
    {SLM_SOURCE}
    parameters_billions: 1.7
    task: classification
    role: slm
escalation: {{kind: bedrock, model_id: anthropic.claude-3-5-haiku-20241022-v1:0}}
router: {{labels: [simple, complex], slm_labels: [simple], confidence_threshold: 0.7}}
"""
FARM = f"""
pattern: model-farm
models:
  - name: chat-a
    {SLM_SOURCE}
    parameters_billions: 1.7
    task: chat
  - name: embed-b
    source: {{hf_repo: CompendiumLabs/bge-small-en-v1.5-gguf, file: bge-small-en-v1.5-q8_0.gguf}}
    parameters_billions: 0.033
    quantization: Q8_0
    task: embedding
  - name: cold-c
    {SLM_SOURCE}
    parameters_billions: 1.7
    task: chat
"""


def _children(pid: int) -> list[int]:
    """PIDs whose parent is `pid` (from /proc)."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2:].split()
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def _alive(pid: int) -> bool:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return text[text.rindex(")") + 2] != "Z"


class LocalRun:
    def __init__(self, config: Path, *args: str):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [CLI, "local", str(config), "--port", str(self.port), *args],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=lambda: [self.lines.put(line) for line in self.proc.stdout], daemon=True).start()

    def wait_for(self, needle: str, timeout: float = 180) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.5)
            except queue.Empty:
                assert self.proc.poll() is None, "cpu-inference local exited:\n" + "".join(self.seen)
                continue
            self.seen.append(line)
            if needle in line:
                return line
        raise AssertionError(f"no {needle!r} after {timeout}s:\n" + "".join(self.seen))

    def stop(self, sig: int) -> tuple[int, str]:
        self.proc.send_signal(sig)
        code = self.proc.wait(timeout=60)
        time.sleep(0.2)
        while not self.lines.empty():
            self.seen.append(self.lines.get())
        return code, "".join(self.seen)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def bin_args(llama_server_bin: Path, smollm2_gguf: Path, gemma_gguf: Path) -> tuple[str, ...]:
    return ("--llama-server", str(llama_server_bin))


@pytest.mark.engine
def test_slm_prefilter_runs_locally_and_ctrl_c_stops_every_process(tmp_path, bin_args):
    cfg = tmp_path / "config.yaml"
    cfg.write_text(PREFILTER)
    run = LocalRun(cfg, *bin_args)
    try:
        run.wait_for("Ctrl-C stops everything")  # the last line printed once everything answers
        out = "".join(run.seen)
        assert f"router ready on {run.url}" in out
        assert "SmolLM2-135M-Instruct Q4_1 stands in for 1.7B Q4_K_M bartowski/SmolLM2-1.7B-Instruct-GGUF" in out
        assert "escalation (bedrock: Bedrock model anthropic.claude-3-5-haiku-20241022-v1:0) is replaced by a local stand-in" in out
        assert f"curl -s {run.url}/v1/chat/completions" in out
        children = _children(run.proc.pid)
        assert len(children) == 3  # SLM engine, stand-in LLM engine, router
        body = {"messages": [{"role": "user", "content": "Hello!"}], "max_tokens": 8}
        simple = httpx.post(f"{run.url}/v1/chat/completions", json=body, timeout=120)
        assert simple.status_code == 200, simple.text
        assert simple.headers["x-router-route"] == "slm" and simple.json()["model"] == "smollm2-1-7b"
        body["messages"][0]["content"] = "Implement a red-black tree in C++ with deletion and write unit tests for it."
        hard = httpx.post(f"{run.url}/v1/chat/completions", json=body, timeout=120)
        assert hard.status_code == 200, hard.text
        assert hard.headers["x-router-route"] == "llm" and hard.json()["model"] == "llm-stand-in"
        code, out = run.stop(signal.SIGINT)
        assert code == 0, out
        assert "SIGINT: stopping" in out and "stopped: router/gateway and all engines exited" in out
        assert [pid for pid in children if _alive(pid)] == []
    finally:
        run.kill()


@pytest.mark.engine
def test_model_farm_gateway_routes_by_model_and_sigterm_stops_it(tmp_path, bin_args):
    cfg = tmp_path / "farm.yaml"
    cfg.write_text(FARM)
    run = LocalRun(cfg, *bin_args, "--models", "chat-a,embed-b", "--log-dir", str(tmp_path / "logs"))
    try:
        run.wait_for("Ctrl-C stops everything")
        assert f"gateway ready on {run.url} (2 of 3 models started)" in "".join(run.seen)
        assert "not started (--models): cold-c" in "".join(run.seen)
        children = _children(run.proc.pid)
        assert len(children) == 3  # two engines and the gateway
        assert [m["id"] for m in httpx.get(f"{run.url}/v1/models", timeout=10).json()["data"]] == ["chat-a", "embed-b", "cold-c"]
        chat = httpx.post(f"{run.url}/v1/chat/completions", json={"model": "chat-a", "messages": [{"role": "user", "content": "Hi"}],
                                                                  "max_tokens": 4}, timeout=120)
        assert chat.status_code == 200 and chat.json()["choices"][0]["message"]["content"], chat.text
        emb = httpx.post(f"{run.url}/v1/embeddings", json={"model": "embed-b", "input": "hello"}, timeout=120)
        assert emb.status_code == 200, emb.text
        vector = emb.json()["data"][0]["embedding"]
        assert len(vector) == 576 and any(vector)  # SmolLM2-135M's hidden size, mean-pooled
        cold = httpx.post(f"{run.url}/v1/chat/completions", json={"model": "cold-c", "messages": [{"role": "user", "content": "Hi"}]}, timeout=30)
        assert cold.status_code == 503 and cold.headers["retry-after"] == "5"
        assert httpx.post(f"{run.url}/v1/embeddings", json={"model": "nope", "input": "x"}, timeout=30).status_code == 404
        code, out = run.stop(signal.SIGTERM)
        assert code == 0, out
        assert "SIGTERM: stopping" in out
        assert [pid for pid in children if _alive(pid)] == []
        assert (tmp_path / "logs" / "front.log").exists()  # --log-dir is kept
    finally:
        run.kill()


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([CLI, "local", *args], cwd=ROOT, capture_output=True, text=True, timeout=60)


def test_user_errors_are_one_line_exit_2(tmp_path):
    cfg = tmp_path / "config.yaml"
    cfg.write_text(FARM)
    fake = tmp_path / "llama-server"
    fake.write_text("#!/bin/sh\nexit 1\n")
    fake.chmod(0o755)
    cases = {
        ("--model-map", "chat-a"): "cpu-inference local: --model-map 'chat-a': expected NAME=PATH",
        ("--model-map", f"nope={cfg}"): "cpu-inference local: --model-map nope: no such model in the config — use one of chat-a, embed-b, cold-c",
        ("--model-map", f"chat-a={tmp_path / 'absent.gguf'}"): f"cpu-inference local: --model-map chat-a: {tmp_path / 'absent.gguf'} is not a file",
        ("--models", "chat-a,zzz"): "cpu-inference local: --models: zzz not in the config",
        ("--llama-server", str(tmp_path / "absent")): f"cpu-inference local: --llama-server {tmp_path / 'absent'}: not an executable file",
    }
    for args, message in cases.items():
        out = _cli(str(cfg), "--llama-server", str(fake), *args) if args[0] != "--llama-server" else _cli(str(cfg), *args)
        assert out.returncode == 2, (args, out.stderr)
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(message), (args, out.stderr)
    missing = _cli(str(tmp_path / "none.yaml"))
    assert missing.returncode == 2 and "file not found" in missing.stderr and "Traceback" not in missing.stderr
