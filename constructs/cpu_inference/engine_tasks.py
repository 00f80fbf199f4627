"""What a model's task asks of llama-server beyond sizing: an embedding model serves /v1/embeddings only with
`--embeddings`, a reranker /v1/rerank only with `--reranking`; without them the pinned build answers 501 "This server
does not support embeddings. Start it with `--embeddings`" (tools/server/server.cpp). One table for every place that
starts an engine, each in the form it takes options:
- one engine per pod or endpoint: llama-server's own environment variables (common/arg.cpp `set_env`: a flag
  option is on when its variable is truthy — common_params_parse_ex, `handler_void && is_truthy(value)`);
- a pool's preset INI and a multi-model endpoint's engine.json: the option's key without dashes, value "true"
  (common/preset.cpp load_from_ini: keys are the long flags without dashes);
- `cpu-inference local`: command-line flags.
Pure, no dependencies: the sizing, the charts, the endpoints, the catalog and the CLI import it."""

from __future__ import annotations

# task -> ((preset / engine.json key, llama-server environment variable), ...), from the pinned common/arg.cpp:
#   {"--embedding", "--embeddings"} .set_env("LLAMA_ARG_EMBEDDINGS")
#   {"--rerank", "--reranking"} .set_env("LLAMA_ARG_RERANKING")
TASK_OPTIONS: dict[str, tuple[tuple[str, str], ...]] = {
    "embedding": (("embeddings", "LLAMA_ARG_EMBEDDINGS"),),
    "rerank": (("reranking", "LLAMA_ARG_RERANKING"),),
}


# The tasks whose models generate text (chat/completions); the others pool hidden states into a vector or a score
# and answer only their own route (the pinned common/arg.cpp: --embeddings "restrict to only support embedding use
# case"). A router, an escalation target or vLLM (whose pooling runner is not wired) needs a generation task.
POOLING_TASKS: tuple[str, ...] = tuple(TASK_OPTIONS)
GENERATION_TASKS: tuple[str, ...] = ("chat", "extraction", "classification", "routing", "batch")


def task_options(task: str) -> dict[str, str]:
    """Preset INI / engine.json keys for `task` (flags as "true")."""
    return {key: "true" for key, _ in TASK_OPTIONS.get(task, ())}


def task_env(task: str) -> dict[str, str]:
    """llama-server environment variables for `task`."""
    return {env: "true" for _, env in TASK_OPTIONS.get(task, ())}


def task_args(task: str) -> list[str]:
    """llama-server command-line flags for `task`."""
    return [f"--{key}" for key, _ in TASK_OPTIONS.get(task, ())]
