"""`cpu-inference local`'s plan (pure): which engines run, with the slots and context per slot the deployment
gives each model, and which GGUF serves each (--model-map, the configured file from the cache, or a stand-in).

A model-farm's pooled models (config.pool_of) run as the deployment runs them: one llama-server in router mode
per pool (LocalPool), over the preset the pool chart renders (k8s/model_pool_chart.pool_preset) from the same
pool plan (config.rules.plan_pool), with the model files at the catalog's keys under a local directory."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from cpu_inference.cli.local_models import (
    ENCODER,
    GEMMA,
    RERANKER,
    SMOLLM2,
    encoder_path,
    gemma_path,
    reranker_path,
    smollm2_lora_path,
    smollm2_path,
)
from cpu_inference.cli.main import UserError
from cpu_inference.engines.tasks import task_args
from inference_runtime.llama_flags import CTX_SIZE, PARALLEL

# The stand-in LLM for an escalation outside the config (openai / sagemaker / bedrock): no deployed counterpart.
STAND_IN_LLM_SLOTS, STAND_IN_LLM_CTX_PER_SLOT = 2, 2048


@dataclass
class Engine:
    name: str  # the OpenAI `model` it serves (--alias): the configured name, whatever file serves it
    model: object | None  # the config's Model; None: the stand-in LLM for an escalation outside the config
    slots: int
    ctx_per_slot: int
    stand_in: str  # SMOLLM2 | GEMMA | ENCODER | RERANKER: what serves it with --stand-ins (always, for model None)
    gguf: Path | None = None
    # engine vllm: the safetensors checkpoint directory that serves it (--model-map), and the deployed engine
    # environment (Sizing.engine_env: KV pool, sequences, context, dtype); None: llama-server serves it (a GGUF)
    vllm_dir: Path | None = None
    vllm_env: dict[str, str] = field(default_factory=dict)
    note: str = ""  # which file serves which model, printed for the user
    args: list[str] = field(default_factory=list)
    # Its LoRA adapters in id order (the config's `adapters`): (name, the local GGUF serving it, scale); and where
    # the engine reads each (a link per adapter, so two adapters served by one file stay two: link_adapters).
    adapters: list[tuple[str, Path, float]] = field(default_factory=list)
    adapter_paths: list[str] = field(default_factory=list)
    port: int = 0
    proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def _describe(m) -> str:
    return f"{m.parameters_billions:g}B {m.weights_label} {m.source.hf_repo}/{m.source.file or ''}".rstrip("/")


# What each stand-in is, by its display name (local_models): the file is located (or built-hint raised) only when used.
STAND_IN_FILES: dict[str, Callable[[], Path]] = {
    SMOLLM2: smollm2_path,
    GEMMA: gemma_path,
    ENCODER: encoder_path,
    RERANKER: reranker_path,
}


def stand_in_for(task: str) -> str:
    """The stand-in for a model of `task`: an encoder for an embedding model, a cross-encoder for a rerank model
    (each serves its route with the task's flag, engine_tasks), else the small generator."""
    return {"embedding": ENCODER, "rerank": RERANKER}.get(task, SMOLLM2)


def farm_stand_in(m) -> str:
    return stand_in_for(m.task)


def slots_args(slots: int, ctx_per_slot: int) -> list[str]:
    """llama-server's flags for slots and their context (the entrypoint's spelling: --ctx-size is the total)."""
    return [*PARALLEL.args(slots), *CTX_SIZE.args(slots * ctx_per_slot)]


def deployed_shape(config, m) -> tuple[int, int]:
    """The (slots, context per slot) the deployment gives model `m` (config.size_model: its SageMaker instance,
    or the smallest fitting EKS node)."""
    from cpu_inference.config import size_model

    s = size_model(config, m)
    if s is None:  # validation refuses such a config; kept for a config loaded without it
        raise UserError(f"{m.name} fits no allowed instance type — run `cpu-inference validate` for the fix")
    return s.slots, s.ctx_per_slot


def plan(config, only: list[str] | None) -> tuple[list[Engine], list[str]]:
    """(engines to start, notes for the user): which models run, with which slots. No file is chosen and no
    process started yet (see serve_files). slm-prefilter: [SLM, LLM]."""
    notes: list[str] = []

    def engine(m, stand_in: str) -> Engine:
        return Engine(m.name, m, *deployed_shape(config, m), stand_in)

    if config.pattern == "slm-prefilter":
        if only:
            raise UserError("--models selects model-farm models; an slm-prefilter always runs its SLM and LLM")
        slms = [m for m in config.models if config.role_of(m) == "slm"]
        slm = slms[0]
        if len(slms) > 1:
            notes.append(f"the router uses one SLM: {slm.name} (not started: {', '.join(m.name for m in slms[1:])})")
        engines = [engine(slm, SMOLLM2)]
        esc = config.escalation
        if esc.kind == "model":
            engines.append(engine(next(m for m in config.models if m.name == esc.model), GEMMA))
        else:
            target = {
                "openai": esc.url,
                "sagemaker": f"SageMaker endpoint {esc.endpoint_name}",
                "bedrock": f"Bedrock model {esc.model_id}",
            }[esc.kind]
            engines.append(Engine("llm-stand-in", None, STAND_IN_LLM_SLOTS, STAND_IN_LLM_CTX_PER_SLOT, GEMMA))
            notes.append(
                f"escalation ({esc.kind}: {target}) is replaced by a local stand-in LLM: the config has no GGUF "
                "for it to download, and nothing leaves this machine"
            )
        return engines, notes

    selected = _selected(config, only)
    # Pooled models run inside their pool's process (plan_pools), not as engines of their own.
    engines = [engine(m, farm_stand_in(m)) for m in selected if config.pool_of(m) is None]
    skipped = [m.name for m in config.models if m not in selected]
    if skipped:
        notes.append(
            f"not started (--models): {', '.join(skipped)} — the gateway answers 503 for them, as for a model scaled to zero"
        )
    return engines, notes


def _serve_with_vllm(config, e: Engine, directory: Path) -> None:
    """Serve `e` with vLLM from `directory`, in the engine environment the deployment renders for it."""
    from cpu_inference.config import size_model

    if not (directory / "config.json").is_file():
        raise UserError(
            f"--model-map {e.name}={directory}: engine vllm needs a checkpoint directory with config.json "
            "(and *.safetensors, tokenizer files)"
        )
    s = size_model(config, cast(Any, e.model))
    assert s is not None  # deployed_shape already refused a model that fits nowhere
    e.vllm_dir, e.vllm_env = directory, s.engine_env()
    e.note = f"{e.name}: vLLM {s.dtype} from {directory} (--model-map)"


def _selected(config, only: list[str] | None) -> list:
    names = [m.name for m in config.models]
    if not only:
        return list(config.models)
    unknown = [n for n in only if n not in names]
    if unknown:
        raise UserError(f"--models: {', '.join(unknown)} not in the config — use names from {', '.join(names)}")
    return [m for m in config.models if m.name in only]


def serve_files(
    config,
    engines: list[Engine],
    mapping: dict[str, Path],
    *,
    stand_ins: bool,
    fetch: Callable[..., dict] | None = None,
    pooled: Collection[str] = (),
) -> None:
    """Choose each engine's GGUF and flags: --model-map's file, else (without --stand-ins) the configured GGUF
    from the cache, downloaded first when missing (model_cache.fetch_models: every file checked, and the engines'
    memory at these slots against this machine's, before any byte moves), else the stand-in. `pooled`: models
    served from a pool, whose memory local_pools.cap_pools checked (models_max of them at once)."""
    vllm = [e for e in engines if getattr(e.model, "engine", None) == "vllm"]
    for e in vllm:
        if e.name in mapping:
            _serve_with_vllm(config, e, mapping[e.name])
        elif not stand_ins:
            raise UserError(
                f"{e.name} uses engine vllm: `local` downloads GGUF files only — pass --model-map {e.name}=DIR "
                "(a local safetensors checkpoint with config.json), or --stand-ins to serve a llama.cpp stand-in"
            )
    wanted = [e for e in engines if e.model is not None and e.name not in mapping and not stand_ins and e not in vllm]
    cached: dict[str, Any] = {}
    if wanted:
        if fetch is None:
            from cpu_inference.cli.model_cache import fetch_models

            fetch = fetch_models
        sized = [e.name for e in wanted if e.name in pooled]
        extra: dict[str, Any] = {"sized_elsewhere": sized} if sized else {}
        cached = fetch(
            config, names=[e.name for e in wanted], shapes={e.name: (e.slots, e.ctx_per_slot) for e in wanted}, **extra
        )
    for e in engines:
        if e.vllm_dir is not None:
            continue
        if e.name in mapping:
            e.gguf, e.note = mapping[e.name], f"{e.name}: {mapping[e.name]} (--model-map)"
        elif e.name in cached:
            e.gguf, e.note = cached[e.name].path, cached[e.name].note
        else:
            e.gguf = STAND_IN_FILES[e.stand_in]()
            what = _describe(e.model) if e.model is not None else "the escalation target"
            e.note = f"{e.name}: {e.stand_in} stands in for {what}" + (" (--stand-ins)" if e.model is not None else "")
        # --embeddings / --reranking as every deployed engine gets them; the pooling is the GGUF's own (mean for the
        # encoder stand-in, rank for the reranker's with --reranking), as for the configured file.
        e.args = slots_args(e.slots, e.ctx_per_slot) + task_args(getattr(e.model, "task", None) or "")


def serve_adapters(engines: list[Engine], mapping: dict[str, Path], *, stand_ins: bool) -> list[str]:
    """Choose the local GGUF of each adapter of each engine's model (config `adapters`, in id order): --model-map's
    file for its name, else with --stand-ins the SmolLM2 stand-in's adapter for a base the SmolLM2 stand-in serves
    (local_models.smollm2_lora_path); else one line naming the adapter and the fix. Returns notes."""
    notes = []
    for e in engines:
        for a in getattr(e.model, "adapters", None) or ():
            if a.name in mapping:
                path, how = mapping[a.name], "--model-map"
            elif stand_ins and e.name not in mapping and e.stand_in == SMOLLM2:
                path, how = smollm2_lora_path(), "the SmolLM2 stand-in's adapter, --stand-ins"
            elif stand_ins and e.name not in mapping:
                raise UserError(
                    f"adapter {a.name} of {e.name}: its base is served by the {e.stand_in} stand-in, which has no stand-in "
                    f"adapter — pass --model-map {a.name}=PATH (a LoRA GGUF of that stand-in)"
                )
            else:
                raise UserError(
                    f"adapter {a.name} of {e.name}: `local` does not download adapters yet — pass --model-map "
                    f"{a.name}=PATH (a LoRA GGUF of {e.name}'s file), or --stand-ins"
                )
            e.adapters.append((a.name, Path(path), a.scale))
            notes.append(f"adapter {a.name} of {e.name}: {path} ({how})")
    return notes


def link_adapters(e: Engine, root: Path) -> list[str]:
    """`root/<adapter>/<file>` -> each adapter's file; sets and returns e.adapter_paths (what its --lora names and
    the gateway's config matches against the engine's GET /lora-adapters)."""
    paths = []
    for name, path, _ in e.adapters:
        link = root / name / path.name
        link.parent.mkdir(parents=True, exist_ok=True)
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(path.resolve())
        paths.append(str(link))
    e.adapter_paths = paths
    return paths
