#!/usr/bin/env python3
"""Container entrypoint for llama-server.

    entrypoint.py            EKS mode: exec llama-server on LLAMA_HOST:LLAMA_PORT (0.0.0.0:8080)
    entrypoint.py serve      SageMaker mode: llama-server on loopback + the /ping, /invocations adapter;
                             started as root (SageMaker's way), it drops to LLAMA_RUN_AS first (privileges.py)
    entrypoint.py pool       EKS pools: llama-server in router mode over LLAMA_MODELS_PRESET, at most
                             LLAMA_MODELS_MAX models loaded (pool_mode.py); models are served as their files
                             land and a changed preset is applied in place, without a restart (pool_supervisor.py);
                             GET /status and /metrics on LLAMA_POOL_STATUS_PORT (pool_status_server.py)
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

import pool_mode
from inference_runtime.engine_flags import (
    EngineConfig,
    available_cpus,
    config_from_env,
    llama_server_args,
    memory_limit_bytes,
    on_loopback,
)
from inference_runtime.env import EngineConfigError, env_float, env_int
from inference_runtime.llama_flags import THREADS
from inference_runtime.privileges import drop_privileges
from inference_runtime.sagemaker_adapter import (
    SIGKILL_AFTER_SECONDS as SIGKILL_AFTER_SECONDS,  # re-exported: the lifecycle tests derive from it
)
from inference_runtime.sagemaker_adapter import (
    AdapterSettings,
    SageMakerPlan,
    adapter_settings,
    engine_port,
    max_drain_seconds,
)
from mme_adapter import ChildDefaults, MultiModelAdapter, child_defaults
from pool_supervisor import pool_settings, supervise

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


def eks_command(env: Mapping[str, str], **probe: int | None) -> list[str]:
    """The llama-server argv for EKS mode (`probe`: cpus=, memory_limit= instead of reading cgroups)."""
    cfg = config_from_env(env, model_dir_default=EKS_MODEL_DIR, **probe)
    if cfg.lora_missing:  # served without them: the gateway answers 503 for these adapters (engine_flags LLAMA_LORA)
        print(
            f"entrypoint: warning: {len(cfg.lora_missing)} adapter file(s) of LLAMA_LORA not there yet, served without "
            f"them until a restart: {', '.join(cfg.lora_missing[:5])}{' ...' if len(cfg.lora_missing) > 5 else ''}",
            file=sys.stderr,
        )
    return [engine_binary(env), *llama_server_args(cfg)]


def pool_command(env: Mapping[str, str], *, memory_limit: int | None = None) -> list[str]:
    """The router's argv for an EKS pool replica (one line naming the preset section whose model is missing)."""
    return pool_mode.pool_command(env, engine_binary(env), memory_limit=memory_limit).command


def sagemaker_plan(env: Mapping[str, str], **probe: int | None) -> SageMakerPlan[EngineConfig]:
    model_dir = env.get("SM_MODEL_DIR", "").strip() or SAGEMAKER_MODEL_DIR
    cfg = config_from_env({**env, "MODEL_DIR": model_dir}, model_dir_default=model_dir, **probe)
    adapter = adapter_settings(env, engine_stop_seconds=ENGINE_STOP_SECONDS)
    engine = on_loopback(cfg, engine_port(env, "LLAMA_ENGINE_PORT", adapter.port))
    queue_depth = env_int(env, "LLAMA_QUEUE_DEPTH", cfg.parallel, minimum=0)
    return SageMakerPlan(
        engine=engine,
        engine_port=engine.port,
        command=[engine_binary(env), *llama_server_args(engine)],
        adapter=adapter,
        max_in_flight=cfg.parallel + queue_depth,
        # LLAMA_LORA_MANIFEST: the adapters the command loads (engine_flags), selected by name at /invocations.
        adapters=cfg.bundle.adapters if cfg.bundle is not None else (),
        model_name=cfg.alias,
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
        return self.adapter.shutdown_seconds  # children stop in parallel


def is_multi_model(env: Mapping[str, str]) -> bool:
    """SageMaker sets SAGEMAKER_MULTI_MODEL=true in a multi-model endpoint's container ("SageMaker AI also
    injects an environment variable into the container",
    docs.aws.amazon.com/sagemaker/latest/dg/build-multi-model-build-container.html) and still runs it as
    `docker run <image> serve`."""
    return env.get("SAGEMAKER_MULTI_MODEL", "").strip().lower() == "true"


def multi_model_plan(
    env: Mapping[str, str], *, cpus: int | None = None, memory_limit: int | None = None
) -> MultiModelPlan:
    """`serve-mme` from the env contract; per-model settings come from each model's engine.json on load."""
    adapter = adapter_settings(env, engine_stop_seconds=ENGINE_STOP_SECONDS)
    threads = env_int(env, THREADS.image_env, 0) or (cpus if cpus is not None else available_cpus())
    children = child_defaults(env, binary=engine_binary(env), threads=threads)
    budget = env_int(env, "MME_MEMORY_BUDGET_BYTES", 0, minimum=0) or (
        memory_limit if memory_limit is not None else memory_limit_bytes()
    )
    if not budget or budget < 0:
        raise EngineConfigError("no memory limit found (cgroup memory.max, /proc/meminfo): set MME_MEMORY_BUDGET_BYTES")
    load_timeout = env_float(env, "MME_LOAD_TIMEOUT_SECONDS", 300.0)
    if load_timeout <= 0:
        raise EngineConfigError(f"MME_LOAD_TIMEOUT_SECONDS must be > 0, got {load_timeout:g}")
    page_size = env_int(env, "MME_LIST_PAGE_SIZE", 100, minimum=1)
    return MultiModelPlan(adapter, children, budget, load_timeout, page_size)


async def serve_multi_model(plan: MultiModelPlan) -> int:
    """Run the multi-model endpoint until SIGTERM: drain, cut what is left, stop every child, exit 0."""
    a = plan.adapter
    adapter = MultiModelAdapter(
        plan.children,
        memory_budget=plan.memory_budget,
        retry_after=a.retry_after,
        pool_idle_seconds=a.pool_idle_seconds,
        generation_budget=a.generation_budget,
        load_timeout=plan.load_timeout,
        engine_stop_seconds=ENGINE_STOP_SECONDS,
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


async def serve(env: Mapping[str, str], plan: SageMakerPlan[EngineConfig] | None = None) -> int:
    """Run SageMaker mode until SIGTERM (exit 0) or until llama-server dies (its exit code, so the
    platform replaces the container instead of answering 503 forever)."""
    plan = plan or sagemaker_plan(env)
    return await plan.serve(plan.make_adapter(), engine="llama-server")


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
            cmd = (
                sagemaker_plan(env).command
                if mode == ["serve"]
                else pool_command(env)
                if mode == ["pool"]
                else eks_command(env)
            )
            print(shlex.join(cmd))
            return 0
        if args[:1] == ["pool"]:
            # Not exec'd: the router runs as a child so a changed preset is applied in place (pool_supervisor.py).
            pool, settings = pool_mode.pool_command(env, engine_binary(env)), pool_settings(env)
            return supervise(pool, env, settings)  # EngineConfigError after start is logged there, never raised
        if args:
            print(
                f"entrypoint: unknown mode {args[0]!r} (use no argument for EKS mode, 'pool', 'serve' or 'serve-mme')",
                file=sys.stderr,
            )
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
