"""GravitonEndpointProps (frozen, validated at synth); EngineImage (any ECR image by tag or digest) is re-exported
from engine_image."""

from __future__ import annotations

import re
from dataclasses import dataclass

import aws_cdk as cdk
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3

from cpu_inference import sizing
from cpu_inference.artifacts import ModelArtifact
from cpu_inference.engines import VLLM, VLLM_DTYPES, VLLM_TASKS, check_engine
from cpu_inference.monitoring import latency
from cpu_inference.sagemaker.endpoint_props import (
    EngineEndpointPropsBase,
)
from cpu_inference.sagemaker.engine_settings import VOLUME_MAX_GB, computed_keys, required_volume_gb

# bucket: a name or a CDK token (a farm's catalog bucket, whose name CloudFormation generates)
_S3_PREFIX = re.compile(r"^s3://(?P<bucket>[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]|\$\{Token\[[^\]]+\]\})/(?P<prefix>[^*]+/)$")


@dataclass(frozen=True, kw_only=True)
class GravitonEndpointProps(EngineEndpointPropsBase):
    """One model on a SageMaker real-time endpoint: a llama.cpp GGUF on the llama-server image, or (spec.engine
    "vllm") a Hugging Face safetensors checkpoint on the vLLM CPU image. Required: name, model, spec, image. The
    shared fields are EndpointPropsBase's and EngineEndpointPropsBase's; the defaults and fields of this endpoint:

    name: DNS label for the model (response `model` field, tags, names' prefix), e.g. "zephyr-7b".
    model: a ModelArtifact (its commit-pinned prefix `models/<name>/<commit>/` is downloaded; the role may read
        only `models/<name>/`), or an S3 prefix URI `s3://bucket/prefix/` holding the GGUF or, for vLLM, the
        checkpoint directory's files (config.json, tokenizer, *.safetensors) (SageMaker S3Prefix data: every
        object under it lands in /opt/ml/model).
    spec: the sizing input (parameters, quantization or vLLM dtype, context, task, engine, optional shape / slots).
    image: a LlamaCppImage (built into ECR by digest) or an EngineImage (any ECR repository + tag/digest) that
        serves spec.engine (images.VLLM_IMAGE builds the vLLM one).
    instance_type: default ml.c7g.2xlarge: Graviton ml.c7g/ml.c8g/ml.m8g/ml.r7gd/ml.r8g, or x86
        ml.c7i/ml.m7i/ml.r7i for comparison (no ml.m7g/ml.r7g); the model must fit it.
    min_capacity / max_capacity: default 1..2. target_concurrency: default 75% of the slots (>= 1);
        scale_out_cooldown default 120 s, scale_in_cooldown 600 s.
    model_file: the GGUF's path under an S3-URI prefix (sets MODEL_PATH; default: the entrypoint finds the
        single .gguf). Ignored for a ModelArtifact (its file is known); refused for vLLM, which serves the
        whole directory (MODEL_PATH=/opt/ml/model). model_key: the KMS key of an
        S3-URI model's bucket, if SSE-KMS (the role gets kms:Decrypt on it).
    lora_manifest: a llama.cpp base served WITH its LoRA adapters: the path, relative to an S3-URI model prefix, of
        the manifest listing them (a farm's catalog `lora` bundle: "lora.json"; sets LLAMA_LORA_MANIFEST). Clients
        pick an adapter by sending its name as `model` (containers/inference_runtime/sagemaker_adapter.py). Their
        bytes count in the model's (spec.adapter_bytes: memory, volume, timeouts).
    queue_depth: requests admitted per instance beyond the slots before 429 (default: = slots).
    environment: extra engine settings (e.g. LLAMA_FLASH_ATTN; vLLM: SERVE_EXTRA_ARGS); may not set the computed
        keys (engine_settings.COMPUTED_KEYS / VLLM_COMPUTED_KEYS).
    model_download_timeout / startup_health_check_timeout: default sized to the model file and engine (see
        engine_settings: vLLM adds its compile warm-up); 60..3600 s. volume_size_gb: default the model file + 10%
        + 6 GiB (vLLM: 10 GiB) for the image and scratch (at most 512).
    encryption_key: also encrypts captured data. data_capture_percent: share of requests captured to S3 (0 = off).
        data_capture_bucket: where (default: a new KMS-encrypted, access-logged bucket); data_capture_prefix
        (default "data-capture/<name>"); data_capture_retention_days: expiry of captured objects in a created
        bucket (default 90).
    latency_slo: p95 target for the first token, the part of an answer that does not grow with its length
        (default config.schema.FIRST_TOKEN_SLO_MS). alarm_output_tokens: output tokens per request the alarm budgets
        for (p95 of your answers' length; default by spec.task, monitoring.latency.alarm_output_tokens; an SLM that
        also answers uses an answer's figure).
    removal_policy: for the created key and capture bucket (default RETAIN).
    """

    model: ModelArtifact | str
    spec: sizing.ModelSpec
    instance_type: str = "ml.c7g.2xlarge"
    model_file: str | None = None
    model_key: kms.IKey | None = None
    lora_manifest: str | None = None
    queue_depth: int | None = None
    model_download_timeout: cdk.Duration | None = None
    data_capture_percent: int = 0
    data_capture_bucket: s3.IBucket | None = None
    data_capture_prefix: str | None = None
    data_capture_retention_days: int = 90

    # -- derived (instance, scales, initial_count, latency_alarm: the bases) ----------------------

    @property
    def engine(self) -> str:
        return self.spec.engine

    @property
    def is_vllm(self) -> bool:
        return self.spec.engine == VLLM

    @property
    def model_bytes(self) -> int:
        """The model's size: the spec's file size, else parameters x bits per weight (vLLM: bytes of its dtype)."""
        return sizing.weights_bytes(self.spec)

    @property
    def output_tokens_budget(self) -> int:
        if self.alarm_output_tokens is not None:
            return self.alarm_output_tokens
        return latency.alarm_output_tokens((self.spec.task,))

    @property
    def capture_prefix(self) -> str:
        return (self.data_capture_prefix or f"data-capture/{self.name}").strip("/")

    def s3_location(self) -> tuple[str, str] | None:
        """(bucket, prefix) of an S3-URI model; None for a ModelArtifact."""
        if isinstance(self.model, ModelArtifact):
            return None
        m = _S3_PREFIX.match(self.model)
        assert m is not None, "validate() first"
        return m["bucket"], m["prefix"]

    # -- validation -------------------------------------------------------------------------------

    def validate(self) -> None:
        p = "GravitonEndpointProps"
        self._check_name(p)
        self._check_image(p)
        self._validate_engine(p)
        self._validate_model(p)
        self._validate_instance(p)
        self._check_image_arch(p, self.instance.arch, "the image")
        self._validate_capacity(p)
        self._validate_environment(p)
        self._check_timeout(p, "model_download_timeout")
        self._check_timeout(p, "startup_health_check_timeout")
        self._validate_volume(p)
        self._check_network(p)
        if not 0 <= self.data_capture_percent <= 100:
            raise ValueError(f"{p}.data_capture_percent must be 0..100 (0 = off), got {self.data_capture_percent}")
        if self.data_capture_bucket is not None and self.data_capture_percent == 0:
            raise ValueError(
                f"{p}.data_capture_bucket is set but data_capture_percent is 0 — set a percent to capture, or drop the bucket"
            )
        if self.data_capture_retention_days < 1:
            raise ValueError(f"{p}.data_capture_retention_days must be >= 1, got {self.data_capture_retention_days}")
        if self.data_capture_prefix is not None and (
            not self.capture_prefix or "*" in self.capture_prefix or ".." in self.capture_prefix.split("/")
        ):
            raise ValueError(
                f"{p}.data_capture_prefix must be an S3 key prefix without '*' or '..', got {self.data_capture_prefix!r}"
            )
        self._check_alarms(p)
        self._check_decode_budget(p)
        self._check_naming(p)

    def _validate_engine(self, p: str) -> None:
        """The image runs the model's engine; a vLLM model is one vLLM can serve here."""
        try:
            check_engine(self.spec.engine)
        except ValueError as e:
            raise ValueError(f"{p}.spec.{e}") from None
        self._check_image_engine(p, self.spec.engine, what=f"{self.name} (spec.engine)")
        if not self.is_vllm:
            return
        if self.spec.task not in VLLM_TASKS:
            raise ValueError(
                f"{p}.spec.task {self.spec.task!r} is not served by vLLM here (tasks: {', '.join(VLLM_TASKS)}) — run "
                "embedding and rerank models on llama.cpp (spec.engine='llama.cpp', a GGUF)"
            )
        if self.spec.dtype not in VLLM_DTYPES:
            raise ValueError(
                f"{p}.spec.dtype must be one of {', '.join(VLLM_DTYPES)} (vLLM's CPU dtypes), got {self.spec.dtype!r}"
            )

    def _validate_model(self, p: str) -> None:
        if self.is_vllm and self.model_file is not None:
            raise ValueError(
                f"{p}.model_file: a vLLM model is the whole checkpoint directory under the prefix (config.json, tokenizer, "
                "*.safetensors → /opt/ml/model) — drop model_file"
            )
        if isinstance(self.model, ModelArtifact):
            if self.model_file is not None or self.model_key is not None or self.lora_manifest is not None:
                raise ValueError(
                    f"{p}.model_file, model_key and lora_manifest apply to an S3 URI model; a ModelArtifact knows its "
                    "file and key and copies no adapters"
                )
            if self.is_vllm and not self.model.is_snapshot:
                raise ValueError(
                    f"{p}.model: vLLM serves a Hugging Face safetensors checkpoint, but ModelArtifact {self.model.props.name!r} "
                    "copies one file — copy the repo's snapshot (ModelArtifactProps(snapshot=True, revision=<commit>))"
                )
            if not self.is_vllm and self.model.is_snapshot:
                raise ValueError(
                    f"{p}.model: ModelArtifact {self.model.props.name!r} is a safetensors snapshot, which llama.cpp cannot "
                    "load — set spec.engine='vllm', or copy a GGUF (ModelArtifactProps(file=...))"
                )
            return
        if not isinstance(self.model, str):
            raise ValueError(
                f"{p}.model must be a ModelArtifact or an s3://bucket/prefix/ URI, got {type(self.model).__name__}"
            )
        if self.is_vllm and (self.model.endswith(".gguf") or self.model.endswith(".safetensors")):
            folder = self.model.rsplit("/", 1)[0] + "/"
            raise ValueError(
                f"{p}.model must be the S3 prefix of the Hugging Face checkpoint (config.json, tokenizer, *.safetensors; "
                f"vLLM serves no GGUF), not a file: use model={folder!r}"
            )
        if self.model.endswith(".gguf"):
            folder = self.model.rsplit("/", 1)[0] + "/"
            file = self.model.rsplit("/", 1)[1]
            raise ValueError(
                f"{p}.model must be the S3 prefix holding the model (SageMaker S3Prefix data), not the file: "
                f"use model={folder!r}, model_file={file!r}"
            )
        if not _S3_PREFIX.match(self.model):
            raise ValueError(
                f"{p}.model must be an S3 prefix URI ending in '/' (s3://bucket/models/x/), got {self.model!r}"
            )
        if self.lora_manifest is not None and (
            self.is_vllm
            or self.lora_manifest.startswith("/")
            or ".." in self.lora_manifest.split("/")
            or not self.lora_manifest.endswith(".json")
        ):
            raise ValueError(
                f"{p}.lora_manifest must be the adapters' .json manifest relative to the model prefix, for a llama.cpp "
                f"model, got {self.lora_manifest!r}"
            )
        if self.model_file is not None and (
            self.model_file.startswith("/")
            or ".." in self.model_file.split("/")
            or not self.model_file.endswith(".gguf")
        ):
            raise ValueError(
                f"{p}.model_file must be a .gguf path relative to the model prefix, got {self.model_file!r}"
            )

    def _validate_instance(self, p: str) -> None:
        it = self._check_instance_type(p, "ml.c7g.8xlarge")
        s = sizing.size(self.spec, it, target="sagemaker")
        if not s.fits:
            same_arch = [i for i in sizing.CATALOG.values() if i.sagemaker and i.arch == it.arch]
            better = sizing.smallest_fitting(self.spec, same_arch, target="sagemaker")
            hint = (
                f"use a larger instance such as {better.instance.sagemaker_name}"
                if better
                else "no SageMaker CPU instance of this architecture fits it"
            )
            precision = f"{self.spec.dtype} on vLLM" if self.is_vllm else self.spec.quantization
            raise ValueError(
                f"{p}.instance_type: {self.name} ({self.spec.parameters_billions:g}B {precision}, {s.slots} slot(s) x "
                f"{s.ctx_per_slot} context) needs {s.memory_needed_bytes / sizing.GIB:.1f} GiB but {self.instance_type} has "
                f"{s.memory_available_bytes / sizing.GIB:.1f} GiB usable — {hint}"
            )

    def _validate_volume(self, p: str) -> None:
        """The ML storage volume holds the model: it must fit, within SageMaker's range, on types that take one."""
        it = self.instance
        need = required_volume_gb(self.model_bytes, self.engine)
        if it.instance_store:
            if self.volume_size_gb is not None:
                raise ValueError(
                    f"{p}.volume_size_gb: {self.instance_type} has local NVMe instance storage and SageMaker attaches no "
                    "ML storage volume to it (VolumeSizeInGB is refused) — drop volume_size_gb"
                )
            return
        if need > VOLUME_MAX_GB:
            raise ValueError(
                f"{p}.model: a {self.model_bytes / sizing.GIB:.1f} GiB model file needs a {need} GB ML storage volume, more "
                f"than SageMaker's {VOLUME_MAX_GB} GB — use a smaller quantization or an instance type with instance storage (ml.r7gd)"
            )
        if self.volume_size_gb is not None and not need <= self.volume_size_gb <= VOLUME_MAX_GB:
            raise ValueError(
                f"{p}.volume_size_gb must be {need}..{VOLUME_MAX_GB} (the {self.model_bytes / sizing.GIB:.1f} GiB model file "
                f"+ image and scratch; SageMaker's maximum), got {self.volume_size_gb} — or leave it out (default: {need})"
            )

    def _validate_capacity(self, p: str) -> None:
        self._check_capacity_bounds(p)
        if self.target_concurrency is not None and self.target_concurrency <= 0:
            raise ValueError(f"{p}.target_concurrency must be > 0, got {self.target_concurrency}")
        if self.queue_depth is not None and self.queue_depth < 0:
            raise ValueError(f"{p}.queue_depth must be >= 0, got {self.queue_depth}")

    def _validate_environment(self, p: str) -> None:
        clash = sorted(set(self.environment) & computed_keys(self.engine))
        if clash:
            raise ValueError(
                f"{p}.environment may not set {', '.join(clash)}: they are computed from the spec and instance "
                "(change spec.parallel_slots / spec.context_per_slot, spec.dtype, queue_depth or model_file instead)"
            )
        self._check_environment_keys(p)
