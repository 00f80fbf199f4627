"""The config.yaml schema (pydantic v2). Every model forbids unknown keys so typos fail loudly.

Field descriptions double as the fix hint in error messages and as editor help in config.schema.json,
so each says what the value is and what a good one looks like.
"""

from __future__ import annotations

import re
from enum import Enum
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ..slm_context import DEFAULT_ANSWER_MAX_TOKENS


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
    "Q2_K", "Q3_K_S", "Q3_K_M", "Q3_K_L", "IQ4_XS", "IQ4_NL", "Q4_0", "Q4_1", "Q4_K_S", "Q4_K_M",
    "Q5_0", "Q5_1", "Q5_K_S", "Q5_K_M", "Q6_K", "Q8_0", "F16", "BF16", "F32",
)
Quantization = Literal[QUANTIZATIONS]  # type: ignore[valid-type]

_NAME = r"^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$"
_HF_REPO = r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$"


class Project(_Strict):
    name: Annotated[str, Field(pattern=_NAME, description="Stack-name prefix: lowercase letters, digits, '-' (max 40)")] = "cpu-inference"
    tags: Annotated[dict[str, str], Field(description="Tags applied to every resource, e.g. {team: ml-platform}")] = {}


class ModelSource(_Strict):
    hf_repo: Annotated[str, Field(pattern=_HF_REPO, description="the Hugging Face repo, as owner/name")]
    file: Annotated[str, Field(pattern=r"^[^/].*\.gguf$", description="the GGUF file name inside the repo (ends in .gguf)")]
    revision: Annotated[str, Field(min_length=1, description="a commit sha (reproducible) or a branch/tag such as main")] = "main"
    sha256: Annotated[str | None, Field(pattern=r"^[0-9a-f]{64}$", description="expected sha256 of the file (64 hex chars); default: the one the Hub reports")] = None
    token_secret_name: Annotated[str | None, Field(min_length=1, description="Secrets Manager secret holding a Hugging Face token, for gated models")] = None
    size_bytes: Annotated[int | None, Field(gt=0, description="the GGUF file size in bytes, when known (sharper sizing)")] = None


class ModelShape(_Strict):
    """Transformer shape, when known, for an exact KV-cache size (else estimated from the parameter count)."""

    layers: Annotated[int, Field(gt=0, description="number of transformer blocks (n_layer)")]
    kv_heads: Annotated[int, Field(gt=0, description="number of key/value heads (n_head_kv)")]
    head_dim: Annotated[int, Field(gt=0, description="dimension of one attention head")]


class Replicas(_Strict):
    min: Annotated[int, Field(ge=0, description="minimum replicas (0 allows scale to zero on EKS)")] = 1
    max: Annotated[int, Field(ge=1, description="maximum replicas / instances")] = 4

    @model_validator(mode="after")
    def _ordered(self) -> Replicas:
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) is greater than max ({self.max}) — set min ≤ max")
        return self


class Model(_Strict):
    name: Annotated[str, Field(pattern=_NAME, description="short DNS-safe name, unique in the config, e.g. smollm2-135m")]
    source: ModelSource
    quantization: Annotated[Quantization, Field(description="GGUF quantization, e.g. Q4_K_M (default), Q5_K_M, Q8_0")] = "Q4_K_M"
    parameters_billions: Annotated[float, Field(gt=0, le=2000, description="parameter count in billions, e.g. 0.135 or 8")]
    context_window: Annotated[int, Field(ge=128, le=1_048_576, description="the longest context one request needs (tokens), at most the model's trained context")] = 4096
    task: Annotated[Task, Field(description="classification | routing | extraction | chat | embedding | rerank | batch")] = Task.CHAT
    role: Annotated[Role | None, Field(description="slm | llm (slm-prefilter) or farm (model-farm); default from the pattern")] = None
    shape: ModelShape | None = None
    parallel_slots: Annotated[int | None, Field(ge=1, le=64, description="llama.cpp parallel slots; default computed by sizing")] = None
    context_per_slot: Annotated[int | None, Field(ge=128, description="tokens of context per slot; default from the task and context_window")] = None
    cpu: Annotated[float | None, Field(gt=0, le=192, description="vCPUs per replica on EKS (= engine threads); default from sizing")] = None
    instance_type: Annotated[str | None, Field(description="SageMaker instance type for this model, e.g. ml.c7g.2xlarge; default sagemaker.instance_type")] = None
    replicas: Replicas = Replicas()

    @model_validator(mode="after")
    def _slot_context(self) -> Model:
        if self.context_per_slot is not None and self.context_per_slot > self.context_window:
            raise ValueError(
                f"context_per_slot ({self.context_per_slot}) exceeds context_window ({self.context_window}) — "
                "lower context_per_slot or raise context_window"
            )
        return self


class Slo(_Strict):
    p95_latency_ms: Annotated[int, Field(gt=0, description="end-to-end p95 latency target in milliseconds, e.g. 500")] = 500
    peak_requests_per_second: Annotated[float, Field(gt=0, description="sustained peak requests/s per endpoint, e.g. 20")] = 10


class EscalationKind(str, Enum):
    OPENAI = "openai"
    SAGEMAKER = "sagemaker"
    BEDROCK = "bedrock"
    MODEL = "model"  # a self-hosted model of this config with role: llm


class Escalation(_Strict):
    kind: Annotated[EscalationKind, Field(description="openai | sagemaker | bedrock | model")]
    url: Annotated[str | None, Field(pattern=r"^https?://", description="OpenAI-compatible base URL, e.g. https://llm.example.com/v1 (kind: openai)")] = None
    api_key_secret_name: Annotated[str | None, Field(description="Secrets Manager secret with the API key (kind: openai)")] = None
    endpoint_name: Annotated[str | None, Field(pattern=r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$", description="SageMaker endpoint name (kind: sagemaker)")] = None
    model_id: Annotated[str | None, Field(min_length=1, description="Bedrock model id, e.g. anthropic.claude-3-5-haiku-20241022-v1:0 (kind: bedrock) or served model name (kind: openai)")] = None
    model: Annotated[str | None, Field(description="name of a model in models with role: llm (kind: model)")] = None

    @model_validator(mode="after")
    def _kind_fields(self) -> Escalation:
        need = {"openai": "url", "sagemaker": "endpoint_name", "bedrock": "model_id", "model": "model"}[self.kind]
        if getattr(self, need) is None:
            raise ValueError(f"kind {self.kind} needs escalation.{need}")
        return self


class Router(_Strict):
    labels: Annotated[list[Annotated[str, Field(pattern=r"^[a-z][a-z0-9_-]*$")]], Field(min_length=2, description="classification labels the SLM must choose from")] = ["simple", "complex"]
    slm_labels: Annotated[list[str], Field(min_length=1, description="labels the SLM answers itself; the rest escalate")] = ["simple"]
    confidence_threshold: Annotated[float, Field(ge=0, le=1, description="minimum label probability for the SLM to answer, e.g. 0.7")] = 0.7
    few_shot: Annotated[list[dict[str, str]], Field(description="examples {text: ..., label: ...} prepended to the classification prompt")] = []
    instructions: Annotated[str | None, Field(min_length=20, description="the classification system prompt; {labels} becomes the labels. Write your own when you change the labels (default: the router's prompt for simple/complex)")] = None
    classify_max_chars: Annotated[int | None, Field(ge=16, description="characters of a request the SLM classifies (longer ones: head and tail), e.g. 1000; default the router's 2000. The SLM's context per slot grows with it")] = None
    answer_max_tokens: Annotated[int, Field(ge=16, le=131072, description="tokens each SLM slot keeps free to answer a simple request of classify_max_chars characters, e.g. 512 (default)")] = DEFAULT_ANSWER_MAX_TOKENS
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
    kubernetes_version: Annotated[Literal[KUBERNETES_MINORS], Field(description="EKS Kubernetes minor: 1.33, 1.34 or 1.35")] = "1.35"  # type: ignore[valid-type]
    architectures: Annotated[list[Architecture], Field(min_length=1, description="node CPU architectures: arm64 (Graviton) and/or amd64")] = ["arm64", "amd64"]
    capacity_types: Annotated[list[CapacityType], Field(min_length=1, description="spot and/or on-demand; Spot is preferred when both are listed")] = ["spot", "on-demand"]
    instance_families: Annotated[list[str], Field(min_length=1, description="EC2 families Karpenter may choose, e.g. [c7g, c8g, m7g, c7a, c7i]")] = ["c7g", "c8g", "m7g", "m8g", "r7g", "c7a", "m7a", "c7i", "m7i"]
    instance_types: Annotated[list[str], Field(description="exact EC2 instance types, narrowing the families (optional)")] = []
    system_instance_type: Annotated[str, Field(description="instance type of the small system node group (CoreDNS, Karpenter, KEDA)")] = "m7g.large"
    endpoint_access: Annotated[Literal["public-and-private", "private"], Field(description="EKS API endpoint access")] = "public-and-private"
    admin_principal_arns: Annotated[list[Annotated[str, Field(pattern=r"^arn:aws[a-z-]*:iam::\d{12}:(role|user)/")]], Field(description="IAM role/user ARNs given cluster-admin access entries (not sts assumed-role ARNs: EKS access entries refuse session principals)")] = []
    prometheus: Annotated[Literal["amp", "in-cluster"], Field(description="amp (Amazon Managed Prometheus + managed scraper) or in-cluster")] = "amp"
    max_node_cpu: Annotated[int, Field(gt=0, description="Karpenter NodePool CPU limit across all nodes")] = 256
    consolidation_budget: Annotated[str, Field(pattern=r"^(\d+%|\d+)$", description="max nodes disrupted at once, e.g. 20% or 2")] = "20%"


class SageMaker(_Strict):
    instance_type: Annotated[str, Field(description="default endpoint instance type, e.g. ml.c7g.2xlarge")] = "ml.c7g.2xlarge"
    network_isolation: Annotated[bool, Field(description="no outbound network from the model container")] = True
    data_capture_percent: Annotated[int, Field(ge=0, le=100, description="percent of requests captured to S3 (0 = off)")] = 0


class Config(_Strict):
    project: Project = Project()
    target: Annotated[Target, Field(description="eks or sagemaker")] = Target.EKS
    pattern: Annotated[Pattern, Field(description="slm-prefilter or model-farm")] = Pattern.SLM_PREFILTER
    slo: Slo = Slo()
    models: Annotated[list[Model], Field(min_length=1, description="the models to serve")]
    escalation: Escalation | None = None
    router: Router = Router()
    eks: Eks = Eks()
    sagemaker: SageMaker = SageMaker()

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


def is_valid_name(value: str) -> bool:
    return re.match(_NAME, value) is not None
