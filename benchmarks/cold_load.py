"""Cold load of a pooled model against its physical floor, and what each removable step costs (issue 25).

A farm pool replica is llama-server in router mode over a preset INI (containers/llama-server/pool_mode.py); a
model's first request makes the router spawn a child llama-server that loads it. This script measures, side by
side in one run on this machine, with the real engine from the warm cache and the stand-in GGUFs:

  floor        what no setting can remove:
               - read: the GGUF from the page cache (after one warm read) into fresh anonymous memory, tensor
                 by tensor with one pread(2) each — the pattern of `load-mode none` (src/llama-model-loader.cpp
                 load_all_data: `file->seek(weight->offs); file->read_raw(cur->data, n_size)` into a host
                 buffer; src/llama-mmap.cpp read_raw_unsafe is a read(2) loop) — and mmap(MAP_POPULATE) of the
                 file, as `load-mode mmap` maps it (llama-mmap.cpp: `flags |= MAP_POPULATE` when prefetching);
               - exec: `llama-server --version` from exec to exit (loader, static init, backend registration),
                 and a child's exec to its first HTTP answer on /health (any status: the server listens BEFORE it
                 loads the model, tools/server/server.cpp "start the HTTP server before loading the model"), i.e.
                 what a child costs before it touches the model.
  standalone   the child's exact argv (from the router's GET /models `status.args`) run on its own: exec to
               /health 200 (weights loaded, context built, warm-up done) — the child's work without the router.
  cold         through the router (the image's `entrypoint.py pool`, models-max 1): two byte copies of one
               stand-in alternate, so every request evicts the other copy first (a full pool, the steady state).
               Time from sending the request to its response head (non-streaming, 1 token out), split with the
               router's own /models/sse events: eviction (request -> `loading` of the target: unload_lru waits
               for the victim's exit), child (`loading` -> `loaded`: the child's READY line,
               server-models.cpp handle_child_state), request (`loaded` -> response head: forward + the request).
  warm         the same request again, model loaded.
  preload      `POST /models/load` (server-models.cpp post_router_models_load: spawns and returns), wait for the
               `loaded` event, then the first request: what a preload of the next likely model saves it.

Variants are presets rendered by the library (cpu_inference.engines.pool_preset.render_preset with the pool's
POOL_DEFAULTS plus the variant's keys in `[*]`): today's pool (`load-mode = none`), `warmup = false`
(common/arg.cpp {"--warmup"}, {"--no-warmup"}; common/common.cpp common_init_result: the empty decode run),
`load-mode = mmap`, `fit = off` (common/arg.cpp {"-fit", "--fit"}, default on: common/fit.cpp common_fit_params
loads the model and a context with no_alloc once more before the real load, to size them to free memory), and
no-warmup + fit off. Rounds interleave variants (machine load drifts across rounds, not variants). JSON +
Markdown go to benchmarks/results/ (gitignored).

    LLAMA_ARG_REPACK=0 .venv/bin/python benchmarks/cold_load.py                 # both stand-ins, 12 rounds
    LLAMA_ARG_REPACK=0 .venv/bin/python benchmarks/cold_load.py --stand-ins smollm2 --rounds 4   # smoke

(LLAMA_ARG_REPACK=0: this machine's hypervisor faults on AMX and the engine's weight repacking segfaults; with
repacking on, a load also copies the repacked tensors.)
"""

from __future__ import annotations

import argparse
import http.client
import json
import math
import mmap
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:] = [str(ROOT), str(ROOT / "constructs"), str(ROOT / "containers")] + [
    p for p in sys.path if Path(p or ".").resolve() != ROOT / "benchmarks"
]

from benchmarks.farm_density import RouterEvents, stand_in_path  # noqa: E402

from cpu_inference._internal.resources import cache_dir  # noqa: E402
from cpu_inference.engines.pool_preset import POOL_DEFAULTS, PoolModel, render_preset  # noqa: E402
from tests.support.engine import free_port, llama_server_path, stop_process, wait_healthy  # noqa: E402

ENTRYPOINT = ROOT / "containers" / "llama-server" / "entrypoint.py"
# `[*]` keys on top of the pool's POOL_DEFAULTS (load-mode none). Keys are flags without dashes (common/preset.cpp
# get_map_key_opt; `warmup = false` becomes --no-warmup: common/preset.cpp to_args, `is_falsey` -> args_neg).
VARIANTS: dict[str, dict[str, str]] = {
    "today": {},
    "no-warmup": {"warmup": "false"},
    "mmap": {"load-mode": "mmap"},
    "fit-off": {"fit": "off"},
    "no-warmup+fit-off": {"warmup": "false", "fit": "off"},
}
PHASE_VARIANTS = ("today", "no-warmup+fit-off")
CTX, PARALLEL, THREADS = 512, 1, 1  # a small pooled model's child on this machine (one core: others run tests)
MS = 1000.0


# ---- floor: reading the file ------------------------------------------------------------------------------


def gguf_tensor_ranges(path: Path) -> list[tuple[int, int]]:
    """(file offset, bytes) of every tensor's data, in file order (GGUF v2/v3: header, key-values, tensor infos,
    data aligned to general.alignment; ggml/docs/gguf.md). A tensor's bytes run to the next one's offset."""
    scalar = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
    with open(path, "rb") as f:

        def unpack(fmt: str):
            return struct.unpack("<" + fmt, f.read(struct.calcsize(fmt)))[0]

        def string() -> str:
            return f.read(unpack("Q")).decode("utf-8", "replace")

        def value(kind: int):
            if kind == 8:
                return string()
            if kind == 9:
                item, n = unpack("I"), unpack("Q")
                if item in scalar:
                    f.seek(n * struct.calcsize(scalar[item]), os.SEEK_CUR)
                else:
                    for _ in range(n):
                        value(item)
                return None
            return unpack(scalar[kind])

        if f.read(4) != b"GGUF":
            raise ValueError(f"{path} is not a GGUF file")
        unpack("I")  # version
        n_tensors, n_kv = unpack("Q"), unpack("Q")
        alignment = 32
        for _ in range(n_kv):
            key, kind = string(), unpack("I")
            v = value(kind)
            if key == "general.alignment":
                alignment = int(v)
        offsets = []
        for _ in range(n_tensors):
            string()
            n_dims = unpack("I")
            f.seek(8 * n_dims + 4, os.SEEK_CUR)  # dims, type
            offsets.append(unpack("Q"))
        data = -(-f.tell() // alignment) * alignment
    size = path.stat().st_size
    starts = sorted(data + o for o in offsets)
    return [(s, e - s) for s, e in zip(starts, [*starts[1:], size], strict=True)]


def read_floor_s(path: Path, ranges: list[tuple[int, int]]) -> float:
    """One pread(2) per tensor into fresh private anonymous memory, as the engine's host buffer (first touch of each
    destination page included: on this VM the page faults cost ~3x the copy)."""
    total = sum(n for _, n in ranges)
    start = time.perf_counter()
    fd = os.open(path, os.O_RDONLY)
    try:
        buf = mmap.mmap(-1, total, flags=mmap.MAP_PRIVATE)  # private anonymous, as malloc's (shared: shmem, slower)
        view, at = memoryview(buf), 0
        for off, n in ranges:
            done = 0
            while done < n:
                done += os.preadv(fd, [view[at + done : at + n]], off + done)
            at += n
        view.release()
        buf.close()
    finally:
        os.close(fd)
    return time.perf_counter() - start


def mmap_floor_s(path: Path) -> float:
    """mmap with MAP_POPULATE (every page mapped from the page cache), then one byte of each page read."""
    start = time.perf_counter()
    fd = os.open(path, os.O_RDONLY)
    try:
        m = mmap.mmap(fd, 0, flags=mmap.MAP_SHARED | mmap.MAP_POPULATE, prot=mmap.PROT_READ)
        m[:: mmap.PAGESIZE]  # noqa: B018 - touch: already populated, this checks nothing faults again
        m.close()
    finally:
        os.close(fd)
    return time.perf_counter() - start


# ---- floor: starting a process ----------------------------------------------------------------------------


def version_exec_s(binary: Path) -> float:
    start = time.perf_counter()
    subprocess.run([str(binary), "--version"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


def http_status(port: int, path: str = "/health") -> int | None:
    """One GET: its status, or None when nothing listens yet."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("GET", path)
        r = conn.getresponse()
        r.read()
        return r.status
    except (TimeoutError, ConnectionRefusedError, ConnectionResetError, http.client.HTTPException):
        return None
    finally:
        conn.close()


# The engine's log prefix: minutes.seconds.milliseconds.microseconds since its logger started (common/log.cpp).
READY_LINE = "llama_server: model loaded"  # tools/server/server.cpp, right after ctx_http.is_ready.store(true)
LOG_TIME = re.compile(r"^(\d+)\.(\d\d)\.(\d{3})\.(\d{3}) ")


def log_seconds(log: Path, marker: str, required: bool = True) -> float | None:
    for line in log.read_text(errors="replace").splitlines():
        m = LOG_TIME.match(line)
        if m and marker in line:
            mins, secs, ms, us = map(int, m.groups())
            return mins * 60 + secs + ms / 1e3 + us / 1e6
    if required:
        raise ValueError(f"{log}: no line with {marker!r}")
    return None


# The child's load phases in its trace log (-lv 4: trace, which leaves --fit's own log level alone: common.cpp passes
# DEBUG to it only from verbosity 5): common/common.cpp "fitting params ...", common/fit.cpp "fitting params to free
# memory took", src/llama-model.cpp "loading model tensors", src/llama-context.cpp "constructing llama_context",
# common/common.cpp "warming up the model", tools/server/server.cpp "model loaded".
PHASES = ("fit", "metadata+vocab", "tensors", "context", "warm-up")


def load_phases(log: Path) -> dict[str, float]:
    start = log_seconds(log, "load_model: loading model")
    fit_end = log_seconds(log, "fitting params to free memory took", required=False)
    tensors = log_seconds(log, "load_tensors: loading model tensors")
    context = log_seconds(log, "llama_context: constructing llama_context")
    warmup = log_seconds(log, "warming up the model", required=False)
    end = log_seconds(log, READY_LINE)
    assert start is not None and tensors is not None and context is not None and end is not None
    after_fit = fit_end if fit_end is not None else start
    return {
        "fit": after_fit - start,
        "metadata+vocab": tensors - after_fit,
        "tensors": context - tensors,
        "context": (warmup if warmup is not None else end) - context,
        "warm-up": end - warmup if warmup is not None else 0.0,
    }


@dataclass
class Standalone:
    listen_s: float  # exec -> first HTTP answer on /health (503 while loading)
    ready_s: float  # exec -> /health 200
    load_s: float  # the engine's own log: `load_model: loading model` -> `model loaded` (fit, weights, context,
    # warm-up)


def standalone(argv: list[str], env: dict[str, str], log: Path) -> Standalone:
    """A child's argv on a fresh port, on its own."""
    port = free_port()
    args = list(argv)
    args[args.index("--port") + 1] = str(port)
    start = time.perf_counter()
    with open(log, "wb") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env)
    listen = None
    try:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"standalone child exited with {proc.returncode}: {' '.join(args)}")
            status = http_status(port)
            now = time.perf_counter() - start
            if status is not None and listen is None:
                listen = now
            if status == 200:
                break
            time.sleep(0.002)
        deadline = time.monotonic() + 10  # the engine logs from its own thread: the line may trail /health 200
        while READY_LINE not in log.read_text(errors="replace") and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        stop_process(proc, timeout=30)
    ready, loading = log_seconds(log, READY_LINE), log_seconds(log, "load_model: loading model")
    assert ready is not None and loading is not None
    return Standalone(listen or now, now, ready - loading)


# ---- through the router -----------------------------------------------------------------------------------


def request(port: int, path: str, body: dict, timeout: float = 300) -> tuple[int, float, dict]:
    """POST `body`; (status, seconds to the response head, parsed body)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        start = time.perf_counter()
        conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        r = conn.getresponse()
        head = time.perf_counter() - start
        data = r.read()
        return r.status, head, json.loads(data or b"{}")
    finally:
        conn.close()


def chat_body(model: str) -> dict:
    # cache_prompt false: every request evaluates its whole prompt (33 tokens here), so warm and cold requests do
    # the same work; with the prompt cache a repeated request evaluates 1 token and "warm" would look 13x cheaper.
    return {
        "model": model,
        "messages": [{"role": "user", "content": "Say hi."}],
        "max_tokens": 1,
        "cache_prompt": False,
    }


def models_listing(port: int) -> dict[str, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", "/models")
        return {m["id"]: m for m in json.loads(conn.getresponse().read())["data"]}
    finally:
        conn.close()


def wait_event(events: RouterEvents, model: str, status: str, after: float, timeout: float = 300) -> float:
    """monotonic time of the first (model, status) event after `after`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for t, m, s in list(events.events):
            if m == model and s == status and t >= after:
                return t
        time.sleep(0.002)
    raise TimeoutError(f"no {status} event for {model} within {timeout}s")


@dataclass
class Router:
    variant: str
    proc: subprocess.Popen
    port: int
    events: RouterEvents
    log: Path
    loaded: str | None = None  # the copy the router holds


def start_router(variant: str, preset: Path, work: Path, binary: Path, env: dict[str, str]) -> Router:
    port = free_port()
    log = work / f"router-{variant}.log"
    router_env = {
        **env,
        "LLAMA_SERVER_BIN": str(binary),
        "LLAMA_MODELS_PRESET": str(preset),
        "LLAMA_MODELS_MAX": "1",
        "LLAMA_HOST": "127.0.0.1",
        "LLAMA_PORT": str(port),
    }
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, str(ENTRYPOINT), "pool"], env=router_env, stdout=out, stderr=subprocess.STDOUT, cwd=work
        )
    wait_healthy(f"http://127.0.0.1:{port}", proc, timeout=60)
    events = RouterEvents(port)
    events.start()
    time.sleep(0.2)  # the SSE stream is open before the first load
    return Router(variant, proc, port, events, log)


@dataclass
class ColdSample:
    head_s: float  # request sent -> response head
    evict_s: float  # request sent -> `loading` of the target (the victim's unload and exit)
    child_s: float  # `loading` -> `loaded` (the child's exec, load, warm-up, READY line)
    request_s: float  # `loaded` -> response head (forward + the request itself)


def cold_request(r: Router, model: str) -> ColdSample:
    if models_listing(r.port)[model]["status"]["value"] != "unloaded":
        raise RuntimeError(f"{r.variant}: {model} is not unloaded before its cold request")
    t0 = time.monotonic()
    status, head, data = request(r.port, "/v1/chat/completions", chat_body(model))
    if status != 200:
        raise RuntimeError(f"{r.variant}: cold request for {model} answered {status}: {data}")
    spawn = wait_event(r.events, model, "loading", t0)
    ready = wait_event(r.events, model, "loaded", spawn)
    r.loaded = model
    return ColdSample(head, spawn - t0, ready - spawn, t0 + head - ready)


def warm_request(r: Router, model: str) -> float:
    status, head, data = request(r.port, "/v1/chat/completions", chat_body(model))
    if status != 200:
        raise RuntimeError(f"{r.variant}: warm request for {model} answered {status}: {data}")
    return head


def preload_request(r: Router, model: str) -> tuple[float, float]:
    """POST /models/load, wait for `loaded`, then the first request: (load -> loaded s, the request's head s)."""
    t0 = time.monotonic()
    status, _, data = request(r.port, "/models/load", {"model": model})
    if status != 200:
        raise RuntimeError(f"{r.variant}: POST /models/load {model} answered {status}: {data}")
    ready = wait_event(r.events, model, "loaded", t0)
    r.loaded = model
    return ready - t0, warm_request(r, model)


# ---- the run -----------------------------------------------------------------------------------------------


def pct_ms(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile, in ms."""
    if not values:
        return None
    v = sorted(values)
    return round(v[min(len(v) - 1, math.ceil(q * len(v)) - 1)] * MS, 1)


@dataclass
class StandInReport:
    stand_in: str
    file_mib: float
    tensors: int
    floor: dict[str, dict] = field(default_factory=dict)  # name -> {p50_ms, p95_ms, n}
    variants: dict[str, dict] = field(default_factory=dict)


def summary(values: list[float]) -> dict:
    return {"n": len(values), "p50_ms": pct_ms(values, 0.50), "p95_ms": pct_ms(values, 0.95)}


def run_stand_in(name: str, a, binary: Path, work: Path, env: dict[str, str]) -> StandInReport:
    source = stand_in_path(name)
    farm = work / "farm"
    models = []
    for copy in ("a", "b"):  # distinct files, as a pool's volume holds one file per model
        key = f"{name}-{copy}/0123456789abcdef/{source.name}"
        (farm / key).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, farm / key)
        models.append(PoolModel(name=f"{name}-{copy}", path=key, ctx_size=CTX, parallel=PARALLEL, threads=THREADS))
    names = [m.name for m in models]
    files = [farm / m.path for m in models]
    ranges = gguf_tensor_ranges(files[0])
    for f in files:  # the warm read: every later read finds the page cache
        read_floor_s(f, ranges)
    routers: dict[str, Router] = {}
    try:
        for variant, extra in VARIANTS.items():
            preset = work / f"{name}-{variant}.ini"
            preset.write_text(render_preset(models, model_dir=str(farm), defaults={**dict(POOL_DEFAULTS), **extra}))
            routers[variant] = start_router(f"{name}-{variant}", preset, work, binary, env)
            cold_request(routers[variant], names[0])  # first load of the router: not counted
        argv = {v: models_listing(r.port)[names[0]]["status"]["args"] for v, r in routers.items()}
        print(f"{name}: child argv (today): {' '.join(argv['today'])}", file=sys.stderr)
        child_env = {k: v for k, v in env.items() if k != "LLAMA_SERVER_ROUTER_PORT"}
        floor: dict[str, list[float]] = {"read": [], "mmap": [], "version": [], "listen": []}
        cold: dict[str, list[ColdSample]] = {v: [] for v in VARIANTS}
        warm: dict[str, list[float]] = {v: [] for v in VARIANTS}
        alone: dict[str, list[Standalone]] = {v: [] for v in VARIANTS}
        preload: list[tuple[float, float]] = []
        phases: dict[str, list[dict[str, float]]] = {v: [] for v in PHASE_VARIANTS}
        order = list(VARIANTS)
        for i in range(a.rounds):
            floor["read"].append(read_floor_s(files[i % 2], ranges))
            floor["mmap"].append(mmap_floor_s(files[i % 2]))
            floor["version"].append(version_exec_s(binary))
            rotated = order[i % len(order) :] + order[: i % len(order)]
            for variant in rotated:
                r = routers[variant]
                target = names[1] if r.loaded == names[0] else names[0]
                cold[variant].append(cold_request(r, target))
                warm[variant].append(warm_request(r, target))
                alone[variant].append(standalone(argv[variant], child_env, work / "standalone.log"))
                floor["listen"].append(alone[variant][-1].listen_s)
            for variant in PHASE_VARIANTS:  # the same argv with the trace log, for the phase split
                standalone([*argv[variant], "-lv", "4"], child_env, work / "phases.log")
                phases[variant].append(load_phases(work / "phases.log"))
            r = routers["today"]
            target = names[1] if r.loaded == names[0] else names[0]
            preload.append(preload_request(r, target))
            print(
                f"{name} round {i + 1}/{a.rounds}: cold today {cold['today'][-1].head_s * MS:.0f} ms, "
                f"load avg {os.getloadavg()[0]:.2f}",
                file=sys.stderr,
            )
    finally:
        for r in routers.values():
            r.events.close()
            stop_process(r.proc, timeout=30)
    rep = StandInReport(name, round(source.stat().st_size / 2**20, 1), len(ranges))
    rep.floor = {k: summary(v) for k, v in floor.items()}
    for v in VARIANTS:
        c = cold[v]
        rep.variants[v] = {
            "cold": summary([s.head_s for s in c]),
            "evict": summary([s.evict_s for s in c]),
            "child": summary([s.child_s for s in c]),
            "request": summary([s.request_s for s in c]),
            "warm": summary(warm[v]),
            "standalone": summary([s.ready_s for s in alone[v]]),
            "engine_load": summary([s.load_s for s in alone[v]]),
        }
    for v in PHASE_VARIANTS:
        rep.variants[v]["phases"] = {k: summary([ph[k] for ph in phases[v]]) for k in PHASES}
    rep.variants["today"]["preload_load"] = summary([p[0] for p in preload])
    rep.variants["today"]["preload_first_request"] = summary([p[1] for p in preload])
    return rep


def markdown(reports: list[StandInReport], rounds: int, load: tuple[float, float]) -> str:
    def p(d: dict) -> str:
        return f"{d['p50_ms']:.0f} / {d['p95_ms']:.0f}"

    lines = [
        f"{rounds} rounds per variant; 1-minute load average {load[0]:.2f} -> {load[1]:.2f}. All ms, p50 / p95.",
        "",
    ]
    for r in reports:
        f = r.floor
        lines += [
            f"**{r.stand_in}** ({r.file_mib} MiB, {r.tensors} tensors). Floor: read(2) from page cache "
            f"{p(f['read'])}, mmap+populate {p(f['mmap'])}, exec `--version` {p(f['version'])}, child exec -> "
            f"listening {p(f['listen'])}.",
            "",
            "| variant | cold (request -> head) | eviction | child (spawn -> loaded) | request after loaded | "
            "standalone (exec -> /health 200) | engine log: loading -> loaded | warm |",
            "|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for v, d in r.variants.items():
            lines.append(
                f"| {v} | {p(d['cold'])} | {p(d['evict'])} | {p(d['child'])} | {p(d['request'])} | "
                f"{p(d['standalone'])} | {p(d['engine_load'])} | {p(d['warm'])} |"
            )
        lines += [
            "",
            "Child load phases (engine trace log, standalone): "
            + "; ".join(
                f"{v}: " + ", ".join(f"{k} {p(r.variants[v]['phases'][k])}" for k in PHASES) for v in PHASE_VARIANTS
            )
            + ".",
        ]
        t = r.variants["today"]
        lines += [
            "",
            f"Preload (today): POST /models/load -> loaded {p(t['preload_load'])}; the first request after it "
            f"{p(t['preload_first_request'])}.",
            "",
        ]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--stand-ins", nargs="+", default=["smollm2", "gemma"], choices=["smollm2", "gemma"])
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    a = ap.parse_args()
    binary = llama_server_path()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LLAMA_", "MODEL_", "SAGEMAKER_"))}
    env["LLAMA_ARG_REPACK"] = os.environ.get("LLAMA_ARG_REPACK", "0")
    load0 = os.getloadavg()[0]
    reports = []
    cache_dir().mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="cold-load-", dir=cache_dir()) as tmp:  # a disk, not tmpfs
        for name in a.stand_ins:
            reports.append(run_stand_in(name, a, binary, Path(tmp), env))
    load = (load0, os.getloadavg()[0])
    a.out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%S")
    (a.out / f"cold_load-{stamp}.json").write_text(
        json.dumps({"rounds": a.rounds, "load_avg": load, "stand_ins": [asdict(r) for r in reports]}, indent=2)
    )
    text = markdown(reports, a.rounds, load)
    (a.out / f"cold_load-{stamp}.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
