"""A model as the patterns serve it: where it comes from, how it is sized, how it scales."""

from __future__ import annotations

from dataclasses import dataclass

from cpu_inference import sizing
from cpu_inference.engines import is_vllm
from model_download.hub import DEFAULT_REVISION


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
        if self.pool is not None and self.role != "farm":
            raise ValueError(
                f"ServedModel {self.name}: only role farm is served from a pool, got role {self.role!r} with pool {self.pool!r}"
            )
