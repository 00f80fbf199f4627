"""What both patterns share: the target (EKS or SageMaker), the served models, and how each model becomes a
workload on the cluster or an endpoint."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal

from aws_cdk import aws_iam as iam
from constructs import Construct, IDependable

from cpu_inference._internal.k8s_object import is_dns_label
from cpu_inference.artifacts import ModelBucketProps
from cpu_inference.config.schema import FIRST_TOKEN_SLO_MS
from cpu_inference.eks import InferenceWorkloads, InferenceWorkloadsProps
from cpu_inference.eks.inference_workloads import KubernetesPatch, ModelDeployment
from cpu_inference.eks.mountpoint import MountpointS3Csi
from cpu_inference.images import VLLM_IMAGE, LlamaCppImageProps
from cpu_inference.k8s.charts.model_pool_chart import ModelPoolChartProps
from cpu_inference.k8s.charts.router_chart import RouterChartProps
from cpu_inference.k8s.specs.default_node_pools import MEMORY_POOL, MEMORY_TAINT
from cpu_inference.k8s.workloads.serving_policy import ServingPolicy
from cpu_inference.patterns.eks_platform import EksPlatform, EksPlatformProps
from cpu_inference.patterns.sagemaker_endpoints import graviton_endpoint_props
from cpu_inference.patterns.served_model import ServedModel
from cpu_inference.patterns.serving_foundation import ROUTER_IMAGE, ServingFoundation
from cpu_inference.sagemaker import GravitonEndpoint

TARGETS = ("eks", "sagemaker")


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


def model_deployments(models: tuple[ServedModel, ...], foundation: ServingFoundation) -> tuple[ModelDeployment, ...]:
    return tuple(
        ModelDeployment.from_artifact(
            foundation.artifacts[m.name],
            image=foundation.image_for(m).image_uri,
            spec=m.spec,
            cpu=m.cpu,
            replicas_min=m.replicas_min,
            replicas_max=m.replicas_max,
            role=m.role,
        )
        for m in models
    )


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
) -> InferenceWorkloads:
    return InferenceWorkloads(
        scope,
        "Workloads",
        props=InferenceWorkloadsProps(
            cluster=platform.cluster,
            models=model_deployments(props.models, foundation),
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


def endpoints(scope: Construct, props: DeploymentProps, foundation: ServingFoundation) -> dict[str, GravitonEndpoint]:
    """One SageMaker endpoint per model, each reading only its own model prefix."""
    out: dict[str, GravitonEndpoint] = {}
    for m in props.models:
        out[m.name] = GravitonEndpoint(
            scope,
            f"Endpoint{''.join(p.capitalize() for p in m.name.split('-'))}",
            props=graviton_endpoint_props(
                m,
                model=foundation.artifacts[m.name],
                image=foundation.image_for(m),
                latency_slo_ms=props.p95_latency_ms,
                network_isolation=props.sagemaker.network_isolation,
                data_capture_percent=props.sagemaker.data_capture_percent,
            ),
        )
    return out
