"""`entrypoint.py pool`: one llama-server in router mode serving a pool's models from a preset INI (stdlib only).

    LLAMA_MODELS_PRESET  the preset INI (one section per model: `model = <gguf>`, ctx-size, parallel, threads;
                         `[*]` holds the defaults of every section)
    LLAMA_MODELS_MAX     how many models may be loaded at once (--models-max); the router unloads the least
                         recently used idle one to load another
    LLAMA_HOST/LLAMA_PORT, LLAMA_FLASH_ATTN, LLAMA_CACHE_REUSE, LLAMA_CACHE_RAM_MIB, LLAMA_EXTRA_ARGS as in EKS mode

Facts of the pinned router (llama.cpp in the llama-cpp-python 0.3.36 sdist; tests/runtime/engine/test_router_mode.py
checks them against the binary): the router's own command line is merged over every model's preset
(tools/server/server-models.cpp load_models: `preset.merge(base_preset)`), so per-model settings (ctx-size,
parallel, threads) must stay OFF the router's command line and live in the INI only; the router gives each child
its own --host/--port/--alias and drops --model/--models-* from what it passes on (server-models.cpp
unset_reserved_args, update_args). A preset key is a flag name without dashes or its env name
(common/preset.cpp get_map_key_opt), so `model`, `m` and `LLAMA_ARG_MODEL` all name the model file.
"""

from __future__ import annotations

import configparser
import shlex
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from inference_runtime.engine_flags import (
    DEFAULT_CACHE_REUSE,
    DEFAULT_FLASH_ATTN,
    DEFAULT_HOST,
    DEFAULT_PORT,
    FLASH_ATTN_VALUES,
    default_cache_ram_mib,
    memory_limit_bytes,
    serving_policy_args,
)
from inference_runtime.env import EngineConfigError, env_int, env_str
from inference_runtime.llama_flags import CACHE_RAM, MODEL, MODELS_MAX, MODELS_PRESET, THREADS

GLOBAL_SECTION = "*"  # the defaults of every model (README "Model presets"; common/preset.cpp load_from_ini)
TOP_SECTION = "default"  # keys before any [section] (common/preset.h COMMON_PRESET_DEFAULT_NAME)
# A preset names an option by its long or short flag without dashes or its variable (common/preset.cpp
# get_map_key_opt): `model`, `m` and `LLAMA_ARG_MODEL` all name the model file (llama_flags rows: LlamaOption.keys).


@dataclass(frozen=True)
class PresetModel:
    name: str  # the section: the `model` field of requests
    path: Path  # the GGUF file
    threads: str | None  # from the section or [*]; None: the child would use every CPU of the host


def read_preset(path: Path, text: str | None = None) -> dict[str, dict[str, str]]:
    """Sections of a llama-server preset INI, keys as written (case kept), `[*]` included. `text`: the file's
    content already read (the watcher checks exactly the bytes it hashed)."""
    if text is None:
        try:
            text = path.read_text()
        except OSError as e:
            raise EngineConfigError(f"{MODELS_PRESET.image_env} {path} cannot be read: {e.strerror or e}") from None
    # The engine's grammar: `[name]` headers, `key = value`, `;`/`#` comments (common/preset.cpp parse_ini_from_file).
    parser = configparser.ConfigParser(
        interpolation=None,
        strict=False,
        default_section="\0no-defaults",
        comment_prefixes=("#", ";"),
        inline_comment_prefixes=("#", ";"),
        delimiters=("=",),
    )
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # LLAMA_ARG_MODEL stays upper case
    try:
        parser.read_string(f"[{TOP_SECTION}]\n{text}", source=str(path))
    except configparser.Error as e:
        first = str(e).splitlines()[0]
        raise EngineConfigError(f"{MODELS_PRESET.image_env} {path} is not a valid preset INI: {first}") from None
    return {name: dict(parser[name]) for name in parser.sections()}


def _first(section: Mapping[str, str], keys: tuple[str, ...]) -> str | None:
    return next((section[k].strip() for k in keys if k in section and section[k].strip()), None)


def check_preset(path: Path, cwd: Path | None = None, text: str | None = None) -> list[PresetModel]:
    """Every model of the preset with the file it names; else one line naming the section (a user error: an INI
    that does not parse, a section without `model = ...`, no model at all). Whether each file is there yet is not
    checked here: the catalog copies a pool's models after the deploy, so a section may name a file that lands
    later (pool_landing.py; the supervisor serves only the landed ones)."""
    sections = read_preset(path, text)
    defaults = sections.get(GLOBAL_SECTION, {})
    base = cwd or Path.cwd()  # the router passes `--model <value>` on to a child in its own working directory
    models = []
    for name, section in sections.items():
        if name == GLOBAL_SECTION or (name == TOP_SECTION and set(section) <= {"version"}):
            continue
        value = _first(section, MODEL.keys) or _first(defaults, MODEL.keys)
        if value is None:
            raise EngineConfigError(
                f"{MODELS_PRESET.image_env} {path}: section [{name}] has no `model = <path of the .gguf>`"
            )
        model = Path(value) if Path(value).is_absolute() else base / value
        models.append(PresetModel(name, model, _first(section, THREADS.keys) or _first(defaults, THREADS.keys)))
    if not models:
        raise EngineConfigError(f"{MODELS_PRESET.image_env} {path} has no model section")
    return models


@dataclass(frozen=True)
class PoolCommand:
    """A pool replica's router: its preset, the models it names, the router's command line. (Not the library's
    cpu_inference.sizing PoolPlan, which sizes a pool.)"""

    preset: Path
    models: list[PresetModel]
    command: list[str]

    def router_command(self, preset: Path) -> list[str]:
        """The command over another preset file: the supervisor's effective copy (only the landed models)."""
        at = self.command.index(MODELS_PRESET.flag) + 1
        return [*self.command[:at], str(preset), *self.command[at + 1 :]]


def pool_command(env: Mapping[str, str], binary: str, *, memory_limit: int | None = None) -> PoolCommand:
    """The router's argv for a pool replica. `memory_limit` replaces the cgroup probe (tests)."""
    preset_env, max_env = MODELS_PRESET.image_env, MODELS_MAX.image_env
    raw = env_str(env, preset_env, "")
    if not raw:
        raise EngineConfigError(f"pool mode needs {preset_env} (the preset INI, one section per model)")
    preset = Path(raw)
    # The engine's 0 means "no limit": a pool would load every model of the preset and run out of memory.
    models_max = env_int(env, max_env, None, minimum=1, hint="models loaded at once")
    if models_max is None:
        raise EngineConfigError(f"{max_env} must be an integer >= 1 (models loaded at once), got ''")
    models = check_preset(preset)
    port = env_int(env, "LLAMA_PORT", DEFAULT_PORT)
    if not 0 < port < 65536:
        raise EngineConfigError(f"LLAMA_PORT must be in 1..65535, got {port}")
    flash_attn = env_str(env, "LLAMA_FLASH_ATTN", DEFAULT_FLASH_ATTN).lower()
    if flash_attn not in FLASH_ATTN_VALUES:
        raise EngineConfigError(f"LLAMA_FLASH_ATTN must be one of {', '.join(FLASH_ATTN_VALUES)}, got {flash_attn!r}")
    cache_reuse = env_int(env, "LLAMA_CACHE_REUSE", DEFAULT_CACHE_REUSE)
    cache_ram = env_int(env, CACHE_RAM.image_env, None)
    sections = read_preset(preset)
    preset_sets_cache_ram = any(_first(s, CACHE_RAM.keys) for s in sections.values())
    if cache_ram is None and not preset_sets_cache_ram:
        # Each loaded model is its own process with its own host-RAM prompt cache: share the image default out.
        limit = memory_limit if memory_limit is not None else memory_limit_bytes()
        per_pod = default_cache_ram_mib(limit)
        cache_ram = None if per_pod is None else per_pod // models_max
    command = [
        binary,
        "--host",
        env_str(env, "LLAMA_HOST", DEFAULT_HOST),
        "--port",
        str(port),
        *MODELS_PRESET.args(str(preset)),
        *MODELS_MAX.args(models_max),
        "--models-autoload",  # an unloaded model loads on its first request (the router's default, made explicit)
        # Not --threads/--ctx-size/--parallel: on the router's command line they would override every model's preset.
        *serving_policy_args(flash_attn, cache_reuse, cache_ram),
        *shlex.split(env.get("LLAMA_EXTRA_ARGS", "")),
    ]
    unthreaded = [m.name for m in models if m.threads is None]
    if unthreaded:
        print(
            f"entrypoint: warning: preset sections without `threads` (in the section or [*]) run with every CPU of "
            f"the node, not the pod's: {', '.join(unthreaded[:5])}{' ...' if len(unthreaded) > 5 else ''}",
            file=sys.stderr,
        )
    return PoolCommand(preset, models, command)
