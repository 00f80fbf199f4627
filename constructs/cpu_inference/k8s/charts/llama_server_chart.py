"""LlamaServerChart: one served model on EKS as a cdk8s chart (cdk8s-plus-27 for the core kinds), on either engine
of `cpu_inference.engines`: llama-server with a GGUF file (the default) or vLLM CPU with a safetensors checkpoint
directory (`spec.engine == "vllm"`). Both get the same workload — requests from sizing, the init container's
verified download, `/health` probes, PDB, spread, restricted pods, the metrics sidecar, the NetworkPolicy and KEDA on
the engine's own queue gauges (`engines.queue_metrics`). What differs is the container: image and command, the
sized environment (`Sizing.engine_env`), a memory-backed /dev/shm for vLLM's inter-process queues (counted in the
memory request and limit) and a start-up budget that covers vLLM's compile warm-up (model_time_budgets.py).

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

The init container downloads the model from S3 with Pod Identity (k8s/workloads/model_fetch.py) into an emptyDir
and verifies size and sha256 before the engine starts. Pods meet Pod Security "restricted".

The pieces live beside this chart, one concern each (all still importable from here): model_workload.py
(ModelWorkload), serving_policy.py (ServingPolicy, KedaSource), model_placement.py (plan), model_time_budgets.py
(download/load/disk budgets), model_scaling.py (queue_target, the ScaledObject), network_policies.py,
engine_container.py (port, command, probes, resources) and workload_defaults.py (restricted pods, spread, PDB).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import cdk8s
import cdk8s_plus_27 as kplus
from constructs import Construct

from cpu_inference import engines, sizing
from cpu_inference.engines.pool_preset import MODEL_DIR
from cpu_inference.k8s.specs.default_node_pools import POOL_LABEL
from cpu_inference.k8s.specs.scrape import scrape_annotations
from cpu_inference.k8s.workloads.engine_container import (
    COMPONENT,
    ENGINE_LABEL,
    ENGINE_PORT,
    PRE_STOP_SECONDS,
    SHM_DIR,
    VLLM_RUNTIME_ENV,
    VLLM_SHM_MIB,
    engine_command,
    engine_container_name,
    engine_resources,
    health_probes,
)
from cpu_inference.k8s.workloads.metrics_proxy import (
    METRICS_PORT,
    SIDECAR_CPU,
    SIDECAR_MEMORY_BYTES,
    metrics_proxy_container,
)
from cpu_inference.k8s.workloads.model_fetch import (
    ADAPTER_WAIT_SECONDS,
    ADAPTERS_COMMAND,
    CRT_MEMORY_LIMIT_GIB,
    FETCH_MEMORY_LIMIT_MIB,
    LORA_DIR,
    adapter_lines,
    adapter_path,
)
from cpu_inference.k8s.workloads.model_fetch import COMMAND as FETCH_COMMAND
from cpu_inference.k8s.workloads.model_fetch import PREFIX_COMMAND as FETCH_PREFIX_COMMAND
from cpu_inference.k8s.workloads.model_placement import plan
from cpu_inference.k8s.workloads.model_scaling import (
    model_scaled_object,
)
from cpu_inference.k8s.workloads.model_time_budgets import (
    NODE_LAUNCH_SECONDS,
    disk_bytes,
    download_budget_seconds,
    startup_budget_seconds,
    stored_bytes,
)
from cpu_inference.k8s.workloads.model_workload import ModelWorkload
from cpu_inference.k8s.workloads.network_policies import download_egress, serving_network_policy
from cpu_inference.k8s.workloads.serving_policy import ServingPolicy
from cpu_inference.k8s.workloads.workload_defaults import (
    add_spread,
    container_security_context,
    one_at_a_time_budget,
    pod_security_context,
    pre_stop_sleep,
    prefer_pools,
    require_architectures,
    restrict,
    tolerate,
    unmanaged_replicas,
)
from inference_runtime.llama_flags import LORA
from inference_runtime.lora import join_paths

__all__ = [
    "ADAPTER_FETCH_CONTAINER",
    "FETCH_CONTAINER",
    "FETCH_MEMORY_MIB",
    "LlamaServerChart",
    "LlamaServerChartProps",
    "rendered_engine_env",
]

FETCH_CONTAINER = "model-fetch"
ADAPTER_FETCH_CONTAINER = "adapter-fetch"  # one for all of a model's LoRA adapters, after model-fetch
FETCH_MEMORY_MIB = FETCH_MEMORY_LIMIT_MIB  # init container memory limit (and request cap): model_fetch.py says why


@dataclass(frozen=True)
class LlamaServerChartProps:
    """model / policy: the model and the namespace's settings. service_account: the name of a ServiceAccount the pods
    run as that the chart does not render (e.g. one per namespace shared by a farm's dedicated models:
    eks/inference_workloads.SHARED_SERVICE_ACCOUNT); None (default): the chart renders the model's own, named as it."""

    model: ModelWorkload
    policy: ServingPolicy = ServingPolicy()
    service_account: str | None = None

    def validate(self) -> None:
        self.model.validate()
        self.policy.validate()


class LlamaServerChart(cdk8s.Chart):
    """Attributes: props, engine ("llama.cpp" | "vllm"), sizing, pod_labels, selector, service_account_name,
    service_account, deployment, service, service_url, pdb, network_policy, scaled_object (ScaledObjectSpec | None),
    startup_probe_seconds, engine_env (the engine container's environment), memory_limit_bytes (the engine
    container's request = limit, /dev/shm included for vLLM), pod_requests (effective cpu, memory bytes)."""

    def __init__(self, scope: Construct, id: str, *, props: LlamaServerChartProps) -> None:
        props.validate()
        m, p = props.model, props.policy
        super().__init__(scope, id, namespace=p.namespace, disable_resource_name_hashes=True)
        self.props = props
        self.sizing = plan(m, p.node_families)
        s = self.sizing
        self.engine = m.engine
        vllm = engines.is_vllm(self.engine)
        self.selector = {"app": m.name, "app.kubernetes.io/component": COMPONENT}
        self.pod_labels = {
            **self.selector,
            "app.kubernetes.io/name": m.name,
            "app.kubernetes.io/part-of": p.pattern,
            "cpu-inference/role": m.role,
            **({ENGINE_LABEL: engines.VLLM} if vllm else {}),  # absent: llama.cpp (its pods predate the label)
        }
        meta = cdk8s.ApiObjectMetadata(name=m.name, labels=self.pod_labels)

        self.service_account_name = props.service_account or m.name
        # No API token: Pod Identity injects its own projected token for the agent; the pod never calls Kubernetes.
        self.service_account: kplus.IServiceAccount = (
            kplus.ServiceAccount.from_service_account_name(self, "ServiceAccount", props.service_account)
            if props.service_account
            else kplus.ServiceAccount(self, "ServiceAccount", metadata=meta, automount_token=False)
        )

        model_path = f"{MODEL_DIR}/{m.file_name}"  # vLLM: the checkpoint's directory
        self.engine_env = engine_env(m, s, p)
        weights = stored_bytes(m.spec, m.size_bytes)  # = the sized weights for a GGUF of unknown size
        disk_gib = math.ceil(disk_bytes(weights) / sizing.GIB)  # cdk8s-plus renders emptyDir limits in whole Gi
        self.startup_probe_seconds = startup_budget_seconds(weights, self.engine)
        cpu_millis = int(s.cpu_request * 1000)
        memory_mib = s.memory_request_mib + (VLLM_SHM_MIB if vllm else 0)  # /dev/shm pages are the container's memory
        self.memory_limit_bytes = memory_mib * sizing.MIB
        models_volume = kplus.Volume.from_empty_dir(
            self, "ModelsVolume", "models", size_limit=cdk8s.Size.gibibytes(disk_gib)
        )
        tmp_volume = kplus.Volume.from_empty_dir(self, "TmpVolume", "tmp", size_limit=cdk8s.Size.gibibytes(1))
        engine_mounts = [
            kplus.VolumeMount(path=MODEL_DIR, volume=models_volume, read_only=True),
            kplus.VolumeMount(path="/tmp", volume=tmp_volume),
        ]
        volumes = [models_volume, tmp_volume]
        if vllm:
            shm_volume = kplus.Volume.from_empty_dir(
                self,
                "ShmVolume",
                "shm",
                medium=kplus.EmptyDirMedium.MEMORY,
                size_limit=cdk8s.Size.mebibytes(VLLM_SHM_MIB),
            )
            engine_mounts.append(kplus.VolumeMount(path=SHM_DIR, volume=shm_volume))
            volumes.append(shm_volume)
        engine = kplus.ContainerProps(
            name=engine_container_name(self.engine),
            image=m.image,
            image_pull_policy=kplus.ImagePullPolicy.IF_NOT_PRESENT,
            command=list(engine_command(self.engine)),
            env_variables={k: kplus.EnvValue.from_value(v) for k, v in sorted(self.engine_env.items())},
            ports=[kplus.ContainerPort(number=ENGINE_PORT, name="http")],
            lifecycle=pre_stop_sleep(PRE_STOP_SECONDS),
            resources=engine_resources(
                cpu_millis=cpu_millis, memory_mib=memory_mib, cpu_limit=p.cpu_limit, ephemeral_gib=disk_gib
            ),
            security_context=container_security_context(),
            **health_probes(self.startup_probe_seconds, liveness_timeout_seconds=5),
            volume_mounts=engine_mounts,
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
            command=list(FETCH_PREFIX_COMMAND if vllm else FETCH_COMMAND),
            env_variables={k: kplus.EnvValue.from_value(v) for k, v in sorted(fetch_env.items())},
            resources=kplus.ContainerResources(
                cpu=kplus.CpuResources(request=kplus.Cpu.millis(cpu_millis)),
                memory=kplus.MemoryResources(
                    request=cdk8s.Size.mebibytes(fetch_mem_mib), limit=cdk8s.Size.mebibytes(FETCH_MEMORY_MIB)
                ),
            ),
            security_context=container_security_context(),
            volume_mounts=[
                kplus.VolumeMount(path=MODEL_DIR, volume=models_volume),
                kplus.VolumeMount(path="/tmp", volume=tmp_volume),
            ],
        )
        init_containers = [fetch]
        if m.adapters:
            init_containers.append(
                self._adapter_fetch(m, p, cpu_millis=cpu_millis, memory_mib=fetch_mem_mib, volumes=fetch.volume_mounts)
            )
        # Engine + metrics sidecar (init container requests ≤ these).
        self.pod_requests = (s.cpu_request + SIDECAR_CPU, self.memory_limit_bytes + SIDECAR_MEMORY_BYTES)

        # With adapters the pod may wait for copies still landing (model_fetch.ADAPTER_WAIT_SECONDS) before it starts.
        budget = (
            download_budget_seconds(weights) + self.startup_probe_seconds + (ADAPTER_WAIT_SECONDS if m.adapters else 0)
        )
        self.deployment = kplus.Deployment(
            self,
            "Deployment",
            metadata=meta,
            pod_metadata=cdk8s.ApiObjectMetadata(labels=self.pod_labels, annotations=scrape_annotations(METRICS_PORT)),
            select=False,
            spread=False,
            replicas=max(m.replicas_min, 1),
            containers=[engine, metrics_proxy_container(m.image, ENGINE_PORT, tmp_volume)],
            init_containers=init_containers,
            volumes=volumes,
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
        restrict(self.deployment, containers=2, init_containers=len(init_containers))
        require_architectures(self.deployment, p.architectures)
        prefer_pools(self.deployment, POOL_LABEL, p.preferred_pools)
        tolerate(self.deployment, p.tolerations)
        add_spread(self.deployment, self.selector)
        if p.keda is not None:
            unmanaged_replicas(self.deployment)
        elif m.replicas_min == 0:
            cdk8s.ApiObject.of(self.deployment).add_json_patch(cdk8s.JsonPatch.replace("/spec/replicas", 0))

        self.service = kplus.Service(
            self,
            "Service",
            metadata=meta,
            ports=[kplus.ServicePort(port=ENGINE_PORT, target_port=ENGINE_PORT, name="http")],
        )
        for key, value in self.selector.items():  # stable labels, not cdk8s' construct-path label
            self.service.select_label(key, value)
        self.service_url = f"http://{m.name}.{p.namespace}.svc.cluster.local:{ENGINE_PORT}"

        self.pdb = one_at_a_time_budget(self, "Budget", name=m.name, labels=self.pod_labels, selector=self.selector)
        # The API port admits only the clients; scrapers reach only the metrics sidecar's port
        # (k8s/workloads/metrics_proxy.py).
        self.network_policy = kplus.k8s.KubeNetworkPolicy(
            self,
            "NetworkPolicy",
            metadata=kplus.k8s.ObjectMeta(name=m.name, labels=self.pod_labels),
            spec=serving_network_policy(self.selector, p, metrics_port=METRICS_PORT, egress=download_egress()),
        )
        self.scaled_object = model_scaled_object(m, p, slots=s.slots, ready_budget_seconds=budget)

    def _adapter_fetch(
        self,
        m: ModelWorkload,
        p: ServingPolicy,
        *,
        cpu_millis: int,
        memory_mib: int,
        volumes: list[kplus.VolumeMount] | None,
    ) -> kplus.ContainerProps:
        """The one init container that fetches every adapter of `m` into LORA_DIR (model_fetch.ADAPTERS_SCRIPT): the
        list is one env value of `<name> <key> <sha256|->` lines, keys in the adapters' one bucket."""
        env = {
            "LORA_BUCKET": m.adapters[0].bucket,
            "LORA_ADAPTERS": adapter_lines([(a.name, a.key, a.sha256) for a in m.adapters]),
            "LORA_DIR": LORA_DIR,
            "AWS_CONFIG_FILE": "/tmp/aws/adapters-config",
            "HOME": "/tmp",
        }
        if p.aws_region:
            env["AWS_REGION"] = p.aws_region
        return kplus.ContainerProps(
            name=ADAPTER_FETCH_CONTAINER,
            image=p.downloader_image,
            image_pull_policy=kplus.ImagePullPolicy.IF_NOT_PRESENT,
            command=list(ADAPTERS_COMMAND),
            env_variables={k: kplus.EnvValue.from_value(v) for k, v in sorted(env.items())},
            resources=kplus.ContainerResources(
                cpu=kplus.CpuResources(request=kplus.Cpu.millis(cpu_millis)),
                memory=kplus.MemoryResources(
                    request=cdk8s.Size.mebibytes(memory_mib), limit=cdk8s.Size.mebibytes(FETCH_MEMORY_MIB)
                ),
            ),
            security_context=container_security_context(),
            volume_mounts=volumes,
        )


def engine_env(m: ModelWorkload, s: sizing.Sizing, p: ServingPolicy) -> dict[str, str]:
    """The engine container's environment: the sized variables (`Sizing.engine_env`), where the model is, the served
    name and address, then `extra_env`. vLLM binds its OMP threads only when the pod owns its CPUs (Guaranteed QoS,
    `cpu_limit="request"`, on nodes with the static CPU manager); it also gets writable caches on /tmp."""
    if engines.is_vllm(m.engine):
        return {
            **s.engine_env(exclusive_cpus=p.cpu_limit == "request"),
            "MODEL_PATH": f"{MODEL_DIR}/{m.file_name}",
            "SERVE_MODEL_NAME": m.name,
            "SERVE_HOST": "0.0.0.0",
            "SERVE_PORT": str(ENGINE_PORT),
            **VLLM_RUNTIME_ENV,
            **dict(m.extra_env),
        }
    lora = {LORA.image_env: join_paths([adapter_path(a.name) for a in m.adapters])} if m.adapters else {}
    return {
        **s.engine_env(),
        "MODEL_PATH": f"{MODEL_DIR}/{m.file_name}",
        "LLAMA_MODEL_ALIAS": m.name,
        "LLAMA_HOST": "0.0.0.0",
        "LLAMA_PORT": str(ENGINE_PORT),
        **lora,  # the adapters' pod paths in id order (inference_runtime/engine_flags.py LLAMA_LORA)
        **dict(m.extra_env),
    }


def rendered_engine_env(chart: cdk8s.Chart) -> dict[str, str]:
    """The engine container's environment exactly as `chart` renders it into its Deployment (names -> values), for a
    test that starts the real engine with it (paths such as MODEL_PATH then point into a local directory)."""
    (deployment,) = [o for o in chart.to_json() if o["kind"] == "Deployment"]
    engine, *_ = deployment["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e["value"] for e in engine["env"]}
