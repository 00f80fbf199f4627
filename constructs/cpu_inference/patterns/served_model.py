"""A model as the patterns serve it: where it comes from, how it is sized, how it scales."""

from __future__ import annotations

from dataclasses import dataclass

from .. import sizing


@dataclass(frozen=True)
class ServedModel:
    """One GGUF model and its serving settings.

    name: DNS-safe name, unique in the pattern (S3 prefix models/<name>/, Kubernetes names, endpoint names).
    hf_repo / file / revision: the Hugging Face source; sha256 pins the bytes (default: the Hub's LFS sha256).
    token_secret_name: Secrets Manager secret with a Hugging Face token, for gated models.
    spec: what sizing needs (parameters, quantization, context, task, shape).
    role: slm | llm | farm. replicas_min/max: scaling bounds. instance_type: SageMaker instance (target sagemaker).
    cpu: vCPUs per replica on EKS (default from sizing).
    pool: the farm pool that serves it (model-farm), or None for its own workload/endpoint (dedicated).
    """

    name: str
    hf_repo: str
    file: str
    spec: sizing.ModelSpec
    revision: str = "main"
    sha256: str | None = None
    token_secret_name: str | None = None
    role: str = "slm"
    replicas_min: int = 1
    replicas_max: int = 4
    instance_type: str | None = None
    cpu: float | None = None
    pool: str | None = None

    def validate(self) -> None:
        if not self.file.endswith(".gguf"):
            raise ValueError(f"ServedModel {self.name}: file must be a .gguf file, got {self.file!r}")
        if self.replicas_min > self.replicas_max:
            raise ValueError(f"ServedModel {self.name}: replicas_min {self.replicas_min} > replicas_max {self.replicas_max}")
        if self.role not in ("slm", "llm", "farm"):
            raise ValueError(f"ServedModel {self.name}: role must be slm, llm or farm, got {self.role!r}")
        if self.pool is not None and self.role != "farm":
            raise ValueError(f"ServedModel {self.name}: only role farm is served from a pool, got role {self.role!r} with pool {self.pool!r}")
