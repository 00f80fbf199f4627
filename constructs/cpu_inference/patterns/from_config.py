"""config.yaml (Config) -> pattern props. The only place where the config meets the constructs: constructs never
read config.yaml, the app does, through these pure functions."""

from __future__ import annotations

from typing import Literal, cast

from cpu_inference import sizing
from cpu_inference.config import Config, model_spec
from cpu_inference.config.rules import pool_budget, pool_instance_of
from cpu_inference.eks import InferenceClusterProps
from cpu_inference.eks.mountpoint import MountpointSettings
from cpu_inference.patterns.deployment import DeploymentProps, SageMakerSettings
from cpu_inference.patterns.eks_platform import EksPlatformProps, NodePoolSettings
from cpu_inference.patterns.escalation import EscalationTarget
from cpu_inference.patterns.farm_pool import FarmPoolSettings
from cpu_inference.patterns.model_farm import ModelFarmProps
from cpu_inference.patterns.router_settings import RouterSettings
from cpu_inference.patterns.served_model import ServedAdapter, ServedModel
from cpu_inference.patterns.slm_prefilter import SlmPrefilterProps


def served_models(config: Config) -> tuple[ServedModel, ...]:
    return tuple(
        ServedModel(
            name=m.name,
            hf_repo=m.source.hf_repo,
            file=m.source.file,
            revision=m.source.revision,
            sha256=m.source.sha256,
            token_secret_name=m.source.token_secret_name,
            spec=model_spec(m, config),
            role=config.role_of(m),
            replicas_min=m.replicas.min,
            replicas_max=m.replicas.max,
            instance_type=(m.instance_type or config.sagemaker.instance_type)
            if config.target == "sagemaker" and pool is None
            else None,
            cpu=m.cpu,
            pool=pool.name if pool is not None else None,
            adapters=tuple(
                ServedAdapter(
                    name=a.name,
                    hf_repo=a.source.hf_repo,
                    file=a.source.catalog_file,  # a PEFT source: its weights (converted by the catalog copy)
                    revision=a.source.revision,
                    sha256=a.source.sha256,
                    token_secret_name=a.source.token_secret_name,
                    scale=a.scale,
                    size_bytes=a.size_bytes,
                )
                for a in m.adapters
            ),
        )
        for m in config.models
        for pool in (config.pool_of(m),)
    )


def farm_pools(config: Config) -> tuple[FarmPoolSettings, ...]:
    """config.farm.pools; on SageMaker a pool's replica is its endpoint's instance (vCPUs and usable memory)."""
    out = []
    for p in config.farm.pools:
        cpu, memory = pool_budget(config, p)
        out.append(
            FarmPoolSettings(
                name=p.name,
                cpu=cpu,
                memory_gib=memory / sizing.GIB,
                replicas_min=p.replicas.min,
                replicas_max=p.replicas.max,
                replication=p.replication,
                models_max=p.models_max,
                instance_type=pool_instance_of(config, p) if config.target == "sagemaker" else None,
                preload=tuple(p.preload),
            )
        )
    return tuple(out)


def mountpoint_settings(config: Config) -> MountpointSettings | None:
    """The Mountpoint for S3 CSI driver of a model farm's platform (its pools read the models through it); None else."""
    if config.pattern != "model-farm":
        return None
    e = config.eks
    version = {"addon_version": e.mountpoint_version} if e.mountpoint_version is not None else {}
    return MountpointSettings(
        install_mountpoint_addon=e.install_mountpoint_addon, driver_role_arn=e.mountpoint_driver_role_arn, **version
    )


def platform_props(config: Config) -> EksPlatformProps:
    e = config.eks
    return EksPlatformProps(
        cluster=InferenceClusterProps(
            kubernetes_version=e.kubernetes_version,
            admin_principal_arns=tuple(e.admin_principal_arns),
            endpoint_access=e.endpoint_access,
            system_instance_type=e.system_instance_type,
            workload_namespace=None,  # each pattern renders its own restricted namespace
        ),
        node_pools=NodePoolSettings(
            architectures=tuple(e.architectures),
            capacity_types=tuple(e.capacity_types),
            instance_families=tuple(e.instance_families),
            instance_types=tuple(e.instance_types),
            max_node_cpu=e.max_node_cpu,
            consolidation_budget=e.consolidation_budget,
            memory_pool=config.pattern == "model-farm",
        ),
        prometheus=e.prometheus,
        mountpoint=mountpoint_settings(config),
    )


def deployment_props(config: Config) -> DeploymentProps:
    return DeploymentProps(
        models=served_models(config),
        # The config schema's use_enum_values stores the enum's value: at run time this is already the plain string.
        target=cast(Literal["eks", "sagemaker"], config.target),
        platform=platform_props(config),
        sagemaker=SageMakerSettings(
            network_isolation=config.sagemaker.network_isolation,
            data_capture_percent=config.sagemaker.data_capture_percent,
        ),
        p95_latency_ms=config.slo.p95_latency_ms,
    )


def slm_prefilter_props(config: Config) -> SlmPrefilterProps:
    assert config.escalation is not None  # the config rules require it for slm-prefilter
    e, r = config.escalation, config.router
    return SlmPrefilterProps(
        deployment=deployment_props(config),
        escalation=EscalationTarget(
            kind=cast(Literal["openai", "sagemaker", "bedrock", "model"], e.kind),  # a str too (use_enum_values)
            url=e.url,
            api_key_secret_name=e.api_key_secret_name,
            endpoint_name=e.endpoint_name,
            model_id=e.model_id,
            model=e.model,
        ),
        router=RouterSettings(
            labels=tuple(r.labels),
            slm_labels=tuple(r.slm_labels),
            confidence_threshold=r.confidence_threshold,
            few_shot=tuple(r.few_shot),
            instructions=r.instructions,
            classify_max_chars=r.classify_max_chars,
            answer_max_tokens=r.answer_max_tokens,
            replicas_min=r.replicas.min,
            replicas_max=r.replicas.max,
        ),
    )


def model_farm_props(config: Config) -> ModelFarmProps:
    return ModelFarmProps(
        deployment=deployment_props(config),
        pools=farm_pools(config),
        gateway_replicas_min=config.farm.gateway.min,
        gateway_replicas_max=config.farm.gateway.max,
        dedicated_stacks=config.farm.dedicated_stacks,
        dedicated_copy=config.farm.dedicated_copy,
        dedicated_hosting=config.farm.dedicated_hosting,
        shared_min_instances=config.farm.shared_endpoints.instances.min,
        shared_max_instances=config.farm.shared_endpoints.instances.max,
        shared_volume_size_gb=config.farm.shared_endpoints.volume_size_gb,
    )
