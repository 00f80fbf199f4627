"""SageMaker multi-model endpoint (MME) contract in front of one llama-server child per loaded model (stdlib only).

The contract ("Custom Containers Contract for Multi-Model Endpoints",
https://docs.aws.amazon.com/sagemaker/latest/dg/mms-container-apis.html):

    POST   /models                {"model_name", "url"}: load the model SageMaker extracted under `url`; 409 if
                                  model_name is loaded; 507 "when a model cannot be loaded due to lack of memory or
                                  any other resource" (SageMaker then unloads unused models and retries)
    GET    /models                {"models": [{"modelName", "modelUrl"}]}, paginated: `next_page_token` in,
                                  `nextPageToken` out while there are more
    GET    /models/{model_name}   {"modelName", "modelUrl"}; 404 if not loaded
    DELETE /models/{model_name}   unload: its resources are reclaimed when this answers; 404 if not loaded
    POST   /models/{model_name}/invoke   the prediction; 404 if not loaded; X-Amzn-SageMaker-Target-Model (the
                                  caller's TargetModel) is "for logging purposes"

A model's directory holds its GGUF and, optionally, `engine.json`: llama-server flags for it (the catalog's
`engine_args`, e.g. {"ctx-size": "2048", "parallel": "1", "threads": "2"}). Loading starts one llama-server on a
free loopback port and answers 200 once its /health does. Which model to unload is SageMaker's choice (its LRU
calls DELETE); this container only says 507 when the memory budget cannot hold one more:

    needed(model) = file bytes + ctx-size x KV bytes per token (f16 K+V over every layer, from the GGUF header)
                    + cache-ram + CHILD_OVERHEAD_BYTES + COMPUTE_FRACTION x file bytes
    free          = budget - RSS(this process) - sum over children of max(RSS(child), needed(child))

RSS comes from /proc/<pid>/status (VmRSS: weights mapped from the file count once they are touched); a child
that has not grown to its estimate yet (still loading) is charged its estimate. The budget is the cgroup memory
limit (else MemTotal), or MME_MEMORY_BUDGET_BYTES.

An invocation is answered exactly as the single-model adapter answers /invocations (sagemaker_adapter.py: a chat,
completion, embeddings or rerank body, streaming, admission with 429, the non-streamed time budget, cancellation),
by one SageMakerAdapter per loaded model.

A loaded child that dies (the OOM killer, a crash) is restarted in place under the same model_name: SageMaker
still believes the model is loaded — the contract has no call to tell it otherwise, and nothing documents that it
re-issues a load after a 404 — so the model stays listed and its invocations are 503 + Retry-After until the new
child's /health is 200. After MAX_CHILD_RESTARTS restarts in a row that fail to load, it is dropped (404).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import logging
import os
import re
import shlex
import socket
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from urllib.parse import parse_qs, unquote

from gguf_header import GgufError, kv_shape
from inference_runtime.engine_flags import (
    DEFAULT_CACHE_REUSE,
    DEFAULT_CTX_PER_SLOT,
    DEFAULT_FLASH_ATTN,
    DEFAULT_PARALLEL,
    EngineConfig,
    find_model,
    llama_server_args,
)
from inference_runtime.env import EngineConfigError, env_int, env_str
from inference_runtime.http1 import Request, encode_head, json_error
from inference_runtime.llama_flags import (
    CACHE_RAM,
    CTX_PER_SLOT_ENV,
    CTX_SIZE,
    FIT,
    MODEL,
    ON_DEMAND_CHILD_FIT,
    PARALLEL,
    THREADS,
    TRUE,
)
from inference_runtime.sagemaker_adapter import (
    DEFAULT_GENERATION_BUDGET_SECONDS,
    DEFAULT_POOL_IDLE_SECONDS,
    HttpFront,
    SageMakerAdapter,
)

log = logging.getLogger("mme-adapter")

MIB = 1024 * 1024
# Measured with the pinned llama-server, -t 1 -np 1 -c 256 --cache-ram 0, VmRSS after load and one request:
# SmolLM2-135M Q4_1 (98.4 MB file) 132.9 MiB, Gemma-3-270M Q4_K_M (253 MB) 317.7 MiB: file + KV + 33 / 72 MiB of
# process, tokenizer and compute buffers. The estimate (file + KV + 64 MiB + 10% of the file) covers both:
# 172.8 and 334.0 MiB (test_mme_contract.py checks the first against the children's RSS on every run).
CHILD_OVERHEAD_BYTES = 64 * MIB
COMPUTE_FRACTION = 0.10
FALLBACK_KV_BYTES_PER_TOKEN = 128 * 1024  # a GGUF whose shape cannot be read: a 7-8B GQA model's f16 KV
ENGINE_JSON = "engine.json"
# engine.json keys the adapter sets itself (the child's address and name) or that change what the child is.
RESERVED_FLAGS = frozenset(
    {
        *MODEL.keys,
        "host",
        "port",
        "alias",
        "a",
        "api-key",
        "api-key-file",
        "models-dir",
        "models-preset",
        "models-max",
        "models-autoload",
        "hf-repo",
        "hf-file",
        "model-url",
        "ssl-key-file",
        "ssl-cert-file",
        "path",
        "webui",
        "slots",
        "props",
    }
)
# The engine.json keys the adapter sizes itself from (memory_needed, admission), by any of their names -> the row.
SIZED = (CTX_SIZE, PARALLEL, THREADS, CACHE_RAM)


def sized_flags() -> dict[str, str]:
    """engine.json name (long or short flag without dashes) -> the row's key; read when a model loads."""
    return {name: o.key for o in SIZED for name in (o.key, o.short.lstrip("-")) if name}


_FLAG = re.compile(r"^[a-z][a-z0-9-]*$")
# Restarts in a row that may fail (the child exits or times out while loading) before a crashed model is dropped.
# One failure can be the OOM killer acting on a neighbour's growth; three in a row means the model cannot load any
# more (its file is gone or broken, it no longer fits), and each further try costs a full load: give it back to
# SageMaker, whose next invoke then gets 404 (the contract's "not loaded").
MAX_CHILD_RESTARTS = 3
RESTART_BACKOFF_SECONDS = 1.0  # before the second and later tries: let the memory of the dead child be reclaimed
ROUTE = re.compile(r"^/models/([^/]+)(/invoke)?$")
LISTED = frozenset({"loaded", "restarting"})  # what SageMaker loaded and did not unload: listed, GET is 200


@dataclass(frozen=True)
class ChildDefaults:
    """What each model's llama-server gets unless its engine.json says otherwise: a single engine's defaults
    (engine_flags), except where noted."""

    binary: str
    threads: int
    parallel: int = DEFAULT_PARALLEL
    ctx_per_slot: int = DEFAULT_CTX_PER_SLOT
    flash_attn: str = DEFAULT_FLASH_ATTN
    cache_reuse: int = DEFAULT_CACHE_REUSE
    # Differs: a single engine's default is 5% of the memory limit; here many models share one budget, so no
    # host-RAM prompt cache unless engine.json (or LLAMA_CACHE_RAM_MIB) asks.
    cache_ram_mib: int = 0
    # Differs: every SageMaker load starts a child, a cold load each. --fit (on by default: common/common.h:478)
    # first loads the model and a context a second time with no_alloc (common/common.cpp:1200 -> common/fit.cpp
    # common_get_device_memory_data_impl) only to shrink unset arguments to device memory. A CPU-only child (no
    # devices, nd == 0) with ctx-size set (always: llama_server_args; fit.cpp:198 n_ctx_auto false) gets nothing
    # from it: "no changes needed" (fit.cpp:324) or "context size set by user -> no change" (fit.cpp:455) and a
    # throw that common_fit_params catches and only logs (fit.cpp:894), every parameter as it was. Off (as in a pool's
    # preset, engines/pool_preset.py) a load + first invoke takes 0.65-0.79x the time (benchmarks/README.md "Pool
    # cold load"). None: the engine decides (LLAMA_ARG_FIT, or --fit in LLAMA_EXTRA_ARGS / engine.json).
    fit: str | None = ON_DEMAND_CHILD_FIT
    queue_depth: int | None = None  # admitted beyond the slots; None: as many as slots
    extra_args: tuple[str, ...] = ()


def child_defaults(env: Mapping[str, str], *, binary: str, threads: int) -> ChildDefaults:
    """Every child's defaults from the env contract (the single engine's variables); checked as a single engine's
    config is, with the same messages naming the variables."""
    queue = env_int(env, "LLAMA_QUEUE_DEPTH", None, minimum=0)
    extra = tuple(shlex.split(env.get("LLAMA_EXTRA_ARGS", "")))
    children = ChildDefaults(
        binary=binary,
        threads=threads,
        parallel=env_int(env, PARALLEL.image_env, DEFAULT_PARALLEL),
        ctx_per_slot=env_int(env, CTX_PER_SLOT_ENV, DEFAULT_CTX_PER_SLOT),
        flash_attn=env_str(env, "LLAMA_FLASH_ATTN", DEFAULT_FLASH_ATTN).lower(),
        cache_reuse=env_int(env, "LLAMA_CACHE_REUSE", DEFAULT_CACHE_REUSE),
        cache_ram_mib=env_int(env, CACHE_RAM.image_env, ChildDefaults.cache_ram_mib),
        queue_depth=queue,
        extra_args=extra,
        # The operator's own --fit (llama-server reads LLAMA_ARG_FIT: common/arg.cpp .set_env) is left alone.
        fit=None if FIT.arg_env in env or names_fit(extra) else ChildDefaults.fit,
    )
    EngineConfig(
        model="-",
        threads=children.threads,
        parallel=children.parallel,
        ctx_per_slot=children.ctx_per_slot,
        flash_attn=children.flash_attn,
        cache_reuse=children.cache_reuse,
        cache_ram_mib=children.cache_ram_mib,
        fit=children.fit,
    ).validate()
    return children


def names_fit(args: tuple[str, ...] | list[str]) -> bool:
    """Whether a command line sets --fit itself (a repeated flag: common/arg.cpp parse_cli_args warns, last wins)."""
    return any(a in (FIT.flag, FIT.short) for a in args)


@dataclass
class Model:
    name: str
    url: str
    config: EngineConfig
    needed: int  # the memory estimate it was admitted with
    proxy: SageMakerAdapter
    state: str = "loading"  # loading | loaded | restarting (its child died) | unloading
    proc: asyncio.subprocess.Process | None = None
    watcher: asyncio.Task | None = field(default=None, repr=False)


class LoadError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


def rss_bytes(pid: int) -> int:
    """Resident set size of a process (0 once it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def free_loopback_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def read_engine_json(model_dir: Path) -> dict[str, str | None]:
    """engine.json as llama-server flags: name (no dashes) -> value, None for a bare switch (`true`)."""
    path = model_dir / ENGINE_JSON
    if not path.is_file():
        return {}
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise EngineConfigError(f"{path} is not valid JSON: {e}") from None
    if not isinstance(raw, dict):
        raise EngineConfigError(f'{path} must be a JSON object of llama-server flags, e.g. {{"ctx-size": "2048"}}')
    flags: dict[str, str | None] = {}
    for key, value in raw.items():
        name = str(key).lstrip("-")
        if not _FLAG.match(name):
            raise EngineConfigError(f"{path}: {key!r} is not a llama-server flag name")
        if name in RESERVED_FLAGS:
            raise EngineConfigError(f"{path}: --{name} is set by the container, remove it")
        # A flag option is on with JSON true or "true", as in a preset INI (common/preset.cpp: is_truthy); the library
        # writes engine.json as strings (cpu_inference.engines.tasks: {"embeddings": "true"}).
        if value is True or value == TRUE:
            flags[name] = None
        elif value is False or value is None or value == "false":
            continue
        elif isinstance(value, (str, int, float)):
            flags[name] = str(value)
        else:
            raise EngineConfigError(f"{path}: {key!r} must be a string, number or true, got {type(value).__name__}")
    return flags


def _positive(path: Path, name: str, value: str | None, minimum: int = 1) -> int:
    try:
        n = int(value or "")
    except ValueError:
        raise EngineConfigError(f"{path / ENGINE_JSON}: {name} must be an integer, got {value!r}") from None
    if n < minimum:
        raise EngineConfigError(f"{path / ENGINE_JSON}: {name} must be >= {minimum}, got {n}")
    return n


def child_config(name: str, model_dir: Path, defaults: ChildDefaults) -> EngineConfig:
    """The child's llama-server config: the GGUF under `model_dir`, the defaults, engine.json over them."""
    gguf = find_model(None, str(model_dir))
    flags = read_engine_json(model_dir)
    names = sized_flags()
    sized = {names[k]: flags.pop(k) for k in list(flags) if k in names}
    p, t, c, r = PARALLEL.key, THREADS.key, CTX_SIZE.key, CACHE_RAM.key
    parallel = _positive(model_dir, p, sized[p]) if p in sized else defaults.parallel
    threads = _positive(model_dir, t, sized[t]) if t in sized else defaults.threads
    # --ctx-size is split evenly across slots (engine_flags.EngineConfig.ctx_size): ctx per slot = ctx-size / parallel.
    ctx_per_slot = _positive(model_dir, c, sized[c], 64 * parallel) // parallel if c in sized else defaults.ctx_per_slot
    cache_ram = _positive(model_dir, r, sized[r], 0) if r in sized else defaults.cache_ram_mib
    extra = [arg for flag, value in flags.items() for arg in ([f"--{flag}"] if value is None else [f"--{flag}", value])]
    cfg = EngineConfig(
        model=str(gguf),
        threads=threads,
        parallel=parallel,
        ctx_per_slot=ctx_per_slot,
        host="127.0.0.1",
        port=1,
        flash_attn=defaults.flash_attn,
        cache_reuse=defaults.cache_reuse,
        cache_ram_mib=cache_ram,
        alias=name,
        fit=None if names_fit(extra) else defaults.fit,  # engine.json's "fit" wins
        extra_args=(*defaults.extra_args, *extra),
    )
    cfg.validate()
    return cfg


def memory_needed(cfg: EngineConfig) -> int:
    """The memory a child will use (module docstring: the formula)."""
    size = Path(cfg.model).stat().st_size
    try:
        per_token = kv_shape(Path(cfg.model)).kv_bytes_per_token
    except (GgufError, OSError) as e:
        log.warning("%s: KV shape unknown (%s): assuming %d bytes per token", cfg.model, e, FALLBACK_KV_BYTES_PER_TOKEN)
        per_token = FALLBACK_KV_BYTES_PER_TOKEN
    cache_ram = max(0, cfg.cache_ram_mib or 0) * MIB
    return size + cfg.ctx_size * per_token + cache_ram + CHILD_OVERHEAD_BYTES + int(COMPUTE_FRACTION * size)


def _page_token(name: str) -> str:
    return base64.urlsafe_b64encode(name.encode()).decode().rstrip("=")


def _from_page_token(token: str) -> str:
    try:
        return base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError):
        raise ValueError(f"invalid next_page_token {token!r}") from None


class MultiModelAdapter(HttpFront):
    def __init__(
        self,
        defaults: ChildDefaults,
        *,
        memory_budget: int,
        retry_after: int = 1,
        pool_idle_seconds: float = DEFAULT_POOL_IDLE_SECONDS,
        generation_budget: float = DEFAULT_GENERATION_BUDGET_SECONDS,
        load_timeout: float = 300.0,
        engine_stop_seconds: float = 5.0,
        page_size: int = 100,
        max_body_bytes: int = 6 * 1024 * 1024,  # SageMaker's real-time payload limit
        client_idle_timeout: float = 75.0,
    ):
        super().__init__(max_body_bytes=max_body_bytes, client_idle_timeout=client_idle_timeout)
        self.defaults = defaults
        self.memory_budget = memory_budget
        self.retry_after = retry_after
        self.pool_idle_seconds = pool_idle_seconds
        self.generation_budget = generation_budget
        self.load_timeout = load_timeout
        self.engine_stop_seconds = engine_stop_seconds
        self.page_size = page_size
        self.models: dict[str, Model] = {}
        # Reading a model directory and its GGUF header happens off the event loop. Made here, not by asyncio.to_thread
        # on first use: its modules are imported now, while the interpreter's files are still readable (root).
        self._files = ThreadPoolExecutor(max_workers=2, thread_name_prefix="model-files")

    # --- memory --------------------------------------------------------------------------------------

    def memory_used(self) -> int:
        """This process plus every child, each child at least at its estimate."""
        children = sum(max(rss_bytes(m.proc.pid) if m.proc else 0, m.needed) for m in self.models.values())
        return rss_bytes(os.getpid()) + children

    # --- lifecycle -----------------------------------------------------------------------------------

    def abort_in_flight(self) -> None:
        for model in self.models.values():
            model.proxy.abort_in_flight()

    def release(self) -> None:
        for model in self.models.values():
            model.proxy.release()
        self._files.shutdown(wait=False)

    async def stop_children(self) -> None:
        await asyncio.gather(*(self._stop_child(m) for m in list(self.models.values())))
        self.models.clear()

    async def _stop_child(self, model: Model) -> None:
        if model.watcher is not None and model.watcher is not asyncio.current_task():
            model.watcher.cancel()
        await self._stop_process(model.proc)

    async def _stop_process(self, proc: asyncio.subprocess.Process | None) -> None:
        if proc is None or proc.returncode is not None:
            return
        proc.terminate()
        try:
            await asyncio.wait_for(proc.wait(), self.engine_stop_seconds)
        except TimeoutError:
            proc.kill()
            await proc.wait()

    async def _watch(self, model: Model) -> None:
        """A loaded child that exits is restarted in place (module docstring); cancelled when the model is unloaded."""
        while True:
            assert model.proc is not None
            code = await model.proc.wait()
            if self.models.get(model.name) is not model or model.state != "loaded":
                return  # unloaded or stopping: the exit was asked for
            log.error("llama-server of model %s exited with %s: restarting it", model.name, code)
            model.state = "restarting"  # invocations get 503 + Retry-After meanwhile
            if not await self._restart(model):
                return

    async def _restart(self, model: Model) -> bool:
        """Start the model's child again on a fresh port, up to MAX_CHILD_RESTARTS tries; True once it is loaded.
        After the last failed try the model is dropped."""
        for attempt in range(1, MAX_CHILD_RESTARTS + 1):
            if attempt > 1:
                await asyncio.sleep(RESTART_BACKOFF_SECONDS)
            if self.models.get(model.name) is not model or model.state != "restarting":
                return False
            # A new port: the old one may still be held by the dead child's connections in TIME_WAIT.
            model.config = replace(model.config, port=free_loopback_port())
            model.proxy.retarget(model.config.port)
            try:
                await self._run_child(model, "restarting")
            except LoadError as e:
                log.warning(
                    "restart of model %s failed (%d of %d): %s", model.name, attempt, MAX_CHILD_RESTARTS, e.message
                )
                await self._stop_process(model.proc)
                continue
            model.state = "loaded"
            log.info("model %s restarted on port %d", model.name, model.config.port)
            return True
        if self.models.get(model.name) is model and model.state == "restarting":
            log.error(
                "model %s dropped after %d failed restarts: invocations get 404 until SageMaker loads it again",
                model.name,
                MAX_CHILD_RESTARTS,
            )
            del self.models[model.name]
            model.proxy.release()
        return False

    # --- routes --------------------------------------------------------------------------------------

    async def _dispatch(self, req: Request, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        ka = req.keep_alive
        path = req.path
        if path == "/ping":
            if req.method not in ("GET", "HEAD"):
                return await self._send(
                    writer, json_error(405, "use GET /ping", keep_alive=ka, extra=[("Allow", "GET")]), ka
                )
            return await self._json(writer, 200, {"status": "ok"}, ka, head_only=req.method == "HEAD")
        if path == "/models":
            if req.method == "POST":
                return await self._load(req, writer)
            if req.method == "GET":
                return await self._list(req, writer)
            return await self._send(
                writer, json_error(405, "use GET or POST /models", keep_alive=ka, extra=[("Allow", "GET, POST")]), ka
            )
        m = ROUTE.match(path)
        if m is None:
            return await self._send(
                writer,
                json_error(
                    404,
                    f"no route {path}: this endpoint serves the multi-model contract (/ping, /models, /models/<name>, /models/<name>/invoke)",
                    keep_alive=ka,
                ),
                ka,
            )
        name = unquote(m.group(1))
        if m.group(2):
            if req.method != "POST":
                return await self._send(
                    writer,
                    json_error(405, "use POST /models/<name>/invoke", keep_alive=ka, extra=[("Allow", "POST")]),
                    ka,
                )
            return await self._invoke(name, req, reader, writer)
        if req.method == "GET":
            model = self.models.get(name)
            if model is None or model.state not in LISTED:
                return await self._send(writer, json_error(404, f"model {name!r} is not loaded", keep_alive=ka), ka)
            return await self._json(writer, 200, {"modelName": name, "modelUrl": model.url}, ka)
        if req.method == "DELETE":
            return await self._unload(name, req, writer)
        return await self._send(
            writer,
            json_error(405, "use GET or DELETE /models/<name>", keep_alive=ka, extra=[("Allow", "GET, DELETE")]),
            ka,
        )

    async def _json(
        self, writer: asyncio.StreamWriter, status: int, body: dict, keep_alive: bool, *, head_only: bool = False
    ) -> bool:
        data = json.dumps(body).encode()
        head = encode_head(
            status,
            [
                ("Content-Type", "application/json"),
                ("Content-Length", str(len(data))),
                ("Connection", "keep-alive" if keep_alive else "close"),
            ],
        )
        return await self._send(writer, head + (b"" if head_only else data), keep_alive)

    async def _list(self, req: Request, writer: asyncio.StreamWriter) -> bool:
        ka = req.keep_alive
        query = parse_qs(req.target.partition("?")[2])
        names = sorted(n for n, m in self.models.items() if m.state in LISTED)
        token = (query.get("next_page_token") or [""])[0]
        if token:
            try:
                after = _from_page_token(token)
            except ValueError as e:
                return await self._send(writer, json_error(400, str(e), keep_alive=ka), ka)
            names = [n for n in names if n > after]  # by name: a page is stable while models come and go
        page = names[: self.page_size]
        body: dict = {"models": [{"modelName": n, "modelUrl": self.models[n].url} for n in page]}
        if len(names) > len(page):
            body["nextPageToken"] = _page_token(page[-1])
        return await self._json(writer, 200, body, ka)

    async def _invoke(
        self, name: str, req: Request, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        ka = req.keep_alive
        target = req.head.header("x-amzn-sagemaker-target-model")
        model = self.models.get(name)
        log.info("invoke model=%s target_model=%s", name, target or "-")
        if model is None:
            return await self._send(writer, json_error(404, f"model {name!r} is not loaded", keep_alive=ka), ka)
        if model.state != "loaded":
            return await self._send(
                writer,
                json_error(503, f"model {name!r} is {model.state}", keep_alive=ka, retry_after=self.retry_after),
                ka,
            )
        return await model.proxy.invoke(req, reader, writer)

    async def _load(self, req: Request, writer: asyncio.StreamWriter) -> bool:
        ka = req.keep_alive
        try:
            name, url = self._load_request(req)
            if name in self.models:
                raise LoadError(409, f"model {name!r} is already loaded")
            cfg, needed = await asyncio.get_running_loop().run_in_executor(
                self._files, self._plan_child, name, Path(url)
            )
            model = self._admit(name, url, cfg, needed)  # no await between the 409/507 checks and the admission
        except LoadError as e:
            log.info("load %s: %d %s", req.body[:200], e.status, e.message)
            return await self._send(writer, json_error(e.status, e.message, keep_alive=ka), ka)
        try:
            await self._start_child(model)
        except LoadError as e:
            if self.models.get(name) is model:
                del self.models[name]
            await self._stop_child(model)
            model.proxy.release()
            log.warning("load %s: %d %s", name, e.status, e.message)
            return await self._send(writer, json_error(e.status, e.message, keep_alive=ka), ka)
        return await self._json(writer, 200, {"modelName": name, "modelUrl": url}, ka)

    @staticmethod
    def _load_request(req: Request) -> tuple[str, str]:
        try:
            body = json.loads(req.body)
        except (ValueError, UnicodeDecodeError):
            raise LoadError(400, 'body must be JSON: {"model_name": ..., "url": ...}') from None
        name = body.get("model_name") if isinstance(body, dict) else None
        url = body.get("url") if isinstance(body, dict) else None
        if not isinstance(name, str) or not name or not isinstance(url, str) or not url:
            raise LoadError(400, 'body must name the model and its directory: {"model_name": ..., "url": ...}')
        return name, url

    def _plan_child(self, name: str, model_dir: Path) -> tuple[EngineConfig, int]:
        """Runs in a thread: reads the model's directory and the GGUF header."""
        try:
            cfg = child_config(name, model_dir, self.defaults)
        except EngineConfigError as e:
            raise LoadError(400, f"model {name!r}: {e}") from None
        try:
            with open(cfg.model, "rb") as f:
                f.read(1)
        except OSError as e:
            raise LoadError(
                500,
                f"model {name!r}: {cfg.model} is not readable by uid {os.getuid()} gid {os.getgid()} "
                f"({e.strerror}): make the artifact's files 0644 and directories 0755, or set LLAMA_RUN_AS=0:0",
            ) from None
        return cfg, memory_needed(cfg)

    def _admit(self, name: str, url: str, cfg: EngineConfig, needed: int) -> Model:
        if name in self.models:
            raise LoadError(409, f"model {name!r} is already loaded")
        own = rss_bytes(os.getpid())
        if needed > self.memory_budget - own:
            # Not a 507: SageMaker would unload every other model and still fail. Say what would fit.
            raise LoadError(
                500,
                f"model {name!r} needs ~{needed // MIB} MiB (file, KV cache for ctx-size {cfg.ctx_size}, "
                f"overhead), more than this instance's whole {self.memory_budget // MIB} MiB budget: "
                "use an instance with more memory or a smaller ctx-size in engine.json",
            )
        free = self.memory_budget - self.memory_used()
        if needed > free:
            raise LoadError(
                507,
                f"model {name!r} needs ~{needed // MIB} MiB (file, KV cache for ctx-size {cfg.ctx_size}, "
                f"overhead) and {max(0, free) // MIB} MiB of the {self.memory_budget // MIB} MiB budget are free: "
                "unload a model",
            )
        cfg = replace(cfg, port=free_loopback_port())
        queue = self.defaults.queue_depth if self.defaults.queue_depth is not None else cfg.parallel
        proxy = SageMakerAdapter(
            "127.0.0.1",
            cfg.port,
            max_in_flight=cfg.parallel + queue,
            retry_after=self.retry_after,
            pool_idle_seconds=self.pool_idle_seconds,
            generation_budget=self.generation_budget,
        )
        model = Model(name, url, cfg, needed, proxy)
        self.models[name] = model
        return model

    async def _start_child(self, model: Model) -> None:
        started = time.monotonic()
        await self._run_child(model, "loading")
        model.state = "loaded"
        model.watcher = asyncio.create_task(self._watch(model))
        log.info("model %s loaded in %.1f s on port %d", model.name, time.monotonic() - started, model.config.port)

    async def _run_child(self, model: Model, state: str) -> None:
        """Start the model's llama-server and return once its /health is 200, while the model stays in `state`
        (a DELETE meanwhile ends the wait with 409); LoadError when it exits or does not load in time."""
        command = [self.defaults.binary, *llama_server_args(model.config)]
        log.info("%s model %s (~%d MiB): %s", state, model.name, model.needed // MIB, shlex.join(command))
        started = time.monotonic()
        try:
            model.proc = await asyncio.create_subprocess_exec(*command)
        except OSError as e:
            raise LoadError(500, f"cannot start llama-server for model {model.name!r}: {e}") from None
        deadline = started + self.load_timeout
        while True:
            if model.proc.returncode is not None or model.state != state:
                break
            if await model.proxy.engine_healthy():
                return
            if time.monotonic() >= deadline:
                raise LoadError(500, f"model {model.name!r} did not load within {self.load_timeout:.0f} s")
            await asyncio.sleep(0.05)  # returncode is set when the child exits, without a wait()
        if model.state != state:
            raise LoadError(409, f"model {model.name!r} was unloaded while loading")
        code = model.proc.returncode
        if code == -9:  # SIGKILL while loading: the kernel's OOM killer
            raise LoadError(507, f"llama-server for model {model.name!r} was killed while loading (out of memory)")
        raise LoadError(
            500, f"llama-server for model {model.name!r} exited with {code} while loading (see the container log)"
        )

    async def _unload(self, name: str, req: Request, writer: asyncio.StreamWriter) -> bool:
        ka = req.keep_alive
        model = self.models.get(name)
        if model is None or model.state == "unloading":
            return await self._send(writer, json_error(404, f"model {name!r} is not loaded", keep_alive=ka), ka)
        model.state = "unloading"  # new invocations get 503; a load still waiting for /health gives up
        # "The resources provisioned to model_name should be reclaimed by the container when this API returns":
        # requests in flight are cut (a clean 503 or a last SSE error event), then the child is stopped.
        if model.proxy.in_flight:
            model.proxy.abort_in_flight()
            deadline = time.monotonic() + 1.0
            while model.proxy.in_flight and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
        await self._stop_child(model)
        model.proxy.release()
        if self.models.get(name) is model:
            del self.models[name]
        log.info("model %s unloaded", name)
        return await self._json(writer, 200, {"modelName": name, "status": "unloaded"}, ka)
