"""LlamaServerChart: one served model on EKS as a cdk8s chart (cdk8s-plus-27 for the core kinds).

Every number comes from `cpu_inference.sizing` for the model on its planned node:

- **Requests**: CPU = the pod's vCPUs (= engine threads); memory = weights + KV cache for slots x context
  per slot + compute/runtime overhead (at least 1.5x the file, AWS guidance).
- **Limits**: memory limit = memory request — memory is not compressible, so a model that outgrows its
  sizing is OOM-killed on its own instead of pushing its neighbours into node-pressure eviction, and the
  engine's `--cache-ram` (5% of the cgroup limit) stays inside what the scheduler reserved.
  No CPU limit by default (`cpu_limit="none"`): the engine runs exactly `threads = CPU request` compute
  threads, so it cannot take much more than its request, and CFS shares guarantee the request under
  contention; a quota would instead throttle the whole thread pool at every barrier whenever the HTTP or
  tokenizer threads tip it over (a throttled thread stalls all the others). `cpu_limit="request"` gives
  Guaranteed QoS (exclusive cores with the kubelet's static CPU manager) for nodes that use it.
- **Threads**: LLAMA_THREADS, OMP/MKL/OPENBLAS/INTRA_OP_NUM_THREADS = the CPU request, NUM_INTER_THREADS=1
  (`Sizing.engine_env()`); slots and context per slot from the model's task (512 for classification).
- **Probes**: `/health` for startup (budget from the file size: page-in from the node's disk), readiness and
  liveness. The Deployment's progress deadline also covers the download.
- **Scaling**: a KEDA ScaledObject on queue depth (`running + (waiting * 10)`); see `queue_target`.

The init container downloads the model from S3 with Pod Identity (k8s/model_fetch.py) into an emptyDir
and verifies size and sha256 before the engine starts. Pods meet Pod Security "restricted".
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import cdk8s
import cdk8s_plus_27 as kplus
from constructs import Construct

from .. import sizing
from .karpenter_specs import POOL_LABEL
from .keda_specs import (
    DEFAULT_ACTIVATION,
    PrometheusTrigger,
    ScaledObjectSpec,
    ScalingModifiers,
    llama_queue_scaled_object,
)
from .metrics_proxy import METRICS_PORT, SIDECAR_CPU, SIDECAR_MEMORY_BYTES, metrics_proxy_container
from .model_fetch import COMMAND as FETCH_COMMAND
from .model_fetch import CRT_MEMORY_LIMIT_GIB, DEFAULT_DOWNLOADER_IMAGE, FETCH_MEMORY_LIMIT_MIB
from .pod_hardening import (
    ARCHITECTURES,
    add_spread,
    container_security_context,
    pod_security_context,
    pre_stop_sleep,
    prefer_pools,
    require_architectures,
    restrict,
    tolerate,
    unmanaged_replicas,
)
from .scrape import scrape_annotations

ENGINE_PORT = 8080
MODEL_DIR = "/models"
# The image's ENTRYPOINT, spelled out so the manifest is the whole command (EKS mode = no argument).
ENGINE_COMMAND = ("python3", "/opt/llama/entrypoint.py")
ENGINE_CONTAINER = "llama-server"
FETCH_CONTAINER = "model-fetch"
COMPONENT = "llama-server"
ROUTER_COMPONENT = "router"

# Start-up budget: llama-server pages the weights in from the node's data volume (gp3, 500 MiB/s per node,
# shared) and warms up; 100 MiB/s leaves room for neighbours loading at the same time.
LOAD_BYTES_PER_SECOND = 100 * sizing.MIB
LOAD_FLOOR_SECONDS = 30
# Download budget (init container, before the startup probe runs): a conservative per-pod S3 rate.
DOWNLOAD_BYTES_PER_SECOND = 50 * sizing.MIB
DOWNLOAD_FLOOR_SECONDS = 60
NODE_LAUNCH_SECONDS = 300  # Karpenter node + image pull, counted in the progress deadline
STARTUP_PERIOD_SECONDS = 5
PRE_STOP_SECONDS = 10  # endpoints/router drop the pod before SIGTERM
FETCH_MEMORY_MIB = FETCH_MEMORY_LIMIT_MIB  # init container memory limit (and request cap): model_fetch.py says why
# Queue-depth target: all slots busy plus one request queued per replica (weight 10 in the formula).
QUEUE_WEIGHT = 10
MIN_SCALE_DOWN_STABILIZATION = 300

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
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
        if not _DNS_LABEL.match(self.name) or len(self.name) > 52:
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


@dataclass(frozen=True)
class KedaSource:
    """Where KEDA reads the llama-server metrics: `Metrics.query_url`, and for AMP the region + the
    SigV4 TriggerAuthentication's name."""

    server_address: str
    aws_region: str | None = None
    authentication_ref: str | None = None


@dataclass(frozen=True)
class ServingPolicy:
    """Namespace-wide settings shared by the models of one pattern.

    namespace / pattern: where the models run (one namespace per pattern) and the part-of label.
    client_labels: pods of the namespace allowed to call the models (default: the router).
    client_namespaces: further namespaces whose pods may call them (e.g. an application namespace).
    metrics_namespaces / metrics_cidrs: scrapers allowed on the port (in-cluster Prometheus namespace; the
    AMP managed collector's subnets — it has no pod identity, so a CIDR is the only handle).
    node_families: candidate instance families for models without a node_type.
    architectures: node architectures accepted (the image is multi-arch).
    tolerations / preferred_pools: e.g. the memory-optimized pool's taint and label for a model farm.
    downloader_image: the AWS CLI v2 image for the init container. aws_region: the bucket's region.
    cpu_limit: "none" (default, see the module docstring) or "request" (Guaranteed QoS).
    keda: where KEDA reads metrics; None renders no ScaledObject (fixed replicas = replicas_min).
    kubernetes_minor: the Pod Security version the namespace enforces.
    """

    namespace: str = "inference"
    pattern: str = "slm-prefilter"
    client_labels: Mapping[str, str] = field(default_factory=lambda: {"app.kubernetes.io/component": ROUTER_COMPONENT})
    client_namespaces: tuple[str, ...] = ()
    metrics_namespaces: tuple[str, ...] = ("monitoring",)
    metrics_cidrs: tuple[str, ...] = ()
    node_families: tuple[str, ...] = ("c7g", "m7g", "r7g")
    architectures: tuple[str, ...] = ARCHITECTURES
    tolerations: tuple[Mapping[str, Any], ...] = ()
    preferred_pools: tuple[str, ...] = ()
    downloader_image: str = DEFAULT_DOWNLOADER_IMAGE
    aws_region: str | None = None
    cpu_limit: Literal["none", "request"] = "none"
    keda: KedaSource | None = None
    kubernetes_minor: str = "1.35"

    def validate(self) -> None:
        for label, value in (("namespace", self.namespace), ("pattern", self.pattern), *(("client_namespaces", n) for n in self.client_namespaces),
                             *(("metrics_namespaces", n) for n in self.metrics_namespaces)):
            if not _DNS_LABEL.match(value):
                raise ValueError(f"ServingPolicy.{label} {value!r} must be a DNS label")
        if not self.architectures or any(a not in ARCHITECTURES for a in self.architectures):
            raise ValueError(f"ServingPolicy.architectures must be a non-empty subset of {ARCHITECTURES}")
        if self.cpu_limit not in ("none", "request"):
            raise ValueError("ServingPolicy.cpu_limit must be 'none' or 'request'")
        unknown = [f for f in self.node_families if f not in sizing.FAMILIES]
        if unknown or not self.node_families:
            raise ValueError(f"ServingPolicy.node_families {list(self.node_families)}: unknown {unknown}; choose from {list(sizing.FAMILIES)}")
        for cidr in self.metrics_cidrs:
            if "/" not in cidr and "${Token[" not in cidr:
                raise ValueError(f"ServingPolicy.metrics_cidrs: {cidr!r} is not a CIDR such as 10.0.0.0/16")


@dataclass(frozen=True)
class LlamaServerChartProps:
    model: ModelWorkload
    policy: ServingPolicy = ServingPolicy()

    def validate(self) -> None:
        self.model.validate()
        self.policy.validate()


def queue_target(slots: int) -> int:
    """KEDA target for `running + (waiting * 10)` (metricType AverageValue): every slot busy plus one
    queued request per replica. For the 15-16-slot small models AWS tuned its default for, this is the
    field-notes 25 (+/-1); for few-slot big models, where one queued request is already seconds of added
    latency, the threshold falls with the slots instead of waiting for ~3 queued requests."""
    return slots + QUEUE_WEIGHT


def plan(model: ModelWorkload, node_families: tuple[str, ...] = ServingPolicy.node_families) -> sizing.Sizing:
    """Sizing of `model` on its node_type (or the smallest fitting type of `node_families`); raises
    ValueError naming the fix when it does not fit."""
    cpu = model.pod_cpu
    if model.node_type:
        try:
            it = sizing.instance(model.node_type)
        except sizing.UnknownInstanceType:
            raise ValueError(f"ModelWorkload {model.name!r}: node_type {model.node_type!r} is not in the instance catalog") from None
        s = sizing.size(model.spec, it, target="eks", cpu=cpu)
        if not s.fits:
            raise ValueError(
                f"ModelWorkload {model.name!r}: {cpu:g} vCPU / {s.memory_request_mib} MiB does not fit {it.name} "
                f"(allocatable {s.cpu_available:g} vCPU / {s.memory_available_bytes // sizing.MIB} MiB) — choose a bigger node_type or fewer cpu"
            )
        return s
    candidates = [it for it in sizing.CATALOG.values() if it.family in node_families]
    fitting = sizing.smallest_fitting(model.spec, candidates, target="eks", cpu=cpu)
    if fitting is None:
        raise ValueError(f"ModelWorkload {model.name!r}: no {list(node_families)} instance fits {cpu:g} vCPU and the model's memory — add a bigger family")
    return fitting


def startup_budget_seconds(weights_bytes: int) -> int:
    """Seconds the startup probe allows for loading the model (after the download)."""
    return LOAD_FLOOR_SECONDS + math.ceil(weights_bytes / LOAD_BYTES_PER_SECOND)


def download_budget_seconds(weights_bytes: int) -> int:
    return DOWNLOAD_FLOOR_SECONDS + math.ceil(weights_bytes / DOWNLOAD_BYTES_PER_SECOND)


def disk_bytes(weights_bytes: int) -> int:
    """emptyDir size for the model: the file (+20% for an estimate that undershoots) + 512 MiB."""
    return int(weights_bytes * 1.2) + 512 * sizing.MIB


class LlamaServerChart(cdk8s.Chart):
    """Attributes: props, sizing, pod_labels, selector, service_account_name, service_account, deployment,
    service, service_url, pdb, network_policy, scaled_object (ScaledObjectSpec | None), startup_probe_seconds,
    engine_env (the engine container's environment), pod_requests (effective cpu, memory bytes)."""

    def __init__(self, scope: Construct, id: str, *, props: LlamaServerChartProps) -> None:
        props.validate()
        m, p = props.model, props.policy
        super().__init__(scope, id, namespace=p.namespace, disable_resource_name_hashes=True)
        self.props = props
        self.sizing = plan(m, p.node_families)
        s = self.sizing
        self.selector = {"app": m.name, "app.kubernetes.io/component": COMPONENT}
        self.pod_labels = {
            **self.selector,
            "app.kubernetes.io/name": m.name,
            "app.kubernetes.io/part-of": p.pattern,
            "cpu-inference/role": m.role,
        }
        meta = cdk8s.ApiObjectMetadata(name=m.name, labels=self.pod_labels)

        self.service_account_name = m.name
        # No API token: Pod Identity injects its own projected token for the agent; the pod never calls Kubernetes.
        self.service_account = kplus.ServiceAccount(self, "ServiceAccount", metadata=meta, automount_token=False)

        model_path = f"{MODEL_DIR}/{m.file_name}"
        self.engine_env = {
            **s.engine_env(),
            "MODEL_PATH": model_path,
            "LLAMA_MODEL_ALIAS": m.name,
            "LLAMA_HOST": "0.0.0.0",
            "LLAMA_PORT": str(ENGINE_PORT),
            **dict(m.extra_env),
        }
        weights = m.size_bytes or s.weights_bytes
        disk_gib = math.ceil(disk_bytes(weights) / sizing.GIB)  # cdk8s-plus renders emptyDir limits in whole Gi
        self.startup_probe_seconds = startup_budget_seconds(weights)
        mem = cdk8s.Size.mebibytes(s.memory_request_mib)
        cpu = kplus.Cpu.millis(int(s.cpu_request * 1000))
        models_volume = kplus.Volume.from_empty_dir(self, "ModelsVolume", "models", size_limit=cdk8s.Size.gibibytes(disk_gib))
        tmp_volume = kplus.Volume.from_empty_dir(self, "TmpVolume", "tmp", size_limit=cdk8s.Size.gibibytes(1))
        health: dict[str, Any] = dict(port=ENGINE_PORT)
        engine = kplus.ContainerProps(
            name=ENGINE_CONTAINER,
            image=m.image,
            image_pull_policy=kplus.ImagePullPolicy.IF_NOT_PRESENT,
            command=list(ENGINE_COMMAND),
            env_variables={k: kplus.EnvValue.from_value(v) for k, v in sorted(self.engine_env.items())},
            ports=[kplus.ContainerPort(number=ENGINE_PORT, name="http")],
            lifecycle=pre_stop_sleep(PRE_STOP_SECONDS),
            resources=kplus.ContainerResources(
                cpu=kplus.CpuResources(request=cpu, limit=cpu if p.cpu_limit == "request" else None),
                memory=kplus.MemoryResources(request=mem, limit=mem),
                ephemeral_storage=kplus.EphemeralStorageResources(request=cdk8s.Size.gibibytes(disk_gib)),
            ),
            security_context=container_security_context(),
            startup=kplus.Probe.from_http_get(
                "/health", **health, period_seconds=cdk8s.Duration.seconds(STARTUP_PERIOD_SECONDS),
                failure_threshold=math.ceil(self.startup_probe_seconds / STARTUP_PERIOD_SECONDS),
                timeout_seconds=cdk8s.Duration.seconds(3),
            ),
            readiness=kplus.Probe.from_http_get(
                "/health", **health, period_seconds=cdk8s.Duration.seconds(5), failure_threshold=2,
                timeout_seconds=cdk8s.Duration.seconds(3),
            ),
            # Generous: a saturated CPU answers /health late, and a restart reloads the whole model.
            liveness=kplus.Probe.from_http_get(
                "/health", **health, period_seconds=cdk8s.Duration.seconds(10), failure_threshold=6,
                timeout_seconds=cdk8s.Duration.seconds(5),
            ),
            volume_mounts=[
                kplus.VolumeMount(path=MODEL_DIR, volume=models_volume, read_only=True),
                kplus.VolumeMount(path="/tmp", volume=tmp_volume),
            ],
        )
        fetch_env = {
            "MODEL_URI": m.model_uri,
            "MODEL_PATH": model_path,
            "MODEL_FETCH_CONCURRENCY": str(max(8, 4 * int(s.cpu_request))),
            "AWS_CONFIG_FILE": "/tmp/aws/config",
            "AWS_CRT_S3_MEMORY_LIMIT_IN_GIB": str(CRT_MEMORY_LIMIT_GIB),
            "HOME": "/tmp",
        }
        if m.sha256:
            fetch_env["MODEL_SHA256"] = m.sha256
        if m.size_bytes:
            fetch_env["MODEL_SIZE_BYTES"] = str(m.size_bytes)
        if p.aws_region:
            fetch_env["AWS_REGION"] = p.aws_region
        # The pod's effective request is max(init, sum of containers): the init container borrows the
        # engine's CPUs (hashing is CPU-bound) and at most its memory, so it costs no extra capacity. Its
        # limit holds the CRT client's capped buffer pool even beside a tiny model (a short-lived burst).
        fetch_mem_mib = min(s.memory_request_mib, FETCH_MEMORY_MIB)
        fetch = kplus.ContainerProps(
            name=FETCH_CONTAINER,
            image=p.downloader_image,
            image_pull_policy=kplus.ImagePullPolicy.IF_NOT_PRESENT,
            command=list(FETCH_COMMAND),
            env_variables={k: kplus.EnvValue.from_value(v) for k, v in sorted(fetch_env.items())},
            resources=kplus.ContainerResources(
                cpu=kplus.CpuResources(request=cpu),
                memory=kplus.MemoryResources(request=cdk8s.Size.mebibytes(fetch_mem_mib), limit=cdk8s.Size.mebibytes(FETCH_MEMORY_MIB)),
            ),
            security_context=container_security_context(),
            volume_mounts=[kplus.VolumeMount(path=MODEL_DIR, volume=models_volume), kplus.VolumeMount(path="/tmp", volume=tmp_volume)],
        )
        # Engine + metrics sidecar (init container requests ≤ these).
        self.pod_requests = (s.cpu_request + SIDECAR_CPU, s.memory_request_mib * sizing.MIB + SIDECAR_MEMORY_BYTES)

        budget = download_budget_seconds(weights) + self.startup_probe_seconds
        self.deployment = kplus.Deployment(
            self,
            "Deployment",
            metadata=meta,
            pod_metadata=cdk8s.ApiObjectMetadata(labels=self.pod_labels, annotations=scrape_annotations(METRICS_PORT)),
            select=False,
            spread=False,
            replicas=max(m.replicas_min, 1),
            containers=[engine, metrics_proxy_container(m.image, ENGINE_PORT, tmp_volume)],
            init_containers=[fetch],
            volumes=[models_volume, tmp_volume],
            service_account=self.service_account,
            automount_service_account_token=False,
            security_context=pod_security_context(),
            termination_grace_period=cdk8s.Duration.seconds(PRE_STOP_SECONDS + m.drain_seconds),
            progress_deadline=cdk8s.Duration.seconds(NODE_LAUNCH_SECONDS + budget),
            # Never below the model count: a new pod must load before an old one goes (maxUnavailable 0).
            strategy=kplus.DeploymentStrategy.rolling_update(
                max_surge=kplus.PercentOrAbsolute.absolute(1), max_unavailable=kplus.PercentOrAbsolute.absolute(0)
            ),
        )
        self.deployment.select(kplus.LabelSelector.of(labels=self.selector))
        restrict(self.deployment, containers=2, init_containers=1)
        require_architectures(self.deployment, p.architectures)
        prefer_pools(self.deployment, POOL_LABEL, p.preferred_pools)
        tolerate(self.deployment, p.tolerations)
        add_spread(self.deployment, self.selector)
        if p.keda is not None:
            unmanaged_replicas(self.deployment)
        elif m.replicas_min == 0:
            cdk8s.ApiObject.of(self.deployment).add_json_patch(cdk8s.JsonPatch.replace("/spec/replicas", 0))

        self.service = kplus.Service(
            self, "Service", metadata=meta, ports=[kplus.ServicePort(port=ENGINE_PORT, target_port=ENGINE_PORT, name="http")],
        )
        for key, value in self.selector.items():  # stable labels, not cdk8s' construct-path label
            self.service.select_label(key, value)
        self.service_url = f"http://{m.name}.{p.namespace}.svc.cluster.local:{ENGINE_PORT}"

        # One pod at a time may go voluntarily (drains, consolidation). minAvailable would block node
        # drains forever for a one-replica model; AlwaysAllow lets a drain evict a pod stuck loading.
        self.pdb = kplus.k8s.KubePodDisruptionBudget(
            self, "Budget", metadata=kplus.k8s.ObjectMeta(name=m.name, labels=self.pod_labels),
            spec=kplus.k8s.PodDisruptionBudgetSpec(
                max_unavailable=kplus.k8s.IntOrString.from_number(1),
                selector=kplus.k8s.LabelSelector(match_labels=self.selector),
                unhealthy_pod_eviction_policy="AlwaysAllow",
            ),
        )
        self.network_policy = kplus.k8s.KubeNetworkPolicy(
            self, "NetworkPolicy", metadata=kplus.k8s.ObjectMeta(name=m.name, labels=self.pod_labels), spec=_network_policy(self.selector, p))
        self.scaled_object = self._scaled_object(m, p, s, budget)

    def _scaled_object(self, m: ModelWorkload, p: ServingPolicy, s: sizing.Sizing, budget: int) -> ScaledObjectSpec | None:
        if p.keda is None:
            return None
        if m.replicas_min == 0 and not m.cold_start_query:
            raise ValueError(
                f"ModelWorkload {m.name!r}: replicas_min 0 needs cold_start_query — with no pod there is no llama-server "
                "metric to activate on (e.g. the gateway's per-model request rate), or set replicas_min ≥ 1"
            )
        target = m.scale_target if m.scale_target is not None else queue_target(s.slots)
        activation = m.activation_target if m.activation_target is not None else float(DEFAULT_ACTIVATION)
        formula = f"running + (waiting * {QUEUE_WEIGHT})"
        if m.cold_start_query:
            formula += f" + (demand * {QUEUE_WEIGHT})"
        so = llama_queue_scaled_object(
            m.name, p.namespace, m.name,
            server_address=p.keda.server_address, series_labels={"namespace": p.namespace, "app": m.name},
            min_replicas=m.replicas_min, max_replicas=m.replicas_max,
            aws_region=p.keda.aws_region, authentication_ref=p.keda.authentication_ref,
            modifiers=ScalingModifiers(formula=formula, target=_num(target), activation_target=_num(activation)),
        )
        triggers = so.triggers
        if m.cold_start_query:
            triggers += (PrometheusTrigger(
                name="demand", server_address=p.keda.server_address, query=m.cold_start_query,
                aws_region=p.keda.aws_region, authentication_ref=p.keda.authentication_ref,
            ),)
        # Hold replicas for at least twice what a new one costs to become ready, so Karpenter's
        # consolidation (1 min) and KEDA do not remove a replica that the next burst brings back.
        hold = max(MIN_SCALE_DOWN_STABILIZATION, 2 * budget)
        return replace(so, triggers=triggers, scale_down_stabilization_seconds=hold, cooldown_period=hold)


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def _network_policy(selector: Mapping[str, str], p: ServingPolicy) -> kplus.k8s.NetworkPolicySpec:
    """The API port admits only the clients; scrapers reach only the metrics sidecar's port (k8s/metrics_proxy.py:
    the AMP collector is allowed by subnet CIDR, which also covers every pod)."""
    k = kplus.k8s
    port = [k.NetworkPolicyPort(port=k.IntOrString.from_number(ENGINE_PORT), protocol="TCP")]
    metrics_port = [k.NetworkPolicyPort(port=k.IntOrString.from_number(METRICS_PORT), protocol="TCP")]
    clients: list[k.NetworkPolicyPeer] = [k.NetworkPolicyPeer(pod_selector=k.LabelSelector(match_labels=dict(p.client_labels)))]
    if p.client_namespaces:
        clients.append(k.NetworkPolicyPeer(namespace_selector=_names(p.client_namespaces)))
    ingress = [k.NetworkPolicyIngressRule(from_=clients, ports=port)]
    scrapers: list[k.NetworkPolicyPeer] = []
    if p.metrics_namespaces:
        scrapers.append(k.NetworkPolicyPeer(namespace_selector=_names(p.metrics_namespaces)))
    scrapers += [k.NetworkPolicyPeer(ip_block=k.IpBlock(cidr=c)) for c in p.metrics_cidrs]
    if scrapers:
        ingress.append(k.NetworkPolicyIngressRule(from_=scrapers, ports=metrics_port))
    return k.NetworkPolicySpec(
        pod_selector=k.LabelSelector(match_labels=dict(selector)),
        policy_types=["Ingress", "Egress"],
        ingress=ingress,
        egress=download_egress(),
    )


def _names(namespaces: tuple[str, ...]) -> kplus.k8s.LabelSelector:
    k = kplus.k8s
    return k.LabelSelector(match_expressions=[k.LabelSelectorRequirement(key="kubernetes.io/metadata.name", operator="In", values=list(namespaces))])


def download_egress() -> list[kplus.k8s.NetworkPolicyEgressRule]:
    """What a model pod may reach: cluster DNS, the EKS Pod Identity agent (link-local, IPv4 and IPv6) and
    HTTPS (S3, via the gateway endpoint or NAT — no fixed addresses). The engine itself runs --offline."""
    k = kplus.k8s
    dns = k.NetworkPolicyPeer(
        namespace_selector=_names(("kube-system",)), pod_selector=k.LabelSelector(match_labels={"k8s-app": "kube-dns"})
    )
    return [
        k.NetworkPolicyEgressRule(
            to=[dns],
            ports=[k.NetworkPolicyPort(port=k.IntOrString.from_number(53), protocol=proto) for proto in ("UDP", "TCP")],
        ),
        k.NetworkPolicyEgressRule(
            to=[k.NetworkPolicyPeer(ip_block=k.IpBlock(cidr="169.254.170.23/32")), k.NetworkPolicyPeer(ip_block=k.IpBlock(cidr="fd00:ec2::23/128"))],
            ports=[k.NetworkPolicyPort(port=k.IntOrString.from_number(80), protocol="TCP")],
        ),
        k.NetworkPolicyEgressRule(
            to=[k.NetworkPolicyPeer(ip_block=k.IpBlock(cidr="0.0.0.0/0")), k.NetworkPolicyPeer(ip_block=k.IpBlock(cidr="::/0"))],
            ports=[k.NetworkPolicyPort(port=k.IntOrString.from_number(443), protocol="TCP")],
        ),
    ]
