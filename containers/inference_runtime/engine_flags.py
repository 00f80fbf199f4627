"""The llama-server command line, computed from the engine env contract (pure; stdlib only).

Imported by the container entrypoint, the cdk8s chart and the tests, so the flags a pod or an endpoint
runs with are computed in exactly one place. Contract (see README.md):

    LLAMA_THREADS        threads for decode and prompt processing (default: the CPUs this process may use:
                         cgroup cpu.max quota, else the affinity mask)
    LLAMA_PARALLEL       parallel slots (continuous batching); default 1
    LLAMA_CTX_PER_SLOT   context per slot; --ctx-size = LLAMA_PARALLEL x LLAMA_CTX_PER_SLOT because
                         llama-server splits --ctx-size evenly across slots (n_ctx_seq = n_ctx / n_seq_max)
    LLAMA_FLASH_ATTN     on | off | auto (default auto: on wherever the CPU backend supports the model)
    LLAMA_CACHE_REUSE    min chunk (tokens) reused from the prompt cache by KV shifting; 0 disables
    LLAMA_CACHE_RAM_MIB  host-RAM prompt cache cap (default: 5% of the memory limit, at most 8192)
    LLAMA_MODEL_ALIAS    model name in API responses (default: the GGUF file name without .gguf)
    LLAMA_EXTRA_ARGS     extra llama-server flags (shell-quoted), appended last
    MODEL_PATH           the GGUF file; else the single model under MODEL_DIR
    LLAMA_LORA           LoRA adapter GGUFs over the model, comma-separated, in id order (inference_runtime/lora.py):
                         --lora <them> --lora-init-without-apply. From the first path whose file is not there yet
                         on, they are left out (named on stderr; ids are positions, so the list only ever grows at
                         its end): the model serves, the gateway sees them missing from GET /lora-adapters and
                         answers 503 for them; a restart picks them up once they have landed.
    LLAMA_LORA_MANIFEST  a bundle's manifest (SageMaker: /opt/ml/model/lora.json, the catalog's `lora` layout;
                         inference_runtime/lora.py read_manifest): the base GGUF it names is the model (MODEL_PATH, if
                         set, must be that file) and its adapters, in its order, are --lora <them>
                         --lora-init-without-apply; every file must be there. Not with LLAMA_LORA.
"""

from __future__ import annotations

import math
import os
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from .env import EngineConfigError, env_int, env_str
from .llama_flags import CACHE_RAM, CTX_PER_SLOT_ENV, CTX_SIZE, FIT, LORA, MODEL, PARALLEL, THREADS, THREADS_BATCH
from .lora import MANIFEST_ENV, LoraBundle, lora_args, manifest_from_env, path_problem, split_paths

ENGINE_DEFAULT_CACHE_RAM_MIB = 8192  # llama-server's own default (common.h cache_ram_mib)
CACHE_RAM_FRACTION = 0.05  # of the memory limit: the sizing leaves little slack beyond weights + KV
FLASH_ATTN_VALUES = ("on", "off", "auto")
FIT_VALUES = ("on", "off")  # common/arg.cpp --fit: is_truthy / is_falsey (these two are its own spelling)
_SHARD = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$")

# The engine's defaults: the one definition (EngineConfig, config_from_env, the multi-model adapter's ChildDefaults,
# the pool router's command line and the library's multi-model props take them from here).
DEFAULT_PARALLEL = 1  # one slot: a dedicated engine's sizing sets LLAMA_PARALLEL
DEFAULT_CTX_PER_SLOT = 4096
DEFAULT_HOST = "0.0.0.0"
DEFAULT_PORT = 8080
DEFAULT_FLASH_ATTN = "auto"  # on wherever the CPU backend supports the model
DEFAULT_CACHE_REUSE = 256  # tokens: the smallest prompt chunk worth reusing by KV shifting


@dataclass(frozen=True)
class EngineConfig:
    model: str
    threads: int
    parallel: int = DEFAULT_PARALLEL
    ctx_per_slot: int = DEFAULT_CTX_PER_SLOT
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    flash_attn: str = DEFAULT_FLASH_ATTN
    cache_reuse: int = DEFAULT_CACHE_REUSE
    cache_ram_mib: int | None = None  # None: the engine's default
    alias: str | None = None
    fit: str | None = None  # --fit; None: the engine's default (on). The multi-model adapter's children set "off".
    extra_args: tuple[str, ...] = field(default_factory=tuple)
    lora: tuple[str, ...] = ()  # adapter GGUFs in id order (LLAMA_LORA): --lora ... --lora-init-without-apply
    lora_missing: tuple[str, ...] = ()  # LLAMA_LORA paths left out: not there (yet); the entrypoint names them
    bundle: LoraBundle | None = None  # LLAMA_LORA_MANIFEST read: its adapters are `lora` (names: the SageMaker adapter)

    @property
    def ctx_size(self) -> int:
        return self.parallel * self.ctx_per_slot

    def validate(self) -> None:
        if self.threads < 1:
            raise EngineConfigError(f"{THREADS.image_env} must be >= 1, got {self.threads}")
        if self.parallel < 1:
            raise EngineConfigError(f"{PARALLEL.image_env} must be >= 1, got {self.parallel}")
        if self.ctx_per_slot < 64:
            raise EngineConfigError(f"{CTX_PER_SLOT_ENV} must be >= 64, got {self.ctx_per_slot}")
        if self.flash_attn not in FLASH_ATTN_VALUES:
            raise EngineConfigError(
                f"LLAMA_FLASH_ATTN must be one of {', '.join(FLASH_ATTN_VALUES)}, got {self.flash_attn!r}"
            )
        if self.cache_reuse < 0:
            raise EngineConfigError(f"LLAMA_CACHE_REUSE must be >= 0, got {self.cache_reuse}")
        if self.cache_ram_mib is not None and self.cache_ram_mib < -1:
            raise EngineConfigError(f"{CACHE_RAM.image_env} must be >= -1, got {self.cache_ram_mib}")
        if self.fit is not None and self.fit not in FIT_VALUES:
            raise EngineConfigError(f"{FIT.flag} must be one of {', '.join(FIT_VALUES)}, got {self.fit!r}")
        if not 0 < self.port < 65536:
            raise EngineConfigError(f"port must be in 1..65535, got {self.port}")
        for path in self.lora:
            problem = path_problem(path)
            if problem:
                raise EngineConfigError(f"{LORA.image_env}: each path {problem}")


def llama_server_args(cfg: EngineConfig) -> list[str]:
    """Flags for llama-server (without the binary). Every flag exists in the pinned llama.cpp."""
    cfg.validate()
    threads = str(cfg.threads)
    args = [
        *MODEL.args(cfg.model),
        "--host",
        cfg.host,
        "--port",
        str(cfg.port),
        *THREADS.args(threads),
        *THREADS_BATCH.args(threads),
        *PARALLEL.args(cfg.parallel),
        *CTX_SIZE.args(cfg.ctx_size),
        *serving_policy_args(cfg.flash_attn, cfg.cache_reuse, cfg.cache_ram_mib),
    ]
    if cfg.alias:
        args += ["--alias", cfg.alias]
    if cfg.fit is not None:
        args += FIT.args(cfg.fit)
    return args + lora_args(cfg.lora) + list(cfg.extra_args)


def serving_policy_args(flash_attn: str, cache_reuse: int, cache_ram_mib: int | None) -> list[str]:
    """The flags every llama-server of the image runs with, whatever the model (one server, a router's
    children, a multi-model endpoint's children)."""
    args = [
        "--cont-batching",
        "--metrics",  # llamacpp:requests_processing / requests_deferred drive KEDA
        "--jinja",  # chat template from the GGUF
        "--flash-attn",
        flash_attn,
        "--cache-prompt",
        "--cache-reuse",
        str(cache_reuse),
        "--no-webui",
        "--no-slots",  # /slots would expose other users' prompts
        "--offline",  # the model is local; never reach out to a hub
    ]
    if cache_ram_mib is not None:
        args += CACHE_RAM.args(cache_ram_mib)
    return args


# --- what the container is given -------------------------------------------------------------------


def cgroup_cpu_limit(root: Path = Path("/sys/fs/cgroup")) -> float | None:
    """CPUs allowed by the CFS quota (cgroup v2 cpu.max, else v1 cfs_quota/period); None if unlimited."""
    try:
        quota, period = (root / "cpu.max").read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    for sub in ("cpu", "cpu,cpuacct", "cpuacct,cpu"):
        try:
            quota_us = int((root / sub / "cpu.cfs_quota_us").read_text())
            period_us = int((root / sub / "cpu.cfs_period_us").read_text())
        except (OSError, ValueError):
            continue
        return None if quota_us <= 0 else quota_us / period_us
    return None


def available_cpus(root: Path = Path("/sys/fs/cgroup"), affinity: int | None = None) -> int:
    """Threads to run: the quota rounded down (a thread over quota gets CFS-throttled and stalls the
    others at every barrier), never more than the CPUs in the affinity mask, at least 1."""
    n_aff = affinity if affinity is not None else len(os.sched_getaffinity(0))
    quota = cgroup_cpu_limit(root)
    if quota is None:
        return max(1, n_aff)
    return max(1, min(n_aff, math.floor(quota + 1e-9)))


def memory_limit_bytes(root: Path = Path("/sys/fs/cgroup"), meminfo: Path = Path("/proc/meminfo")) -> int | None:
    """The cgroup memory limit (v2 memory.max, v1 limit_in_bytes), else the machine's MemTotal."""
    candidates = [root / "memory.max", root / "memory" / "memory.limit_in_bytes"]
    for path in candidates:
        try:
            text = path.read_text().strip()
        except OSError:
            continue
        if text != "max" and text.isdigit() and int(text) < 1 << 60:  # v1 "unlimited" is ~2^63
            return int(text)
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def default_cache_ram_mib(limit_bytes: int | None) -> int | None:
    if limit_bytes is None:
        return None
    return max(0, min(ENGINE_DEFAULT_CACHE_RAM_MIB, int(limit_bytes * CACHE_RAM_FRACTION) // (1024 * 1024)))


def find_model(model_path: str | None, model_dir: str | None) -> Path:
    """MODEL_PATH if given; else the one GGUF under MODEL_DIR (the first shard of a split model;
    multimodal projectors are not models)."""
    if model_path:
        path = Path(model_path)
        if not path.is_file():
            raise EngineConfigError(f"MODEL_PATH {path} is not a file")
        return path
    if not model_dir:
        raise EngineConfigError("set MODEL_PATH or MODEL_DIR")
    root = Path(model_dir)
    if not root.is_dir():
        raise EngineConfigError(f"MODEL_DIR {root} is not a directory")
    ggufs = sorted(p for p in root.rglob("*.gguf") if p.is_file() and not p.name.lower().startswith("mmproj"))
    shards = [p for p in ggufs if _SHARD.search(p.name)]
    firsts = [p for p in shards if _SHARD.search(p.name).group(1) == "00001"]  # type: ignore[union-attr]
    if shards and len(firsts) == 1 and len(ggufs) == len(shards):
        return firsts[0]
    if len(ggufs) != 1:
        found = ", ".join(str(p.relative_to(root)) for p in ggufs) or "none"
        raise EngineConfigError(f"MODEL_DIR {root} must hold exactly one .gguf model (found: {found}); set MODEL_PATH")
    return ggufs[0]


def config_from_env(
    env: Mapping[str, str],
    *,
    model_dir_default: str = "/models",
    cpus: int | None = None,
    memory_limit: int | None = None,
) -> EngineConfig:
    """EKS-mode config from the env contract. `cpus` / `memory_limit` default to what this process is given."""
    bundle = manifest_from_env(env)
    if bundle is not None:
        model = _bundle_model(env, bundle)
    else:
        model = find_model(env.get("MODEL_PATH"), env.get("MODEL_DIR") or model_dir_default)
    threads = env_int(env, THREADS.image_env, None)
    if threads is None:
        threads = cpus if cpus is not None else available_cpus()
    cache_ram = env_int(env, CACHE_RAM.image_env, None)
    if cache_ram is None:
        cache_ram = default_cache_ram_mib(memory_limit if memory_limit is not None else memory_limit_bytes())
    adapters = bundle.paths if bundle is not None else split_paths(env.get(LORA.image_env, ""))
    # The landed PREFIX: ids are positions, so a list may only grow at its end (pool_landing.landed_prefix's reason).
    landed = next((i for i, p in enumerate(adapters) if not Path(p).is_file()), len(adapters))
    cfg = EngineConfig(
        model=str(model),
        threads=threads,
        parallel=env_int(env, PARALLEL.image_env, DEFAULT_PARALLEL),
        ctx_per_slot=env_int(env, CTX_PER_SLOT_ENV, DEFAULT_CTX_PER_SLOT),
        host=env_str(env, "LLAMA_HOST", DEFAULT_HOST),
        port=env_int(env, "LLAMA_PORT", DEFAULT_PORT),
        flash_attn=env_str(env, "LLAMA_FLASH_ATTN", DEFAULT_FLASH_ATTN).lower(),
        cache_reuse=env_int(env, "LLAMA_CACHE_REUSE", DEFAULT_CACHE_REUSE),
        cache_ram_mib=cache_ram,
        alias=env.get("LLAMA_MODEL_ALIAS", "").strip() or model.name.removesuffix(".gguf"),
        extra_args=tuple(shlex.split(env.get("LLAMA_EXTRA_ARGS", ""))),
        lora=adapters[:landed],
        lora_missing=adapters[landed:],
        bundle=bundle,
    )
    cfg.validate()
    return cfg


def _bundle_model(env: Mapping[str, str], bundle: LoraBundle) -> Path:
    """The model of a LLAMA_LORA_MANIFEST bundle: the file its manifest names (MODEL_PATH, when set, must be it)."""
    if env.get(LORA.image_env, "").strip():
        raise EngineConfigError(
            f"set {MANIFEST_ENV} or {LORA.image_env}, not both: the manifest lists the adapters of its bundle"
        )
    model = Path(bundle.model)
    explicit = env.get("MODEL_PATH", "").strip()
    if explicit and Path(explicit).resolve() != model.resolve():
        raise EngineConfigError(
            f"MODEL_PATH {explicit} is not the model {model.name} of {MANIFEST_ENV} {bundle.manifest}: "
            "unset MODEL_PATH, or point it at that file"
        )
    return Path(explicit) if explicit else model


def on_loopback(cfg: EngineConfig, port: int) -> EngineConfig:
    """The same engine bound to 127.0.0.1:port (SageMaker mode: only the adapter faces the network)."""
    return replace(cfg, host="127.0.0.1", port=port)
