"""The llama-server options the library and the images render, one row each, and the one definition of a pooled
model's flags. Stdlib only: the llama-server image runs it (engine_flags, mme_adapter, pool_mode) and the library
imports it (sizing, charts, endpoints, catalog, CLI) — the same rows on both sides.

A llama-server option takes these spellings, all derived from one row here:
- the command line: its long flag (`--ctx-size 2048`; a switch is bare: `--embeddings`) or its short one (`-c`);
- llama-server's own environment variable (common/arg.cpp `.set_env(...)`, e.g. LLAMA_ARG_CTX_SIZE; a switch is
  on when the variable is truthy: common_params_parse_ex, `handler_void && is_truthy(value)`);
- a preset INI key and an engine.json key: the long flag without its dashes (tools/server/README.md "Model
  presets": "Keys within a section correspond to command-line arguments (without leading dashes)"; common/preset.cpp
  load_from_ini; the multi-model adapter reads engine.json the same way: containers/llama-server/mme_adapter.py
  read_engine_json), value "true" for a switch. A preset also accepts the short flag without its dash and the
  variable (common/preset.cpp get_map_key_opt maps every name of an option and its env): `keys`;
- where the image's entrypoint has its own variable for it (inference_runtime/engine_flags.py, the env
  contract: LLAMA_THREADS becomes --threads and --threads-batch), that name.
Rows and env names from the pinned llama.cpp (llama-cpp-python 0.3.36 sdist, vendor/llama.cpp/common/arg.cpp;
tests/test_one_definition_engines.py::test_every_row_is_the_pinned_llama_servers checks each against it):
    {"-m", "--model"} .set_env("LLAMA_ARG_MODEL")              {"-tb", "--threads-batch"} (no env)
    {"-t", "--threads"} .set_env("LLAMA_ARG_THREADS")          {"-c", "--ctx-size"} .set_env("LLAMA_ARG_CTX_SIZE")
    {"-np", "--parallel"} .set_env("LLAMA_ARG_N_PARALLEL")     {"-lm", "--load-mode"} .set_env("LLAMA_ARG_LOAD_MODE")
    {"-cram", "--cache-ram"} .set_env("LLAMA_ARG_CACHE_RAM")    {"-fit", "--fit"} .set_env("LLAMA_ARG_FIT")
    {"--embedding", "--embeddings"} .set_env("LLAMA_ARG_EMBEDDINGS")
    {"--rerank", "--reranking"} .set_env("LLAMA_ARG_RERANKING")
    {"--lora"} (no env)                                        {"--lora-init-without-apply"} (no env, a switch)

A pooled model (a farm pool's preset section on EKS and under `cpu-inference local`, its engine.json in a SageMaker
multi-model tarball) runs with `pooled_model_flags`: change a pooled model's llama-server flags there."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

TRUE = "true"  # a switch that is on, in a preset INI, an engine.json or llama-server's own environment variable


@dataclass(frozen=True)
class LlamaOption:
    """One llama-server option. flag: its long form. arg_env: llama-server's own variable ("" when it has none).
    image_env: the image entrypoint's variable for it ("" when it has none). switch: a flag without a value. short:
    its one-dash form ("" when it has none). Renderers read these attributes when they render
    (tests/test_one_definition_engines.py changes one and re-renders everything)."""

    flag: str
    arg_env: str
    image_env: str = ""
    switch: bool = False
    short: str = ""

    @property
    def key(self) -> str:
        """The preset INI / engine.json key: the long flag without its dashes."""
        return self.flag.removeprefix("--")

    @property
    def keys(self) -> tuple[str, ...]:
        """Every name a preset INI / engine.json may give it: the long and short flag without dashes, the variable."""
        return tuple(k for k in (self.key, self.short.removeprefix("-"), self.arg_env) if k)

    def value(self, value: int | str | bool = True) -> str:
        """The value as a preset, an engine.json or an environment variable carries it."""
        return TRUE if self.switch else str(value)

    def args(self, value: int | str | bool = True) -> list[str]:
        """On a command line."""
        return [self.flag] if self.switch else [self.flag, str(value)]


# The image's env contract (inference_runtime/engine_flags.py): LLAMA_THREADS -> --threads and --threads-batch,
# LLAMA_PARALLEL -> --parallel, the context per slot LLAMA_CTX_PER_SLOT -> --ctx-size = LLAMA_PARALLEL x it
# (llama-server splits --ctx-size evenly over the slots: n_ctx_seq = n_ctx / n_seq_max), LLAMA_CACHE_RAM_MIB ->
# --cache-ram.
CTX_PER_SLOT_ENV = "LLAMA_CTX_PER_SLOT"
MODEL = LlamaOption("--model", "LLAMA_ARG_MODEL", short="-m")
THREADS = LlamaOption("--threads", "LLAMA_ARG_THREADS", image_env="LLAMA_THREADS", short="-t")
THREADS_BATCH = LlamaOption("--threads-batch", "", short="-tb")  # the image gives it LLAMA_THREADS too
PARALLEL = LlamaOption("--parallel", "LLAMA_ARG_N_PARALLEL", image_env="LLAMA_PARALLEL", short="-np")
CTX_SIZE = LlamaOption("--ctx-size", "LLAMA_ARG_CTX_SIZE", short="-c")  # the total over the slots
CACHE_RAM = LlamaOption("--cache-ram", "LLAMA_ARG_CACHE_RAM", image_env="LLAMA_CACHE_RAM_MIB", short="-cram")
LOAD_MODE = LlamaOption("--load-mode", "LLAMA_ARG_LOAD_MODE", short="-lm")
# on|off (default on, common/common.h): before loading, a dry run that shrinks unset arguments to fit device memory
# (common/fit.cpp). A CPU-only child whose preset sets ctx-size has nothing it can change, yet pays the dry run on
# every cold load: off in a pool's `[*]` (engines/pool_preset.py; benchmarks/cold_load.py measures it).
FIT = LlamaOption("--fit", "LLAMA_ARG_FIT", short="-fit")
# What a child loaded on demand runs with — a pool's router child and a SageMaker multi-model child alike (both are
# CPU-only with ctx-size set, and each load is a cold load): one value for both.
ON_DEMAND_CHILD_FIT = "off"
# A pool replica's router (containers/llama-server/pool_mode.py: LLAMA_MODELS_PRESET / LLAMA_MODELS_MAX become these):
#   {"--models-preset"} .set_env("LLAMA_ARG_MODELS_PRESET")    {"--models-max"} .set_env("LLAMA_ARG_MODELS_MAX")
MODELS_PRESET = LlamaOption("--models-preset", "LLAMA_ARG_MODELS_PRESET", image_env="LLAMA_MODELS_PRESET")
MODELS_MAX = LlamaOption("--models-max", "LLAMA_ARG_MODELS_MAX", image_env="LLAMA_MODELS_MAX")
EMBEDDINGS = LlamaOption("--embeddings", "LLAMA_ARG_EMBEDDINGS", switch=True)
RERANKING = LlamaOption("--reranking", "LLAMA_ARG_RERANKING", switch=True)
# LoRA adapters of a base model (inference_runtime/lora.py): `--lora A.gguf,B.gguf` loads them in that order, their
# ids are their positions (common/arg.cpp:2955 `{"--lora"}`: parse_csv_row, each pushed at scale 1.0; GET
# /lora-adapters lists them with `id` = index, tools/server/server-task.cpp:1660); `--lora-init-without-apply`
# (arg.cpp:3803, server only) skips applying them at load (common/common.cpp:1412). Neither has an env of its own; the
# image's LLAMA_LORA (comma-separated paths) becomes both (engine_flags.llama_server_args). As preset keys a base's
# section carries `lora = <paths>` and `lora-init-without-apply = true` (engines/pool_preset.py): the router passes
# every key of a section to its child as that flag (common/preset.cpp:45 to_args).
LORA = LlamaOption("--lora", "", image_env="LLAMA_LORA")
LORA_INIT_WITHOUT_APPLY = LlamaOption("--lora-init-without-apply", "", switch=True)
# The preset key that names a section's model file (tools/server/README.md "Model presets": `model = ...`).
MODEL_KEY = MODEL.key

# The sized options every pooled model carries (the pool plan's numbers), in the order a preset section and an
# engine.json list them; a pool's preset puts the most common value of each in `[*]` (engines/pool_preset.py).
POOLED_SIZED: tuple[LlamaOption, ...] = (CTX_SIZE, PARALLEL, THREADS)


def pooled_model_flags(
    *, ctx_size: int, parallel: int, threads: int, options: Mapping[str, str] | None = None
) -> dict[str, str]:
    """A pooled model's llama-server flags (name without dashes -> value): its preset section (PoolModel.flags)
    and its engine.json (PoolPlan.engine_args) both are exactly this. ctx_size: the total over its `parallel` slots;
    options: the task's switches (engines.tasks.task_options), after the sized options."""
    sized = {CTX_SIZE: ctx_size, PARALLEL: parallel, THREADS: threads}
    return {**{o.key: o.value(sized[o]) for o in POOLED_SIZED}, **dict(options or {})}
