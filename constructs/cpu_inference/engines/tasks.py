"""What a model's task asks of llama-server beyond sizing: an embedding model serves /v1/embeddings only with
`--embeddings`, a reranker /v1/rerank only with `--reranking`; without them the pinned build answers 501 "This server
does not support embeddings. Start it with `--embeddings`" (tools/server/server.cpp). One table for every place that
starts an engine, each in the form it takes options (the spellings: inference_runtime/llama_flags.py):
- one engine per pod or endpoint: llama-server's own environment variables (task_env);
- a pool's preset INI and a multi-model endpoint's engine.json: the option's key without dashes, value "true"
  (task_options);
- `cpu-inference local`: command-line flags (task_args).
Pure, no dependencies: the sizing, the charts, the endpoints, the catalog and the CLI import it."""

from __future__ import annotations

from inference_runtime.llama_flags import EMBEDDINGS, RERANKING, LlamaOption

# task -> the llama-server switches it needs.
TASK_OPTIONS: dict[str, tuple[LlamaOption, ...]] = {
    "embedding": (EMBEDDINGS,),
    "rerank": (RERANKING,),
}


# The tasks whose models generate text (chat/completions); the others pool hidden states into a vector or a score
# and answer only their own route (the pinned common/arg.cpp: --embeddings "restrict to only support embedding use
# case"). A router, an escalation target or vLLM (whose pooling runner is not wired) needs a generation task.
POOLING_TASKS: tuple[str, ...] = tuple(TASK_OPTIONS)
GENERATION_TASKS: tuple[str, ...] = ("chat", "extraction", "classification", "routing", "batch")


def task_options(task: str) -> dict[str, str]:
    """Preset INI / engine.json keys for `task` (flags as "true")."""
    return {o.key: o.value() for o in TASK_OPTIONS.get(task, ())}


def task_env(task: str) -> dict[str, str]:
    """llama-server environment variables for `task`."""
    return {o.arg_env: o.value() for o in TASK_OPTIONS.get(task, ())}


def task_args(task: str) -> list[str]:
    """llama-server command-line flags for `task`."""
    return [arg for o in TASK_OPTIONS.get(task, ()) for arg in o.args()]
