"""A model as the patterns serve it: where it comes from, how it is sized, how it scales."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from cpu_inference import sizing
from cpu_inference.config.schema import ADAPTER_SIZE_MB
from cpu_inference.engines import is_vllm
from cpu_inference.engines.adapter_hosting import adapter_task_problem
from inference_runtime.lora import DEFAULT_SCALE, scale_problem
from model_download.catalog import NAME, PEFT_WEIGHTS
from model_download.hub import DEFAULT_REVISION

_SHA256 = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class ServedAdapter:
    """A LoRA adapter served over its ServedModel (the base): clients send `name` as `model`, the base's engine
    applies the adapter to that request only (patterns/README.md "Adapters (LoRA)").

    name: DNS label, unique among the pattern's models and adapters (the catalog key farm/<name>/...).
    hf_repo / file / revision / sha256 / token_secret_name: the adapter's GGUF on the Hub, as a model's.
    scale: the adapter's strength, (0, 4]. size_bytes: its GGUF's size, counted in the base's memory (default
    config.schema.ADAPTER_SIZE_MB)."""

    name: str
    hf_repo: str
    file: str
    revision: str = DEFAULT_REVISION
    sha256: str | None = None
    token_secret_name: str | None = None
    scale: float = DEFAULT_SCALE
    size_bytes: int = int(ADAPTER_SIZE_MB * 1e6)

    def validate(self, base: str) -> None:
        where = f"ServedModel {base}: adapter {self.name!r}"
        if not NAME.match(self.name):
            raise ValueError(f"{where}: name must be a DNS label (lowercase letters, digits, '-'; at most 63)")
        peft = self.file.rsplit("/", 1)[-1] == PEFT_WEIGHTS  # converted to GGUF by the catalog copy
        if not (self.file.endswith(".gguf") or peft) or self.file.startswith("/"):
            raise ValueError(
                f"{where}: file must be the adapter's .gguf in the repo, or a PEFT adapter's {PEFT_WEIGHTS} (the "
                f"catalog copy converts it with the engine pin's convert_lora_to_gguf.py), got {self.file!r}"
            )
        problem = scale_problem(self.scale)
        if problem:
            raise ValueError(f"{where}: scale {problem}")
        if self.sha256 is not None and not _SHA256.match(self.sha256):
            raise ValueError(f"{where}: sha256 must be 64 lowercase hex characters")
        if self.size_bytes < 1:
            raise ValueError(f"{where}: size_bytes must be ≥ 1")


@dataclass(frozen=True)
class ServedModel:
    """One model and its serving settings: a GGUF file for engine llama.cpp, a safetensors repo for engine vllm
    (`spec.engine`).

    name: DNS-safe name, unique in the pattern (S3 prefix models/<name>/, Kubernetes names, endpoint names).
    hf_repo / file / revision: the Hugging Face source (file: the .gguf, llama.cpp only; vLLM copies the repo's
    safetensors checkpoint); sha256 pins the GGUF's bytes (default: the Hub's LFS sha256).
    token_secret_name: Secrets Manager secret with a Hugging Face token, for gated models.
    spec: what sizing needs (parameters, quantization, context, task, shape).
    role: slm | llm | farm. replicas_min/max: scaling bounds. instance_type: SageMaker instance (target sagemaker).
    cpu: vCPUs per replica on EKS (default from sizing).
    pool: the farm pool that serves it (model-farm), or None for its own workload/endpoint (dedicated).
    adapters: LoRA adapters served over it (ServedAdapter; a model-farm on EKS, engine llama.cpp; ids follow this
    order). Their bytes are counted in its memory: `spec.adapter_bytes` is their size_bytes summed.
    """

    name: str
    hf_repo: str
    file: str | None
    spec: sizing.ModelSpec
    revision: str = DEFAULT_REVISION
    sha256: str | None = None
    token_secret_name: str | None = None
    role: str = "slm"
    replicas_min: int = 1
    replicas_max: int = 4
    instance_type: str | None = None
    cpu: float | None = None
    pool: str | None = None
    adapters: tuple[ServedAdapter, ...] = ()

    def __post_init__(self) -> None:
        if self.adapters:  # sizing counts the adapters in the base's memory (every one is loaded with it)
            total = sum(a.size_bytes for a in self.adapters)
            object.__setattr__(self, "spec", replace(self.spec, adapter_bytes=total))

    @property
    def engine(self) -> str:
        return self.spec.engine

    def validate(self) -> None:
        if is_vllm(self.engine):
            if self.file is not None:
                raise ValueError(
                    f"ServedModel {self.name}: engine vllm loads the repo's safetensors checkpoint — file must be None, got {self.file!r}"
                )
            if self.pool is not None:
                raise ValueError(
                    f"ServedModel {self.name}: engine vllm serves one model per process — it cannot be in pool {self.pool!r}"
                )
            if self.sha256 is not None:
                raise ValueError(
                    f"ServedModel {self.name}: sha256 pins one GGUF file — pin a vLLM snapshot with revision=<commit sha> instead"
                )
        elif not (self.file or "").endswith(".gguf"):
            raise ValueError(f"ServedModel {self.name}: file must be a .gguf file, got {self.file!r}")
        if self.replicas_min > self.replicas_max:
            raise ValueError(
                f"ServedModel {self.name}: replicas_min {self.replicas_min} > replicas_max {self.replicas_max}"
            )
        if self.role not in ("slm", "llm", "farm"):
            raise ValueError(f"ServedModel {self.name}: role must be slm, llm or farm, got {self.role!r}")
        if self.adapters and is_vllm(self.engine):
            raise ValueError(
                f"ServedModel {self.name}: adapters are GGUF LoRA adapters for engine llama.cpp — remove them or serve the base with llama.cpp"
            )
        if self.adapters and (problem := adapter_task_problem(self.spec.task)):
            raise ValueError(f"ServedModel {self.name}: {problem}")
        names = [a.name for a in self.adapters]
        if len(set(names)) != len(names) or self.name in names:
            raise ValueError(
                f"ServedModel {self.name}: adapter names must be unique and differ from the model's, got {names}"
            )
        for a in self.adapters:
            a.validate(self.name)
        if self.pool is not None and self.role != "farm":
            raise ValueError(
                f"ServedModel {self.name}: only role farm is served from a pool, got role {self.role!r} with pool {self.pool!r}"
            )
