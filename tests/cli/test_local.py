"""`cpu-inference local CONFIG` end to end: the CLI starts real llama-servers and the real router/gateway,
the test curls the printed URL, then sends SIGINT/SIGTERM and checks that every child process is gone."""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
import yaml

from cpu_inference.config import Config
from model_download import Hub
from tests.runtime.model_download.constants import FILE, PUBLIC_REPO
from tests.runtime.model_download.fake_hub import FakeHub, sha256_file
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
# Dedicated (one llama-server each): a farm model is pooled by default, and pools run in test_local_pools.py.
FARM = f"""
pattern: model-farm
models:
  - name: chat-a
    serving: dedicated
    {SLM_SOURCE}
    parameters_billions: 1.7
    task: chat
  - name: embed-b
    serving: dedicated
    source: {{hf_repo: CompendiumLabs/bge-small-en-v1.5-gguf, file: bge-small-en-v1.5-q8_0.gguf}}
    parameters_billions: 0.033
    quantization: Q8_0
    task: embedding
  - name: cold-c
    serving: dedicated
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
        fields = text[text.rindex(")") + 2 :].split()
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
    def __init__(self, config: Path, *args: str, env: dict[str, str] | None = None, stderr: Path | None = None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._stderr = open(stderr, "w") if stderr else None  # noqa: SIM115 - closed in stop()/kill()
        self.proc = subprocess.Popen(
            [CLI, "local", str(config), "--port", str(self.port), *args],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=self._stderr or subprocess.STDOUT,
            text=True,
            env=env,
        )
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
        if self._stderr is not None:
            self._stderr.close()


@pytest.fixture
def bin_args(llama_server_bin: Path, smollm2_gguf: Path, gemma_gguf: Path, minilm_gguf: Path) -> tuple[str, ...]:
    return ("--llama-server", str(llama_server_bin), "--stand-ins")


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
        assert (
            "escalation (bedrock: Bedrock model anthropic.claude-3-5-haiku-20241022-v1:0) is replaced by a local stand-in"
            in out
        )
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
        assert [m["id"] for m in httpx.get(f"{run.url}/v1/models", timeout=10).json()["data"]] == [
            "chat-a",
            "embed-b",
            "cold-c",
        ]
        chat = httpx.post(
            f"{run.url}/v1/chat/completions",
            json={"model": "chat-a", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4},
            timeout=120,
        )
        assert chat.status_code == 200 and chat.json()["choices"][0]["message"]["content"], chat.text
        emb = httpx.post(f"{run.url}/v1/embeddings", json={"model": "embed-b", "input": "hello"}, timeout=120)
        assert emb.status_code == 200, emb.text
        vector = emb.json()["data"][0]["embedding"]
        assert len(vector) == 384 and any(vector)  # the encoder stand-in's (all-MiniLM-L6-v2) hidden size
        cold = httpx.post(
            f"{run.url}/v1/chat/completions",
            json={"model": "cold-c", "messages": [{"role": "user", "content": "Hi"}]},
            timeout=30,
        )
        assert cold.status_code == 503 and cold.headers["retry-after"] == "5"
        assert (
            httpx.post(f"{run.url}/v1/embeddings", json={"model": "nope", "input": "x"}, timeout=30).status_code == 404
        )
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
        (
            "--model-map",
            f"nope={cfg}",
        ): "cpu-inference local: --model-map nope: no such model in the config — use one of chat-a, embed-b, cold-c",
        (
            "--model-map",
            f"chat-a={tmp_path / 'absent.gguf'}",
        ): f"cpu-inference local: --model-map chat-a: {tmp_path / 'absent.gguf'} is not a file",
        ("--models", "chat-a,zzz"): "cpu-inference local: --models: zzz not in the config",
        (
            "--llama-server",
            str(tmp_path / "absent"),
        ): f"cpu-inference local: --llama-server {tmp_path / 'absent'}: not an executable file",
    }
    for args, message in cases.items():
        out = (
            _cli(str(cfg), "--llama-server", str(fake), *args) if args[0] != "--llama-server" else _cli(str(cfg), *args)
        )
        assert out.returncode == 2, (args, out.stderr)
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(message), (args, out.stderr)
    missing = _cli(str(tmp_path / "none.yaml"))
    assert missing.returncode == 2 and "file not found" in missing.stderr and "Traceback" not in missing.stderr


def _cmdline(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")[:-1]


def _environ(pid: int) -> dict[str, str]:
    pairs = Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace").split("\0")
    return dict(p.split("=", 1) for p in pairs if "=" in p)


@pytest.mark.engine
def test_default_config_runs_locally_with_the_deployed_slots_context_and_router_config(bin_args):
    """`cpu-inference local config.yaml` (stand-ins): the SLM engine gets exactly the slots and context per slot
    the EKS chart renders for it, the router exactly the ConfigMap's decision keys, and a 2,000-character
    request is classified by the SLM (before, local ran `-np 4 -c 8192` and hid the deployed 512-token slots)."""
    from tests.support.rendered import engine_container, router_config_map
    from tests.support.texts import GREEK, repeated

    rendered = {e["name"]: e["value"] for e in engine_container("config.yaml", "smollm2-1-7b")["env"]}
    config_map = router_config_map("config.yaml")
    run = LocalRun(ROOT / "config.yaml", *bin_args)
    try:
        run.wait_for("Ctrl-C stops everything")
        procs = {pid: _cmdline(pid) for pid in _children(run.proc.pid)}
        (slm,) = [
            argv for argv in procs.values() if "--alias" in argv and argv[argv.index("--alias") + 1] == "smollm2-1-7b"
        ]
        flag = lambda name: slm[slm.index(name) + 1]  # noqa: E731
        slots, per_slot = int(rendered["LLAMA_PARALLEL"]), int(rendered["LLAMA_CTX_PER_SLOT"])
        assert (flag("--parallel"), flag("--ctx-size")) == (str(slots), str(slots * per_slot))
        (router_pid,) = [pid for pid, argv in procs.items() if argv[1:3] == ["-m", "slm_router"]]
        local_cfg = json.loads(_environ(router_pid)["ROUTER_CONFIG_JSON"])
        deployment_only = {"slm_url", "escalation", "listen_host", "listen_port", "timeouts"}  # loopback, stand-in LLM
        assert {k: v for k, v in local_cfg.items() if k not in deployment_only} == {
            k: v for k, v in config_map.items() if k not in deployment_only
        }
        body = {"messages": [{"role": "user", "content": repeated(GREEK, 2000)}], "max_tokens": 4}
        r = httpx.post(f"{run.url}/v1/chat/completions", json=body, timeout=600)
        assert r.status_code == 200, r.text
        assert "x-router-label" in r.headers, f"not classified by the SLM: {dict(r.headers)}"
        code, out = run.stop(signal.SIGTERM)
        assert code == 0, out
    finally:
        run.kill()


# --- the configured GGUFs, from a fake Hugging Face on loopback (real SmolLM2-135M bytes) ------------------------

# A model-farm of one small chat model (dedicated: its own llama-server), its GGUF on the (fake) Hub: what `local`
# must download and serve by name.
HUB_MODEL = "tiny-chat"
HUB_CONFIG = f"""
pattern: model-farm
models:
  - name: {HUB_MODEL}
    serving: dedicated
    source: {{hf_repo: {PUBLIC_REPO}, file: {FILE}, revision: main{{sha256}}}}
    parameters_billions: 0.135
    quantization: Q4_1
    context_window: 2048
    task: chat
"""
# bartowski/Meta-Llama-3.1-70B-Instruct-GGUF's Q4_K_M file: 42,520,395,584 bytes (its Hub file listing). The
# deployment fits it on a c7g.12xlarge; a laptop with less than ~60 GiB free cannot hold it.
BIG_REPO, BIG_FILE, BIG_SIZE = (
    "bartowski/Meta-Llama-3.1-70B-Instruct-GGUF",
    "Meta-Llama-3.1-70B-Instruct-Q4_K_M.gguf",
    42_520_395_584,
)
BIG_CONFIG = f"""
pattern: model-farm
models:
  - name: big
    serving: dedicated  # its own server: a farm model is pooled by default, and no pool holds 70B
    source: {{hf_repo: {BIG_REPO}, file: {BIG_FILE}}}
    parameters_billions: 70.6
    quantization: Q4_K_M
    task: chat
"""
_PROXY_VARS = ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")


@pytest.fixture(scope="module")
def fake_hf(smollm2_gguf: Path, tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    """The fake Hub serving the real SmolLM2-135M GGUF, and a sparse 42.5 GB file that is never read (only its HEAD)."""
    big = tmp_path_factory.mktemp("big") / BIG_FILE
    with open(big, "wb") as f:
        f.truncate(BIG_SIZE)
    hub = FakeHub()
    hub.add_file(PUBLIC_REPO, FILE, smollm2_gguf)
    hub.add_file(BIG_REPO, BIG_FILE, big, sha256="ab" * 32)
    with hub:
        yield hub


@pytest.fixture(scope="module")
def hub_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """CPU_INFERENCE_CACHE of the first/second-run tests (shared: the second run needs the first's cache)."""
    return tmp_path_factory.mktemp("cache")


def _hub_env(endpoint: str, cache: Path) -> dict[str, str]:
    """This environment with HF_ENDPOINT at `endpoint` (as a user points at a mirror), its own cache, no token or
    proxy."""
    env = {k: v for k, v in os.environ.items() if k not in (*_PROXY_VARS, "HF_TOKEN")}
    return {**env, "HF_ENDPOINT": endpoint, "CPU_INFERENCE_CACHE": str(cache)}


def _hub_config(tmp_path: Path, sha256: str | None = None) -> Path:
    cfg = tmp_path / "hub.yaml"
    cfg.write_text(HUB_CONFIG.replace("{sha256}", f", sha256: '{sha256}'" if sha256 else ""))
    return cfg


def _engine_urls(lines: list[str]) -> dict[str, str]:
    """{engine name: url} from the `  NAME ready on URL` lines."""
    return {
        parts[0]: parts[-1]
        for parts in (line.split() for line in lines)
        if len(parts) == 4 and parts[1:3] == ["ready", "on"]
    }


def _gguf_files(cache: Path) -> list[Path]:
    return sorted(p for p in cache.rglob("*.gguf*") if ".locks" not in p.parts)


def _serves_the_configured_name(run: LocalRun) -> float:
    """The engine and the gateway answer as HUB_MODEL; returns the monotonic time of the first chat answer."""
    engine_url = _engine_urls(run.seen)[HUB_MODEL]
    assert [m["id"] for m in httpx.get(f"{engine_url}/v1/models", timeout=10).json()["data"]] == [HUB_MODEL]
    assert [m["id"] for m in httpx.get(f"{run.url}/v1/models", timeout=10).json()["data"]] == [HUB_MODEL]
    chat = httpx.post(
        f"{run.url}/v1/chat/completions",
        timeout=120,
        json={"model": HUB_MODEL, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4},
    )
    answered = time.monotonic()
    assert chat.status_code == 200, chat.text
    assert chat.json()["model"] == HUB_MODEL and chat.json()["choices"][0]["message"]["content"]
    return answered


@pytest.mark.engine
def test_first_run_downloads_the_configured_gguf_with_progress_and_serves_it_by_name(
    tmp_path, fake_hf, hub_cache, llama_server_bin, smollm2_gguf
):
    fake_hf.reset()
    served = fake_hf.files[(PUBLIC_REPO, FILE)]
    stderr = tmp_path / "stderr.txt"
    run = LocalRun(
        _hub_config(tmp_path),
        "--llama-server",
        str(llama_server_bin),
        "--threads",
        "1",
        env=_hub_env(fake_hf.url, hub_cache),
        stderr=stderr,
    )
    try:
        run.wait_for("Ctrl-C stops everything")
        cached = hub_cache / "models" / PUBLIC_REPO / fake_hf.commit / FILE
        # The configured file came over the (fake) Hub's CDN, whole, into the cache: it is what the engine loads.
        assert fake_hf.stats.bytes_served == served.size and fake_hf.stats.gets >= 1
        assert sha256_file(cached) == served.sha256
        (engine,) = [argv for argv in map(_cmdline, _children(run.proc.pid)) if "--alias" in argv]
        assert engine[engine.index("-m") + 1] == str(cached) and engine[engine.index("--alias") + 1] == HUB_MODEL
        out = "".join(run.seen)
        mib = f"{served.size / 2**20:.0f} MiB"
        assert (
            f"{HUB_MODEL}: {PUBLIC_REPO}/{FILE}@main (commit {fake_hf.commit[:12]}, {mib}, downloaded) {cached}" in out
        )
        assert "stands in" not in out
        _serves_the_configured_name(run)
        code, out = run.stop(signal.SIGTERM)
        assert code == 0, out
    finally:
        run.kill()
    progress = stderr.read_text()
    # A pipe gets the log line and the bar's final state (a terminal redraws it): every byte counted.
    assert (
        f"{HUB_MODEL}: downloading {PUBLIC_REPO}/{FILE}@main ({mib}) from {fake_hf.url} into {hub_cache / 'models'}"
        in progress
    )
    mb = f"{served.size / 1e6:.1f}"
    assert re.search(rf"{HUB_MODEL} .*━.* {re.escape(mb)}/{re.escape(mb)} MB", progress), progress


@pytest.mark.engine
def test_second_run_starts_from_the_cache_without_downloading(tmp_path, fake_hf, hub_cache, llama_server_bin):
    from cpu_inference.cli.model_cache import fetch_model

    config = _hub_config(tmp_path)
    if not _gguf_files(hub_cache):  # run alone: warm the cache as a first run would
        fetch_model(
            Config.model_validate(yaml.safe_load(config.read_text())).models[0],
            hub=Hub(fake_hf.url),
            cache_dir=hub_cache / "models",
        )
    before = {p: p.stat().st_mtime_ns for p in _gguf_files(hub_cache)}
    fake_hf.reset()
    began = time.monotonic()
    run = LocalRun(
        config, "--llama-server", str(llama_server_bin), "--threads", "1", env=_hub_env(fake_hf.url, hub_cache)
    )
    try:
        run.wait_for("Ctrl-C stops everything")
        first_answer = _serves_the_configured_name(run) - began
        print(f"\nwarm cache: `cpu-inference local` start to first chat answer {first_answer:.2f} s")
        out = "".join(run.seen)
        assert f"{HUB_MODEL}: {PUBLIC_REPO}/{FILE}@main (commit {fake_hf.commit[:12]}, " in out and ", cached) " in out
        # `revision: main` costs one HEAD (which commit main is now); no byte of the file moves.
        assert (fake_hf.stats.heads, fake_hf.stats.gets, fake_hf.stats.bytes_served) == (1, 0, 0)
        assert {p: p.stat().st_mtime_ns for p in _gguf_files(hub_cache)} == before  # nothing rewritten
        code, out = run.stop(signal.SIGTERM)
        assert code == 0, out
    finally:
        run.kill()
    assert first_answer < 60


def _refused(config: Path, env: dict[str, str], *args: str) -> str:
    """`local` exits 2 with one error line, last on stderr, before starting any engine; returns the line."""
    fake = config.parent / "llama-server"  # never started: anything printing "engine(s)" fails below
    fake.write_text("#!/bin/sh\nexit 1\n")
    fake.chmod(0o755)
    out = subprocess.run(
        [CLI, "local", str(config), "--port", str(free_port()), "--llama-server", str(fake), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert "Traceback" not in out.stderr and "engine(s)" not in out.stdout and "ready on" not in out.stdout, out.stdout
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("cpu-inference local: ")]
    assert errors == lines[-1:], out.stderr  # before it, at most a download's progress
    return lines[-1]


@pytest.mark.parametrize("fault", ["config sha256", "corrupted bytes"])
def test_a_wrong_sha256_is_refused_and_nothing_is_served(tmp_path, fake_hf, fault):
    fake_hf.reset()
    served = fake_hf.files[(PUBLIC_REPO, FILE)]
    wrong = "0" * 64
    if fault == "corrupted bytes":
        fake_hf.corrupt(5 * 1024 * 1024)  # the Hub's sha256 is right; one byte on the way is not
    try:
        line = _refused(
            _hub_config(tmp_path, wrong if fault == "config sha256" else None),
            _hub_env(fake_hf.url, tmp_path / "cache"),
        )
    finally:
        fake_hf.reset()
    assert line.startswith(
        f"cpu-inference local: models[0] ({HUB_MODEL}): sha256 mismatch for {PUBLIC_REPO}/{FILE}@main: expected "
    )
    if fault == "config sha256":
        assert (
            f"expected {wrong} (models[0].source.sha256), the Hub reports {served.sha256}; nothing was downloaded"
            in line
        )
        assert fake_hf.stats.gets == 0
    else:
        assert f"expected {served.sha256}, got " in line and "nothing was kept in the cache" in line
    assert _gguf_files(tmp_path / "cache") == []  # no file, no .part


def test_no_network_is_one_line_naming_model_map_and_stand_ins(tmp_path):
    closed = f"http://127.0.0.1:{free_port()}"
    began = time.monotonic()
    line = _refused(_hub_config(tmp_path), _hub_env(closed, tmp_path / "cache"))
    assert time.monotonic() - began < 30  # one connection attempt, not a minute of retries
    assert line.startswith(
        f"cpu-inference local: no network: cannot connect to 127.0.0.1:{closed.rsplit(':', 1)[1]} (Connection refused)"
    )
    assert f"{closed} cannot send models[0] ({HUB_MODEL}) {PUBLIC_REPO}/{FILE}@main, and the cache has no copy" in line
    assert line.endswith(
        f"serve a local GGUF with --model-map NAME=PATH (for {HUB_MODEL}), or run the small stand-ins with --stand-ins"
    )


def test_a_model_too_large_for_this_machine_is_refused_with_the_numbers_before_any_download(tmp_path, fake_hf):
    from cpu_inference.cli.model_cache import machine_memory

    memory = machine_memory()
    if memory is not None and memory.bytes > 1.5 * BIG_SIZE:  # sizing's 1.5 × the weights at least
        pytest.skip(f"this machine has {memory}: a 70B Q4_K_M fits")
    fake_hf.reset()
    cfg = tmp_path / "big.yaml"
    cfg.write_text(BIG_CONFIG)
    line = _refused(cfg, _hub_env(fake_hf.url, tmp_path / "cache"))
    # The weights are the size the Hub's HEAD reported (42,520,395,584 B = 39.6 GiB); slots and context: the
    # deployment's.
    assert line.startswith(
        "cpu-inference local: models[0] (big): needs 59.4 GiB (1.5 × the weights, more than weights 39.6 GiB"
        " + KV cache 2.5 GiB for 2 slot(s) × 4096 tokens + runtime "
    ), line
    assert re.search(
        r" but this machine has \d+(\.\d)? [MG]iB available[^—]* — use --model-map big=PATH with a smaller "
        r"quantization, or --stand-ins$",
        line,
    ), line
    assert (fake_hf.stats.heads, fake_hf.stats.gets) == (1, 0)  # refused on the HEAD, before any byte
    assert not (tmp_path / "cache").exists() or _gguf_files(tmp_path / "cache") == []


@pytest.mark.engine
def test_prefilter_serves_the_downloaded_slm_and_a_stand_in_for_an_escalation_outside_the_config(
    tmp_path, fake_hf, hub_cache, llama_server_bin, gemma_gguf
):
    """Bedrock has no GGUF to download: the SLM is the configured file, the LLM a stand-in, and the output says so."""
    cfg = tmp_path / "prefilter.yaml"
    cfg.write_text(f"""
pattern: slm-prefilter
models:
  - name: tiny-slm
    source: {{hf_repo: {PUBLIC_REPO}, file: {FILE}}}
    parameters_billions: 0.135
    quantization: Q4_1
    context_window: 4096
    task: classification
    role: slm
escalation: {{kind: bedrock, model_id: anthropic.claude-3-5-haiku-20241022-v1:0}}
router: {{labels: [simple, complex], slm_labels: [simple], confidence_threshold: 0.7}}
""")
    fake_hf.reset()
    run = LocalRun(cfg, "--llama-server", str(llama_server_bin), "--threads", "1", env=_hub_env(fake_hf.url, hub_cache))
    try:
        run.wait_for("Ctrl-C stops everything")
        out = "".join(run.seen)
        cached = hub_cache / "models" / PUBLIC_REPO / fake_hf.commit / FILE
        assert f"tiny-slm: {PUBLIC_REPO}/{FILE}@main (commit {fake_hf.commit[:12]}, " in out and str(cached) in out
        assert "llm-stand-in: Gemma-3-270M Q4_K_M stands in for the escalation target" in out
        assert (
            "escalation (bedrock: Bedrock model anthropic.claude-3-5-haiku-20241022-v1:0) is replaced by a local stand-in "
            "LLM: the config has no GGUF for it to download"
        ) in out
        engines = {
            argv[argv.index("--alias") + 1]: argv[argv.index("-m") + 1]
            for argv in map(_cmdline, _children(run.proc.pid))
            if "--alias" in argv
        }
        assert engines["tiny-slm"] == str(cached) and Path(engines["llm-stand-in"]).name == gemma_gguf.name
        simple = httpx.post(
            f"{run.url}/v1/chat/completions",
            timeout=120,
            json={"messages": [{"role": "user", "content": "Hello!"}], "max_tokens": 4},
        )
        assert simple.status_code == 200, simple.text
        assert "x-router-label" in simple.headers  # the downloaded SLM classified it
        if simple.headers["x-router-route"] == "slm":
            assert simple.json()["model"] == "tiny-slm"
        code, out = run.stop(signal.SIGTERM)
        assert code == 0, out
    finally:
        run.kill()
