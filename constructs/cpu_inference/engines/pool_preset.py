"""The llama-server preset INI of a multi-model pool (tools/server/README.md "Model presets"): PoolModel,
render_preset and pool_preset. Pure (no cdk8s): k8s/charts/model_pool_chart.py renders the pool's ConfigMap with it and
`cpu-inference local` the preset of its local pool, without starting the jsii runtime. Why `[*]` holds
`load-mode = none`: k8s/charts/model_pool_chart.py (Mountpoint for S3 drops a file's page cache on every open). Why
`fit = off`: every cold load of a pooled model starts a child, and `--fit` (on by default) first runs a dry load to fit
unset arguments to device memory — on a CPU-only build with ctx-size set per section it can change nothing
(common/fit.cpp: no devices, n_ctx not auto), and it was a third of a cold load's cost above its floor
(benchmarks/cold_load.py: the child's load 0.60× on SmolLM2-135M, 0.72× on Gemma-3-270M; cold p50 0.95×, 0.69×)."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from inference_runtime.llama_flags import (
    FIT,
    LOAD_MODE,
    LORA,
    LORA_INIT_WITHOUT_APPLY,
    MODEL_KEY,
    ON_DEMAND_CHILD_FIT,
    POOLED_SIZED,
    pooled_model_flags,
)
from inference_runtime.lora import lora_preset, path_problem

MODEL_DIR = "/models"  # where a replica reads the weights: the volume's mount (k8s/workloads/engine_container.py)
# The llama-server router's own defaults a preset can name (README "Model presets": keys are flags without dashes).
PRESET_VERSION = "1"
POOL_DEFAULTS = (
    (LOAD_MODE.key, "none"),
    (FIT.key, ON_DEMAND_CHILD_FIT),
)  # the `[*]` keys of every pool replica (docstring)
_OPTION = re.compile(r"^[a-z][a-z0-9-]{0,63}$")
_SECTION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")  # no ':' (a tag separator for the router), no ']'
# A preset-only key of the pin (common/arg.cpp:4745 common_params_add_preset_options: "in server router mode, autoload
# this model on startup"; never passed to the child: common/preset.cpp:45 to_args skips is_preset_only). The router
# reads it only on the FIRST load of its model list (tools/server/server-models.cpp:841-856 load_models: each section
# with a truthy value, common_arg_utils::is_truthy "true", is loaded once the server listens, server.cpp:440
# load_startup_models) and THROWS "number of models to load on startup (%zu) exceeds models_max (%d)" when there are
# more than --models-max: the replica would crash-loop, hence preload_problem. On a reload (server-models.cpp:955) it
# is not honoured: a section added later (a model whose copy lands after the start: the pool supervisor gives the
# router only the landed sections, containers/llama-server/pool_landing.py effective_preset, so such a model takes no
# place at start) is listed unloaded and loads on its first request. The key is compared on reload like any option
# (server-models.cpp:800 preset_options_for_compare): adding or removing it on a running model unloads that model once.
LOAD_ON_STARTUP = "load-on-startup"


@dataclass(frozen=True)
class PoolModel:
    """One model of a pool. name: the `model` clients send (the INI section). path: the GGUF's key under the
    farm prefix (`<name>/<idhash>/<file>.gguf`, catalog.gguf_key without `farm/`), read at /models/<path>.
    ctx_size / parallel / threads: the child llama-server's --ctx-size / --parallel / --threads (pool plan).
    options: more keys of its section (engines.tasks.task_options: `embeddings = true` for an embedding model).
    preload: load it when the replica starts (`load-on-startup = true`, LOAD_ON_STARTUP), not on its first request.
    adapters: its LoRA adapters' keys under the farm prefix (like `path`), in id order: its section gets
    `lora = /models/<a>,/models/<b>` and `lora-init-without-apply = true` (inference_runtime/lora.py); the replica's
    supervisor keeps only the adapters whose file has landed (containers/llama-server/pool_landing.py).
    Its section's flags: `flags()` (llama_flags.pooled_model_flags, as its engine.json on SageMaker; never preload,
    never adapters: SageMaker does not serve them)."""

    name: str
    path: str
    ctx_size: int
    parallel: int = 1
    threads: int = 1
    options: Mapping[str, str] = field(default_factory=dict)
    preload: bool = False
    adapters: tuple[str, ...] = ()

    def validate(self) -> None:
        where = f"PoolModel {self.name!r}"
        if not _SECTION.match(self.name):
            raise ValueError(
                f"{where}: name must be 1-128 of letters, digits, '.', '_', '-' starting with a letter or digit "
                "(it is a preset INI section and the request's `model`)"
            )
        if _bad_key(self.path):
            raise ValueError(
                f"{where}: path must be a relative key under the farm prefix ending in .gguf (e.g. {self.name}/<idhash>/model.gguf), got {self.path!r}"
            )
        for key in self.adapters:
            if _bad_key(key) or path_problem(key):
                raise ValueError(
                    f"{where}: adapters must be relative keys under the farm prefix ending in .gguf, without ',' "
                    f"(e.g. my-adapter/<idhash>/adapter.gguf), got {key!r}"
                )
        if len(set(self.adapters)) != len(self.adapters):
            raise ValueError(f"{where}: adapters lists a file twice: {list(self.adapters)}")
        for key in ("ctx_size", "parallel", "threads"):
            if getattr(self, key) < 1:
                raise ValueError(f"{where}: {key} must be ≥ 1, got {getattr(self, key)}")
        reserved = (MODEL_KEY, LOAD_ON_STARTUP, LORA.key, LORA_INIT_WITHOUT_APPLY.key, *(o.key for o in POOLED_SIZED))
        for key, value in self.options.items():
            if not _OPTION.match(key) or key in reserved or any(c in str(value) for c in "\n\r"):
                raise ValueError(
                    f"{where}: options key {key!r} must be a llama-server flag without dashes other than {'/'.join(reserved)}, one-line value"
                )

    def flags(self) -> dict[str, str]:
        """Its llama-server flags (its preset section's keys besides `model`)."""
        return pooled_model_flags(
            ctx_size=self.ctx_size, parallel=self.parallel, threads=self.threads, options=self.options
        )


def _bad_key(key: str) -> bool:
    return key.startswith("/") or ".." in key.split("/") or not key.endswith(".gguf") or any(c in key for c in "\n\r;#")


def render_preset(
    models: Sequence[PoolModel], *, model_dir: str = MODEL_DIR, defaults: Mapping[str, str] | None = None
) -> str:
    """The llama-server preset INI of a pool (tools/server/README.md "Model presets"): `[*]` holds `defaults`
    plus the most common value of each sized option (llama_flags.POOLED_SIZED); each model's section holds
    `model = <model_dir>/<path>` and only the flags (PoolModel.flags) whose value differs from `[*]` (a section
    overrides `[*]`), `load-on-startup = true` for a model with preload, and its adapters' `lora` keys."""
    flags = [m.flags() for m in models]
    sized = [o.key for o in POOLED_SIZED]
    base: dict[str, str] = dict(defaults or {})
    for key in sized:
        ((common, _),) = Counter(f[key] for f in flags).most_common(1)
        base[key] = common
    lines = [f"version = {PRESET_VERSION}", "[*]", *(f"{k} = {v}" for k, v in base.items())]
    for m, own in zip(models, flags, strict=True):
        lines += [f"[{m.name}]", f"{MODEL_KEY} = {model_dir.rstrip('/')}/{m.path}"]
        lines += [f"{key} = {value}" for key, value in own.items() if key not in sized or value != base[key]]
        if m.preload:
            lines.append(f"{LOAD_ON_STARTUP} = true")
        root = model_dir.rstrip("/")
        lines += [f"{key} = {value}" for key, value in lora_preset([f"{root}/{a}" for a in m.adapters]).items()]
    return "\n".join(lines) + "\n"


def pool_preset(models: Sequence[PoolModel], *, model_dir: str = MODEL_DIR) -> str:
    """The preset a pool replica runs: render_preset with the pool's `[*]` defaults (POOL_DEFAULTS). One definition
    for the chart and `cpu-inference local` (which moves `model_dir` to a local directory)."""
    return render_preset(models, model_dir=model_dir, defaults=dict(POOL_DEFAULTS))


def preload_problem(preload: Sequence[str], members: Sequence[str], models_max: int, *, pool: str) -> str | None:
    """Why pool `pool` cannot preload `preload` (the names of its hot models), or None: each must be one of its
    `members`, once, and at most `models_max` of them (more crash the router at start: LOAD_ON_STARTUP)."""
    twice = sorted(n for n, k in Counter(preload).items() if k > 1)
    if twice:
        return f"names {twice} more than once — list each model once"
    known = set(members)
    strangers = [n for n in preload if n not in known]
    if strangers:
        return f"{strangers} are not models of pool {pool} — list only models that pool {pool} serves"
    if len(preload) > models_max:
        return (
            f"{len(preload)} models to load at start but pool {pool} holds {models_max} at once (models_max; the engine "
            f"would refuse to start) — preload at most {models_max}, or raise models_max or memory"
        )
    return None


def with_preload(models: Sequence[PoolModel], preload: Sequence[str]) -> tuple[PoolModel, ...]:
    """`models` with preload set on the named ones (checked by the caller: preload_problem)."""
    hot = set(preload)
    return tuple(replace(m, preload=m.name in hot) for m in models)
