"""What both patterns share: the target (EKS or SageMaker), the served models, and how each model becomes a
workload on the cluster or an endpoint."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from constructs import Construct, IDependable

from cpu_inference._internal.k8s_object import is_dns_label
from cpu_inference.artifacts import ModelBucketProps, ModelCatalog
from cpu_inference.config.schema import FIRST_TOKEN_SLO_MS
from cpu_inference.eks import InferenceWorkloads, InferenceWorkloadsProps
from cpu_inference.eks.inference_workloads import KubernetesPatch, ModelDeployment
from cpu_inference.eks.mountpoint import MountpointS3Csi
from cpu_inference.images import VLLM_IMAGE, LlamaCppImageProps
from cpu_inference.k8s.charts.model_pool_chart import ModelPoolChartProps
from cpu_inference.k8s.charts.router_chart import RouterChartProps
from cpu_inference.k8s.specs.default_node_pools import MEMORY_POOL, MEMORY_TAINT
from cpu_inference.k8s.workloads.model_workload import ModelWorkload, WorkloadAdapter
from cpu_inference.k8s.workloads.serving_policy import ServingPolicy
from cpu_inference.patterns.eks_platform import EksPlatform, EksPlatformProps
from cpu_inference.patterns.sagemaker_endpoints import graviton_endpoint_props
from cpu_inference.patterns.served_model import ServedModel
from cpu_inference.patterns.serving_foundation import ROUTER_IMAGE, ServingFoundation
from cpu_inference.sagemaker import GravitonEndpoint
from model_download.catalog import FARM_PREFIX, LORA_MANIFEST, CatalogEntry, lora_prefix

TARGETS = ("eks", "sagemaker")

# CloudFormation's per-template quotas (CloudFormation user guide, "CloudFormation quotas": 500 resources per stack;
# a template uploaded from S3 at most 1 MB — aws-cdk-lib core/lib/stack.js TEMPLATE_BODY_MAXIMUM_SIZE=1e6). A nested
# stack is a stack of its own: the same quotas apply to each nested template.
CFN_MAX_RESOURCES = 500
CFN_MAX_TEMPLATE_BYTES = 1_000_000
# How many nested stacks a farm's dedicated models are spread over (config.yaml farm.dedicated_stacks, default
# config.schema.DEDICATED_STACKS). Fixed once deployed: a model's stack is a function of its name and this number only,
# so adding or removing models never moves another model (a move is a delete + create in CloudFormation); changing
# the number moves most of them.
DEDICATED_STACKS_KEY = "farm.dedicated_stacks"


def dedicated_stack_index(name: str, stacks: int) -> int:
    """The nested stack (0..stacks-1) of the dedicated model `name`: sha256 of the name, modulo `stacks` — a stable
    function of the name alone (never of the other models or their order)."""
    return int(hashlib.sha256(name.encode()).hexdigest()[:16], 16) % stacks


def dedicated_stack_id(index: int) -> str:
    """The construct id (and so the logical id prefix) of dedicated stack `index`: part of every deployed template."""
    return f"Dedicated{index:02d}"


class DedicatedStacks:
    """The nested stacks of one farm's dedicated models, created on first use under `scope` (an empty one is never
    created: adding its first model creates it, removing its last deletes it; nothing else moves)."""

    def __init__(self, scope: Construct, stacks: int, description: str) -> None:
        self.scope = scope
        self.count = stacks
        self.description = description
        self.stacks: dict[int, cdk.NestedStack] = {}

    def index(self, name: str) -> int:
        return dedicated_stack_index(name, self.count)

    def stack_for(self, name: str) -> cdk.NestedStack:
        i = self.index(name)
        if i not in self.stacks:
            self.stacks[i] = cdk.NestedStack(
                self.scope, dedicated_stack_id(i), description=f"{self.description} ({i + 1} of {self.count})"
            )
        return self.stacks[i]


def check_dedicated_stacks(stacks: dict[int, cdk.NestedStack], key: str = DEDICATED_STACKS_KEY) -> None:
    """Refuse a nested stack over CloudFormation's quotas (500 resources, 1 MB template), naming `key`. Called once
    the stacks are complete (counts the resources their constructs will render)."""
    for i, st in sorted(stacks.items()):
        resources = [c for c in st.node.find_all() if isinstance(c, cdk.CfnResource) and cdk.Stack.of(c) is st]
        if len(resources) > CFN_MAX_RESOURCES:
            raise ValueError(
                f"{key}: dedicated stack {dedicated_stack_id(i)} would hold {len(resources)} CloudFormation resources "
                f"(limit {CFN_MAX_RESOURCES} per stack) — raise {key} (this moves most dedicated models to another "
                "stack: they are replaced) or serve some models from a pool"
            )


@dataclass(frozen=True)
class SageMakerSettings:
    """Endpoint-wide options for target `sagemaker` (mirrors config.yaml `sagemaker`)."""

    network_isolation: bool = True
    data_capture_percent: int = 0


@dataclass(frozen=True)
class DeploymentProps:
    """models: the served models. target: `eks` (a cluster: platform props, or bring `existing_platform`) or
    `sagemaker` (one GravitonEndpoint per model). p95_latency_ms: the SLO behind the latency alarms.
    bucket / engine_image / router_image / vllm_image: props of the ModelBucket and the images (bring existing ones
    there); the vLLM image is built only when a model has engine vllm.
    kubernetes_patch (target eks): the escape hatch, InferenceWorkloadsProps.kubernetes_patch — called with every
    Kubernetes object the pattern renders (models, pools, router, namespace, ScaledObjects) before it goes into a
    KubernetesManifest; change the dict in place (return None) or return a replacement."""

    models: tuple[ServedModel, ...]
    target: Literal["eks", "sagemaker"] = "eks"
    platform: EksPlatformProps = field(default_factory=EksPlatformProps)
    existing_platform: EksPlatform | None = None
    sagemaker: SageMakerSettings = field(default_factory=SageMakerSettings)
    p95_latency_ms: int = FIRST_TOKEN_SLO_MS
    bucket: ModelBucketProps = ModelBucketProps()
    engine_image: LlamaCppImageProps = LlamaCppImageProps()
    router_image: LlamaCppImageProps = ROUTER_IMAGE
    vllm_image: LlamaCppImageProps = VLLM_IMAGE
    kubernetes_patch: KubernetesPatch | None = None

    def validate(self) -> None:
        if self.target not in TARGETS:
            raise ValueError(f"target must be one of {TARGETS}, got {self.target!r}")
        if not self.models:
            raise ValueError("models: give at least one model")
        if self.p95_latency_ms <= 0:
            raise ValueError(f"p95_latency_ms must be > 0, got {self.p95_latency_ms}")
        if self.kubernetes_patch is not None and self.target != "eks":
            raise ValueError(
                f"kubernetes_patch patches Kubernetes objects: it applies to target eks only (target is {self.target!r}); remove it"
            )
        if self.target == "sagemaker":
            missing = [m.name for m in self.models if not m.instance_type and m.pool is None]
            if missing:
                raise ValueError(
                    f"target sagemaker needs an instance_type for every dedicated model, missing for {missing}"
                )
        if self.existing_platform is None and self.target == "eks":
            self.platform.validate()

    @property
    def platform_in_use(self) -> EksPlatformProps:
        """The props of the platform the workloads run on: existing_platform's when given (`platform` unused)."""
        return self.existing_platform.props if self.existing_platform is not None else self.platform


def validate_namespace(namespace: str, key: str) -> None:
    """`key`: the prop that set it (e.g. ModelFarmProps.namespace), named in the error."""
    if not is_dns_label(namespace):  # a Namespace's name is an RFC 1123 label (Kubernetes "Object Names and IDs")
        raise ValueError(
            f"{key} {namespace!r} must be a DNS label (lowercase letters, digits and '-', at most 63 characters)"
        )


def claim_namespace(platform: EksPlatform, namespace: str, *, owner: Construct, key: str) -> None:
    """Reserve `namespace` on `platform` for the pattern `owner`; a second pattern on the platform with the same
    namespace is a ValueError naming `key` (the prop to change)."""
    # Two patterns in one namespace render objects of the same names there (gateway/router, dashboard, alerts rule
    # group), each overwriting the other's.
    holder = platform.pattern_namespaces.setdefault(namespace, owner.node.path)
    if holder != owner.node.path:
        raise ValueError(
            f"{key} {namespace!r} is already used on this platform by {holder} — set a different namespace "
            f"({key}) for one of them: two patterns in one namespace overwrite each other's objects"
        )


def served_policy(props: DeploymentProps, *, namespace: str, pattern: str, farm: bool) -> ServingPolicy:
    """Namespace-wide serving settings from the node pools of the platform in use. A farm packs onto the tainted
    memory-optimized pool (r families), tolerating its taint and preferring it."""
    platform = props.platform_in_use
    pools = platform.node_pools
    families = tuple(pools.instance_families)
    policy = ServingPolicy(
        namespace=namespace,
        pattern=pattern,
        node_families=families,
        architectures=tuple(pools.architectures),
        kubernetes_minor=platform.cluster.kubernetes_version,
    )
    if farm and pools.memory_pool and any(f.startswith("r") for f in families):
        policy = replace(policy, tolerations=(MEMORY_TAINT.toleration(),), preferred_pools=(MEMORY_POOL,))
    return policy


@dataclass(frozen=True)
class CatalogModels:
    """Dedicated models copied by a farm's ModelCatalog (not one ModelArtifact each): `names`, read from their
    `gguf` keys; consumers wait for `catalog.ready` (the farm's one bounded wait, model_download.catalog_wait)."""

    catalog: ModelCatalog
    names: frozenset[str]

    def uri(self, name: str) -> str:
        return f"s3://{self.catalog.bucket.bucket_name}/{self.catalog.gguf_key(name)}"

    def _bundle(self, name: str) -> CatalogEntry | None:
        """The entry when it is a base with adapters in the catalog's `lora` bundle (SageMaker), else None."""
        entry = self.catalog.catalog.entry(name)
        return entry if "lora" in self.catalog.catalog.layouts_of(entry) else None

    def prefix_uri(self, name: str) -> str:
        """SageMaker's S3Prefix model data: the GGUF's own prefix `farm/<name>/<idhash>/`, or a base with adapters'
        bundle prefix (catalog.lora_prefix: the base, lora/<adapter>.gguf and the manifest, all of it downloaded)."""
        bundle = self._bundle(name)
        if bundle is not None:
            return f"s3://{self.catalog.bucket.bucket_name}/{lora_prefix(bundle)}"
        return self.uri(name).rsplit("/", 1)[0] + "/"

    def file(self, name: str) -> str:
        bundle = self._bundle(name)
        if bundle is not None:
            return bundle.basename  # the bundle's base member (catalog.lora_member_keys)
        return self.catalog.gguf_key(name).rsplit("/", 1)[1]

    def landed_sha256(self, name: str) -> str | None:
        """The pinned digest of what lands at the entry's key, or None (then the object's `sha256` metadata is what a
        reader verifies). A PEFT adapter's sha256 pins its source weights, not the GGUF the copy converts them to."""
        entry = self.catalog.catalog.entry(name)
        return None if entry.peft else entry.sha256

    def lora_manifest(self, name: str) -> str | None:
        """The bundle's manifest relative to its prefix (catalog.LORA_MANIFEST), None for a model without adapters."""
        return LORA_MANIFEST if self._bundle(name) is not None else None

    @property
    def ready(self) -> IDependable:
        assert self.catalog.ready is not None  # ModelCatalogProps.awaited covers every dedicated entry
        return self.catalog.ready


def model_deployments(
    models: tuple[ServedModel, ...], foundation: ServingFoundation, catalog: CatalogModels | None = None
) -> tuple[ModelDeployment, ...]:
    out = []
    for m in models:
        workload = dict(cpu=m.cpu, replicas_min=m.replicas_min, replicas_max=m.replicas_max, role=m.role)
        if catalog is not None and m.name in catalog.names:
            # The catalog's identity key (never overwritten): the pods verify the object's own sha256 metadata, or
            # the pinned one (k8s/workloads/model_fetch.py); they read through the namespace's one identity.
            out.append(
                ModelDeployment(
                    workload=ModelWorkload(
                        name=m.name,
                        image=foundation.image_for(m).image_uri,
                        model_uri=catalog.uri(m.name),
                        spec=m.spec,
                        sha256=m.sha256,
                        # Its LoRA adapters: their catalog keys (farm/<adapter>/<idhash>/<file>, under the same read
                        # of farm/ as the model's), fetched by the pod's adapter-fetch init container.
                        adapters=tuple(
                            WorkloadAdapter(
                                name=a.name,
                                uri=catalog.uri(a.name),
                                scale=a.scale,
                                sha256=catalog.landed_sha256(a.name),
                            )
                            for a in m.adapters
                        ),
                        **workload,  # type: ignore[arg-type]
                    ),
                    model_bucket=catalog.catalog.model_bucket,
                    read_prefix=FARM_PREFIX,
                    shared_identity=True,
                    ready=catalog.ready,
                )
            )
            continue
        if m.adapters:  # ModelFarmProps refuses this first, naming farm.dedicated_copy
            raise ValueError(f"ServedModel {m.name}: a dedicated model's adapters are read from its farm's catalog")
        out.append(
            ModelDeployment.from_artifact(
                foundation.artifacts[m.name], image=foundation.image_for(m).image_uri, spec=m.spec, **workload
            )
        )
    return tuple(out)


def eks_workloads(
    scope: Construct,
    props: DeploymentProps,
    foundation: ServingFoundation,
    platform: EksPlatform,
    *,
    policy: ServingPolicy,
    router: RouterChartProps,
    router_statements: tuple[iam.PolicyStatement, ...] = (),
    pools: tuple[ModelPoolChartProps, ...] = (),
    mountpoint: MountpointS3Csi | None = None,
    extra_depends_on: tuple[IDependable, ...] = (),
    catalog: CatalogModels | None = None,
    home: DedicatedStacks | None = None,
) -> InferenceWorkloads:
    return InferenceWorkloads(
        scope,
        "Workloads",
        props=InferenceWorkloadsProps(
            cluster=platform.cluster,
            models=model_deployments(props.models, foundation, catalog),
            model_scope=home.stack_for if home is not None else None,
            policy=policy,
            metrics=platform.metrics,
            keda=platform.keda,
            router=router,
            router_policy_statements=router_statements,
            p95_latency_slo_ms=props.p95_latency_ms,
            depends_on=(*platform.karpenter.node_pool_manifests, *extra_depends_on),
            pools=pools,
            mountpoint=mountpoint,
            kubernetes_patch=props.kubernetes_patch,
        ),
    )


def endpoints(
    scope: Construct,
    props: DeploymentProps,
    foundation: ServingFoundation,
    *,
    home: DedicatedStacks | None = None,
    dashboard: bool = True,
    catalog: CatalogModels | None = None,
) -> dict[str, GravitonEndpoint]:
    """One SageMaker endpoint per model, each reading only its own model prefix. `home`: the nested stacks the
    endpoints go to (each in the stack of its name; None: all in `scope`). dashboard: one per endpoint. catalog: the
    models read from the farm's catalog (their GGUF's prefix `farm/<name>/<idhash>/`), created only after the
    farm's wait for their keys."""
    out: dict[str, GravitonEndpoint] = {}
    for m in props.models:
        source: dict[str, Any] = {"model": foundation.artifacts.get(m.name)}
        if catalog is not None and m.name in catalog.names:
            key = catalog.catalog.model_bucket.key
            source = {
                "model": catalog.prefix_uri(m.name),
                "model_file": catalog.file(m.name),
                "model_key": key,
                "lora_manifest": catalog.lora_manifest(m.name),
            }
        out[m.name] = GravitonEndpoint(
            home.stack_for(m.name) if home is not None else scope,
            f"Endpoint{''.join(p.capitalize() for p in m.name.split('-'))}",
            props=graviton_endpoint_props(
                m,
                image=foundation.image_for(m),
                latency_slo_ms=props.p95_latency_ms,
                network_isolation=props.sagemaker.network_isolation,
                data_capture_percent=props.sagemaker.data_capture_percent,
                dashboard=dashboard,
                **source,
            ),
        )
        if catalog is not None and m.name in catalog.names:
            out[m.name].node.add_dependency(catalog.ready)  # CreateModel only once its object exists
    return out
