"""`cpu-inference local` with a model of engine vllm: the vLLM image's entrypoint starts vLLM in the engine environment
the deployment renders for that model (Sizing.engine_env), beside llama-server for a GGUF model, behind the same
router. Without a checkpoint or a stand-in it says what to pass, before anything starts."""

from __future__ import annotations

import signal
from pathlib import Path

import httpx
import pytest

from cpu_inference.config import load, size_model
from tests.cli.test_local import CLI, ROOT, LocalRun, _alive, _children
from tests.support.vllm import vllm_model_dir, vllm_python

# The SLM answers on llama.cpp (a stand-in GGUF), the escalation LLM is a vLLM model.
MIXED = """
pattern: slm-prefilter
models:
  - name: smollm2-1-7b
    source: {hf_repo: bartowski/SmolLM2-1.7B-Instruct-GGUF, file: SmolLM2-1.7B-Instruct-Q4_K_M.gguf}
    parameters_billions: 1.7
    task: classification
    role: slm
  - name: qwen3-0-6b
    engine: vllm
    source: {hf_repo: Qwen/Qwen3-0.6B}
    parameters_billions: 0.6
    context_window: 2048
    task: chat
    role: llm
escalation: {kind: model, model: qwen3-0-6b}
router: {labels: [simple, complex], slm_labels: [simple], confidence_threshold: 0.7}
"""


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode().split("=", 1) for item in raw if b"=" in item)


def test_a_vllm_model_without_a_checkpoint_or_stand_in_is_refused_before_anything_starts(tmp_path: Path) -> None:
    import subprocess

    cfg = tmp_path / "config.yaml"
    cfg.write_text(MIXED)
    out = subprocess.run(
        [CLI, "local", str(cfg), "--llama-server", "/bin/true"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip().endswith(
        "qwen3-0-6b uses engine vllm: `local` downloads GGUF files only — pass --model-map qwen3-0-6b=DIR (a local safetensors "
        "checkpoint with config.json), or --stand-ins to serve a llama.cpp stand-in"
    ), out.stderr
    gguf = tmp_path / "x.gguf"
    gguf.write_bytes(b"GGUF" + b"\0" * 16)
    wrong = subprocess.run(
        [CLI, "local", str(cfg), "--llama-server", "/bin/true", "--model-map", f"qwen3-0-6b={gguf}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert wrong.returncode == 2 and f"--model-map qwen3-0-6b: {gguf} is not a checkpoint directory" in wrong.stderr


@pytest.mark.vllm
@pytest.mark.engine
def test_the_router_escalates_to_a_vllm_model_started_in_its_deployed_environment(
    tmp_path, llama_server_bin, smollm2_gguf
) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text(MIXED)
    python, checkpoint = vllm_python(), vllm_model_dir()
    run = LocalRun(
        cfg,
        "--llama-server",
        str(llama_server_bin),
        "--stand-ins",
        "--threads",
        "2",
        "--vllm-python",
        str(python),
        "--model-map",
        f"qwen3-0-6b={checkpoint}",
    )
    try:
        run.wait_for("Ctrl-C stops everything", timeout=480)
        out = "".join(run.seen)
        assert f"qwen3-0-6b: vLLM bfloat16 from {checkpoint} (--model-map)" in out
        children = _children(run.proc.pid)
        # The entrypoint execs vLLM's server (EKS mode): the child is `python -m vllm.entrypoints.openai.api_server`.
        vllm_pid = next(pid for pid in children if "vllm.entrypoints" in Path(f"/proc/{pid}/cmdline").read_text())
        env = _environ(vllm_pid)
        config = load(cfg)
        deployed = size_model(config, next(m for m in config.models if m.name == "qwen3-0-6b")).engine_env()
        # The deployed sizing, except the threads, which are this machine's (one reserved for vLLM's scheduler).
        for key in ("VLLM_CPU_KVCACHE_SPACE", "SERVE_MAX_NUM_SEQS", "SERVE_MAX_MODEL_LEN", "SERVE_DTYPE"):
            assert env[key] == deployed[key], key
        assert (env["OMP_NUM_THREADS"], env["VLLM_CPU_NUM_OF_RESERVED_CPU"], env["VLLM_CPU_OMP_THREADS_BIND"]) == (
            "1",
            "1",
            "nobind",
        )

        body = {
            "messages": [
                {
                    "role": "user",
                    "content": "Implement a red-black tree in C++ with deletion and write unit tests for it.",
                }
            ],
            "max_tokens": 8,
        }
        hard = httpx.post(f"{run.url}/v1/chat/completions", json=body, timeout=180)
        assert hard.status_code == 200, hard.text
        assert hard.headers["x-router-route"] == "llm" and hard.json()["model"] == "qwen3-0-6b"
        assert hard.json()["system_fingerprint"].startswith("vllm-")  # vLLM answered, not a llama-server
        code, out = run.stop(signal.SIGINT)
        assert code == 0, out
        assert [pid for pid in children if _alive(pid)] == []
    finally:
        run.kill()
