"""Pattern 2 — high-density CPU model farm: hundreds to thousands of small models (embeddings, classifiers,
rerankers, small generators) on shared CPU capacity, behind one entry point.

A farm model is served from a multi-model **pool** (ServedModel.pool) unless it is dedicated (pool None: a hot
model keeps its own workload or endpoint, as in the SLM pre-filter). Per pool:
- EKS: a StatefulSet of llama-server routers (load a model on its first request, unload the least recently
  used above models_max), reading the weights from one Mountpoint for S3 volume, scaled by KEDA on the
  gateway's in-flight count; the gateway routes each model to `replication` replicas (rendezvous hashing).
- SageMaker: one multi-model endpoint (SageMaker loads, caches and unloads the models; the container runs one
  llama-server per loaded model).
Every GGUF model of the farm, pooled or dedicated, is copied by its ONE ModelCatalog (a Step Functions fan-out the
deploy starts and does not wait for; the deploy waits, bounded, for the dedicated models only), so the template
stays O(1) in the number of pooled models: what grows per model is a preset line in a ConfigMap and a name in the
gateway's config (EKS), nothing on SageMaker; a pool serves each model as soon as its copy lands. Pool sizes come
from pool_sizing (models_max from memory, threads per loaded model)."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from constructs import Construct, IDependable

from cpu_inference import sizing
from cpu_inference.artifacts import ModelCatalog, ModelCatalogProps
from cpu_inference.config.schema import (
    DEDICATED_COPIES,
    DEDICATED_COPY,
    DEDICATED_HOSTING,
    DEDICATED_HOSTINGS,
    DEDICATED_STACKS,
)
from cpu_inference.eks.mountpoint import MountpointS3Csi, MountpointSettings
from cpu_inference.engines import is_vllm
from cpu_inference.engines.adapter_hosting import adapter_hosting_problem
from cpu_inference.k8s.charts.model_pool_chart import ModelPoolChartProps
from cpu_inference.k8s.charts.router_chart import RouterChartProps
from cpu_inference.monitoring import latency
from cpu_inference.patterns.deployment import (
    CatalogModels,
    DedicatedStacks,
    DeploymentProps,
    check_dedicated_stacks,
    claim_namespace,
    eks_workloads,
    endpoints,
    served_policy,
    validate_namespace,
)
from cpu_inference.patterns.eks_platform import EksPlatform
from cpu_inference.patterns.farm_pool import FarmPoolSettings
from cpu_inference.patterns.served_model import ServedAdapter, ServedModel
from cpu_inference.patterns.serving_foundation import ServingFoundation, ServingFoundationProps
from cpu_inference.sagemaker import MultiModelEndpoint, MultiModelEndpointProps
from cpu_inference.sagemaker.inference_components import (
    DEFAULT_MAX_INSTANCES,
    DEFAULT_MIN_INSTANCES,
    DEFAULT_VOLUME_SIZE_GB,
    ComponentHandle,
    ComponentModel,
    InferenceComponents,
    InferenceComponentsProps,
)
from cpu_inference.sizing.pools import PoolPlan, pool_plan
from inference_runtime.lora import Adapter
from model_download.catalog import FARM_PREFIX, CatalogAdapter, CatalogEntry

NAMESPACE = "model-farm"  # ModelFarmProps.namespace's default


@dataclass(frozen=True)
class ModelFarmProps:
    """deployment: the farm's models (role `farm`; `pool` names the pool of each, None = dedicated) and the
    target. pools: the multi-model pools (default one pool `default`). gateway_replicas_min/max: the single
    OpenAI-compatible entry point that routes by the request's `model` (EKS). namespace (EKS): where the farm's
    objects go — each pattern on one platform needs its own, so a second farm on an existing_platform sets one.
    dedicated_stacks: the nested stacks the dedicated models are spread over (deployment.DedicatedStacks: a model's
    stack is a stable hash of its name; fixed once deployed — changing it moves, i.e. replaces, most of them).
    dedicated_copy: `catalog` (default) — the dedicated GGUF models are copied by the farm's ModelCatalog, first, and
    the deploy waits for their keys only (one bounded Custom::DedicatedModelsReady); `artifact` — one ModelArtifact
    each, as farms deployed before (config.yaml farm.dedicated_copy).
    dedicated_hosting (SageMaker): `endpoints` (default) — one GravitonEndpoint per dedicated model;
    `inference_components` — one shared endpoint per instance type and ONE inference component per model
    (sagemaker/inference_components.py; the catalog copies those models as `mme` tarballs; needs dedicated_copy
    `catalog` and deployment.sagemaker.network_isolation False). shared_min_instances / shared_max_instances /
    shared_volume_size_gb: the shared endpoints' (config.yaml farm.shared_endpoints)."""

    deployment: DeploymentProps
    pools: tuple[FarmPoolSettings, ...] = (FarmPoolSettings(),)
    gateway_replicas_min: int = 2
    gateway_replicas_max: int = 6
    namespace: str = NAMESPACE
    dedicated_stacks: int = DEDICATED_STACKS
    dedicated_copy: str = DEDICATED_COPY
    dedicated_hosting: str = DEDICATED_HOSTING
    shared_min_instances: int = DEFAULT_MIN_INSTANCES
    shared_max_instances: int = DEFAULT_MAX_INSTANCES
    shared_volume_size_gb: int = DEFAULT_VOLUME_SIZE_GB

    @property
    def inference_components(self) -> bool:
        return self.dedicated_hosting == "inference_components"

    @property
    def dedicated(self) -> tuple[ServedModel, ...]:
        return tuple(m for m in self.deployment.models if m.pool is None)

    @property
    def dedicated_in_catalog(self) -> tuple[ServedModel, ...]:
        """The dedicated models the farm's catalog copies (every GGUF one, with dedicated_copy `catalog`); the rest
        (vLLM snapshots — the catalog copies single GGUF files — and every one with `artifact`) keep a ModelArtifact."""
        if self.dedicated_copy != "catalog":
            return ()
        return tuple(m for m in self.dedicated if not is_vllm(m.engine))

    def members(self, pool: str) -> tuple[ServedModel, ...]:
        return tuple(m for m in self.deployment.models if m.pool == pool)

    def validate(self) -> None:
        self.deployment.validate()
        validate_namespace(self.namespace, "ModelFarmProps.namespace")
        if not 0 <= self.dedicated_stacks <= 64:
            raise ValueError(
                f"ModelFarmProps.dedicated_stacks must be 0..64 (0: no nested stacks), got {self.dedicated_stacks}"
            )
        if self.dedicated_copy not in DEDICATED_COPIES:
            raise ValueError(
                f"ModelFarmProps.dedicated_copy must be one of {DEDICATED_COPIES} (farm.dedicated_copy), got {self.dedicated_copy!r}"
            )
        if self.dedicated_hosting not in DEDICATED_HOSTINGS:
            raise ValueError(
                f"ModelFarmProps.dedicated_hosting must be one of {DEDICATED_HOSTINGS} (farm.dedicated_hosting), got {self.dedicated_hosting!r}"
            )
        if self.inference_components:
            self._validate_inference_components()
        self._validate_adapters()
        wrong = [m.name for m in self.deployment.models if m.role != "farm"]
        if wrong:
            raise ValueError(f"models {wrong} are not role farm — a model farm serves role farm only")
        if not 1 <= self.gateway_replicas_min <= self.gateway_replicas_max:
            raise ValueError(
                f"need 1 ≤ gateway_replicas_min ({self.gateway_replicas_min}) ≤ gateway_replicas_max ({self.gateway_replicas_max})"
            )
        names = [p.name for p in self.pools]
        if len(set(names)) != len(names):
            raise ValueError(f"pool names must be unique, got {names}")
        for p in self.pools:
            p.validate()
        unknown = sorted({m.pool for m in self.deployment.models if m.pool is not None} - set(names))
        if unknown:
            raise ValueError(
                f"models name pools {unknown} that are not in pools {names} — add the pool or fix the model's pool"
            )
        if self.deployment.target == "sagemaker":
            cold = [m.name for m in self.dedicated if m.replicas_min < 1]
            if cold:
                raise ValueError(
                    f"models {cold} have replicas.min 0: SageMaker real-time endpoints keep ≥ 1 instance — set min 1 or use target eks"
                )
            for p in self.pools:
                if self.members(p.name) and p.replicas_min < 1:
                    raise ValueError(
                        f"pool {p.name}: replicas.min 0 — a SageMaker multi-model endpoint keeps ≥ 1 instance; set min 1"
                    )
                if p.preload:  # a multi-model endpoint loads what SageMaker decides (pool_preset.LOAD_ON_STARTUP: EKS)
                    raise ValueError(f"pool {p.name}: preload is for target eks — remove it on target sagemaker")
                if self.members(p.name) and not p.instance_type:
                    raise ValueError(
                        f"pool {p.name}: target sagemaker needs the pool's instance_type (its multi-model endpoint's instances)"
                    )
        elif any(p.cpu != int(p.cpu) for p in self.pools if self.members(p.name)):
            raise ValueError("pool cpu on EKS must be a whole number of vCPUs (each loaded model gets whole threads)")

    def _validate_adapters(self) -> None:
        """LoRA adapters (ServedModel.adapters): where engines.adapter_hosting serves them, names unique among models
        and adapters."""
        bases = [m for m in self.deployment.models if m.adapters]
        if not bases:
            return
        for m in bases:
            problem = adapter_hosting_problem(
                self.deployment.target,
                pooled=m.pool is not None,
                hosting=self.dedicated_hosting,
                copy=self.dedicated_copy,
            )
            if problem:
                raise ValueError(f"model {m.name} has adapters: {problem}")
        for m in bases:
            m.validate()
        names = [m.name for m in self.deployment.models] + [a.name for m in bases for a in m.adapters]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"names {twice} are used more than once: every model and adapter name must be unique")

    def _validate_inference_components(self) -> None:
        key = "farm.dedicated_hosting: inference_components"
        if self.deployment.target != "sagemaker":
            raise ValueError(
                f"{key} is for target sagemaker (target is {self.deployment.target}) — remove it, or set target: sagemaker"
            )
        if self.dedicated_copy != "catalog":
            raise ValueError(
                f"{key} reads each model's tarball from the farm's catalog — remove farm.dedicated_copy: artifact"
            )
        vllm = [m.name for m in self.dedicated if is_vllm(m.engine)]
        if vllm:
            raise ValueError(
                f"{key} serves llama.cpp GGUF models from the catalog; {vllm} are vLLM — keep farm.dedicated_hosting: "
                "endpoints for them"
            )


def plan_pool(pool: FarmPoolSettings, members: tuple[ServedModel, ...]) -> PoolPlan:
    """The pool's plan (pool_sizing): models_max from memory unless the pool sets it, threads per loaded model.
    On SageMaker the same plan sizes each loaded model (SageMaker itself decides how many stay loaded)."""
    plan = pool_plan(
        {m.name: m.spec for m in members},
        cpu=pool.cpu,
        memory_bytes=int(pool.memory_gib * sizing.GIB),
        models_max=pool.models_max,
    )
    if not plan.fits:
        raise ValueError(
            f"pool {pool.name}: its largest model {plan.largest_model} needs {math.ceil(plan.per_model[plan.largest_model].memory_bytes / sizing.MIB)} MiB "
            f"loaded; memory_gib {pool.memory_gib} holds {plan.models_max_fit} — raise memory_gib or move the model to a larger pool"
        )
    return plan


# What a catalog entry or bundled adapter copies from the Hub: the same fields on a ServedModel and a ServedAdapter.
_HUB_FIELDS = ("hf_repo", "file", "revision", "sha256", "token_secret_name")


def _hub_source(source: ServedModel | ServedAdapter) -> dict[str, Any]:
    return {f: getattr(source, f) for f in _HUB_FIELDS}


def catalog_entry(
    m: ServedModel, plan: PoolPlan | None, layouts: tuple[str, ...] | None = None, *, bundle: bool = False
) -> CatalogEntry:
    """A pooled model's entry (plan: its pool's, for the MME tarball's flags), or a dedicated one's (plan None: read
    as one GGUF by its own workload or endpoint, which sizes itself; `layouts` ("gguf",) where the catalog's differ).
    bundle: a dedicated SageMaker base with adapters is ONE entry in the catalog's `lora` layout (its GGUF, its
    adapters' GGUFs and the manifest under one prefix, which its endpoint's ModelDataSource downloads whole)."""
    if m.file is None:  # ServedModel.validate: only a vLLM model has no file, and it is never in the catalog
        raise ValueError(f"ServedModel {m.name}: a model of the catalog needs its GGUF file")
    if bundle and m.adapters:
        layouts = ("lora",)
    return CatalogEntry(
        name=m.name,
        **_hub_source(m),
        engine_args=plan.engine_args(m.name) if plan is not None else {},
        layouts=layouts,
        adapters=tuple(CatalogAdapter(name=a.name, **_hub_source(a), scale=a.scale) for a in m.adapters)
        if bundle and m.adapters
        else None,
    )


def adapter_entries(models: tuple[ServedModel, ...]) -> tuple[CatalogEntry, ...]:
    """The catalog entries of `models`' LoRA adapters, in model then adapter order: each records its base, so the copy
    checks its GGUF header against the base's (model_download.gguf_meta) before it lands at farm/<name>/<idhash>/."""
    return tuple(CatalogEntry(name=a.name, **_hub_source(a), base=m.name) for m in models for a in m.adapters)


def farm_catalog_entries(
    props: ModelFarmProps, plans: dict[str, PoolPlan]
) -> tuple[tuple[CatalogEntry, ...], tuple[str, ...]]:
    """The farm catalog's entries and layouts (what ModelFarm copies and `cpu-inference farm status` reads).
    Dedicated models head the entries: the copy's Distributed Map takes its work list in order, so the models the
    deploy waits for are copied first. Each is read as one GGUF by its own workload/endpoint — or, as inference
    components, as the catalog's `mme` tarball (their ArtifactUrl is a .tar.gz). `plans`: the pools with members.
    The models' LoRA adapters come last (adapter_entries, after every base): a pool serves each once it lands."""
    layouts = ("mme",) if props.deployment.target == "sagemaker" else ("gguf",)
    own = None if "gguf" in layouts or props.inference_components else ("gguf",)
    pooled = tuple(m for p in props.pools if p.name in plans for m in props.members(p.name))
    sagemaker = props.deployment.target == "sagemaker"  # a dedicated base's adapters: in its own `lora` bundle
    entries = tuple(catalog_entry(m, None, own, bundle=sagemaker) for m in props.dedicated_in_catalog) + tuple(
        catalog_entry(m, plans[str(m.pool)]) for m in pooled
    )
    # EKS: a dedicated base's adapters are catalog entries as a pooled base's are (its pod fetches their gguf keys,
    # k8s/workloads/model_fetch.py ADAPTERS_SCRIPT), first among the adapters: the Map copies in order.
    eks_dedicated = props.dedicated_in_catalog if props.deployment.target == "eks" else ()
    return entries + adapter_entries(eks_dedicated + pooled), layouts


class ModelFarm(Construct):
    """Attributes: foundation (bucket, dedicated models' artifacts, images); catalog (the pooled models' one copy
    job, or None); plans (pool name → PoolPlan); on EKS `platform`, `mountpoint` (the platform's Mountpoint for S3
    CSI driver, when the farm has pools), `mountpoint_grant` (this farm's prefix read, granted to the driver's role),
    `workloads` (dedicated model charts, pool charts and the gateway); on SageMaker `endpoints` (dedicated model name
    → GravitonEndpoint) and `pool_endpoints` (pool name → MultiModelEndpoint).

    The Mountpoint driver is the platform's (one add-on per cluster: a second farm on the same existing_platform
    reuses it). A farm that builds its own platform turns it on (d.platform.mountpoint, default MountpointSettings());
    an existing_platform must have been built with one."""

    def __init__(self, scope: Construct, id: str, *, props: ModelFarmProps) -> None:
        super().__init__(scope, id)
        props.validate()
        self.props = props
        d = props.deployment
        dedicated = props.dedicated
        in_catalog = props.dedicated_in_catalog
        self.foundation = ServingFoundation(
            self,
            "Serving",
            props=ServingFoundationProps(
                models=tuple(m for m in dedicated if m not in in_catalog),
                bucket=d.bucket,
                engine_image=d.engine_image,
                vllm_image=d.vllm_image,
                router_image=d.router_image if d.target == "eks" else None,
            ),
        )
        pools = [p for p in props.pools if props.members(p.name)]
        self.plans: dict[str, PoolPlan] = {p.name: plan_pool(p, props.members(p.name)) for p in pools}
        self.catalog: ModelCatalog | None = None
        if pools or in_catalog:
            entries, layouts = farm_catalog_entries(props, self.plans)
            self.catalog = ModelCatalog(
                self,
                "Catalog",
                props=ModelCatalogProps(
                    model_bucket=self.foundation.model_bucket,
                    entries=entries,
                    layouts=layouts,
                    awaited=len(in_catalog),
                ),
            )
        self.catalog_models = (
            CatalogModels(self.catalog, frozenset(m.name for m in in_catalog))
            if self.catalog is not None and in_catalog
            else None
        )
        self.platform: EksPlatform | None = None
        self.mountpoint: MountpointS3Csi | None = None
        self.mountpoint_grant: iam.Grant | None = None
        self.workloads = None
        self.endpoints = {}
        self.inference_components: InferenceComponents | None = None
        self.components: dict[str, ComponentHandle] = {}
        self.pool_endpoints: dict[str, MultiModelEndpoint] = {}
        dedicated_props = replace(d, models=dedicated)
        # With dedicated_stacks, dedicated endpoints live in nested stacks chosen by a stable hash of their name
        # (deployment.DedicatedStacks): 300 of them fit CloudFormation's per-template quotas, and adding one never
        # moves another. Without (the default), they stay in the farm's stack, as every farm deployed before.
        self.dedicated_stacks = (
            DedicatedStacks(self, props.dedicated_stacks, "cpu-inference: dedicated models")
            if props.dedicated_stacks
            else None
        )
        if d.target == "sagemaker":
            if props.inference_components and dedicated:
                self.inference_components = self._inference_components(dedicated)
                self.components = self.inference_components.components
            elif dedicated:
                # Nested: one dashboard per endpoint is a resource per model, so the farm's endpoints are read in
                # CloudWatch's automatic SageMaker dashboard instead; each endpoint keeps its alarms.
                self.endpoints = endpoints(
                    self,
                    dedicated_props,
                    self.foundation,
                    home=self.dedicated_stacks,
                    dashboard=self.dedicated_stacks is None,
                    catalog=self.catalog_models,
                )
            if self.dedicated_stacks is not None:
                check_dedicated_stacks(self.dedicated_stacks.stacks)
            for p in pools:
                assert self.catalog is not None and p.instance_type is not None
                self.pool_endpoints[p.name] = MultiModelEndpoint(
                    self,
                    f"Pool{''.join(part.capitalize() for part in p.name.split('-'))}",
                    props=MultiModelEndpointProps.for_catalog(
                        self.catalog,
                        name=p.name,
                        image=self.foundation.engine_image,
                        models=[m.name for m in props.members(p.name)],
                        instance_type=p.instance_type,
                        min_capacity=p.replicas_min,
                        max_capacity=p.replicas_max,
                        threads_per_model=self.plans[p.name].threads_per_model,
                        network_isolation=d.sagemaker.network_isolation,
                        # The latency alarm as for one model's endpoint: the SLO plus the longest answer a member's
                        # task produces (an embedding/rerank pool: the SLO alone).
                        latency_slo=cdk.Duration.millis(d.p95_latency_ms),
                        alarm_output_tokens=latency.alarm_output_tokens(m.spec.task for m in props.members(p.name)),
                    ),
                )
            return
        platform_props = (
            d.platform
            if not pools or d.platform.mountpoint is not None
            else replace(d.platform, mountpoint=MountpointSettings())
        )
        self.platform = d.existing_platform or EksPlatform(
            self, "Platform", props=platform_props, mountpoint_scope=self
        )
        claim_namespace(self.platform, props.namespace, owner=self, key="ModelFarmProps.namespace")
        assert self.foundation.router_image is not None
        gateway = RouterChartProps(
            image=self.foundation.router_image.image_uri,
            mode="gateway",
            name="gateway",
            namespace=props.namespace,
            pattern="model-farm",
            replicas_min=props.gateway_replicas_min,
            replicas_max=props.gateway_replicas_max,
            architectures=tuple(d.platform_in_use.node_pools.architectures),
        )
        pool_props: tuple[ModelPoolChartProps, ...] = ()
        pool_deps: tuple[IDependable, ...] = ()
        if pools:
            assert self.catalog is not None
            self.mountpoint = self.platform.mountpoint
            if self.mountpoint is None:
                raise ValueError(
                    "ModelFarm: existing_platform has no Mountpoint for S3 CSI driver, which the pools read their models through — "
                    "build that platform with EksPlatformProps(mountpoint=MountpointSettings()) (or MountpointSettings(install_mountpoint_addon=False, "
                    "driver_role_arn=<the installed driver's IAM role>) when the cluster already runs the driver)"
                )
            # Driver-level credentials are cluster-wide: this farm's prefix goes to the one driver role.
            self.mountpoint_grant = self.mountpoint.grant_read(self, self.foundation.model_bucket, FARM_PREFIX)
            pool_deps = (self.catalog.resource, self.mountpoint_grant)
            pool_props = tuple(self._pool_chart_props(p, props.members(p.name)) for p in pools)
        policy = served_policy(d, namespace=props.namespace, pattern="model-farm", farm=True)
        self.workloads = eks_workloads(
            self,
            dedicated_props,
            self.foundation,
            self.platform,
            policy=policy,
            router=gateway,
            pools=pool_props,
            # The pools wait for the add-on this platform installed (a pre-installed driver: nothing to wait for).
            mountpoint=self.mountpoint if self.mountpoint is not None and self.mountpoint.addon is not None else None,
            extra_depends_on=pool_deps,
            catalog=self.catalog_models,
            home=self.dedicated_stacks,
        )
        if self.dedicated_stacks is not None:
            check_dedicated_stacks(self.dedicated_stacks.stacks)

    def _inference_components(self, dedicated: tuple[ServedModel, ...]) -> InferenceComponents:
        """The dedicated models as inference components on shared endpoints, reading the catalog's mme tarballs."""
        props, d = self.props, self.props.deployment
        assert self.catalog is not None and self.catalog_models is not None
        bucket = self.catalog.bucket.bucket_name
        models = tuple(
            ComponentModel(
                name=m.name,
                spec=m.spec,
                instance_type=str(m.instance_type),
                artifact_url=f"s3://{bucket}/{self.catalog.mme_key(m.name)}",
                model_file=self.catalog.catalog.entry(m.name).basename,
                min_copies=m.replicas_min,
                max_copies=m.replicas_max,
            )
            for m in dedicated
        )
        return InferenceComponents(
            self,
            "Dedicated",
            props=InferenceComponentsProps(
                models=models,
                image=self.foundation.engine_image,
                model_bucket=self.foundation.model_bucket,
                min_instances=props.shared_min_instances,
                max_instances=props.shared_max_instances,
                volume_size_gb=props.shared_volume_size_gb,
                latency_slo_ms=d.p95_latency_ms,
                network_isolation=d.sagemaker.network_isolation,
                model_scope=self.dedicated_stacks.stack_for if self.dedicated_stacks is not None else None,
                depends_on=(self.catalog_models.ready,),  # CreateInferenceComponent once its tarball exists
            ),
        )

    def grant_invoke_dedicated(self, grantee: iam.IGrantable) -> iam.Grant:
        """InvokeEndpoint + InvokeEndpointWithResponseStream on every dedicated model: the shared endpoints of the
        inference components, or each GravitonEndpoint."""
        if self.inference_components is not None:
            return self.inference_components.grant_invoke(grantee)
        if not self.endpoints:
            raise ValueError("ModelFarm.grant_invoke_dedicated: this farm has no dedicated SageMaker endpoint")
        grants = [e.grant_invoke(grantee) for e in self.endpoints.values()]
        return functools.reduce(lambda a, b: a.combine(b), grants)

    def _pool_chart_props(self, pool: FarmPoolSettings, members: tuple[ServedModel, ...]) -> ModelPoolChartProps:
        assert self.catalog is not None
        return ModelPoolChartProps.from_plan(
            name=pool.name,
            image=self.foundation.engine_image.image_uri,
            plan=self.plans[pool.name],
            paths={m.name: self.catalog.gguf_key(m.name).removeprefix(FARM_PREFIX) for m in members},
            bucket_name=self.foundation.model_bucket.bucket.bucket_name,
            region=cdk.Stack.of(self).region,
            replicas_min=pool.replicas_min,
            replicas_max=pool.replicas_max,
            replication=pool.replication,
            preload=pool.preload,
            adapters=tuple(
                Adapter(
                    name=a.name,
                    base=m.name,
                    path=self.catalog.gguf_key(a.name).removeprefix(FARM_PREFIX),
                    scale=a.scale,
                )
                for m in members
                for a in m.adapters
            ),
        )
