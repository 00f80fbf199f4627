"""MultiModelEndpointProps (frozen, validated at synth) and TargetModel: one farm pool on a SageMaker multi-model
endpoint. The limits encoded here come from botocore's sagemaker / sagemaker-runtime service models and the
SageMaker developer guide; each check names its source."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import aws_cdk as cdk
from constructs import IDependable

from cpu_inference import sizing
from cpu_inference.artifacts import ModelBucket, ModelCatalog
from cpu_inference.engines import VLLM
from cpu_inference.images import LlamaCppImage
from cpu_inference.monitoring import latency
from cpu_inference.sagemaker.endpoint_props import NAME, EngineEndpointPropsBase, default_target_concurrency
from cpu_inference.sagemaker.engine_image import EngineImage, image_engine
from cpu_inference.sagemaker.engine_settings import (
    ANSWER_MARGIN_SECONDS,
    GENERATION_BUDGET_ENV,
    INVOKE_TIMEOUT_SECONDS,
    VOLUME_MAX_GB,
    VOLUME_MIN_GB,
)
from cpu_inference.sizing.pools import concurrent_models
from inference_runtime.engine_flags import DEFAULT_PARALLEL
from inference_runtime.llama_flags import PARALLEL, THREADS

# botocore sagemaker ContainerDefinition.ModelDataUrl (shape Url): max 1024, pattern (https|s3)://([^/]+)/?(.*).
MODEL_DATA_URL_MAX = 1024
# S3 bucket names: 3..63 lowercase letters, digits, '.', '-' (what ModelBucket / imported buckets resolve to).
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
# botocore sagemaker-runtime InvokeEndpoint.TargetModel (header X-Amzn-SageMaker-Target-Model): 1..1024,
# pattern \A\S[\p{Print}]*\z — printable, no leading whitespace.
TARGET_MODEL_MAX = 1024
_TARGET_MODEL = re.compile(r"^\S[\x20-\x7e]*$")
# SageMaker downloads and untars `<prefix><TargetModel>` into /opt/ml/models/<model_name>/model: multi-model
# artifacts are gzip'd tar archives (botocore ContainerDefinition.ModelDataUrl: "a single gzip compressed tar
# archive (.tar.gz suffix)"; docs invoke-multi-model-endpoint: TargetModel="<MODEL_FILENAME>.tar.gz").
ARTIFACT_SUFFIX = ".tar.gz"
# botocore sagemaker ContainerDefinition.Environment (EnvironmentMap): at most 100 entries, values <= 1024.
ENV_MAX_ENTRIES = 100
ENV_VALUE_MAX = 1024
# What the construct renders into the container environment (containers/llama-server entrypoint.py
# multi_model_plan): each loaded model's llama-server threads unless its engine.json sets them (the adapter's own
# default is every CPU, which would let one generation take the whole instance); the memory the adapter admits
# models into before it answers 507 (the adapter's own default is the cgroup limit, else MemTotal: all of it, no room
# for the kernel, SageMaker's agents or the tarball's extraction — so the construct always renders its own); and the
# generation budget of a request, which on an MME may first have waited on a cold load (GENERATION_BUDGET_ENV).
MEMORY_BUDGET_ENV = "MME_MEMORY_BUDGET_BYTES"
COMPUTED_KEYS = frozenset({THREADS.image_env, MEMORY_BUDGET_ENV, GENERATION_BUDGET_ENV})
# The adapter's per-model admission (containers/llama-server mme_adapter.py, ChildDefaults / load): a loaded model
# takes its engine.json `parallel` (else LLAMA_PARALLEL, default 1) plus LLAMA_QUEUE_DEPTH (default: as many as its
# parallel) requests, and answers 429 beyond them.
QUEUE_DEPTH_ENV = "LLAMA_QUEUE_DEPTH"
DEFAULT_MODEL_PARALLEL = (
    DEFAULT_PARALLEL  # the image's (every child's LLAMA_PARALLEL default: mme_adapter.ChildDefaults)
)


@dataclass(frozen=True)
class TargetModel:
    """One model a multi-model endpoint serves. `path` is InvokeEndpoint's TargetModel (header
    X-Amzn-SageMaker-Target-Model): the artifact's key relative to the endpoint's S3 prefix, e.g.
    `m-0001/3f2a9c0d1e4b5a69-1a2b3c4d.tar.gz`; `key` is the full object key."""

    name: str
    path: str
    key: str


@dataclass(frozen=True, kw_only=True)
class MultiModelEndpointProps(EngineEndpointPropsBase):
    """One pool of farm models on a SageMaker multi-model endpoint. Required: name, image, model_bucket. The shared
    fields are EndpointPropsBase's and EngineEndpointPropsBase's; the defaults and fields of this endpoint:

    name: DNS label of the pool (tags, the endpoint name's prefix), e.g. "default".
    image: a LlamaCppImage or an EngineImage whose `serve` implements SageMaker's multi-model contract
        (containers/llama-server: `serve` runs the serve-mme adapter when SageMaker sets SAGEMAKER_MULTI_MODEL=true).
    model_bucket: the ModelBucket holding the artifacts; prefix: the key prefix all of them live under (default
        "farm/"; ModelDataUrl = s3://<bucket>/<prefix>). The role may read only that prefix.
    target_models: model name → TargetModel path relative to the prefix (`<name>/<idhash>-<sha8>.tar.gz`).
        Never rendered into the template: 10 or 1,000 models give the same template. May be empty (SageMaker
        serves any .tar.gz put under the prefix later).
    depends_on: what must exist before the Model is created (the catalog's copy resource).
        `MultiModelEndpointProps.for_catalog(catalog, name=..., image=..., models=...)` fills these four from a
        ModelCatalog copied with the "mme" layout.
    instance_type: default ml.m8g.xlarge (4 Graviton4 vCPUs, 16 GiB — the farm pool's default replica). Memory is
        the model cache: more memory, fewer cold loads. target_concurrency: default 75% of `slots`.
    threads_per_model: threads of each loaded model's llama-server (LLAMA_THREADS; a model's engine.json
        `threads` wins; default 2): `slots` = vCPUs // threads_per_model generations run at once per instance.
    memory_budget_bytes: memory the adapter loads models into before it answers 507, SageMaker's cue to unload
        the least recently used (MME_MEMORY_BUDGET_BYTES; default: utilization_alarm_percent — the memory alarm's
        threshold, 85% — of the instance type's memory, so the models fill the instance up to the alarm and no
        further).
    model_parallel: the smallest llama-server `parallel` among the pool's models (their engine.json; for_catalog
        fills it from the catalog; default: the adapter's default, LLAMA_PARALLEL or 1). One loaded model admits
        `parallel` + queue (LLAMA_QUEUE_DEPTH, default = parallel) requests before 429, so the default
        target_concurrency is also at most 75% of that: one hot model's 429s then still show as concurrency above the
        target, and the pool scales out.
    model_cache: MultiModelConfig.ModelCacheSetting (default True = Enabled; False unloads after every call —
        only for models each called once).
    environment: extra container environment (e.g. LLAMA_CTX_PER_SLOT, the default context of models whose
        engine.json has no ctx-size); may not set LLAMA_THREADS or MME_MEMORY_BUDGET_BYTES.
    startup_health_check_timeout: default SageMaker's. volume_size_gb: the on-disk model cache (default
        SageMaker's multi-model size).
    alarm_output_tokens: default an answer's (monitoring.latency.alarm_output_tokens; ModelFarm: its members' longest).
    cold_load_alarm: Maximum ModelLoadingWaitTime (download + load of a model not in memory) alarm (default 30 s,
        half of InvokeEndpoint's 60 s; below 50 s). It is also the cold load a request's time is planned for: a
        non-streamed answer is cut (504) at 60 s - cold_load_alarm - 10 s (ADAPTER_GENERATION_BUDGET_SECONDS, 20 s
        by default), so one that first waited on a load still returns inside InvokeEndpoint's 60 s. A lower
        cold_load_alarm leaves longer answers. cache_hit_alarm_percent: alarm when the share of requests finding their
        model loaded (ModelCacheHit Average) stays below it — thrashing (default 50).
    """

    model_bucket: ModelBucket
    prefix: str = "farm/"
    target_models: Mapping[str, str] = field(default_factory=dict)
    depends_on: tuple[IDependable, ...] = ()
    instance_type: str = "ml.m8g.xlarge"
    threads_per_model: int = 2
    memory_budget_bytes: int | None = None
    model_parallel: int | None = None
    model_cache: bool = True
    alarm_output_tokens: int | None = None
    cold_load_alarm: cdk.Duration = field(default_factory=lambda: cdk.Duration.seconds(INVOKE_TIMEOUT_SECONDS // 2))
    cache_hit_alarm_percent: float = 50.0

    # -- derived (instance, scales, initial_count, latency_alarm: the bases) ----------------------

    @property
    def slots(self) -> int:
        """Generations an instance runs at once: its vCPUs shared by threads_per_model each."""
        return concurrent_models(self.instance.vcpus, self.threads_per_model)

    @property
    def memory_budget(self) -> int:
        """MME_MEMORY_BUDGET_BYTES: memory_budget_bytes, else the memory alarm's share of the instance's memory."""
        if self.memory_budget_bytes is not None:
            return self.memory_budget_bytes
        return int(self.instance.memory_gib * sizing.GIB * self.utilization_alarm_percent / 100)

    @property
    def generation_budget_seconds(self) -> float:
        """ADAPTER_GENERATION_BUDGET_SECONDS: InvokeEndpoint's 60 s less the cold load planned for (cold_load_alarm)
        and the answer's margin — the full 50 s after a 30 s load would be cut by SageMaker, not by the adapter."""
        return INVOKE_TIMEOUT_SECONDS - self.cold_load_alarm.to_seconds() - ANSWER_MARGIN_SECONDS

    @property
    def model_admission(self) -> int:
        """Requests the least admitting loaded model takes before 429: its parallel + the queue depth."""
        parallel = (
            self.model_parallel
            if self.model_parallel is not None
            else self._env_int(PARALLEL.image_env, DEFAULT_MODEL_PARALLEL)
        )
        return parallel + self._env_int(QUEUE_DEPTH_ENV, parallel)

    def _env_int(self, key: str, default: int) -> int:
        raw = self.environment.get(key)
        if raw is None or cdk.Token.is_unresolved(raw):
            return default
        try:
            return int(raw)
        except ValueError:
            return default  # the container refuses it at start with one line naming the variable

    @property
    def default_target_concurrency(self) -> float:
        # Scaling watches in-flight requests per instance, admission is per model: a target above what one model
        # admits would never be reached by a single hot model, whose excess gets 429 (F12).
        return min(default_target_concurrency(self.slots), default_target_concurrency(self.model_admission))

    @property
    def output_tokens_budget(self) -> int:
        if self.alarm_output_tokens is not None:
            return self.alarm_output_tokens
        return latency.alarm_output_tokens(())

    def target(self, name: str) -> TargetModel:
        path = self.target_models[name]
        return TargetModel(name=name, path=path, key=f"{self.prefix}{path}")

    # -- validation -------------------------------------------------------------------------------

    def validate(self) -> None:
        p = "MultiModelEndpointProps"
        self._check_name(p)
        self._check_instance_type(p, "ml.m8g.xlarge")
        self._check_image(p)
        if image_engine(self.image) == VLLM:
            # vLLM serves one model per process (--model); the multi-model contract loads and unloads many models in
            # one container on demand, which containers/llama-server implements (mme_adapter.py) and vLLM does not.
            raise ValueError(
                f"{p}.image serves vllm, which runs one model per process; a multi-model endpoint loads many models into "
                "one container — give each vLLM model its own GravitonEndpoint, and pool llama.cpp GGUFs here"
            )
        self._check_image_arch(p, self.instance.arch, "the image")
        self._validate_model_data(p)
        self._validate_capacity(p)
        self._validate_environment(p)
        self._check_timeout(p, "startup_health_check_timeout")
        self._validate_volume(p)
        self._check_network(p)
        self._check_alarms(p)
        self._check_decode_budget(p)
        most = INVOKE_TIMEOUT_SECONDS - ANSWER_MARGIN_SECONDS
        if not 0 < self.cold_load_alarm.to_seconds() < most:
            raise ValueError(
                f"{p}.cold_load_alarm must be between 0 and {most} s (InvokeEndpoint's {INVOKE_TIMEOUT_SECONDS} s less "
                f"{ANSWER_MARGIN_SECONDS} s for the answer: what is left is the generation budget after a cold load), "
                f"got {self.cold_load_alarm.to_seconds()} s"
            )
        if not 0 < self.cache_hit_alarm_percent <= 100:
            raise ValueError(f"{p}.cache_hit_alarm_percent must be in (0, 100], got {self.cache_hit_alarm_percent}")
        self._check_naming(p)

    def _validate_model_data(self, p: str) -> None:
        if not isinstance(self.model_bucket, ModelBucket):
            raise ValueError(f"{p}.model_bucket must be a ModelBucket, got {type(self.model_bucket).__name__}")
        prefix = self.prefix
        if (
            not prefix.endswith("/")
            or prefix.startswith("/")
            or "*" in prefix
            or ".." in prefix.split("/")
            or prefix.strip("/") == ""
        ):
            raise ValueError(
                f"{p}.prefix must be a key prefix ending in '/', without a leading '/', '*' or '..' (ModelDataUrl is "
                f"s3://<bucket>/<prefix>), got {prefix!r} — e.g. 'farm/'"
            )
        bucket_name = self.model_bucket.bucket.bucket_name
        resolved = bucket_name if not cdk.Token.is_unresolved(bucket_name) else "x" * 63  # the longest a name can be
        if not cdk.Token.is_unresolved(bucket_name) and not _BUCKET.match(bucket_name):
            raise ValueError(f"{p}.model_bucket's bucket name {bucket_name!r} is not an S3 bucket name")
        url_length = len(f"s3://{resolved}/{prefix}")
        if url_length > MODEL_DATA_URL_MAX:
            raise ValueError(
                f"{p}.prefix makes ModelDataUrl {url_length} characters; SageMaker allows {MODEL_DATA_URL_MAX} — shorten the prefix"
            )
        for name, path in self.target_models.items():
            if not NAME.match(name):
                raise ValueError(
                    f"{p}.target_models key {name!r} must be a DNS label (the model's name in config.yaml)"
                )
            where = f"{p}.target_models[{name!r}]"
            if not isinstance(path, str) or not path.endswith(ARTIFACT_SUFFIX):
                raise ValueError(
                    f"{where} must be a {ARTIFACT_SUFFIX} artifact under the prefix (multi-model endpoints load gzip'd tar archives), got {path!r}"
                )
            if path.startswith(prefix) or path.startswith("/") or ".." in path.split("/"):
                raise ValueError(
                    f"{where} must be relative to the prefix {prefix!r} (SageMaker joins the two), got {path!r} — drop the leading {prefix!r} or '/'"
                )
            if not (1 <= len(path) <= TARGET_MODEL_MAX and _TARGET_MODEL.match(path)):
                raise ValueError(
                    f"{where} must be 1..{TARGET_MODEL_MAX} printable ASCII characters (InvokeEndpoint TargetModel), got {path!r}"
                )

    def _validate_capacity(self, p: str) -> None:
        self._check_capacity_bounds(p)
        if self.target_concurrency is not None and self.target_concurrency <= 0:
            raise ValueError(f"{p}.target_concurrency must be > 0, got {self.target_concurrency}")
        vcpus = self.instance.vcpus
        if not 1 <= self.threads_per_model <= vcpus:
            raise ValueError(
                f"{p}.threads_per_model must be 1..{vcpus} (the vCPUs of {self.instance_type}), got {self.threads_per_model}"
            )
        memory = int(self.instance.memory_gib * sizing.GIB)
        if self.memory_budget_bytes is not None and not 0 < self.memory_budget_bytes <= memory:
            raise ValueError(
                f"{p}.memory_budget_bytes must be in 1..{memory} (the {self.instance.memory_gib:g} GiB of {self.instance_type}), "
                f"got {self.memory_budget_bytes} — or leave it out ({self.utilization_alarm_percent:g}% of it, the memory alarm's threshold)"
            )
        if self.model_parallel is not None and self.model_parallel < 1:
            raise ValueError(
                f"{p}.model_parallel must be >= 1 (the smallest `parallel` of the pool's models), got {self.model_parallel}"
            )

    def _validate_environment(self, p: str) -> None:
        clash = sorted(set(self.environment) & COMPUTED_KEYS)
        if clash:
            raise ValueError(
                f"{p}.environment may not set {', '.join(clash)}: set threads_per_model / memory_budget_bytes / cold_load_alarm instead"
            )
        self._check_environment_keys(p)
        if len(self.environment) + len(COMPUTED_KEYS) > ENV_MAX_ENTRIES:
            raise ValueError(
                f"{p}.environment has {len(self.environment)} entries; SageMaker allows {ENV_MAX_ENTRIES} in all (with {len(COMPUTED_KEYS)} computed) — drop some"
            )
        long = [
            k for k, v in self.environment.items() if not cdk.Token.is_unresolved(v) and len(v.encode()) > ENV_VALUE_MAX
        ]
        if long:
            raise ValueError(f"{p}.environment values of {long} exceed SageMaker's {ENV_VALUE_MAX} bytes per value")

    def _validate_volume(self, p: str) -> None:
        if self.volume_size_gb is None:
            return
        if self.instance.instance_store:
            raise ValueError(
                f"{p}.volume_size_gb: {self.instance_type} has local NVMe instance storage and SageMaker attaches no "
                "ML storage volume to it (VolumeSizeInGB is refused) — drop volume_size_gb"
            )
        if not VOLUME_MIN_GB <= self.volume_size_gb <= VOLUME_MAX_GB:
            raise ValueError(
                f"{p}.volume_size_gb must be {VOLUME_MIN_GB}..{VOLUME_MAX_GB} (SageMaker's range), got {self.volume_size_gb}"
            )

    # -- from a catalog ---------------------------------------------------------------------------

    @classmethod
    def for_catalog(
        cls,
        catalog: ModelCatalog,
        *,
        name: str,
        image: LlamaCppImage | EngineImage,
        models: Iterable[str] | None = None,
        **overrides: Any,
    ) -> MultiModelEndpointProps:
        """A pool of `models` (default: every model of the catalog) whose artifacts a ModelCatalog copies with the
        "mme" layout: its bucket and prefix, each model's `mme_target_model(name)`, a dependency on its copy, and the
        smallest `parallel` of their engine_args (model_parallel)."""
        names = [e.name for e in catalog.catalog.entries] if models is None else list(models)
        chosen = set(names)
        given = [
            int(e.engine_args[PARALLEL.key])
            for e in catalog.catalog.entries
            if e.name in chosen and PARALLEL.key in (e.engine_args or {})
        ]
        # A model without `parallel` in its engine.json runs with the adapter's default: count it as that.
        if len(given) < len(chosen):
            given.append(DEFAULT_MODEL_PARALLEL)
        model_parallel = overrides.pop("model_parallel", min(given) if given else None)
        return cls(
            name=name,
            image=image,
            model_bucket=catalog.model_bucket,
            prefix=catalog.prefix,
            target_models={m: catalog.mme_target_model(m) for m in names},
            depends_on=(catalog.resource,),
            model_parallel=model_parallel,
            **overrides,
        )
