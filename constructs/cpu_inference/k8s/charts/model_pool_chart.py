"""ModelPoolChart: one multi-model pool of the model farm on EKS — Kubernetes objects per pool, never per model.

A pool serves many models from one StatefulSet `pool-<name>`: each pod runs `entrypoint.py pool`, llama-server in
router mode over a preset INI (one section per model) that loads a model on its first request and unloads the
least recently used idle one beyond `--models-max` (facts pinned in tests/runtime/engine/test_router_mode.py).
Objects: ServiceAccount, ConfigMap (the preset), headless Service (stable DNS per pod:
`pool-<name>-<i>.pool-<name>.<ns>.svc.cluster.local`, what the gateway's rendezvous hashing addresses),
StatefulSet (podManagementPolicy Parallel: replicas start and stop together, names stay stable), PDB,
NetworkPolicy, the model volume (a Mountpoint for Amazon S3 static PersistentVolume + its claim) and a KEDA
ScaledObject on the gateway's per-pool in-flight gauge. Adding a model adds one INI section and one name in the
gateway config (~100 bytes each), nothing else — and does not roll the pool: the ConfigMap is mounted as a
directory (the kubelet updates it in place) and each replica applies the new preset itself, keeping its loaded
models warm (containers/llama-server/pool_supervisor.py).

Per-model settings live only in the INI: the router's own command line overrides every preset section
(server-models.cpp load_models: `preset.merge(base_preset)`), so the container command carries no ctx-size,
parallel or threads. Values shared by most models go to `[*]` once; a section repeats only what differs.

Weights: the Mountpoint for Amazon S3 CSI driver (EKS add-on `aws-mountpoint-s3-csi-driver`, eks/mountpoint.py)
mounts `s3://<bucket>/farm/` read-only at /models — no per-pod copy; a CSI volume is allowed under Pod Security
"restricted" (hostPath is not). Sources for every field: github.com/awslabs/mountpoint-s3-csi-driver
examples/kubernetes/static_provisioning/static_provisioning.yaml and docs/CONFIGURATION.md (static provisioning:
`storageClassName: ""`, `claimRef`, unique `volumeHandle`, `volumeAttributes.bucketName`, capacity "ignored,
required"), docs/CACHING.md (`cache: emptyDir`, `cacheEmptyDirSizeLimit`; `metadata-ttl`), and
pkg/driver/node/node.go (ReadOnlyMany or a read-only publish adds `--read-only`; the pod's fsGroup becomes
`--gid` + `--allow-other`, so uid 65532 with fsGroup 65532 reads the files).

Loading: `load-mode = none` (read(2) into the process, no mmap) in `[*]`. Linux FUSE drops a file's page cache on
every open(2) unless the server answers FOPEN_KEEP_CACHE (fs/fuse/file.c, fuse_open: `else if (!(ff->open_flags &
FOPEN_KEEP_CACHE)) invalidate_inode_pages2(inode->i_mapping)`, which also unmaps mapped pages), and Mountpoint never
does (mountpoint-s3
mountpoint-s3-fs/src/fs.rs `open`: reply flags are FOPEN_DIRECT_IO for O_DIRECT, else 0). With mmap, a second
replica on the node opening a model would evict the first one's mapped weights, which then fault back in 4 KiB
reads through FUSE; a plain read is the sequential pattern Mountpoint is built for. Cost: the weights are
anonymous memory of the child (the pool plan counts weights per loaded model anyway), and two replicas on one
node do not share them — benchmarks/weights_sharing.py measures what that sharing is worth (k8s/README.md).
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import cdk8s
import cdk8s_plus_27 as kplus
from constructs import Construct

from cpu_inference._internal.k8s_object import is_dns_label
from cpu_inference._internal.tokens import is_token, stable_digest
from cpu_inference.engines.pool_preset import MODEL_DIR, PoolModel, pool_preset, preload_problem, with_preload
from cpu_inference.k8s.charts.router_chart import gateway_pool
from cpu_inference.k8s.specs.default_node_pools import POOL_LABEL
from cpu_inference.k8s.specs.keda import ScaledObjectSpec, pool_in_flight_scaled_object
from cpu_inference.k8s.specs.scrape import scrape_annotations
from cpu_inference.k8s.workloads.engine_container import (
    COMPONENT,
    ENGINE_COMMAND,
    ENGINE_CONTAINER,
    ENGINE_PORT,
    PRE_STOP_SECONDS,
    engine_resources,
    health_probes,
)
from cpu_inference.k8s.workloads.model_scaling import MIN_SCALE_DOWN_STABILIZATION
from cpu_inference.k8s.workloads.network_policies import serving_network_policy
from cpu_inference.k8s.workloads.serving_policy import ServingPolicy
from cpu_inference.k8s.workloads.workload_defaults import (
    container_security_context,
    one_at_a_time_budget,
    pod_security_context,
    pre_stop_sleep,
    prefer_pools,
    require_architectures,
    restrict,
    spread_constraints,
    tolerate,
    unmanaged_replicas,
)
from cpu_inference.sizing.pools import PoolPlan, replica_memory_bytes
from inference_runtime.llama_flags import MODELS_MAX, MODELS_PRESET, THREADS
from inference_runtime.lora import Adapter, adapters_problem
from inference_runtime.pool_status import DEFAULT_STATUS_PORT, METRICS_PATH
from model_download.catalog import (  # where the catalog copies pooled models, and its failure marker
    COPY_FAILED_NAME,
    FARM_PREFIX,
)
from slm_router.config import GatewayAdapter

POOL_PREFIX = "pool-"
STATUS_PORT = DEFAULT_STATUS_PORT  # the supervisor's side port (/status for the gateway, /metrics for scrapers)
PRESET_DIR = "/etc/llama"
PRESET_FILE = "preset.ini"
PRESET_PATH = f"{PRESET_DIR}/{PRESET_FILE}"
POOL_COMMAND = (*ENGINE_COMMAND, "pool")  # containers/llama-server/entrypoint.py pool (pool_mode.py)
CSI_DRIVER = "s3.csi.aws.com"  # the Mountpoint CSI driver's name (CSIDriver object of the add-on / chart)
# "Ignored, required" (static_provisioning.yaml): the API needs a capacity/request; the driver never reads it.
NOMINAL_CAPACITY = "1Ti"
# Start-up: the router itself is ready in seconds, but the supervisor first looks up every preset section's file
# (pool_landing: one stat per model, plus its failure marker while it is missing). The path
# /models/<name>/<idhash>/<file> (catalog.gguf_key) has LOOKUPS_PER_MODEL components that a cold mount has never
# looked up, and on Mountpoint a first lookup is a HeadObject + ListObjectsV2 (mountpoint-s3 doc/CONFIGURATION.md,
# "When looking up files and directories ... concurrent HeadObject and ListObjectV2 requests"), tens of ms each.
STARTUP_FLOOR_SECONDS = 60
LOOKUPS_PER_MODEL = 3
LOOKUP_SECONDS = 0.05
# Room on the node for the pool's Mountpoint pod (pool_sizing.MOUNTPOINT_MEMORY_BYTES, reserved by every replica: one
# such pod serves the pool's replicas on a node, MOUNTPOINT_POD_SHARING.md). The driver starts that pod only after a
# replica is placed, so neither the scheduler nor Karpenter counts it (docs/HEADROOM_FOR_MPPOD.md, issues #534/#543),
# and it cannot have requests of its own (volume attributes mountpointContainerResources*, pkg/driver/node/
# volumecontext/volume_context.go): its priority class mount-s3-critical has preemptionPolicy Never (chart
# templates/mount-s3-priority.yaml), so a request that finds no room leaves it Pending and the replica in
# ContainerCreating (docs/CONFIGURATION.md: "Specifying `ResourcesRequests` is currently not recommended", #543, #778).
# So the replica's memory request and limit carry it: Karpenter sizes nodes for it, and the engine leaves it unused
# (the plan's figure); the Mountpoint pod, BestEffort, then finds it free. No memory limit on that pod either: a limit
# alone becomes its request, and Mountpoint before 1.23.0 ignores its cgroup when sizing its buffers (pool_sizing).
DRAIN_SECONDS = 60
NEGATIVE_METADATA_TTL_SECONDS = 30  # see the mount options: how long Mountpoint remembers a not-yet-copied model
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_REGION = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d$")


def gateway_adapter(adapter: Adapter, model_dir: str = MODEL_DIR) -> GatewayAdapter:
    """The gateway's view of a pooled adapter: its path as the base's preset section names it (pool_preset renders
    `lora = <model_dir>/<key>`), which the replica's /status lists in id order."""
    return GatewayAdapter(
        name=adapter.name, path=f"{model_dir.rstrip('/')}/{adapter.path}", scale=adapter.scale, base=adapter.base
    )


def pool_object_name(name: str) -> str:
    return f"{POOL_PREFIX}{name}"


def pool_replica_urls(name: str, namespace: str, replicas_max: int) -> list[str]:
    """The stable root URL of every pod the StatefulSet can have (ordinal order), through the headless Service."""
    svc = pool_object_name(name)
    return [f"http://{svc}-{i}.{svc}.{namespace}.svc.cluster.local:{ENGINE_PORT}" for i in range(replicas_max)]


@dataclass(frozen=True)
class ModelPoolChartProps:
    """name: the pool (DNS label; objects are `pool-<name>`). image: the llama-server image. models: its PoolModels.
    models_max: models loaded at once per pod (--models-max, from the pool plan). cpu: vCPUs per pod (request;
    whole). memory_bytes: the pool plan's memory_request_bytes; the pod's request = limit adds the node's Mountpoint
    pod allowance (pool_sizing.replica_memory_bytes).
    replicas_min / replicas_max: KEDA bounds (≥ 1: the gateway routes to stable replica URLs, no scale from zero).
    bucket_name / region: the model bucket (the Mountpoint volume). prefix: the farm prefix mounted at /models.
    namespace: defaults to policy.namespace. policy: the pattern's ServingPolicy (tolerations, node preferences,
    clients, scrapers, KEDA source, cpu_limit). replication: how many replicas the gateway keeps a model warm on.
    in_flight_per_replica: KEDA target (requests in progress per replica; default models_max x the usual parallel).
    cache_gib: Mountpoint's local data cache per node (emptyDir of its pod; 0 = none): a model evicted by LRU
    reloads from the node's disk instead of S3. drain_seconds: SIGTERM grace for generations in flight.
    extra_env: more engine variables (LLAMA_FLASH_ATTN, LLAMA_EXTRA_ARGS, ...).
    adapters: the LoRA adapters of the pool's models (inference_runtime.lora.Adapter; `path` the adapter GGUF's key
    under the farm prefix, as PoolModel.path), in each base's id order: the base's PoolModel.adapters lists their
    keys (its preset section's `lora`) and the gateway's pool entry their names, scales and paths as the engine sees
    them (/models/<key>)."""

    name: str
    image: str
    models: tuple[PoolModel, ...]
    models_max: int
    cpu: int
    memory_bytes: int
    bucket_name: str
    region: str
    replicas_min: int = 1
    replicas_max: int = 4
    namespace: str | None = None
    policy: ServingPolicy = ServingPolicy()
    prefix: str = FARM_PREFIX
    replication: int = 2
    in_flight_per_replica: int | None = None
    cache_gib: int = 20
    drain_seconds: int = DRAIN_SECONDS
    extra_env: Mapping[str, str] = field(default_factory=dict)
    adapters: tuple[Adapter, ...] = ()

    @classmethod
    def from_plan(
        cls,
        *,
        name: str,
        image: str,
        plan: PoolPlan,
        paths: Mapping[str, str],
        bucket_name: str,
        region: str,
        preload: Sequence[str] = (),
        adapters: Sequence[Adapter] = (),
        **kw: Any,
    ) -> ModelPoolChartProps:
        """Props from `pool_sizing.pool_plan(...)`: one PoolModel per planned model (PoolPlan.pool_model: the flags its
        engine.json carries on SageMaker), models_max, cpu and memory (request = limit = the plan's
        memory_request_bytes). `paths`: model name -> key under the farm prefix (catalog.gguf_key minus `farm/`).
        `preload`: the pool's hot models, loaded when a replica starts (PoolModel.preload,
        pool_preset.LOAD_ON_STARTUP). `adapters`: the models' LoRA adapters (each `path` a key under the farm
        prefix)."""
        missing = sorted(set(plan.per_model) - set(paths))
        if missing:
            raise ValueError(
                f"ModelPoolChartProps.from_plan {name!r}: no path for models {missing[:5]} (give paths[name] = <name>/<idhash>/<file>)"
            )
        problem = preload_problem(preload, list(plan.per_model), plan.models_max, pool=name)
        if problem:
            raise ValueError(f"ModelPoolChartProps.from_plan {name!r}: preload {problem}")
        models = with_preload([plan.pool_model(n, paths[n]) for n in plan.per_model], preload)
        models = tuple(replace(m, adapters=tuple(a.path for a in adapters if a.base == m.name)) for m in models)
        return cls(
            adapters=tuple(adapters),
            name=name,
            image=image,
            models=models,
            models_max=plan.models_max,
            cpu=math.ceil(plan.cpu),
            memory_bytes=plan.memory_request_bytes,
            bucket_name=bucket_name,
            region=region,
            **kw,
        )

    @property
    def effective_namespace(self) -> str:
        return self.namespace or self.policy.namespace

    def validate(self) -> None:
        where = f"ModelPoolChartProps {self.name!r}"
        if not is_dns_label(self.name) or len(self.name) > 40:
            raise ValueError(
                f"{where}: name must be a DNS label of at most 40 characters (StatefulSet pool-<name>, pod pool-<name>-<i>)"
            )
        if self.namespace is not None and self.namespace != self.policy.namespace and self.policy != ServingPolicy():
            raise ValueError(
                f"{where}: namespace {self.namespace!r} differs from policy.namespace {self.policy.namespace!r}; set one"
            )
        self.policy.validate()
        if not self.image:
            raise ValueError(f"{where}: image is required (the llama-server image URI)")
        if not self.models:
            raise ValueError(f"{where}: models must list at least one PoolModel")
        seen: set[str] = set()
        for m in self.models:
            m.validate()
            if m.name in seen:
                raise ValueError(f"{where}: model {m.name!r} appears twice; a model belongs to one pool once")
            seen.add(m.name)
        if self.models_max < 1:
            raise ValueError(
                f"{where}: models_max must be ≥ 1 (llama-server's 0 means unlimited: every model would load)"
            )
        problem = adapters_problem(self.adapters, [m.name for m in self.models])
        if problem:
            raise ValueError(f"{where}: {problem}")
        for m in self.models:
            if m.adapters != tuple(a.path for a in self.adapters if a.base == m.name):
                raise ValueError(
                    f"{where}: model {m.name!r} lists adapters {list(m.adapters)}, not the paths of its adapters in "
                    "`adapters` (ModelPoolChartProps.from_plan sets both)"
                )
        hot = [m.name for m in self.models if m.preload]
        problem = preload_problem(hot, [m.name for m in self.models], self.models_max, pool=self.name)
        if problem:
            raise ValueError(f"{where}: models with preload: {problem}")
        if self.cpu < 1 or self.cpu != int(self.cpu):
            raise ValueError(f"{where}: cpu must be a whole number of vCPUs ≥ 1, got {self.cpu}")
        if self.memory_bytes < 64 * 1024 * 1024:
            raise ValueError(
                f"{where}: memory_bytes {self.memory_bytes} is under 64 MiB; use the pool plan's memory_request_bytes"
            )
        if not 1 <= self.replicas_min <= self.replicas_max:
            raise ValueError(
                f"{where}: need 1 ≤ replicas_min ({self.replicas_min}) ≤ replicas_max ({self.replicas_max}): "
                "the gateway routes to stable replica URLs, a pool does not scale from zero"
            )
        if self.replication < 1:
            raise ValueError(f"{where}: replication must be ≥ 1")
        if not (is_token(self.bucket_name) or _BUCKET.match(self.bucket_name)):
            raise ValueError(f"{where}: bucket_name {self.bucket_name!r} is not an S3 bucket name")
        if not (is_token(self.region) or _REGION.match(self.region)):
            raise ValueError(f"{where}: region {self.region!r} is not an AWS Region such as us-east-1")
        if not self.prefix.endswith("/") or self.prefix.startswith("/"):
            raise ValueError(f"{where}: prefix must be a key prefix ending in '/' (e.g. farm/), got {self.prefix!r}")
        if self.cache_gib < 0 or self.drain_seconds < 0:
            raise ValueError(f"{where}: cache_gib and drain_seconds must be ≥ 0")
        if self.in_flight_per_replica is not None and self.in_flight_per_replica < 1:
            raise ValueError(f"{where}: in_flight_per_replica must be ≥ 1")
        clash = sorted(
            {MODELS_PRESET.image_env, MODELS_MAX.image_env, "LLAMA_HOST", "LLAMA_PORT", THREADS.image_env, "MODEL_PATH"}
            & set(self.extra_env)
        )
        if clash:
            raise ValueError(
                f"{where}: extra_env must not set {clash}: the chart sets them (per-model settings belong in the preset)"
            )


def startup_budget_seconds(model_count: int) -> int:
    """Counted for the next power of two of models: the budget is in the pod template, and a model-list change
    must not roll the pool (the preset is applied in place) unless the pool's size class changes."""
    size_class = 1 << max(0, model_count - 1).bit_length()
    return STARTUP_FLOOR_SECONDS + math.ceil(size_class * LOOKUPS_PER_MODEL * LOOKUP_SECONDS)


def volume_identity(pv_spec: Mapping[str, Any]) -> str:
    """A short hash of everything the PV's mount is made of (the csi source, mount options, access modes): part of
    the PV and claim names, so any change is a new PV/PVC pair and never an update of a field Kubernetes forbids to
    change (kubernetes/kubernetes pkg/apis/core/validation/validation.go: ValidatePersistentVolumeUpdate
    "spec.persistentvolumesource is immutable after creation" — csi.driver/volumeHandle/readOnly/volumeAttributes;
    ValidatePersistentVolumeClaimUpdate "spec is immutable after creation except resources.requests and
    volumeAttributesClassName", so the claim's volumeName cannot follow a renamed PV). Mount options may change on a
    PV, but a running Mountpoint pod keeps the ones it started with: they are part of the identity too."""
    text = json.dumps(pv_spec, sort_keys=True, separators=(",", ":"), default=str)
    return stable_digest(text)[:10]


class ModelPoolChart(cdk8s.Chart):
    """Attributes: props, name (pool-<name>), namespace, selector, pod_labels, preset (INI text), engine_env,
    command, service_account, config_map, service, stateful_set, persistent_volume, persistent_volume_claim,
    pdb, network_policy, scaled_object (ScaledObjectSpec | None), replica_urls, startup_probe_seconds,
    pod_memory_bytes (request = limit), slots_per_replica, gateway_pool (the gateway config's `pools` entry)."""

    def __init__(self, scope: Construct, id: str, *, props: ModelPoolChartProps) -> None:
        props.validate()
        ns = props.effective_namespace
        super().__init__(scope, id, namespace=ns, disable_resource_name_hashes=True)
        self.props = props
        p = props.policy
        self.name = pool_object_name(props.name)
        self.selector = {"app": self.name, "app.kubernetes.io/component": COMPONENT}
        self.pod_labels = {
            **self.selector,
            "app.kubernetes.io/name": self.name,
            "app.kubernetes.io/part-of": p.pattern,
            "cpu-inference/role": "farm",
            "cpu-inference/pool": props.name,
        }
        meta = cdk8s.ApiObjectMetadata(name=self.name, labels=self.pod_labels)
        self.preset = pool_preset(props.models)
        self.replica_urls = pool_replica_urls(props.name, ns, props.replicas_max)
        usual_parallel = Counter(m.parallel for m in props.models).most_common(1)[0][0]
        self.slots_per_replica = props.models_max * usual_parallel
        self.gateway_pool = gateway_pool(
            props.name,
            props.replication,
            [m.name for m in props.models],
            self.replica_urls,
            [gateway_adapter(a) for a in props.adapters],
        )

        self.service_account = kplus.ServiceAccount(self, "ServiceAccount", metadata=meta, automount_token=False)
        self.config_map = kplus.ConfigMap(self, "Preset", metadata=meta, data={PRESET_FILE: self.preset})

        # --- the model volume: Mountpoint for S3, static provisioning, read-only ---
        attributes = {"bucketName": props.bucket_name}
        if props.cache_gib:
            attributes |= {"cache": "emptyDir", "cacheEmptyDirSizeLimit": f"{props.cache_gib}Gi"}
        mount_options = [
            f"region {props.region}",
            f"prefix {props.prefix}",
            # Keys are identity-hashed and never overwritten (catalog.py): cached metadata cannot go stale.
            "metadata-ttl indefinite",
            # But a model's key appears AFTER the pool starts (the catalog copies off the deploy's critical path),
            # and "not found" is cached with --metadata-ttl unless this is set (mountpoint-s3 v1.15.0, #1246:
            # `--negative-metadata-ttl` "independently set[s] the time-to-live (TTL) for cached negative entries";
            # its default is the metadata TTL, i.e. indefinite). The supervisor stats a missing model's file (and
            # its failure marker) every poll; Mountpoint answers from this cache in between, so S3 sees about two
            # lookups per missing model per TTL per node, and a landed model is served within TTL + one poll.
            f"negative-metadata-ttl {NEGATIVE_METADATA_TTL_SECONDS}",
        ]
        access_modes = ["ReadOnlyMany"]  # node.go: MULTI_NODE_READER_ONLY -> mount-s3 --read-only
        source = {
            "csi": {"driver": CSI_DRIVER, "readOnly": True, "volumeAttributes": attributes},
            "mountOptions": mount_options,
            "accessModes": access_modes,
            "storageClassName": "",
        }
        # Cluster-scoped: unique per namespace and pool; also the volumeHandle ("Kubernetes only processes a volume
        # once per volumeHandle"). A bucket known at deploy time only (a CloudFormation reference) is in the name
        # itself, so a replaced bucket renames the pair too; the hash covers everything known at synth.
        suffix = f"{props.bucket_name}-{volume_identity(source)}"
        pv_name = f"{ns}-{self.name}-{suffix}"
        claim_name = f"{self.name}-{suffix}"
        k = kplus.k8s
        self.persistent_volume = k.KubePersistentVolume(
            self,
            "Volume",
            metadata=k.ObjectMeta(name=pv_name, labels=self.pod_labels),
            spec=k.PersistentVolumeSpec(
                capacity={"storage": k.Quantity.from_string(NOMINAL_CAPACITY)},
                access_modes=access_modes,
                storage_class_name="",
                persistent_volume_reclaim_policy="Retain",  # the bucket is never the volume's to delete
                claim_ref=k.ObjectReference(namespace=ns, name=claim_name),
                mount_options=mount_options,
                csi=k.CsiPersistentVolumeSource(
                    driver=CSI_DRIVER, volume_handle=pv_name, read_only=True, volume_attributes=attributes
                ),
            ),
        )
        self.persistent_volume.add_json_patch(cdk8s.JsonPatch.remove("/metadata/namespace"))  # cluster-scoped
        self.persistent_volume_claim = k.KubePersistentVolumeClaim(
            self,
            "Claim",
            metadata=k.ObjectMeta(name=claim_name, labels=self.pod_labels),
            spec=k.PersistentVolumeClaimSpec(
                access_modes=["ReadOnlyMany"],
                storage_class_name="",
                resources=k.ResourceRequirements(requests={"storage": k.Quantity.from_string(NOMINAL_CAPACITY)}),
                volume_name=pv_name,
            ),
        )

        # --- the pods ---
        threads = max(m.threads for m in props.models)
        self.engine_env = {
            MODELS_PRESET.image_env: PRESET_PATH,
            MODELS_MAX.image_env: str(props.models_max),
            "LLAMA_HOST": "0.0.0.0",
            "LLAMA_PORT": str(ENGINE_PORT),
            # The supervisor: its side port, and the marker a failed copy leaves beside a model's key (catalog.py).
            "LLAMA_POOL_STATUS_PORT": str(STATUS_PORT),
            "LLAMA_POOL_COPY_FAILED_FILE": COPY_FAILED_NAME,
            # Inherited by every child: no math library starts more threads than the model's own --threads.
            **{k: str(threads) for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")},
            **dict(props.extra_env),
        }
        self.command = list(POOL_COMMAND)
        self.pod_memory_bytes = replica_memory_bytes(props.memory_bytes)
        self.startup_probe_seconds = startup_budget_seconds(len(props.models))
        preset_volume = kplus.Volume.from_config_map(self, "PresetVolume", self.config_map, name="preset")
        claim = kplus.PersistentVolumeClaim.from_claim_name(self, "ClaimRef", claim_name)
        models_volume = kplus.Volume.from_persistent_volume_claim(
            self, "ModelsVolume", claim, name="models", read_only=True
        )
        tmp_volume = kplus.Volume.from_empty_dir(self, "TmpVolume", "tmp", size_limit=cdk8s.Size.gibibytes(1))
        engine = kplus.ContainerProps(
            name=ENGINE_CONTAINER,
            image=props.image,
            image_pull_policy=kplus.ImagePullPolicy.IF_NOT_PRESENT,
            command=self.command,
            env_variables={k: kplus.EnvValue.from_value(v) for k, v in sorted(self.engine_env.items())},
            ports=[
                kplus.ContainerPort(number=ENGINE_PORT, name="http"),
                kplus.ContainerPort(number=STATUS_PORT, name="status"),
            ],
            lifecycle=pre_stop_sleep(PRE_STOP_SECONDS),
            resources=engine_resources(
                cpu_millis=props.cpu * 1000,
                memory_mib=math.ceil(self.pod_memory_bytes / (1024 * 1024)),
                cpu_limit=p.cpu_limit,
                ephemeral_gib=1,
            ),
            security_context=container_security_context(),
            # The router answers /health itself (no model is loaded at start; a model loads on its first request).
            **health_probes(self.startup_probe_seconds, liveness_timeout_seconds=3),
            volume_mounts=[
                kplus.VolumeMount(path=MODEL_DIR, volume=models_volume, read_only=True),
                # The whole ConfigMap as a directory, never a subPath: only then does the kubelet swap in a new
                # version ("A container using a ConfigMap as a subPath volume mount will not receive ConfigMap
                # updates", kubernetes.io/docs/concepts/configuration/configmap, "Mounted ConfigMaps are updated
                # automatically").
                kplus.VolumeMount(path=PRESET_DIR, volume=preset_volume, read_only=True),
                kplus.VolumeMount(path="/tmp", volume=tmp_volume),
            ],
        )
        self.service = kplus.Service(
            self,
            "Service",
            metadata=meta,
            cluster_ip="None",
            ports=[
                kplus.ServicePort(port=ENGINE_PORT, target_port=ENGINE_PORT, name="http"),
                kplus.ServicePort(port=STATUS_PORT, target_port=STATUS_PORT, name="status"),
            ],
        )
        for key, value in self.selector.items():
            self.service.select_label(key, value)
        # A pod's DNS name must resolve while it loads (the gateway health-checks each replica itself).
        cdk8s.ApiObject.of(self.service).add_json_patch(cdk8s.JsonPatch.add("/spec/publishNotReadyAddresses", True))
        # No checksum of the preset on the pod template: a model-list change is applied in place by every replica
        # (entrypoint.py pool re-checks the new preset and calls the router's GET /models?reload=1, which keeps
        # unchanged loaded models running; containers/llama-server/pool_supervisor.py), so it must not roll the pool.
        self.stateful_set = kplus.StatefulSet(
            self,
            "StatefulSet",
            metadata=meta,
            pod_metadata=cdk8s.ApiObjectMetadata(
                labels=self.pod_labels, annotations=scrape_annotations(STATUS_PORT, METRICS_PATH)
            ),
            select=False,
            spread=False,
            service=self.service,
            pod_management_policy=kplus.PodManagementPolicy.PARALLEL,
            replicas=props.replicas_min,
            containers=[engine],
            volumes=[models_volume, preset_volume, tmp_volume],
            service_account=self.service_account,
            automount_service_account_token=False,
            security_context=pod_security_context(),
            termination_grace_period=cdk8s.Duration.seconds(PRE_STOP_SECONDS + props.drain_seconds),
        )
        self.stateful_set.select(kplus.LabelSelector.of(labels=self.selector))
        restrict(self.stateful_set, containers=1)  # type: ignore[arg-type]  # any kplus workload
        require_architectures(self.stateful_set, p.architectures)  # type: ignore[arg-type]
        prefer_pools(self.stateful_set, POOL_LABEL, p.preferred_pools)  # type: ignore[arg-type]
        tolerate(self.stateful_set, p.tolerations)  # type: ignore[arg-type]
        spread = spread_constraints(self.selector)
        for c in spread:  # StatefulSet pods carry controller-revision-hash, not pod-template-hash
            c["matchLabelKeys"] = ["controller-revision-hash"]
        obj = cdk8s.ApiObject.of(self.stateful_set)
        obj.add_json_patch(cdk8s.JsonPatch.add("/spec/template/spec/topologySpreadConstraints", spread))
        # kplus binds the governing Service to the StatefulSet by cdk8s' construct-path label; select on the
        # stable labels only (the path changes with the construct tree, a selector change would orphan pods).
        cdk8s.ApiObject.of(self.service).add_json_patch(
            cdk8s.JsonPatch.remove("/spec/selector/cdk8s.io~1metadata.addr")
        )
        if p.keda is not None:
            unmanaged_replicas(self.stateful_set)  # type: ignore[arg-type]

        self.pdb = one_at_a_time_budget(self, "Budget", name=self.name, labels=self.pod_labels, selector=self.selector)
        # Ingress: the API port and the supervisor's status port from the gateway (the policy's client
        # labels/namespaces: the gateway asks a replica why it does not know a model); the status port's /metrics
        # from the scrapers (cold loads per model: the router's own /metrics exists per loaded model only, `?model=`,
        # test_router_mode.py). Egress: none — the children listen on loopback (not subject to NetworkPolicy) and
        # the weights come through the Mountpoint pod, which runs in the driver's namespace and talks to S3.
        self.network_policy = k.KubeNetworkPolicy(
            self,
            "NetworkPolicy",
            metadata=k.ObjectMeta(name=self.name, labels=self.pod_labels),
            spec=serving_network_policy(
                self.selector, p, metrics_port=STATUS_PORT, egress=[], client_ports=(ENGINE_PORT, STATUS_PORT)
            ),
        )
        self.scaled_object = self._scaled_object(props)

    def _scaled_object(self, props: ModelPoolChartProps) -> ScaledObjectSpec | None:
        p = props.policy
        if p.keda is None:
            return None
        target = props.in_flight_per_replica or self.slots_per_replica
        # Hold a replica at least twice what a new one costs to become useful (start + one cold model load).
        hold = max(MIN_SCALE_DOWN_STABILIZATION, 2 * self.startup_probe_seconds)
        return pool_in_flight_scaled_object(
            props.name,
            props.effective_namespace,
            self.name,
            server_address=p.keda.server_address,
            aws_region=p.keda.aws_region,
            authentication_ref=p.keda.authentication_ref,
            min_replicas=props.replicas_min,
            max_replicas=props.replicas_max,
            target=target,
            hold_seconds=hold,
        )
