"""ModelWorkload: the per-model inputs of one served model on EKS (what LlamaServerChart renders), checked with a
one-line error naming the field and the fix. The namespace-wide settings are ServingPolicy (serving_policy.py).

The engine is the spec's (`spec.engine`, cpu_inference.engines): llama.cpp serves one GGUF file, vLLM a Hugging Face
checkpoint directory (config.json, tokenizer, *.safetensors), so its model_uri is an S3 prefix ending in '/'."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from cpu_inference import engines, sizing
from cpu_inference._internal.k8s_object import is_dns_label
from inference_runtime.llama_flags import LORA
from inference_runtime.lora import name_problem, scale_problem

_SHA256 = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class WorkloadAdapter:
    """A LoRA adapter the model's pod loads (inference_runtime/lora.py): clients send `name` as `model`, the gateway
    applies it per request with `scale`. uri: `s3://<bucket>/<key>` of its GGUF (a farm's catalog key
    farm/<name>/<idhash>/<file>; every adapter of a model in one bucket; the bucket may be a CDK token); sha256: its
    pinned digest, else the object's `sha256` metadata is verified (k8s/workloads/model_fetch.py ADAPTERS_SCRIPT)."""

    name: str
    uri: str
    scale: float = 1.0
    sha256: str | None = None

    @property
    def bucket(self) -> str:
        return self.uri.removeprefix("s3://").split("/", 1)[0]

    @property
    def key(self) -> str:
        return self.uri.removeprefix("s3://").split("/", 1)[1]


@dataclass(frozen=True)
class ModelWorkload:
    """One model to serve (per-model inputs).

    name: DNS label; the Deployment, Service, ServiceAccount, PDB, NetworkPolicy and ScaledObject names.
    image: the engine image URI by digest: llama-server (LlamaCppImage) or, for `spec.engine == "vllm"`, vLLM CPU.
    model_uri: llama.cpp: `s3://<bucket>/<key>.gguf`, the GGUF file; vLLM: `s3://<bucket>/models/<name>/<commit>/`,
    the checkpoint's prefix (a directory, ending in '/'). May hold CDK tokens (e.g. ModelArtifact.s3_uri).
    spec: what sizing needs (engine, parameters, quantization or dtype, task, context, shape).
    cpu: vCPUs per pod = engine threads, a whole number (default `sizing.default_pod_cpu(spec)`).
    node_type: the instance type the pod is planned on (e.g. r7g.2xlarge): slots shrink until the model fits
    its allocatable memory. Default: the smallest fitting type among `ServingPolicy.node_families`.
    sha256 / size_bytes: expected digest and size of the file; default: the object's `sha256` metadata
    and ContentLength (written by the ModelArtifact copy job after it verified the Hub's digest). vLLM: sha256
    pins the snapshot's manifest (`cpu-inference.manifest`, the copy receipt's digest; default: the manifest
    object's `sha256` metadata), which pins every file's sha256 and size (model_fetch.py); size_bytes is the
    checkpoint's total, checked against the manifest's sum.
    replicas_min / replicas_max: KEDA bounds; 0 lets a cold model scale to zero (needs cold_start_query).
    role: slm | llm | farm (a label; the chart treats them alike).
    scale_target / activation_target: KEDA scalingModifiers; default model_scaling's queue_target(slots) /
        QUEUE_ACTIVATION.
    cold_start_query: PromQL that is > 0 while clients want this model (e.g. the gateway's per-model request
    rate). Required with replicas_min 0: with no pod there is no llama-server metric to activate on.
    drain_seconds: how long SIGTERM waits for generations in flight (terminationGracePeriod - preStop).
    extra_env: more engine variables (LLAMA_FLASH_ATTN, LLAMA_EXTRA_ARGS; vLLM: SERVE_EXTRA_ARGS, ...), never the
    sized ones nor the ones the chart sets (model location, served name, address, caches).
    adapters: LoRA adapters over the model (llama.cpp only), in id order: a second init container fetches them and
    the engine gets LLAMA_LORA (their pod paths, this order); their bytes belong in `spec.adapter_bytes` (sizing).
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
    adapters: tuple[WorkloadAdapter, ...] = ()

    @property
    def pod_cpu(self) -> float:
        return self.cpu if self.cpu is not None else sizing.default_pod_cpu(self.spec)

    @property
    def engine(self) -> str:
        return self.spec.engine

    @property
    def file_name(self) -> str:
        """llama.cpp: the GGUF's file name (MODEL_PATH is /models/<file>). vLLM: the model directory's name under
        /models, which is the workload's name (the prefix ends in a commit, which says nothing)."""
        if engines.is_vllm(self.engine):
            return self.name
        return self.model_uri.rstrip("/").rsplit("/", 1)[-1]

    def validate(self) -> None:
        where = f"ModelWorkload {self.name!r}"
        if not is_dns_label(self.name) or len(self.name) > 52:
            raise ValueError(
                f"{where}: name must be a DNS label of at most 52 characters (lowercase letters, digits, '-')"
            )
        if not self.image:
            raise ValueError(
                f"{where}: image is required (the engine image URI: llama-server, e.g. LlamaCppImage.image_uri, or vLLM CPU)"
            )
        self._validate_model_uri(where)
        cpu = self.pod_cpu
        if cpu < 1 or cpu != int(cpu):
            raise ValueError(
                f"{where}: cpu must be a whole number of vCPUs ≥ 1 (engine threads = the CPU request), got {cpu}"
            )
        if (
            self.sha256 is not None and "${Token[" not in self.sha256 and not _SHA256.match(self.sha256)
        ):  # token: ModelArtifact.sha256
            raise ValueError(f"{where}: sha256 must be 64 lowercase hex characters")
        if engines.is_vllm(self.engine) and self.spec.task not in engines.VLLM_TASKS:
            raise ValueError(
                f"{where}: task {self.spec.task!r} is not served by vllm here (tasks: {', '.join(engines.VLLM_TASKS)}); "
                "use engine llama.cpp for embedding/rerank models"
            )
        if self.size_bytes is not None and self.size_bytes <= 0:
            raise ValueError(f"{where}: size_bytes must be > 0")
        if not 0 <= self.replicas_min <= self.replicas_max or self.replicas_max < 1:
            raise ValueError(
                f"{where}: need 0 ≤ replicas_min ({self.replicas_min}) ≤ replicas_max ({self.replicas_max}), replicas_max ≥ 1"
            )
        if self.role not in ("slm", "llm", "farm"):
            raise ValueError(f"{where}: role must be slm, llm or farm, got {self.role!r}")
        for label, value in (("scale_target", self.scale_target), ("activation_target", self.activation_target)):
            if value is not None and value <= 0:
                raise ValueError(f"{where}: {label} must be > 0")
        if self.drain_seconds < 0:
            raise ValueError(f"{where}: drain_seconds must be ≥ 0")
        self._validate_adapters(where)
        sized = set(sizing.size(self.spec, sizing.instance("m7g.large"), target="eks", cpu=1).engine_env())
        clash = sorted(sized & set(self.extra_env) | (set(chart_set_env(self.engine)) & set(self.extra_env)))
        if clash:
            raise ValueError(f"{where}: extra_env must not set {clash}: they come from sizing and the model location")

    def _validate_adapters(self, where: str) -> None:
        if not self.adapters:
            return
        if engines.is_vllm(self.engine):
            raise ValueError(f"{where}: adapters are GGUF LoRA adapters for engine llama.cpp — remove them")
        names = [a.name for a in self.adapters]
        if len(set(names)) != len(names) or self.name in names:
            raise ValueError(f"{where}: adapter names must be unique and differ from the model's, got {names}")
        buckets = {a.bucket for a in self.adapters}
        for a in self.adapters:
            at = f"{where}: adapter {a.name!r}"
            problem = name_problem(a.name) or (f"scale {scale_problem(a.scale)}" if scale_problem(a.scale) else None)
            if problem:
                raise ValueError(f"{at}: {problem}")
            if not a.uri.startswith("s3://") or a.uri.count("/") < 3 or not a.uri.endswith(".gguf"):
                raise ValueError(f"{at}: uri must be s3://<bucket>/<key>.gguf, got {a.uri!r}")
            if a.sha256 is not None and not _SHA256.match(a.sha256):
                raise ValueError(f"{at}: sha256 must be 64 lowercase hex characters")
        if len(buckets) != 1:
            raise ValueError(
                f"{where}: every adapter must be in one bucket (the fetch reads one), got {sorted(buckets)}"
            )

    def _validate_model_uri(self, where: str) -> None:
        uri = self.model_uri
        if not uri.startswith("s3://") or uri.count("/") < 3:
            shape = (
                "s3://<bucket>/models/<name>/<commit>/" if engines.is_vllm(self.engine) else "s3://<bucket>/<key>.gguf"
            )
            raise ValueError(f"{where}: model_uri must be {shape}, got {uri!r}")
        token = "${Token[" in uri.rsplit("/", 1)[-1]  # e.g. a whole key from a CDK attribute: checked at deploy
        if engines.is_vllm(self.engine):
            if uri.endswith(".gguf"):
                raise ValueError(
                    f"{where}: engine vllm serves a Hugging Face safetensors checkpoint, not a GGUF: set model_uri to its S3 "
                    f"prefix s3://<bucket>/models/<name>/<commit>/, or engine llama.cpp for {uri!r}"
                )
            if not uri.endswith("/") and not token:
                raise ValueError(
                    f"{where}: engine vllm needs model_uri to be the checkpoint's S3 prefix ending in '/' "
                    f"(s3://<bucket>/models/<name>/<commit>/), got {uri!r}"
                )
        elif uri.endswith("/"):
            raise ValueError(
                f"{where}: model_uri {uri!r} is a prefix (a checkpoint directory): llama.cpp needs the .gguf file's "
                "key, or set spec.engine='vllm' for a safetensors checkpoint"
            )
        elif not self.file_name.endswith(".gguf") and not token:
            raise ValueError(f"{where}: model_uri must name a .gguf file, got {uri!r}")


# What the chart itself sets in the engine container (besides the sized variables): extra_env may not override them.
_LLAMA_CHART_ENV = ("MODEL_PATH", "MODEL_DIR", LORA.image_env)  # LLAMA_LORA: the adapters' pod paths
_VLLM_CHART_ENV = (
    "MODEL_PATH",
    "MODEL_DIR",
    "SERVE_MODEL_NAME",
    "SERVE_HOST",
    "SERVE_PORT",
    "HOME",
    "XDG_CACHE_HOME",
    "XDG_CONFIG_HOME",
    "HF_HOME",
    "HF_HUB_OFFLINE",
    "VLLM_NO_USAGE_STATS",
    "DO_NOT_TRACK",
)


def chart_set_env(engine: str) -> tuple[str, ...]:
    return _VLLM_CHART_ENV if engines.is_vllm(engine) else _LLAMA_CHART_ENV
