"""The config.yaml schema (pydantic v2). Every model forbids unknown keys so typos fail loudly.

Field descriptions double as the fix hint in error messages and as editor help in config.schema.json,
so each says what the value is and what a good one looks like.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    create_model,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails

from cpu_inference.engines import DEFAULT_VLLM_DTYPE, LLAMA_CPP, VLLM, VLLM_TASKS
from cpu_inference.sizing.slm_context import DEFAULT_ANSWER_MAX_TOKENS
from inference_runtime.lora import DEFAULT_SCALE, MAX_SCALE
from model_download.catalog import PEFT_CONFIG, PEFT_WEIGHTS
from model_download.hub import DEFAULT_REVISION


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, use_enum_values=True)


class Target(str, Enum):
    EKS = "eks"
    SAGEMAKER = "sagemaker"


class Pattern(str, Enum):
    SLM_PREFILTER = "slm-prefilter"
    MODEL_FARM = "model-farm"


class Task(str, Enum):
    CLASSIFICATION = "classification"
    ROUTING = "routing"
    EXTRACTION = "extraction"
    CHAT = "chat"
    EMBEDDING = "embedding"
    RERANK = "rerank"
    BATCH = "batch"


class Role(str, Enum):
    """What a model does inside its pattern."""

    SLM = "slm"  # slm-prefilter: answers and classifies on CPU
    LLM = "llm"  # slm-prefilter: a self-hosted escalation model
    FARM = "farm"  # model-farm member


QUANTIZATIONS = (
    "Q2_K",
    "Q3_K_S",
    "Q3_K_M",
    "Q3_K_L",
    "IQ4_XS",
    "IQ4_NL",
    "Q4_0",
    "Q4_1",
    "Q4_K_S",
    "Q4_K_M",
    "Q5_0",
    "Q5_1",
    "Q5_K_S",
    "Q5_K_M",
    "Q6_K",
    "Q8_0",
    "F16",
    "BF16",
    "F32",
)
Quantization = Literal[QUANTIZATIONS]  # type: ignore[valid-type]

_NAME = r"^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$"
_HF_REPO = r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$"


class Project(_Strict):
    name: Annotated[
        str, Field(pattern=_NAME, description="Stack-name prefix: lowercase letters, digits, '-' (max 40)")
    ] = "cpu-inference"
    tags: Annotated[dict[str, str], Field(description="Tags applied to every resource, e.g. {team: ml-platform}")] = {}


class _HubSource(_Strict):
    """A file on the Hugging Face Hub: repo, revision, checksum and token — what a model's and an adapter's source
    share (each adds its `file`)."""

    hf_repo: Annotated[str, Field(pattern=_HF_REPO, description="the Hugging Face repo, as owner/name")]
    revision: Annotated[
        str, Field(min_length=1, description="a commit sha (reproducible) or a branch/tag such as main")
    ] = DEFAULT_REVISION
    sha256: Annotated[
        str | None,
        Field(
            pattern=r"^[0-9a-f]{64}$",
            description="expected sha256 of the file (64 hex chars); default: the one the Hub reports",
        ),
    ] = None
    token_secret_name: Annotated[
        str | None,
        Field(min_length=1, description="Secrets Manager secret holding a Hugging Face token, for gated repos"),
    ] = None


class ModelSource(_HubSource):
    file: Annotated[
        str | None,
        Field(
            pattern=r"^[^/].*\.gguf$",
            description="the GGUF file name inside the repo (ends in .gguf); engine llama.cpp only — engine vllm copies the repo's safetensors checkpoint",
        ),
    ] = None
    size_bytes: Annotated[
        int | None,
        Field(
            gt=0,
            description="the GGUF file size (engine vllm: the safetensors' total) in bytes, when known (sharper sizing)",
        ),
    ] = None


class ModelShape(_Strict):
    """Transformer shape, when known, for an exact KV-cache size (else estimated from the parameter count)."""

    layers: Annotated[int, Field(gt=0, description="number of transformer blocks (n_layer)")]
    kv_heads: Annotated[int, Field(gt=0, description="number of key/value heads (n_head_kv)")]
    head_dim: Annotated[int, Field(gt=0, description="dimension of one attention head")]


# An adapter's size when its source does not say (adapters[].size_mb), counted in its base's memory: a conservative
# figure for the 1-3B bases adapters are made for. LoRA adds r x (d_in + d_out) weights per adapted matrix; rank 16 on
# every attention and MLP projection of Qwen2.5-1.5B (huggingface.co/Qwen/Qwen2.5-1.5B config.json: hidden_size 1536,
# intermediate_size 8960, 28 layers, 2 KV heads of 128) is 16 x 41,216 x 28 = 18.5 M weights, 37 MB in F16.
ADAPTER_SIZE_MB = 50


class AdapterSource(_HubSource):
    file: Annotated[
        str | None,
        Field(
            description="the adapter's GGUF file in the repo (ends in .gguf); leave it out for a PEFT adapter "
            f"({PEFT_CONFIG} + {PEFT_WEIGHTS}), which the catalog copy converts with the engine pin's "
            "convert_lora_to_gguf.py (on EKS and SageMaker); sha256 then pins the safetensors"
        ),
    ] = None

    @property
    def catalog_file(self) -> str:
        """The file the catalog copies: `file`, or a PEFT adapter's weights (model_download.catalog.PEFT_WEIGHTS)."""
        return self.file or PEFT_WEIGHTS

    @property
    def peft(self) -> bool:
        """A PEFT adapter (no file, or the PEFT weights named): converted to GGUF by the catalog copy."""
        return self.catalog_file.rsplit("/", 1)[-1] == PEFT_WEIGHTS


class Adapter(_Strict):
    """A LoRA adapter served over its model (the base): clients send its name as `model`, the base's replicas
    apply it to that request only."""

    name: Annotated[
        str,
        Field(
            pattern=_NAME,
            description="the `model` clients send for this adapter, DNS-safe and unique among every model and adapter name, e.g. support-json",
        ),
    ]
    source: Annotated[
        AdapterSource, Field(description="where the adapter's GGUF comes from: {hf_repo, file, revision, sha256}")
    ]
    scale: Annotated[
        float,
        Field(
            gt=0,
            le=MAX_SCALE,  # inference_runtime.lora: the engine's scale bounds, one definition
            description="how strongly the adapter applies (its delta times scale), in (0, 4]; default 1.0 as trained",
        ),
    ] = DEFAULT_SCALE
    size_mb: Annotated[
        float,
        Field(
            gt=0,
            description=f"the adapter's GGUF size in MB, counted in its base's memory (every adapter stays loaded); default {ADAPTER_SIZE_MB}",
        ),
    ] = ADAPTER_SIZE_MB

    @property
    def size_bytes(self) -> int:
        """size_mb in bytes (MB of 10^6 bytes), what sizing counts in the base's memory."""
        return int(self.size_mb * 1e6)


class Replicas(_Strict):
    min: Annotated[int, Field(ge=0, description="minimum replicas (0 allows scale to zero on EKS)")] = 1
    max: Annotated[int, Field(ge=1, description="maximum replicas / instances")] = 4

    @model_validator(mode="after")
    def _ordered(self) -> Replicas:
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) is greater than max ({self.max}) — set min ≤ max")
        return self


class Model(_Strict):
    name: Annotated[
        str, Field(pattern=_NAME, description="short DNS-safe name, unique in the config, e.g. smollm2-135m")
    ]
    engine: Annotated[
        Literal["llama.cpp", "vllm"],
        Field(
            description="llama.cpp (default: a GGUF file, every pattern and target) or vllm (vLLM's CPU backend: a Hugging Face safetensors repo in dtype, dedicated replicas or endpoint)"
        ),
    ] = "llama.cpp"
    source: ModelSource
    quantization: Annotated[
        Quantization, Field(description="GGUF quantization, e.g. Q4_K_M (default), Q5_K_M, Q8_0 (engine llama.cpp)")
    ] = "Q4_K_M"
    dtype: Annotated[
        Literal["bfloat16", "float16", "float32"] | None,
        Field(
            description="engine vllm: the weights' dtype, bfloat16 (default; every supported CPU has BF16 instructions), float16 or float32"
        ),
    ] = None
    parameters_billions: Annotated[
        float, Field(gt=0, le=2000, description="parameter count in billions, e.g. 0.135 or 8")
    ]
    context_window: Annotated[
        int,
        Field(
            ge=128,
            le=1_048_576,
            description="the longest context one request needs (tokens), at most the model's trained context",
        ),
    ] = 4096
    task: Annotated[
        Task,
        Field(
            validate_default=True,
            description="classification | routing | extraction | chat | embedding | rerank | batch",
        ),
    ] = Task.CHAT
    role: Annotated[
        Role | None, Field(description="slm | llm (slm-prefilter) or farm (model-farm); default from the pattern")
    ] = None
    shape: ModelShape | None = None
    parallel_slots: Annotated[
        int | None,
        Field(
            ge=1,
            le=64,
            description="llama.cpp parallel slots (engine vllm: --max-num-seqs); default computed by sizing",
        ),
    ] = None
    context_per_slot: Annotated[
        int | None, Field(ge=128, description="tokens of context per slot; default from the task and context_window")
    ] = None
    cpu: Annotated[
        float | None,
        Field(gt=0, le=192, description="vCPUs per replica on EKS (= engine threads); default from sizing"),
    ] = None
    instance_type: Annotated[
        str | None,
        Field(
            description="SageMaker instance type for this model, e.g. ml.c7g.2xlarge; default sagemaker.instance_type"
        ),
    ] = None
    replicas: Replicas = Replicas()
    serving: Annotated[
        Literal["pool", "dedicated"] | None,
        Field(
            description="pool (shared multi-model pool; the default for farm models of model-farm) or dedicated (its own replicas or endpoint: hot models)"
        ),
    ] = None
    pool: Annotated[
        str | None,
        Field(
            pattern=_NAME,
            description="name of the farm.pools entry that serves this model (serving: pool); default the first pool",
        ),
    ] = None
    adapters: Annotated[
        list[Adapter],
        Field(
            description="LoRA adapters served over this model (a llama.cpp model of a model-farm: pooled or dedicated on EKS, dedicated on SageMaker): each a name clients send, a source (a GGUF file, or a PEFT repo the catalog converts) and a scale; ids follow this order"
        ),
    ] = []

    @model_validator(mode="after")
    def _slot_context(self) -> Model:
        if self.context_per_slot is not None and self.context_per_slot > self.context_window:
            raise ValueError(
                f"context_per_slot ({self.context_per_slot}) exceeds context_window ({self.context_window}) — "
                "lower context_per_slot or raise context_window"
            )
        return self

    # What each engine loads: llama.cpp a GGUF file in a quantization, vLLM a safetensors checkpoint in a dtype, one
    # model per process (cpu_inference.engines says why each limit exists). Field validators, so an error names the
    # key written (`engine` is declared first so they can see it); those without validate_default run only on a
    # value the user wrote.
    @field_validator("source")
    @classmethod
    def _source_for_engine(cls, source: ModelSource, info: ValidationInfo) -> ModelSource:
        engine = info.data.get("engine")  # None: the engine itself was invalid (reported on its own line)
        if engine == LLAMA_CPP and source.file is None:
            raise ValueError(
                "file is required for engine llama.cpp — name the .gguf file in the repo (source.file), or set engine: vllm for a safetensors repo"
            )
        if engine == VLLM and source.file is not None:
            raise ValueError(
                f"engine vllm loads the repo's safetensors checkpoint, not a GGUF file — remove source.file ({source.file}) or use engine: llama.cpp"
            )
        if engine == VLLM and source.sha256 is not None:
            raise ValueError(
                "sha256 pins one GGUF file; engine vllm copies several files — remove source.sha256 and pin the snapshot with revision: <full commit sha> (every file is checked against the Hub's listing at that commit)"
            )
        return source

    @field_validator("quantization")
    @classmethod
    def _quantization_for_engine(cls, value: str, info: ValidationInfo) -> str:
        if info.data.get("engine") == VLLM:
            raise ValueError(
                f"quantization is a GGUF setting; engine vllm runs the checkpoint in dtype — remove quantization (dtype defaults to {DEFAULT_VLLM_DTYPE}) or use engine: llama.cpp"
            )
        return value

    @field_validator("dtype")
    @classmethod
    def _dtype_for_engine(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None and info.data.get("engine") == LLAMA_CPP:
            raise ValueError(
                "dtype is for engine vllm — llama.cpp runs the GGUF file's quantization: remove dtype, or set engine: vllm"
            )
        return value

    @field_validator("task")
    @classmethod
    def _task_for_engine(cls, value: Any, info: ValidationInfo) -> Any:
        task = value.value if isinstance(value, Enum) else value
        if info.data.get("engine") == VLLM and task not in VLLM_TASKS:
            raise ValueError(
                f"task {task} stays on engine llama.cpp here (vLLM's pooling runner is not wired) — use engine: llama.cpp, or a generation task ({', '.join(VLLM_TASKS)})"
            )
        return value

    @field_validator("serving")
    @classmethod
    def _serving_for_engine(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value == "pool" and info.data.get("engine") == VLLM:
            raise ValueError(
                "engine vllm serves one model per process, so it cannot share a farm pool — remove serving: pool (the model gets its own replicas) or use engine: llama.cpp"
            )
        return value

    @property
    def weights_label(self) -> str:
        """How the weights are stored, for tables and messages: the GGUF quantization, or vLLM's dtype."""
        return self.quantization if self.engine == LLAMA_CPP else f"{self.weights_dtype} (vLLM)"

    @property
    def weights_dtype(self) -> str:
        """vLLM's --dtype (the default when not written); llama.cpp models have none."""
        return self.dtype or DEFAULT_VLLM_DTYPE


def _partial(
    model: type[BaseModel],
    name: str,
    doc: str,
    *,
    skip: tuple[str, ...] = (),
    required: tuple[str, ...] = (),
    nested: dict[str, Any] | None = None,
) -> type[BaseModel]:
    """`model` with every field but `required` optional (default None), same constraints and descriptions, unknown
    keys refused: a group's defaults and its compact entries are checked key by key where they are written."""
    fields: dict[str, Any] = {}
    for key, f in model.model_fields.items():
        if key in skip:
            continue
        annotation: Any = (nested or {}).get(key, f.annotation)
        if key not in required:
            annotation = annotation | None
        if f.metadata:  # the constraints (pattern, ge, ...) of the full field
            annotation = Annotated[(annotation, *f.metadata)]
        fields[key] = (annotation, Field(... if key in required else None, description=f.description))
    return create_model(name, __base__=_Strict, __doc__=doc, **fields)


PartialModelSource = _partial(
    ModelSource, "PartialModelSource", "Some keys of a model's source; the rest come from the group's defaults."
)
ModelDefaults = _partial(
    Model,
    "ModelDefaults",
    "Keys every model of the group gets unless its entry sets them (source merges key by key).",
    skip=("name",),
    nested={"source": PartialModelSource},
)
ModelEntry = _partial(
    Model,
    "ModelEntry",
    "One model of a group: its own keys over the group's defaults (source merges key by key).",
    required=("name",),
    nested={"source": PartialModelSource},
)


def _merge(defaults: dict[str, Any], entry: dict[str, Any]) -> dict[str, Any]:
    """entry over defaults; mappings (source, replicas, shape) merge key by key."""
    out = dict(defaults)
    for key, value in entry.items():
        out[key] = {**out[key], **value} if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


class ModelGroup(_Strict):
    """Models written compactly: shared keys once in defaults, each model only what differs."""

    defaults: Annotated[
        ModelDefaults,  # type: ignore[valid-type]
        Field(
            description="keys every model of the group shares (any model key but name; source may be partial, e.g. hf_repo and revision)"
        ),
    ] = ModelDefaults()
    models: Annotated[
        list[ModelEntry],  # type: ignore[valid-type]
        Field(
            min_length=1,
            description="the group's models: each a name and what differs from defaults, e.g. {name: m-0001, source: {file: m-0001.gguf}}",
        ),
    ]
    _expanded: tuple[Model, ...] = PrivateAttr(default=())
    _from_defaults: tuple[frozenset[str], ...] = PrivateAttr(default=())

    @model_validator(mode="wrap")
    @classmethod
    def _expand(cls, data: Any, handler: Any) -> ModelGroup:
        """Merge each entry over the defaults and validate it as a Model. Errors keep their place: a key of the
        defaults at defaults.<key>, an entry's (or its merged model's) at models[j].<key> — the Config prefixes
        model_groups[g]. Entries that are well-formed on their own are merged even when another one is not, so one
        run reports every problem."""
        try:
            group = handler(data)
        except ValidationError as exc:
            errors = [_detail(e, ()) for e in exc.errors()]
            raw = data if isinstance(data, dict) else {}
            entries = raw.get("models")
            if any(e["loc"][:1] == ("defaults",) for e in errors) or not isinstance(entries, list):
                raise
            broken = {e["loc"][1] for e in errors if e["loc"][:1] == ("models",) and len(e["loc"]) > 1}
            defaults = ModelDefaults.model_validate(raw.get("defaults") or {}).model_dump(exclude_unset=True)
            own = [
                (j, ModelEntry.model_validate(x).model_dump(exclude_unset=True))
                for j, x in enumerate(entries)
                if j not in broken
            ]
            errors += _expand_entries(defaults, own)[2]
            raise ValidationError.from_exception_data("ModelGroup", errors) from None
        defaults = group.defaults.model_dump(exclude_unset=True)
        expanded, origins, errors = _expand_entries(
            defaults, [(j, e.model_dump(exclude_unset=True)) for j, e in enumerate(group.models)]
        )
        if errors:
            raise ValidationError.from_exception_data("ModelGroup", errors)
        group._expanded, group._from_defaults = tuple(expanded), tuple(origins)
        return group


def _detail(e: Any, prefix: tuple[Any, ...]) -> InitErrorDetails:
    """A pydantic error again, at `prefix` + its place (to re-raise it from a validator)."""
    return InitErrorDetails(type=e["type"], loc=(*prefix, *e["loc"]), input=e["input"], ctx=e.get("ctx", {}))


def _expand_entries(
    defaults: dict[str, Any], entries: list[tuple[int, dict[str, Any]]]
) -> tuple[list[Model], list[frozenset[str]], list[InitErrorDetails]]:
    """(models, the keys each took from defaults, errors at models[j].<key>) for entries (j, own keys)."""
    models: list[Model] = []
    origins: list[frozenset[str]] = []
    errors: list[InitErrorDetails] = []
    for j, own in entries:
        try:
            models.append(Model.model_validate(_merge(defaults, own)))
        except ValidationError as exc:
            errors += [_detail(e, ("models", j)) for e in exc.errors()]
            continue
        origins.append(frozenset(k for k in defaults if k not in own))
    return models, origins, errors


# The p95 latency SLO of one model's answer up to its first token (the part that does not grow with the answer's
# length; on EKS the router's/gateway's time to the response head), the one default of every entry point:
# config.yaml `slo.p95_latency_ms`, DeploymentProps.p95_latency_ms, GravitonEndpointProps / MultiModelEndpointProps
# .latency_slo (the SageMaker alarm adds the answer's decode time: monitoring/latency.py). It lives here, the lowest
# layer that states it, so config can read it. 2 s: the shipped configs serving a 7-8B model on CPU
# (examples/slm-prefilter-sagemaker.yaml, vllm-*.yaml) all set 2000; an SLM-only deployment sets less (config.yaml:
# 500).
FIRST_TOKEN_SLO_MS = 2000
# farm.dedicated_stacks' default (patterns/deployment.DedicatedStacks): 0, the dedicated models stay in the farm's
# stack, so a deployed farm never moves (replaces) them by upgrading; a farm with more dedicated SageMaker endpoints
# than one stack holds sets it (16 nested stacks hold ~600 — README "Dedicated models at scale").
DEDICATED_STACKS = 0
# farm.dedicated_copy: how a farm's dedicated GGUF models are copied (patterns/model_farm.ModelFarmProps). `catalog`
# (default): by the farm's ModelCatalog, first, the deploy waiting for their keys only (one bounded resource);
# `artifact`: one ModelArtifact each (6 resources per model), as farms deployed before. A deployed farm that switches
# is checked at deploy time: a branch revision the catalog resolves to other bytes than the deployed ones fails the
# deploy, naming the commit to pin (model_download/catalog_wait.py).
DEDICATED_COPIES = ("catalog", "artifact")
DEDICATED_COPY = "catalog"
# farm.dedicated_hosting: how a SageMaker farm hosts its dedicated models (patterns/model_farm.ModelFarmProps).
# `endpoints` (default): one GravitonEndpoint each (14 resources a model), as farms deployed before — so upgrading
# never replaces a deployed farm's endpoints; `inference_components`: one shared endpoint per instance type and ONE
# AWS::SageMaker::InferenceComponent per model (sagemaker/inference_components.py). SageMaker only.
DEDICATED_HOSTINGS = ("endpoints", "inference_components")
DEDICATED_HOSTING = "endpoints"
# farm.shared_endpoints' defaults (sagemaker/inference_components.InferenceComponentsProps): instances 1..16 and a
# 64 GB ML storage volume per instance — fixed numbers, so adding a model never changes an endpoint.
SHARED_MIN_INSTANCES = 1
SHARED_MAX_INSTANCES = 16
SHARED_VOLUME_SIZE_GB = 64


class Slo(_Strict):
    p95_latency_ms: Annotated[
        int,
        Field(
            gt=0,
            description="p95 latency SLO up to the first token (response head) in milliseconds, e.g. 500 for an SLM",
        ),
    ] = FIRST_TOKEN_SLO_MS
    peak_requests_per_second: Annotated[
        float, Field(gt=0, description="sustained peak requests/s per endpoint, e.g. 20")
    ] = 10


class EscalationKind(str, Enum):
    OPENAI = "openai"
    SAGEMAKER = "sagemaker"
    BEDROCK = "bedrock"
    MODEL = "model"  # a self-hosted model of this config with role: llm


class Escalation(_Strict):
    kind: Annotated[EscalationKind, Field(description="openai | sagemaker | bedrock | model")]
    url: Annotated[
        str | None,
        Field(
            pattern=r"^https?://",
            description="OpenAI-compatible base URL, e.g. https://llm.example.com/v1 (kind: openai)",
        ),
    ] = None
    api_key_secret_name: Annotated[
        str | None, Field(description="Secrets Manager secret with the API key (kind: openai)")
    ] = None
    endpoint_name: Annotated[
        str | None,
        Field(pattern=r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$", description="SageMaker endpoint name (kind: sagemaker)"),
    ] = None
    model_id: Annotated[
        str | None,
        Field(
            min_length=1,
            description="Bedrock model id, e.g. anthropic.claude-3-5-haiku-20241022-v1:0 (kind: bedrock) or served model name (kind: openai)",
        ),
    ] = None
    model: Annotated[str | None, Field(description="name of a model in models with role: llm (kind: model)")] = None

    @model_validator(mode="after")
    def _kind_fields(self) -> Escalation:
        need = {"openai": "url", "sagemaker": "endpoint_name", "bedrock": "model_id", "model": "model"}[self.kind]
        if getattr(self, need) is None:
            raise ValueError(f"kind {self.kind} needs escalation.{need}")
        return self


class Router(_Strict):
    labels: Annotated[
        list[Annotated[str, Field(pattern=r"^[a-z][a-z0-9_-]*$")]],
        Field(min_length=2, description="classification labels the SLM must choose from"),
    ] = ["simple", "complex"]
    slm_labels: Annotated[
        list[str], Field(min_length=1, description="labels the SLM answers itself; the rest escalate")
    ] = ["simple"]
    confidence_threshold: Annotated[
        float, Field(ge=0, le=1, description="minimum label probability for the SLM to answer, e.g. 0.7")
    ] = 0.7
    few_shot: Annotated[
        list[dict[str, str]],
        Field(description="examples {text: ..., label: ...} prepended to the classification prompt"),
    ] = []
    instructions: Annotated[
        str | None,
        Field(
            min_length=20,
            description="the classification system prompt; {labels} becomes the labels. Write your own when you change the labels (default: the router's prompt for simple/complex)",
        ),
    ] = None
    classify_max_chars: Annotated[
        int | None,
        Field(
            ge=16,
            description="characters of a request the SLM classifies (longer ones: head and tail), e.g. 1000; default the router's 2000. The SLM's context per slot grows with it",
        ),
    ] = None
    answer_max_tokens: Annotated[
        int,
        Field(
            ge=16,
            le=131072,
            description="tokens each SLM slot keeps free to answer a simple request of classify_max_chars characters, e.g. 512 (default)",
        ),
    ] = DEFAULT_ANSWER_MAX_TOKENS
    replicas: Replicas = Replicas(min=2, max=6)

    @model_validator(mode="after")
    def _labels(self) -> Router:
        unknown = [x for x in self.slm_labels if x not in self.labels]
        if unknown:
            raise ValueError(f"slm_labels {unknown} are not in labels {self.labels} — use labels from the list")
        return self


KUBERNETES_MINORS = ("1.33", "1.34", "1.35")
Architecture = Literal["arm64", "amd64"]
CapacityType = Literal["spot", "on-demand"]


class Eks(_Strict):
    kubernetes_version: Annotated[
        Literal[KUBERNETES_MINORS],  # type: ignore[valid-type]
        Field(description="EKS Kubernetes minor: 1.33, 1.34 or 1.35"),
    ] = "1.35"
    architectures: Annotated[
        list[Architecture], Field(min_length=1, description="node CPU architectures: arm64 (Graviton) and/or amd64")
    ] = ["arm64", "amd64"]
    capacity_types: Annotated[
        list[CapacityType],
        Field(min_length=1, description="spot and/or on-demand; Spot is preferred when both are listed"),
    ] = ["spot", "on-demand"]
    instance_families: Annotated[
        list[str], Field(min_length=1, description="EC2 families Karpenter may choose, e.g. [c7g, c8g, m7g, c7a, c7i]")
    ] = ["c7g", "c8g", "m7g", "m8g", "r7g", "c7a", "m7a", "c7i", "m7i"]
    instance_types: Annotated[
        list[str], Field(description="exact EC2 instance types, narrowing the families (optional)")
    ] = []
    system_instance_type: Annotated[
        str, Field(description="instance type of the small system node group (CoreDNS, Karpenter, KEDA)")
    ] = "m7g.large"
    endpoint_access: Annotated[
        Literal["public-and-private", "private"], Field(description="EKS API endpoint access")
    ] = "public-and-private"
    admin_principal_arns: Annotated[
        list[Annotated[str, Field(pattern=r"^arn:aws[a-z-]*:iam::\d{12}:(role|user)/")]],
        Field(
            description="IAM role/user ARNs given cluster-admin access entries (not sts assumed-role ARNs: EKS access entries refuse session principals)"
        ),
    ] = []
    prometheus: Annotated[
        Literal["amp", "in-cluster"],
        Field(description="amp (Amazon Managed Prometheus + managed scraper) or in-cluster"),
    ] = "amp"
    max_node_cpu: Annotated[int, Field(gt=0, description="Karpenter NodePool CPU limit across all nodes")] = 256
    consolidation_budget: Annotated[
        str, Field(pattern=r"^(\d+%|\d+)$", description="max nodes disrupted at once, e.g. 20% or 2")
    ] = "20%"
    # The Mountpoint for S3 CSI driver of a model farm's cluster (eks/mountpoint.py checks the values at synth).
    install_mountpoint_addon: Annotated[
        bool,
        Field(
            description="model-farm: install the Mountpoint for S3 CSI driver add-on (pools read models through it); false when the cluster already runs the driver — then set mountpoint_driver_role_arn"
        ),
    ] = True
    mountpoint_version: Annotated[
        str | None,
        Field(
            description="aws-mountpoint-s3-csi-driver add-on build, v2.5.0 or later, e.g. v2.7.0-eksbuild.1; default: the library's pinned build"
        ),
    ] = None
    mountpoint_driver_role_arn: Annotated[
        str | None,
        Field(
            description="with install_mountpoint_addon false: the IAM role ARN the installed driver reads S3 with; the farm grants it read of its model prefix"
        ),
    ] = None


class SageMaker(_Strict):
    instance_type: Annotated[str, Field(description="default endpoint instance type, e.g. ml.c7g.2xlarge")] = (
        "ml.c7g.2xlarge"
    )
    network_isolation: Annotated[bool, Field(description="no outbound network from the model container")] = True
    data_capture_percent: Annotated[
        int, Field(ge=0, le=100, description="percent of requests captured to S3 (0 = off)")
    ] = 0


class FarmPool(_Strict):
    """A multi-model pool: EKS, a StatefulSet of llama-server routers (load on first request, LRU unload);
    SageMaker, one multi-model endpoint."""

    name: Annotated[str, Field(pattern=_NAME, description="pool name, DNS-safe and unique, e.g. small or medium")]
    cpu: Annotated[
        float, Field(gt=0, le=192, description="vCPUs per pool replica on EKS, shared by its loaded models, e.g. 4")
    ] = 4
    memory_gib: Annotated[
        float,
        Field(gt=0, le=3072, description="memory per pool replica on EKS in GiB; models_max follows from it, e.g. 16"),
    ] = 16
    replicas: Annotated[
        Replicas,
        Field(description="pool replicas (EKS pods, scaled by KEDA on in-flight requests) or SageMaker instances"),
    ] = Replicas(min=1, max=4)
    replication: Annotated[
        int,
        Field(
            ge=1,
            description="EKS: pool replicas the gateway routes each model to (model affinity), at most replicas.max, e.g. 2",
        ),
    ] = 2
    models_max: Annotated[
        int | None, Field(ge=1, description="models loaded at once per replica; default computed by sizing from memory")
    ] = None
    instance_type: Annotated[
        str | None,
        Field(
            description="SageMaker instance type of this pool's multi-model endpoint, e.g. ml.r7gd.2xlarge; default sagemaker.instance_type"
        ),
    ] = None
    preload: Annotated[
        list[str],
        Field(
            description="EKS only: hot models of this pool that every replica loads when it starts, not on their first "
            "request; each a model of this pool, at most its models_max, e.g. [chat-small]",
        ),
    ] = []


class SharedEndpoints(_Strict):
    """The endpoints farm.dedicated_hosting: inference_components shares between the dedicated models (one per
    instance type): fixed numbers, never computed from the models, so adding a model changes no endpoint."""

    instances: Annotated[
        Replicas,
        Field(
            description="ManagedInstanceScaling bounds of each shared endpoint (min >= 1, the initial count); each copy of a "
            "dedicated model takes one instance, so max must hold the sum of its instance type's models' replicas.min",
        ),
    ] = Replicas(min=SHARED_MIN_INSTANCES, max=SHARED_MAX_INSTANCES)
    volume_size_gb: Annotated[
        int,
        Field(
            ge=1,
            le=512,
            description="ML storage volume per instance in GB, at least the largest dedicated model + 10% + 6 GiB "
            "(ignored on instance-storage types such as ml.r7gd)",
        ),
    ] = SHARED_VOLUME_SIZE_GB

    @model_validator(mode="after")
    def _at_least_one(self) -> SharedEndpoints:
        if self.instances.min < 1:
            raise ValueError(
                "instances.min must be >= 1: a shared endpoint keeps one instance (scale to zero is not supported here)"
            )
        return self


class Farm(_Strict):
    pools: Annotated[
        list[FarmPool],
        Field(
            min_length=1,
            description="the multi-model pools of a model farm; a pooled model goes to its pool: or the first",
        ),
    ] = [FarmPool(name="default")]
    gateway: Annotated[
        Replicas, Field(description="replicas of the farm's gateway (routes each model to its pool replicas)")
    ] = Replicas(min=2, max=6)
    dedicated_stacks: Annotated[
        int,
        Field(
            ge=0,
            le=64,
            description="nested CloudFormation stacks the dedicated models (SageMaker endpoints; EKS manifests) are spread "
            "over, each by a stable hash of its name (0: in the farm's stack); needed past ~30 dedicated endpoints or "
            "~60 dedicated EKS models (500 resources, 1 MB per stack); fixed once deployed — changing it moves most "
            "dedicated models to another stack, which replaces them",
        ),
    ] = DEDICATED_STACKS
    dedicated_copy: Annotated[
        Literal["catalog", "artifact"],
        Field(
            description="catalog (default): dedicated GGUF models are copied by the farm's catalog, first, and the deploy "
            "waits (bounded) for them only; artifact: one copy resource per model, as farms deployed before"
        ),
    ] = DEDICATED_COPY  # type: ignore[assignment]
    dedicated_hosting: Annotated[
        Literal["endpoints", "inference_components"],
        Field(
            description="SageMaker only. endpoints (default): one endpoint per dedicated model (14 CloudFormation resources "
            "each); inference_components: one shared endpoint per instance type and one inference component per dedicated "
            "model (1 resource each; llama.cpp models copied by the catalog; needs sagemaker.network_isolation: false). "
            "Switching a deployed farm replaces its dedicated endpoints",
        ),
    ] = DEDICATED_HOSTING  # type: ignore[assignment]
    shared_endpoints: Annotated[
        SharedEndpoints,
        Field(description="with dedicated_hosting: inference_components, the shared endpoints (one per instance type)"),
    ] = SharedEndpoints()


@dataclass(frozen=True)
class ModelOrigin:
    """Where a model of Config.models was written: models[i], or model_groups[g].models[j] (and which keys it took
    from that group's defaults), so problems name the line the user wrote."""

    path: str
    defaults_path: str | None = None
    from_defaults: frozenset[str] = frozenset()

    def key(self, key: str) -> str:
        return f"{self.defaults_path}.{key}" if key in self.from_defaults else f"{self.path}.{key}"


class Config(_Strict):
    project: Project = Project()
    # validate_default: a default enum member becomes its value too (use_enum_values), so it prints as "eks".
    target: Annotated[Target, Field(validate_default=True, description="eks or sagemaker")] = Target.EKS
    pattern: Annotated[Pattern, Field(validate_default=True, description="slm-prefilter or model-farm")] = (
        Pattern.SLM_PREFILTER
    )
    slo: Slo = Slo()
    models: Annotated[
        list[Model], Field(description="the models to serve (with model_groups: at least one in all)")
    ] = []
    model_groups: Annotated[
        list[ModelGroup],
        Field(
            description="models written compactly: per group defaults and a list of short entries (expanded into models)"
        ),
    ] = []
    escalation: Escalation | None = None
    router: Router = Router()
    farm: Farm = Farm()
    eks: Eks = Eks()
    sagemaker: SageMaker = SageMaker()
    _origins: tuple[ModelOrigin, ...] = PrivateAttr(default=())

    @model_validator(mode="wrap")
    @classmethod
    def _expand_groups(cls, data: Any, handler: Any) -> Config:
        """model_groups become models (after the listed ones): Config.models holds every model, model_groups is
        emptied, and model_path(i) / key_path(i, key) say where model i was written."""
        config = handler(data)
        if config._origins:
            return config  # already expanded (a validated instance passed through)
        origins = [ModelOrigin(f"models[{i}]") for i in range(len(config.models))]
        models = list(config.models)
        for g, group in enumerate(config.model_groups):
            models += group._expanded
            origins += [
                ModelOrigin(f"model_groups[{g}].models[{j}]", f"model_groups[{g}].defaults", keys)
                for j, keys in enumerate(group._from_defaults)
            ]
        errors: list[InitErrorDetails] = []
        if not models:
            errors.append(
                InitErrorDetails(
                    type="value_error",
                    loc=("models",),
                    input=[],
                    ctx={"error": ValueError("no model to serve — list models under models: or model_groups:")},
                )
            )
        first: dict[str, str] = {}
        for m, origin in zip(models, origins, strict=True):
            if m.name in first and origin.defaults_path is not None:  # the listed models' repeats: _unique_names
                loc = tuple(int(p) if p.isdigit() else p for p in re.split(r"[.\[\]]+", origin.path) if p) + ("name",)
                errors.append(
                    InitErrorDetails(
                        type="value_error",
                        loc=loc,
                        input=m.name,
                        ctx={
                            "error": ValueError(
                                f"model name {m.name!r} appears twice (also {first[m.name]}) — model names must be unique"
                            )
                        },
                    )
                )
            first.setdefault(m.name, origin.path)
        if errors:
            raise ValidationError.from_exception_data("Config", errors)
        if config.model_groups:
            config = config.model_copy(update={"models": models, "model_groups": []})
        config._origins = tuple(origins)
        return config

    @model_validator(mode="after")
    def _dedicated_hosting(self) -> Config:
        """farm.dedicated_hosting inference_components is a SageMaker farm's: refused elsewhere, naming the key."""
        if self.farm.dedicated_hosting == "inference_components":
            if self.target != "sagemaker":
                raise ValueError(
                    f"farm.dedicated_hosting: inference_components is for target sagemaker (target is {self.target}) — "
                    "remove farm.dedicated_hosting, or set target: sagemaker"
                )
            if self.sagemaker.network_isolation:
                raise ValueError(
                    "farm.dedicated_hosting: inference_components — an inference component's container has no network "
                    "isolation (only a SageMaker Model has EnableNetworkIsolation): set sagemaker.network_isolation: false "
                    "to accept that, or keep farm.dedicated_hosting: endpoints"
                )
            if self.farm.dedicated_copy != "catalog":
                raise ValueError(
                    "farm.dedicated_hosting: inference_components reads each dedicated model's tarball from the farm's "
                    "catalog — remove farm.dedicated_copy: artifact"
                )
        return self

    @field_validator("models")
    @classmethod
    def _unique_names(cls, models: list[Model]) -> list[Model]:
        seen: set[str] = set()
        for m in models:
            if m.name in seen:
                raise ValueError(f"model name {m.name!r} appears twice — model names must be unique")
            seen.add(m.name)
        return models

    def role_of(self, model: Model) -> str:
        if model.role:
            return model.role
        return "farm" if self.pattern == "model-farm" else "slm"

    def serving_of(self, model: Model) -> str:
        """pool or dedicated: the model's own serving:, else pool for a llama.cpp farm model of model-farm (a vLLM
        process serves one model: always dedicated)."""
        if model.serving:
            return model.serving
        pooled = self.pattern == "model-farm" and self.role_of(model) == "farm" and model.engine != VLLM
        return "pool" if pooled else "dedicated"

    def pool_of(self, model: Model) -> FarmPool | None:
        """The pool serving `model` (its pool:, else the first), or None when it is served dedicated or the pool
        does not exist (config.rules reports that)."""
        if self.serving_of(model) != "pool":
            return None
        name = model.pool or self.farm.pools[0].name
        return next((p for p in self.farm.pools if p.name == name), None)

    def pool_models(self, pool: str) -> list[Model]:
        return [m for m in self.models if (p := self.pool_of(m)) is not None and p.name == pool]

    def model_path(self, i: int) -> str:
        """Where models[i] was written: models[i] or model_groups[g].models[j]."""
        return self._origins[i].path if i < len(self._origins) else f"models[{i}]"

    def key_path(self, i: int, key: str) -> str:
        """Where key `key` of models[i] was written: the entry, or its group's defaults when it came from there."""
        return self._origins[i].key(key) if i < len(self._origins) else f"models[{i}].{key}"


def is_valid_name(value: str) -> bool:
    return re.match(_NAME, value) is not None
