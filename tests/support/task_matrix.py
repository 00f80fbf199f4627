"""The task × path × engine matrix: ONE table of what the library serves and what it refuses, from which the matrix
tests (tests/matrix/ for llama.cpp, tests/runtime/vllm/test_task_matrix.py for vLLM) are generated.

Axes, each read from the product itself so a new value cannot arrive without its row:
- tasks: the config schema's `Task` enum;
- paths: every (target, serving) the schema accepts, plus `cpu-inference local`;
- engines: the schema's `engine` literal;
- via: the client names the model itself, or one of its LoRA adapters (issue 26: "every task the base serves is
  served through its adapters") — the same requests with the adapter's name as `model`.
A cell either SERVES (its requests, `REQUESTS[task]`, are sent through the path's deployed stack and checked) or is
REFUSED at `validate` with the one line `refusal()` names. `test_matrix.py` checks the table covers the product,
that every refused cell is refused by the real validator, and every serving cell is accepted and run by one test.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass
from itertools import product

from cpu_inference.config.schema import DEDICATED_COPY, DEDICATED_HOSTING, Model, Target, Task

TASKS: tuple[str, ...] = tuple(t.value for t in Task)
ENGINES: tuple[str, ...] = typing.get_args(Model.model_fields["engine"].annotation)
SERVINGS: tuple[str, ...] = typing.get_args(typing.get_args(Model.model_fields["serving"].annotation)[0])
TARGETS: tuple[str, ...] = tuple(t.value for t in Target)
LOCAL = "local"
# (target, serving) -> the path's name; `local` runs any config on this machine.
DEPLOYED = {
    ("eks", "dedicated"): "eks-dedicated",
    ("eks", "pool"): "eks-pool",
    ("sagemaker", "dedicated"): "sagemaker-single",
    ("sagemaker", "pool"): "sagemaker-mme",
}
PATHS: tuple[str, ...] = (*(DEPLOYED[k] for k in product(TARGETS, SERVINGS)), LOCAL)
# Who the client names as `model`: the config's model, or a LoRA adapter over it (config models[].adapters).
VIAS: tuple[str, ...] = ("model", "adapter")

# What a client sends for each task (the requests a test makes on every path that serves it):
#   chat / chat-stream / completion: OpenAI chat (plain and streamed) and completion
#   classify: the SLM router's own classification request (grammar + structured_outputs choice + logprobs)
#   extract: chat with response_format json_schema
#   embed / embed-batch: OpenAI embeddings, one input and a list
#   rerank: query + documents
REQUESTS: dict[str, tuple[str, ...]] = {
    "classification": ("classify", "chat"),
    "routing": ("classify", "chat"),
    "extraction": ("extract",),
    "chat": ("chat", "chat-stream", "completion"),
    "embedding": ("embed", "embed-batch"),
    "rerank": ("rerank",),
    "batch": ("completion", "chat"),
}
GENERATION_REQUESTS = ("chat", "chat-stream", "completion", "classify", "extract")

# A request a path cannot carry by the service's own API (not a choice of ours), with the source. The table test
# checks each against its source.
NOT_CARRIED: dict[tuple[str, str], str] = {
    # botocore sagemaker-runtime: InvokeEndpointWithResponseStream has no TargetModel member, so a multi-model
    # endpoint cannot stream; MultiModelEndpoint grants InvokeEndpoint only.
    ("sagemaker-mme", "chat-stream"): "InvokeEndpointWithResponseStream has no TargetModel",
}


@dataclass(frozen=True)
class Cell:
    task: str
    path: str
    engine: str
    via: str = "model"

    @property
    def serving(self) -> str | None:
        return next((s for (_, s), p in DEPLOYED.items() if p == self.path), None)

    @property
    def target(self) -> str | None:
        return next((t for (t, _), p in DEPLOYED.items() if p == self.path), None)

    def requests(self) -> tuple[str, ...]:
        return tuple(r for r in REQUESTS[self.task] if (self.path, r) not in NOT_CARRIED)

    @property
    def adapter(self) -> bool:
        return self.via == "adapter"

    @property
    def base(self) -> Cell:
        """The same task, path and engine with the model named itself."""
        return Cell(self.task, self.path, self.engine)

    @property
    def id(self) -> str:
        return f"{self.task}-{self.path}-{self.engine}" + ("-adapter" if self.adapter else "")


def refusal(cell: Cell) -> str | None:
    """The `validate` line (a fragment of it) that refuses `cell`, or None when the library serves it. An adapter
    cell is refused when its base cell is, else by the adapter rules (config/rules.py _check_adapters, in its order)."""
    if cell.engine == "vllm" and cell.task in ("embedding", "rerank"):
        return f"task {cell.task} stays on engine llama.cpp here"
    if cell.engine == "vllm" and cell.serving == "pool":
        return "engine vllm serves one model per process, so it cannot share a farm pool"
    return adapter_refusal(cell) if cell.adapter else None


def adapter_refusal(cell: Cell) -> str | None:
    """Why the base of a served cell cannot serve `cell`'s task through an adapter on its path (None: it does)."""
    from cpu_inference.engines.adapter_hosting import adapter_hosting_problem, adapter_task_problem

    if cell.engine == "vllm":
        return "adapters are GGUF LoRA adapters for engine llama.cpp"
    if problem := adapter_task_problem(cell.task):
        return problem
    if cell.target is None:  # `local` serves a pooled and a dedicated base's adapters (cli/local_plan.serve_adapters)
        return None
    return adapter_hosting_problem(
        cell.target, pooled=cell.serving == "pool", hosting=DEDICATED_HOSTING, copy=DEDICATED_COPY
    )


CELLS: tuple[Cell, ...] = tuple(Cell(t, p, e, v) for t, p, e, v in product(TASKS, PATHS, ENGINES, VIAS))
SERVED: tuple[Cell, ...] = tuple(c for c in CELLS if refusal(c) is None)
REFUSED: tuple[Cell, ...] = tuple(c for c in CELLS if refusal(c) is not None)


# The SLM pre-filter's models by role: the router's SLM classifies and answers chat requests, the escalation LLM
# answers the hard ones; both generate. Served (role, task) pairs run in tests/runtime/router (the router in front of
# real engines); the others are refused at validate.
PREFILTER_ROLES = ("slm", "llm")


def prefilter_refusal(role: str, task: str) -> str | None:
    from cpu_inference.engines.tasks import GENERATION_TASKS

    return None if task in GENERATION_TASKS else f"{task}: the slm-prefilter's {role} "


def served(engine: str, path: str) -> tuple[Cell, ...]:
    return tuple(c for c in SERVED if c.engine == engine and c.path == path)


# --- the configs the matrix deploys: one per (target, engine), a model per served cell ------------------------------

# What each task's model is in the generated configs (the bytes served are the stand-ins of tests/support/models.py:
# SmolLM2 for generation, all-MiniLM-L6-v2 for embeddings, the MiniLM cross-encoder stand-in for rerank).
VLLM_SOURCE = "{hf_repo: HuggingFaceTB/SmolLM2-135M-Instruct, revision: 12fd25f77366fa6b3b4b768ec3050bf629380bac}"
LLAMA_SOURCES = {
    "embedding": "{hf_repo: sentence-transformers/all-MiniLM-L6-v2, file: all-minilm-l6-v2.gguf}, parameters_billions: 0.023, "
    "quantization: F16, context_window: 512",
    "rerank": "{hf_repo: cross-encoder/minilm-rerank, file: minilm-rerank.gguf}, parameters_billions: 0.023, quantization: F16, "
    "context_window: 512",
}
# The LoRA adapter every generator of a generated config serves (where its adapter cells are served): its bytes are
# the SmolLM2 stand-in's real adapter (tests/support/lora.py, `make lora`; the stand-in generator is SmolLM2); the
# Hub source is a placeholder the catalog would copy (as tests/cli/test_local_adapters.py's).
ADAPTER_SOURCE = (
    "{hf_repo: example/smollm2-json-lora-GGUF, file: smollm2-json-lora.gguf, "
    "revision: 0123456789abcdef0123456789abcdef01234567}"
)
GENERATOR_SOURCE = (
    "{hf_repo: HuggingFaceTB/SmolLM2-135M-Instruct-GGUF, file: smollm2-135m-instruct-q4_1.gguf}, "
    "parameters_billions: 0.135, quantization: Q4_1, context_window: 2048"
)
POOLS = {
    "eks": "{name: small, cpu: 2, memory_gib: 4, replicas: {min: 1, max: 2}, replication: 1}",
    "sagemaker": "{name: small, instance_type: ml.c7g.xlarge, replicas: {min: 1, max: 2}}",
}


def task_of(model: str) -> str:
    """The task of a generated config's model (its name's first word)."""
    return model.split("-", 1)[0]


def model_name(task: str, engine: str, serving: str) -> str:
    return f"{task}-{'vllm' if engine == 'vllm' else 'llama'}-{'hot' if serving == 'dedicated' else 'pooled'}"


def adapter_name(task: str, engine: str, serving: str) -> str:
    """The name clients send for the adapter over `model_name(task, engine, serving)`."""
    return f"{model_name(task, engine, serving)}-tuned"


def model_line(target: str, task: str, engine: str, serving: str, *, adapter: bool = False) -> str:
    """One config model; with `adapter`, carrying one LoRA adapter (adapter_name) over it."""
    name = model_name(task, engine, serving)
    if engine == "vllm":
        # cpu 3: fits a 4-vCPU node's allocatable; vLLM keeps one for its scheduler (validate's advice). Context 512,
        # the smallest any task asks for (sizing.TASK_CONTEXT), renders the same engine for every task, so one vLLM
        # start per path serves them all (tests/runtime/vllm/test_task_matrix.py checks the rendered envs are equal).
        source = f"{VLLM_SOURCE}, engine: vllm, parameters_billions: 0.135, context_window: 512"
        source += ", shape: {layers: 30, kv_heads: 3, head_dim: 64}" + (", cpu: 3" if target == "eks" else "")
    else:
        source = LLAMA_SOURCES.get(task, GENERATOR_SOURCE)
    adapters = (
        f", adapters: [{{name: {adapter_name(task, engine, serving)}, source: {ADAPTER_SOURCE}}}]" if adapter else ""
    )
    return f"- {{name: {name}, serving: {serving}, task: {task}, source: {source}{adapters}}}"


def carries_adapter(target: str, task: str, engine: str, serving: str) -> bool:
    """Whether a generated config's model carries its adapter: when the adapter cell of its (target, serving) path is
    served, so one start of a path serves its model cells and its adapter cells."""
    return Cell(task, DEPLOYED[(target, serving)], engine, "adapter") in SERVED


def config_yaml(target: str, engine: str, tasks: tuple[str, ...] = TASKS) -> str:
    """A model-farm config for `target` with one model per served (task, serving) of `engine` (and a pool only when
    `engine` has pooled models), each carrying its adapter where that path serves adapter cells."""
    cells = [
        c
        for c in SERVED
        if c.target == target and c.engine == engine and c.task in tasks and c.serving is not None and not c.adapter
    ]
    pools = ["farm:", "  pools:", f"  - {POOLS[target]}"] if any(c.serving == "pool" for c in cells) else []
    return "\n".join(
        [
            f"project: {{name: matrix-{target}}}",
            f"target: {target}",
            "pattern: model-farm",
            *pools,
            "models:",
            *(
                model_line(
                    target,
                    c.task,
                    c.engine,
                    c.serving or "",
                    adapter=carries_adapter(target, c.task, c.engine, c.serving or ""),
                )
                for c in cells
            ),
            "",
        ]
    )
