"""RouterChart: the router service (containers/router) as a cdk8s chart — mode `router`, the SLM pre-filter
front door with LLM escalation (pattern slm-prefilter), or mode `gateway`, the model farm's one
OpenAI-compatible entry point routed by the body's `model`.

The router's whole configuration is one JSON object (the contract in containers/router/README.md), typed as
the router's own slm_router.config.Config (a mapping is accepted and type-checked as the router reads it),
rendered into a ConfigMap mounted at /etc/router/config.json (`ROUTER_CONFIG`); a checksum annotation rolls the pods
when it changes. The pods meet Pod Security "restricted" (the image runs as 65532, read-only root, /tmp
an emptyDir). Scaling: KEDA on requests in progress (`router_in_flight` / `gateway_in_flight`, the router's
own scaling signal) when a metrics source is given —
the router is asyncio I/O, so CPU utilization says little and would need metrics-server, which EKS does not
install — else a CPU HorizontalPodAutoscaler.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import cdk8s
import cdk8s_plus_27 as kplus
from constructs import Construct

from cpu_inference._internal.k8s_object import is_dns_label
from cpu_inference._internal.tokens import stable_digest
from cpu_inference.k8s.specs.keda import PrometheusTrigger, ScaledObjectSpec
from cpu_inference.k8s.specs.scrape import scrape_annotations
from cpu_inference.k8s.workloads.engine_container import COMPONENT as MODEL_COMPONENT
from cpu_inference.k8s.workloads.engine_container import ENGINE_PORT, ROUTER_COMPONENT
from cpu_inference.k8s.workloads.metrics_proxy import METRICS_PORT, metrics_proxy_container
from cpu_inference.k8s.workloads.network_policies import download_egress
from cpu_inference.k8s.workloads.serving_policy import KedaSource
from cpu_inference.k8s.workloads.workload_defaults import (
    ARCHITECTURES,
    add_spread,
    container_security_context,
    pod_security_context,
    pre_stop_sleep,
    require_architectures,
    restrict,
    tolerate,
    unmanaged_replicas,
)
from slm_router.config import Config as RouterConfig
from slm_router.config import ConfigError, GatewayAdapter, GatewayModel, GatewayPool, config_of

ROUTER_PORT = 8000
CONFIG_DIR = "/etc/router"
CONFIG_FILE = "config.json"
API_KEY_DIR = "/etc/router/secrets"
API_KEY_FILE = "api-key"
PRE_STOP_SECONDS = 5
MODES = ("router", "gateway")  # the router's own `mode` (containers/router/slm_router/config.py)
IN_FLIGHT = {"router": "router_in_flight", "gateway": "gateway_in_flight"}
DEFAULT_MAX_IN_FLIGHT = RouterConfig.max_in_flight  # the router's own default (256): 429 beyond it
LATENCY_HISTOGRAMS = {"router": "router_request_seconds", "gateway": "gateway_request_seconds"}
GATEWAY_UNAVAILABLE = "gateway_backend_unavailable_total"


def gateway_models(
    urls: Mapping[str, str], adapters: Mapping[str, Sequence[GatewayAdapter]] | None = None
) -> tuple[GatewayModel, ...]:
    """`gateway.models` of the router config: the `model` clients send -> the backend's root URL; `adapters`: a
    dedicated model's LoRA adapters in its id order (the key is left out without any, so such a model renders as
    before)."""
    adapters = adapters or {}
    return tuple(GatewayModel(name=name, url=url, adapters=tuple(adapters.get(name, ()))) for name, url in urls.items())


def gateway_pool(
    name: str,
    replication: int,
    models: Sequence[str],
    replicas: Sequence[str],
    adapters: Sequence[GatewayAdapter] = (),
) -> GatewayPool:
    """One entry of `gateway.pools` (slm_router.config.GatewayPool): the pool's models, the root URL of every
    replica it can have (StatefulSet ordinal order; k8s/model_pool_chart.pool_replica_urls) and how many of
    them keep a model warm (rendezvous hashing); `adapters`: its models' LoRA adapters (each naming its base), in
    each base's id order — the key is left out without any, so a pool without adapters renders as before."""
    more = {"adapters": tuple(adapters)} if adapters else {}
    return GatewayPool.of(name=name, replication=replication, models=tuple(models), replicas=tuple(replicas), **more)


def gateway_cold_start_query(namespace: str, model: str, window: str = "2m") -> str:
    """The scale-from-zero signal for a model behind the gateway: 1 while the gateway refused a request for
    it (503: no ready backend) within `window`, else 0. Clamped to 1 so a burst of retries while the first
    replica loads activates the model without asking for more replicas than the queue will."""
    return f'clamp_max(sum(increase({GATEWAY_UNAVAILABLE}{{namespace="{namespace}",model="{model}"}}[{window}])), 1) or vector(0)'


@dataclass(frozen=True)
class RouterChartProps:
    """image: the router image URI. config: the router's config (containers/router/README.md: slm_url, labels,
    escalation, gateway.models, ...): a slm_router.config.Config (`Config.of(...)`), or its JSON object as a
    mapping, type-checked key by key as the router reads it. mode: `router` (SLM pre-filter + escalation) or
    `gateway` (model farm; InferenceWorkloads fills `gateway.models` with its models' Services when the config
    has none).

    Defaults: 2-6 replicas, 0.5 vCPU (it relays bytes and classifies through the SLM; one asyncio process
    uses at most one core, and there is no CPU limit) and 256 MiB (request = limit); scale out at
    `in_flight_per_replica` requests in progress per replica, well under the router's `max_in_flight`
    (429 beyond it). api_key_secret: a Kubernetes Secret
    (key `api-key`) holding an OpenAI-compatible escalation's key, mounted read-only and referenced as
    `escalation.api_key_file`. client_namespaces / client_cidrs: who may call the router; both empty =
    any source (it is the front door). Egress: the model pods of the namespace, DNS, the Pod Identity
    agent, and HTTPS (escalation to SageMaker/Bedrock/an external LLM).
    """

    image: str
    config: RouterConfig | Mapping[str, Any] = field(default_factory=dict)
    mode: str = "router"
    name: str = "router"
    namespace: str = "inference"
    pattern: str = "slm-prefilter"
    replicas_min: int = 2
    replicas_max: int = 6
    cpu: float = 0.5
    memory_mib: int = 256
    in_flight_per_replica: int = 64
    target_cpu_utilization: int = 70
    api_key_secret: str | None = None
    client_namespaces: tuple[str, ...] = ()
    client_cidrs: tuple[str, ...] = ()
    metrics_namespaces: tuple[str, ...] = ("monitoring",)
    metrics_cidrs: tuple[str, ...] = ()
    escalation_ports: tuple[int, ...] = (443,)
    architectures: tuple[str, ...] = ARCHITECTURES
    tolerations: tuple[Mapping[str, Any], ...] = ()
    keda: KedaSource | None = None

    def validate(self) -> None:
        for label, value in (("name", self.name), ("namespace", self.namespace), ("pattern", self.pattern)):
            if not is_dns_label(value):
                raise ValueError(f"RouterChartProps.{label} {value!r} must be a DNS label")
        if self.mode not in MODES:
            raise ValueError(f"RouterChartProps.mode must be one of {MODES}, got {self.mode!r}")
        if not self.image:
            raise ValueError("RouterChartProps.image is required (the router image URI)")
        if not 1 <= self.replicas_min <= self.replicas_max:
            raise ValueError(
                f"RouterChartProps: need 1 ≤ replicas_min ({self.replicas_min}) ≤ replicas_max ({self.replicas_max}) — the router is the front door"
            )
        if self.cpu <= 0 or self.memory_mib < 128:
            raise ValueError("RouterChartProps: cpu must be > 0 and memory_mib ≥ 128")
        if not 1 <= self.target_cpu_utilization <= 100:
            raise ValueError("RouterChartProps: target_cpu_utilization must be 1..100")
        cfg = self.router_config()
        max_in_flight = cfg.max_in_flight
        if not 1 <= self.in_flight_per_replica < max_in_flight:
            raise ValueError(
                f"RouterChartProps.in_flight_per_replica ({self.in_flight_per_replica}) must be ≥ 1 and below config.max_in_flight "
                f"({max_in_flight}): replicas must be added before the router starts answering 429"
            )
        if cfg.listen_port != ROUTER_PORT:
            raise ValueError(
                f"RouterChartProps.config.listen_port must be {ROUTER_PORT} (the Service and probes use it), got {cfg.listen_port}"
            )
        if "mode" in cfg.set_keys() and cfg.mode != self.mode:
            raise ValueError(
                f"RouterChartProps: config.mode {cfg.mode!r} differs from mode {self.mode!r}; set mode only"
            )
        if self.mode == "gateway" and not cfg.gateway.models and not any(p.models for p in cfg.gateway.pools):
            raise ValueError(
                "RouterChartProps: mode gateway needs config.gateway.models ([{name, url}]) or config.gateway.pools "
                "([{name, replication, models, replicas}]); InferenceWorkloads fills them from its models and pools"
            )
        esc = cfg.escalation
        if self.api_key_secret is not None and (esc.api_key_file or esc.api_key_env):
            raise ValueError(
                "RouterChartProps: api_key_secret sets escalation.api_key_file itself; remove api_key_file/api_key_env from config"
            )

    def router_config(self) -> RouterConfig:
        """config, typed: a mapping is type-checked key by key as the router reads it (an unknown key or a wrong
        type fails here, at synth, rather than in the pod); the whole is validated by the router at start."""
        if not isinstance(self.config, (RouterConfig, Mapping)):
            raise ValueError(
                f"RouterChartProps.config must be a slm_router.config.Config or a mapping (the router's JSON config), "
                f"got {type(self.config).__name__}"
            )
        try:
            return config_of(self.config)
        except ConfigError as e:
            raise ValueError(f"RouterChartProps.config.{e}") from None


def router_config(props: RouterChartProps) -> dict[str, Any]:
    """The config file the pods read: props.config plus what the chart owns (listen address, key file)."""
    cfg = props.router_config().updated(mode=props.mode, listen_host="0.0.0.0", listen_port=ROUTER_PORT)
    if props.api_key_secret is not None:
        cfg = cfg.updated(escalation=cfg.escalation.updated(api_key_file=f"{API_KEY_DIR}/{API_KEY_FILE}"))
    return cfg.to_dict()


class RouterChart(cdk8s.Chart):
    """Attributes: props, config (dict written to the ConfigMap), selector, pod_labels, service_account,
    config_map, deployment, service, service_url, pdb, network_policy, scaled_object (KEDA spec) or hpa."""

    def __init__(self, scope: Construct, id: str, *, props: RouterChartProps) -> None:
        props.validate()
        super().__init__(scope, id, namespace=props.namespace, disable_resource_name_hashes=True)
        self.props = props
        self.config = router_config(props)
        text = json.dumps(self.config, indent=2, sort_keys=True)
        self.selector = {"app": props.name, "app.kubernetes.io/component": ROUTER_COMPONENT}
        self.pod_labels = {
            **self.selector,
            "app.kubernetes.io/name": props.name,
            "app.kubernetes.io/part-of": props.pattern,
            "cpu-inference/router-mode": props.mode,
        }
        meta = cdk8s.ApiObjectMetadata(name=props.name, labels=self.pod_labels)
        self.service_account = kplus.ServiceAccount(self, "ServiceAccount", metadata=meta, automount_token=False)
        self.config_map = kplus.ConfigMap(self, "Config", metadata=meta, data={CONFIG_FILE: text})

        config_volume = kplus.Volume.from_config_map(self, "ConfigVolume", self.config_map, name="config")
        tmp_volume = kplus.Volume.from_empty_dir(self, "TmpVolume", "tmp", size_limit=cdk8s.Size.gibibytes(1))
        volumes = [config_volume, tmp_volume]
        mounts = [
            kplus.VolumeMount(path=CONFIG_DIR, volume=config_volume, read_only=True),
            kplus.VolumeMount(path="/tmp", volume=tmp_volume),
        ]
        if props.api_key_secret is not None:
            secret = kplus.Secret.from_secret_name(self, "ApiKey", props.api_key_secret)
            key_volume = kplus.Volume.from_secret(self, "ApiKeyVolume", secret, name="api-key", optional=False)
            volumes.append(key_volume)
            mounts.append(kplus.VolumeMount(path=API_KEY_DIR, volume=key_volume, read_only=True))
        mem = cdk8s.Size.mebibytes(props.memory_mib)
        probe: dict[str, Any] = dict(port=ROUTER_PORT, timeout_seconds=cdk8s.Duration.seconds(3))
        container = kplus.ContainerProps(
            name="router",
            image=props.image,
            image_pull_policy=kplus.ImagePullPolicy.IF_NOT_PRESENT,
            env_variables={"ROUTER_CONFIG": kplus.EnvValue.from_value(f"{CONFIG_DIR}/{CONFIG_FILE}")},
            ports=[kplus.ContainerPort(number=ROUTER_PORT, name="http")],
            resources=kplus.ContainerResources(
                cpu=kplus.CpuResources(request=kplus.Cpu.millis(int(props.cpu * 1000))),
                memory=kplus.MemoryResources(request=mem, limit=mem),
            ),
            security_context=container_security_context(),
            startup=kplus.Probe.from_http_get(
                "/health", **probe, period_seconds=cdk8s.Duration.seconds(2), failure_threshold=30
            ),
            liveness=kplus.Probe.from_http_get(
                "/health", **probe, period_seconds=cdk8s.Duration.seconds(10), failure_threshold=3
            ),
            # /ready is 200 while some model can answer (README): a router with no upstream leaves the Service.
            readiness=kplus.Probe.from_http_get(
                "/ready", **probe, period_seconds=cdk8s.Duration.seconds(5), failure_threshold=2
            ),
            lifecycle=pre_stop_sleep(PRE_STOP_SECONDS),
            volume_mounts=mounts,
        )
        annotations = {**scrape_annotations(METRICS_PORT), "cpu-inference/config-sha256": stable_digest(text)}
        self.deployment = kplus.Deployment(
            self,
            "Deployment",
            metadata=meta,
            pod_metadata=cdk8s.ApiObjectMetadata(labels=self.pod_labels, annotations=annotations),
            select=False,
            spread=False,
            containers=[container, metrics_proxy_container(props.image, ROUTER_PORT, tmp_volume)],
            volumes=volumes,
            service_account=self.service_account,
            automount_service_account_token=False,
            security_context=pod_security_context(),
            # The router drains requests in progress on SIGTERM (README); streamed generations may be long.
            termination_grace_period=cdk8s.Duration.seconds(PRE_STOP_SECONDS + 60),
            strategy=kplus.DeploymentStrategy.rolling_update(
                max_surge=kplus.PercentOrAbsolute.absolute(1), max_unavailable=kplus.PercentOrAbsolute.absolute(0)
            ),
        )
        self.deployment.select(kplus.LabelSelector.of(labels=self.selector))
        restrict(self.deployment, containers=2)
        require_architectures(self.deployment, props.architectures)
        tolerate(self.deployment, props.tolerations)
        add_spread(self.deployment, self.selector)

        self.service = kplus.Service(
            self,
            "Service",
            metadata=meta,
            ports=[kplus.ServicePort(port=ROUTER_PORT, target_port=ROUTER_PORT, name="http")],
        )
        for key, value in self.selector.items():
            self.service.select_label(key, value)
        self.service_url = f"http://{props.name}.{props.namespace}.svc.cluster.local:{ROUTER_PORT}"

        k = kplus.k8s
        self.pdb = k.KubePodDisruptionBudget(
            self,
            "Budget",
            metadata=k.ObjectMeta(name=props.name, labels=self.pod_labels),
            spec=k.PodDisruptionBudgetSpec(
                max_unavailable=k.IntOrString.from_number(1),
                selector=k.LabelSelector(match_labels=self.selector),
                unhealthy_pod_eviction_policy="AlwaysAllow",
            ),
        )
        self.network_policy = k.KubeNetworkPolicy(
            self,
            "NetworkPolicy",
            metadata=k.ObjectMeta(name=props.name, labels=self.pod_labels),
            spec=self._network_policy(props),
        )

        self.scaled_object: ScaledObjectSpec | None = None
        self.hpa: kplus.HorizontalPodAutoscaler | None = None
        if props.keda is not None:
            unmanaged_replicas(self.deployment)
            sel = f'namespace="{props.namespace}",app="{props.name}"'
            self.scaled_object = ScaledObjectSpec(
                name=props.name,
                namespace=props.namespace,
                target_name=props.name,
                min_replicas=props.replicas_min,
                max_replicas=props.replicas_max,
                scaling_modifiers=None,
                triggers=(
                    PrometheusTrigger(
                        name="in_flight",
                        server_address=props.keda.server_address,
                        query=f"sum({IN_FLIGHT[props.mode]}{{{sel}}}) or vector(0)",
                        threshold=str(props.in_flight_per_replica),
                        aws_region=props.keda.aws_region,
                        authentication_ref=props.keda.authentication_ref,
                    ),
                ),
            )
        else:
            self.hpa = kplus.HorizontalPodAutoscaler(
                self,
                "Autoscaler",
                metadata=meta,
                target=self.deployment,
                min_replicas=props.replicas_min,
                max_replicas=props.replicas_max,
                metrics=[
                    kplus.Metric.resource_cpu(kplus.MetricTarget.average_utilization(props.target_cpu_utilization))
                ],
                scale_down=kplus.ScalingRules(stabilization_window=cdk8s.Duration.minutes(5)),
            )

    def _network_policy(self, props: RouterChartProps) -> kplus.k8s.NetworkPolicySpec:
        k = kplus.k8s
        port = [k.NetworkPolicyPort(port=k.IntOrString.from_number(ROUTER_PORT), protocol="TCP")]

        def names(ns: tuple[str, ...]) -> k.LabelSelector:
            return k.LabelSelector(
                match_expressions=[
                    k.LabelSelectorRequirement(key="kubernetes.io/metadata.name", operator="In", values=list(ns))
                ]
            )

        clients: list[k.NetworkPolicyPeer] = []
        if props.client_namespaces:
            clients.append(k.NetworkPolicyPeer(namespace_selector=names(props.client_namespaces)))
        clients += [k.NetworkPolicyPeer(ip_block=k.IpBlock(cidr=c)) for c in props.client_cidrs]
        # No peers = any source: the router is the entry point (an ALB in IP mode, an ingress controller, apps).
        ingress = [k.NetworkPolicyIngressRule(from_=clients or None, ports=port)]
        scrapers = (
            [k.NetworkPolicyPeer(namespace_selector=names(props.metrics_namespaces))]
            if props.metrics_namespaces
            else []
        )
        scrapers += [k.NetworkPolicyPeer(ip_block=k.IpBlock(cidr=c)) for c in props.metrics_cidrs]
        if scrapers:  # only the metrics sidecar's port: the AMP collector's CIDRs cover every pod
            ingress.append(
                k.NetworkPolicyIngressRule(
                    from_=scrapers,
                    ports=[k.NetworkPolicyPort(port=k.IntOrString.from_number(METRICS_PORT), protocol="TCP")],
                )
            )
        models = k.NetworkPolicyPeer(
            pod_selector=k.LabelSelector(match_labels={"app.kubernetes.io/component": MODEL_COMPONENT})
        )
        egress = [
            k.NetworkPolicyEgressRule(
                to=[models], ports=[k.NetworkPolicyPort(port=k.IntOrString.from_number(ENGINE_PORT), protocol="TCP")]
            ),
            *download_egress()[:2],  # DNS, Pod Identity agent
        ]
        if props.escalation_ports:
            anywhere = [
                k.NetworkPolicyPeer(ip_block=k.IpBlock(cidr="0.0.0.0/0")),
                k.NetworkPolicyPeer(ip_block=k.IpBlock(cidr="::/0")),
            ]
            egress.append(
                k.NetworkPolicyEgressRule(
                    to=anywhere,
                    ports=[
                        k.NetworkPolicyPort(port=k.IntOrString.from_number(p), protocol="TCP")
                        for p in props.escalation_ports
                    ],
                )
            )
        return k.NetworkPolicySpec(
            pod_selector=k.LabelSelector(match_labels=self.selector),
            policy_types=["Ingress", "Egress"],
            ingress=ingress,
            egress=egress,
        )


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"
