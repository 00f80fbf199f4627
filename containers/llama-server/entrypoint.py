#!/usr/bin/env python3
"""Container entrypoint for llama-server.

    entrypoint.py            EKS mode: exec llama-server on LLAMA_HOST:LLAMA_PORT (0.0.0.0:8080)
    entrypoint.py serve      SageMaker mode: llama-server on loopback + the /ping, /invocations adapter;
                             started as root (SageMaker's way), it drops to LLAMA_RUN_AS first (privileges.py)
    entrypoint.py pool       EKS pools: llama-server in router mode over LLAMA_MODELS_PRESET, at most
                             LLAMA_MODELS_MAX models loaded (pool_mode.py); a changed preset is applied in
                             place, without a restart (pool_supervisor.py)
    entrypoint.py serve-mme  SageMaker multi-model endpoint: the /models contract, one llama-server per loaded
                             model (mme_adapter.py); `serve` becomes this when SageMaker sets SAGEMAKER_MULTI_MODEL=true
    entrypoint.py print-command [serve|pool]   print the engine command line this environment produces

Flags come from engine_flags (the env contract); see README.md.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shlex
import shutil
import signal
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from engine_flags import (
    EngineConfig,
    EngineConfigError,
    available_cpus,
    config_from_env,
    llama_server_args,
    memory_limit_bytes,
    on_loopback,
)
from mme_adapter import ChildDefaults, MultiModelAdapter
from pool_mode import pool_plan
from pool_supervisor import poll_seconds, supervise
from privileges import drop_privileges
from sagemaker_adapter import (
    ABORT_SECONDS,
    DEFAULT_GENERATION_BUDGET_SECONDS,
    SageMakerAdapter,
    max_drain_seconds,
    serve_engine,
    time_limits,
)
from sagemaker_adapter import (
    SIGKILL_AFTER_SECONDS as SIGKILL_AFTER_SECONDS,  # re-exported: the lifecycle tests derive from it
)

DEFAULT_BIN = "/opt/llama/bin/llama-server"
EKS_MODEL_DIR = "/models"
SAGEMAKER_MODEL_DIR = "/opt/ml/model"

log = logging.getLogger("entrypoint")

ENGINE_STOP_SECONDS = 5.0  # llama-server exits at once on SIGTERM when idle; SIGKILL after this
MAX_DRAIN_SECONDS = max_drain_seconds(ENGINE_STOP_SECONDS)  # 19 s of SageMaker's 30 (sagemaker_adapter.py)


def engine_binary(env: Mapping[str, str]) -> str:
    explicit = env.get("LLAMA_SERVER_BIN", "").strip()
    if explicit:
        return explicit
    if Path(DEFAULT_BIN).is_file():
        return DEFAULT_BIN
    found = shutil.which("llama-server")
    if found:
        return found
    raise EngineConfigError("llama-server not found: set LLAMA_SERVER_BIN")


def _int(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name, "").strip()
    try:
        return int(raw) if raw else default
    except ValueError:
        raise EngineConfigError(f"{name} must be an integer, got {raw!r}") from None


def _float(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name, "").strip()
    try:
        return float(raw) if raw else default
    except ValueError:
        raise EngineConfigError(f"{name} must be a number, got {raw!r}") from None


def eks_command(env: Mapping[str, str], **probe: int | None) -> list[str]:
    """The llama-server argv for EKS mode (`probe`: cpus=, memory_limit= instead of reading cgroups)."""
    cfg = config_from_env(env, model_dir_default=EKS_MODEL_DIR, **probe)
    return [engine_binary(env), *llama_server_args(cfg)]


def pool_command(env: Mapping[str, str], *, memory_limit: int | None = None) -> list[str]:
    """The router's argv for an EKS pool replica (one line naming the preset section whose model is missing)."""
    return pool_plan(env, engine_binary(env), memory_limit=memory_limit).command


@dataclass(frozen=True)
class AdapterSettings:
    """What SageMaker's side of the container runs with, in both single- and multi-model mode."""

    host: str
    port: int
    retry_after: int
    pool_idle_seconds: float
    drain_seconds: float  # on SIGTERM, how long requests being answered may take to finish
    generation_budget: float  # a non-streamed request is answered within this many seconds


def adapter_settings(env: Mapping[str, str]) -> AdapterSettings:
    # SAGEMAKER_BIND_TO_PORT is set for containers in inference pipelines; 8080 otherwise.
    port = _int(env, "SAGEMAKER_BIND_TO_PORT", 8080)
    drain = _float(env, "ADAPTER_DRAIN_SECONDS", MAX_DRAIN_SECONDS)
    budget = _float(env, "ADAPTER_GENERATION_BUDGET_SECONDS", DEFAULT_GENERATION_BUDGET_SECONDS)
    problem = time_limits(drain, budget, engine_stop_seconds=ENGINE_STOP_SECONDS)
    if problem:
        raise EngineConfigError(problem)
    return AdapterSettings(
        host=env.get("ADAPTER_HOST", "").strip() or "0.0.0.0",
        port=port,
        retry_after=_int(env, "ADAPTER_RETRY_AFTER_SECONDS", 1),
        pool_idle_seconds=_float(env, "ADAPTER_POOL_IDLE_SECONDS", 3.0),
        drain_seconds=drain,
        generation_budget=budget,
    )


@dataclass(frozen=True)
class SageMakerPlan:
    engine: EngineConfig  # bound to 127.0.0.1
    command: list[str]
    adapter_host: str
    adapter_port: int
    max_in_flight: int  # slots + queue depth
    retry_after: int
    pool_idle_seconds: float
    drain_seconds: float  # on SIGTERM, how long requests being answered may take to finish
    generation_budget: float  # a non-streamed request is answered within this many seconds

    @property
    def shutdown_seconds(self) -> float:
        """The longest SIGTERM → exit: drain, then the clean 503s, then the engine's stop."""
        return self.drain_seconds + ABORT_SECONDS + ENGINE_STOP_SECONDS


def sagemaker_plan(env: Mapping[str, str], **probe: int | None) -> SageMakerPlan:
    model_dir = env.get("SM_MODEL_DIR", "").strip() or SAGEMAKER_MODEL_DIR
    cfg = config_from_env({**env, "MODEL_DIR": model_dir}, model_dir_default=model_dir, **probe)
    adapter = adapter_settings(env)
    engine_port = _int(env, "LLAMA_ENGINE_PORT", 8081 if adapter.port != 8081 else 8082)
    if engine_port == adapter.port:
        raise EngineConfigError(f"LLAMA_ENGINE_PORT must differ from the adapter port {adapter.port}")
    queue_depth = _int(env, "LLAMA_QUEUE_DEPTH", cfg.parallel)
    if queue_depth < 0:
        raise EngineConfigError(f"LLAMA_QUEUE_DEPTH must be >= 0, got {queue_depth}")
    engine = on_loopback(cfg, engine_port)
    return SageMakerPlan(
        engine=engine,
        command=[engine_binary(env), *llama_server_args(engine)],
        adapter_host=adapter.host,
        adapter_port=adapter.port,
        max_in_flight=cfg.parallel + queue_depth,
        retry_after=adapter.retry_after,
        pool_idle_seconds=adapter.pool_idle_seconds,
        drain_seconds=adapter.drain_seconds,
        generation_budget=adapter.generation_budget,
    )


@dataclass(frozen=True)
class MultiModelPlan:
    adapter: AdapterSettings
    children: ChildDefaults
    memory_budget: int
    load_timeout: float
    page_size: int  # models per GET /models answer

    @property
    def shutdown_seconds(self) -> float:
        return self.adapter.drain_seconds + ABORT_SECONDS + ENGINE_STOP_SECONDS  # children stop in parallel


def is_multi_model(env: Mapping[str, str]) -> bool:
    """SageMaker sets SAGEMAKER_MULTI_MODEL=true in a multi-model endpoint's container ("SageMaker AI also
    injects an environment variable into the container",
    docs.aws.amazon.com/sagemaker/latest/dg/build-multi-model-build-container.html) and still runs it as
    `docker run <image> serve`."""
    return env.get("SAGEMAKER_MULTI_MODEL", "").strip().lower() == "true"


def multi_model_plan(env: Mapping[str, str], *, cpus: int | None = None, memory_limit: int | None = None) -> MultiModelPlan:
    """`serve-mme` from the env contract; per-model settings come from each model's engine.json on load."""
    adapter = adapter_settings(env)
    threads = _int(env, "LLAMA_THREADS", 0) or (cpus if cpus is not None else available_cpus())
    parallel = _int(env, "LLAMA_PARALLEL", 1)
    queue_depth = env.get("LLAMA_QUEUE_DEPTH", "").strip()
    children = ChildDefaults(
        binary=engine_binary(env),
        threads=threads,
        parallel=parallel,
        ctx_per_slot=_int(env, "LLAMA_CTX_PER_SLOT", 4096),
        flash_attn=env.get("LLAMA_FLASH_ATTN", "").strip().lower() or "auto",
        cache_reuse=_int(env, "LLAMA_CACHE_REUSE", 256),
        cache_ram_mib=_int(env, "LLAMA_CACHE_RAM_MIB", 0),
        queue_depth=_int(env, "LLAMA_QUEUE_DEPTH", 0) if queue_depth else None,
        extra_args=tuple(shlex.split(env.get("LLAMA_EXTRA_ARGS", ""))),
    )
    # The same checks (and messages naming the variables) as a single engine's.
    EngineConfig(model="-", threads=children.threads, parallel=children.parallel, ctx_per_slot=children.ctx_per_slot,
                 flash_attn=children.flash_attn, cache_reuse=children.cache_reuse, cache_ram_mib=children.cache_ram_mib).validate()
    if children.queue_depth is not None and children.queue_depth < 0:
        raise EngineConfigError(f"LLAMA_QUEUE_DEPTH must be >= 0, got {children.queue_depth}")
    budget = _int(env, "MME_MEMORY_BUDGET_BYTES", 0) or (memory_limit if memory_limit is not None else memory_limit_bytes())
    if not budget or budget < 0:
        raise EngineConfigError("no memory limit found (cgroup memory.max, /proc/meminfo): set MME_MEMORY_BUDGET_BYTES")
    load_timeout = _float(env, "MME_LOAD_TIMEOUT_SECONDS", 300.0)
    if load_timeout <= 0:
        raise EngineConfigError(f"MME_LOAD_TIMEOUT_SECONDS must be > 0, got {load_timeout:g}")
    page_size = _int(env, "MME_LIST_PAGE_SIZE", 100)
    if page_size < 1:
        raise EngineConfigError(f"MME_LIST_PAGE_SIZE must be >= 1, got {page_size}")
    return MultiModelPlan(adapter, children, budget, load_timeout, page_size)


async def serve_multi_model(plan: MultiModelPlan) -> int:
    """Run the multi-model endpoint until SIGTERM: drain, cut what is left, stop every child, exit 0."""
    a = plan.adapter
    adapter = MultiModelAdapter(
        plan.children, memory_budget=plan.memory_budget, retry_after=a.retry_after, pool_idle_seconds=a.pool_idle_seconds,
        generation_budget=a.generation_budget, load_timeout=plan.load_timeout, engine_stop_seconds=ENGINE_STOP_SECONDS,
        page_size=plan.page_size,
    )
    port = await adapter.start(a.host, a.port)
    log.info("multi-model adapter on %s:%d, memory budget %d MiB", a.host, port, plan.memory_budget // (1024 * 1024))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("stopping: draining requests in flight for up to %.0fs", a.drain_seconds)
    await adapter.close(grace=a.drain_seconds)
    await adapter.stop_children()
    return 0


async def serve(env: Mapping[str, str], plan: SageMakerPlan | None = None) -> int:
    """Run SageMaker mode until SIGTERM (exit 0) or until llama-server dies (its exit code, so the
    platform replaces the container instead of answering 503 forever)."""
    plan = plan or sagemaker_plan(env)
    adapter = SageMakerAdapter(
        "127.0.0.1", plan.engine.port, max_in_flight=plan.max_in_flight, retry_after=plan.retry_after,
        pool_idle_seconds=plan.pool_idle_seconds, generation_budget=plan.generation_budget,
    )
    return await serve_engine(adapter, plan.command, host=plan.adapter_host, port=plan.adapter_port,
                              drain_seconds=plan.drain_seconds, engine_stop_seconds=ENGINE_STOP_SECONDS, engine="llama-server")


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s", stream=sys.stderr)
    args = sys.argv[1:] if argv is None else argv
    env = os.environ
    try:
        if args[:1] == ["serve-mme"] or (args[:1] == ["serve"] and is_multi_model(env)):
            mme = multi_model_plan(env)
            # Before anything listens: the adapter and every llama-server it starts run unprivileged.
            log.info("%s", drop_privileges(env, model=None, binary=mme.children.binary))
            return asyncio.run(serve_multi_model(mme))
        if args[:1] == ["serve"]:
            plan = sagemaker_plan(env)
            # Before anything listens or starts: the adapter and the engine never run as root.
            log.info("%s", drop_privileges(env, model=plan.engine.model, binary=plan.command[0]))
            return asyncio.run(serve(env, plan))
        if args[:1] == ["print-command"]:
            mode = args[1:2]
            cmd = sagemaker_plan(env).command if mode == ["serve"] else pool_command(env) if mode == ["pool"] else eks_command(env)
            print(shlex.join(cmd))
            return 0
        if args[:1] == ["pool"]:
            # Not exec'd: the router runs as a child so a changed preset is applied in place (pool_supervisor.py).
            pool, interval = pool_plan(env, engine_binary(env)), poll_seconds(env)
            return supervise(pool, env, interval)  # EngineConfigError after start is logged there, never raised
        if args:
            print(f"entrypoint: unknown mode {args[0]!r} (use no argument for EKS mode, 'pool', 'serve' or 'serve-mme')", file=sys.stderr)
            return 2
        cmd = eks_command(env)
    except EngineConfigError as e:
        print(f"entrypoint: error: {e}", file=sys.stderr)
        return 2
    print(f"entrypoint: exec {shlex.join(cmd)}", file=sys.stderr, flush=True)
    os.execv(cmd[0], cmd)  # llama-server becomes PID 1 and handles SIGTERM itself
    return 1  # pragma: no cover


if __name__ == "__main__":
    sys.exit(main())
