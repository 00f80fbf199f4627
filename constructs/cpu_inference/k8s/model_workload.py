"""ModelWorkload: the per-model inputs of one served model on EKS (what LlamaServerChart renders), checked with a
one-line error naming the field and the fix. The namespace-wide settings are ServingPolicy (serving_policy.py)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from .. import sizing

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class ModelWorkload:
    """One model to serve (per-model inputs).

    name: DNS label; the Deployment, Service, ServiceAccount, PDB, NetworkPolicy and ScaledObject names.
    image: the llama-server image URI (by digest, from LlamaCppImage).
    model_uri: `s3://<bucket>/<key>` of the GGUF file (may hold CDK tokens, e.g. ModelArtifact.s3_uri).
    spec: what sizing needs (parameters, quantization, task, context, shape).
    cpu: vCPUs per pod = engine threads, a whole number (default `sizing.default_pod_cpu(spec)`).
    node_type: the instance type the pod is planned on (e.g. r7g.2xlarge): slots shrink until the model fits
    its allocatable memory. Default: the smallest fitting type among `ServingPolicy.node_families`.
    sha256 / size_bytes: expected digest and size of the file; default: the object's `sha256` metadata
    and ContentLength (written by the ModelArtifact copy job after it verified the Hub's digest).
    replicas_min / replicas_max: KEDA bounds; 0 lets a cold model scale to zero (needs cold_start_query).
    role: slm | llm | farm (a label; the chart treats them alike).
    scale_target / activation_target: KEDA scalingModifiers; default `queue_target(slots)` / 5.
    cold_start_query: PromQL that is > 0 while clients want this model (e.g. the gateway's per-model request
    rate). Required with replicas_min 0: with no pod there is no llama-server metric to activate on.
    drain_seconds: how long SIGTERM waits for generations in flight (terminationGracePeriod - preStop).
    extra_env: more engine variables (LLAMA_FLASH_ATTN, LLAMA_EXTRA_ARGS, ...), never the sized ones.
    """

    name: str
    image: str
    model_uri: str
    spec: sizing.ModelSpec
    cpu: float | None = None
    node_type: str | None = None
    sha256: str | None = None
    size_bytes: int | None = None
    replicas_min: int = 1
    replicas_max: int = 4
    role: str = "slm"
    scale_target: float | None = None
    activation_target: float | None = None
    cold_start_query: str | None = None
    drain_seconds: int = 60
    extra_env: Mapping[str, str] = field(default_factory=dict)

    @property
    def pod_cpu(self) -> float:
        return self.cpu if self.cpu is not None else sizing.default_pod_cpu(self.spec)

    @property
    def file_name(self) -> str:
        return self.model_uri.rstrip("/").rsplit("/", 1)[-1]

    def validate(self) -> None:
        where = f"ModelWorkload {self.name!r}"
        if not DNS_LABEL.match(self.name) or len(self.name) > 52:
            raise ValueError(f"{where}: name must be a DNS label of at most 52 characters (lowercase letters, digits, '-')")
        if not self.image:
            raise ValueError(f"{where}: image is required (the llama-server image URI, e.g. LlamaCppImage.image_uri)")
        if not self.model_uri.startswith("s3://") or self.model_uri.count("/") < 3:
            raise ValueError(f"{where}: model_uri must be s3://<bucket>/<key>.gguf, got {self.model_uri!r}")
        if not self.file_name.endswith(".gguf") and "${Token[" not in self.file_name:
            raise ValueError(f"{where}: model_uri must name a .gguf file, got {self.model_uri!r}")
        cpu = self.pod_cpu
        if cpu < 1 or cpu != int(cpu):
            raise ValueError(f"{where}: cpu must be a whole number of vCPUs ≥ 1 (engine threads = the CPU request), got {cpu}")
        if self.sha256 is not None and "${Token[" not in self.sha256 and not _SHA256.match(self.sha256):  # token: ModelArtifact.sha256
            raise ValueError(f"{where}: sha256 must be 64 lowercase hex characters")
        if self.size_bytes is not None and self.size_bytes <= 0:
            raise ValueError(f"{where}: size_bytes must be > 0")
        if not 0 <= self.replicas_min <= self.replicas_max or self.replicas_max < 1:
            raise ValueError(f"{where}: need 0 ≤ replicas_min ({self.replicas_min}) ≤ replicas_max ({self.replicas_max}), replicas_max ≥ 1")
        if self.role not in ("slm", "llm", "farm"):
            raise ValueError(f"{where}: role must be slm, llm or farm, got {self.role!r}")
        for label, value in (("scale_target", self.scale_target), ("activation_target", self.activation_target)):
            if value is not None and value <= 0:
                raise ValueError(f"{where}: {label} must be > 0")
        if self.drain_seconds < 0:
            raise ValueError(f"{where}: drain_seconds must be ≥ 0")
        sized = set(sizing.size(self.spec, sizing.instance("m7g.large"), target="eks", cpu=1).engine_env())
        clash = sorted(sized & set(self.extra_env) | ({"MODEL_PATH", "MODEL_DIR"} & set(self.extra_env)))
        if clash:
            raise ValueError(f"{where}: extra_env must not set {clash}: they come from sizing and the model location")
