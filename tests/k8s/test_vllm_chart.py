"""LlamaServerChart for vLLM models (`spec.engine == "vllm"`): the same workload as a llama.cpp model (probes, PDB,
spread, restricted pod, metrics sidecar, NetworkPolicy, KEDA on queue depth) with vLLM's container — the image's
own entrypoint (containers/vllm-cpu/Dockerfile), exactly the sized environment (`Sizing.engine_env`), a
memory-backed /dev/shm as large as vLLM's shared-memory queues (from vLLM's source) counted in the memory request and
limit, and KEDA triggers on vLLM's gauges. Every object validates against the Kubernetes 1.35 schema (the
ScaledObject against the upstream KEDA CRD) and every pod spec passes Pod Security "restricted"."""

from __future__ import annotations

import ast
import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import cdk8s
import pytest

from cpu_inference import engines, sizing
from cpu_inference.k8s.charts.llama_server_chart import LlamaServerChart, LlamaServerChartProps, rendered_engine_env
from cpu_inference.k8s.workloads.engine_container import ENGINE_PORT, VLLM_SHM_MIB
from cpu_inference.k8s.workloads.metrics_proxy import METRICS_PORT
from cpu_inference.k8s.workloads.model_scaling import queue_target
from cpu_inference.k8s.workloads.model_time_budgets import (
    VLLM_COLD_START_SECONDS,
    download_budget_seconds,
    startup_budget_seconds,
    stored_bytes,
)
from cpu_inference.k8s.workloads.model_workload import ModelWorkload
from cpu_inference.k8s.workloads.serving_policy import KedaSource, ServingPolicy
from cpu_inference.monitoring.alerts import ModelAlertSpec, dashboard, rule_groups
from cpu_inference.sizing import pools as pool_sizing
from cpu_inference.testing.pod_security import restricted_violations
from tests.support.k8s import validate_core, validate_custom
from tests.support.vllm import vllm_source

ROOT = Path(__file__).resolve().parents[2]
VLLM_DOCKERFILE = ROOT / "containers" / "vllm-cpu" / "Dockerfile"
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/vllm-cpu@sha256:" + "e" * 64
AMP = "https://aps-workspaces.us-east-1.amazonaws.com/workspaces/ws-1"
MINOR = "1.35"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
# SmolLM2-135M's shape (config.json of the BF16 checkpoint) and a 1.7B chat model sized by parameters.
MODELS = {
    "smol": sizing.ModelSpec(
        0.135, engine="vllm", task="chat", context_window=2048, layers=30, kv_heads=3, head_dim=64
    ),
    "chat-2b": sizing.ModelSpec(1.7, engine="vllm", task="chat", context_window=8192),
}
NODES = ("m7g.2xlarge", "m7a.2xlarge")
POLICY = ServingPolicy(
    namespace="inference",
    pattern="slm-prefilter",
    keda=KedaSource(AMP, aws_region="us-east-1", authentication_ref="amp-sigv4"),
    aws_region="us-east-1",
)


def workload(name: str, node: str | None = None, **kw: Any) -> ModelWorkload:
    args: dict[str, Any] = dict(
        name=name,
        image=IMAGE,
        model_uri=f"s3://models-bucket/models/{name}/{COMMIT}/",
        spec=MODELS[name],
        node_type=node,
        replicas_min=1,
        replicas_max=5,
    )
    args.update(kw)
    return ModelWorkload(**args)


def render(w: ModelWorkload, policy: ServingPolicy = POLICY) -> tuple[LlamaServerChart, dict[str, dict[str, Any]]]:
    chart = LlamaServerChart(cdk8s.App(), w.name, props=LlamaServerChartProps(model=w, policy=policy))
    return chart, {o["kind"]: o for o in chart.to_json()}


CASES = [(n, node) for n in MODELS for node in NODES]


@pytest.fixture(scope="module")
def rendered() -> dict[tuple[str, str], tuple[LlamaServerChart, dict[str, dict[str, Any]], sizing.Sizing]]:
    out = {}
    for name, node in CASES:
        spec = MODELS[name]
        expected = sizing.size(spec, sizing.instance(node), target="eks", cpu=sizing.default_pod_cpu(spec))
        chart, objs = render(workload(name, node))
        out[(name, node)] = (chart, objs, expected)
    return out


def pod(objs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return objs["Deployment"]["spec"]["template"]["spec"]


def engine(objs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return pod(objs)["containers"][0]


def env_of(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container["env"]}


IDS = [f"{n}@{node}" for n, node in CASES]


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_engine_env_is_exactly_the_sized_vllm_env_plus_location_name_and_caches(rendered, case) -> None:
    chart, objs, s = rendered[case]
    assert chart.sizing == s and s.engine == "vllm"
    env = env_of(engine(objs))
    assert env == chart.engine_env == rendered_engine_env(chart)
    sized = s.engine_env(exclusive_cpus=False)  # cpu_limit "none": shared node, vLLM must not bind threads
    assert {k: env[k] for k in sized} == sized and sized["VLLM_CPU_OMP_THREADS_BIND"] == "nobind"
    assert env["VLLM_CPU_KVCACHE_SPACE"] == str(s.kv_cache_space_gib) and env["SERVE_MAX_NUM_SEQS"] == str(s.slots)
    assert env["OMP_NUM_THREADS"] == str(int(s.cpu_request) - s.reserved_cpus)
    chart_set = {
        "MODEL_PATH": f"/models/{case[0]}",
        "SERVE_MODEL_NAME": case[0],
        "SERVE_HOST": "0.0.0.0",
        "SERVE_PORT": str(ENGINE_PORT),
        "HOME": "/tmp",
        "HF_HUB_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
    }
    assert env == {**sized, **chart_set}, "nothing llama-specific, nothing unsized"
    assert not [k for k in env if k.startswith("LLAMA_")]


def test_guaranteed_cpus_let_vllm_bind_its_threads() -> None:
    chart, objs = render(workload("smol", NODES[0]), replace(POLICY, cpu_limit="request"))
    env = env_of(engine(objs))
    assert {k: env[k] for k in chart.sizing.engine_env(exclusive_cpus=True)} == chart.sizing.engine_env(
        exclusive_cpus=True
    )
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == "auto"
    res = engine(objs)["resources"]
    assert res["limits"]["cpu"] == res["requests"]["cpu"] and res["limits"]["memory"] == res["requests"]["memory"]


def test_image_and_command_are_the_vllm_images_entrypoint(rendered) -> None:
    _, objs, _ = rendered[CASES[0]]
    c = engine(objs)
    assert c["name"] == "vllm" and c["image"] == IMAGE
    (entrypoint,) = re.findall(r"^ENTRYPOINT\s+(\[.*\])\s*$", VLLM_DOCKERFILE.read_text(), re.M)
    assert c["command"] == json.loads(entrypoint), (
        "the manifest spells out the image's own ENTRYPOINT (EKS mode: no argument)"
    )
    sidecar = pod(objs)["containers"][1]
    assert sidecar["name"] == "metrics" and sidecar["image"] == IMAGE and sidecar["command"][:2] == ["python3", "-c"]


def _default_int(source: str, pattern: str) -> int:
    (value,) = re.findall(pattern, source)
    return int(ast.literal_eval(value))


@pytest.mark.vllm  # reads vLLM's own source in the test environment (scripts/build_vllm_env.sh)
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_dev_shm_is_memory_backed_sized_for_vllms_queues_and_counted_in_memory(rendered, case) -> None:
    chart, objs, s = rendered[case]
    p = pod(objs)
    (shm_mount,) = [m for m in engine(objs)["volumeMounts"] if m["mountPath"] == "/dev/shm"]
    (volume,) = [v for v in p["volumes"] if v["name"] == shm_mount["name"]]
    assert volume["emptyDir"] == {"medium": "Memory", "sizeLimit": f"{VLLM_SHM_MIB}Mi"}
    res = engine(objs)["resources"]
    memory = s.memory_request_mib + VLLM_SHM_MIB
    assert res["requests"]["memory"] == res["limits"]["memory"] == f"{memory}Mi", "tmpfs pages count against the limit"
    assert chart.memory_limit_bytes == memory * sizing.MIB
    # vLLM's own numbers (vllm-cpu as scripts/build_vllm_env.sh installs it, the image's version): the multiproc
    # executor's broadcast queue (10 chunks of VLLM_MQ_MAX_CHUNK_BYTES_MB) and the
    # worker's response queue (MessageQueue(1, 1): 10 chunks of the default max_chunk_bytes).
    src = vllm_source()
    envs = (src / "envs.py").read_text()
    mq_mb = _default_int(envs, r'os\.getenv\("VLLM_MQ_MAX_CHUNK_BYTES_MB", "(\d+)"\)')
    broadcast = (src / "distributed" / "device_communicators" / "shm_broadcast.py").read_text()
    default_chunk = eval(re.findall(r"max_chunk_bytes: int = ([0-9 *]+),", broadcast)[0])  # noqa: S307 - a literal product
    chunks = _default_int(broadcast, r"max_chunks: int = (\d+),")
    assert (
        "self.worker_response_mq = MessageQueue(1, 1)"
        in (src / "v1" / "executor" / "multiproc_executor.py").read_text()
    )
    assert 'parallel_config.distributed_executor_backend = "mp"' in (src / "platforms" / "cpu.py").read_text()
    needed = chunks * (mq_mb * sizing.MIB + default_chunk)
    assert needed <= VLLM_SHM_MIB * sizing.MIB, f"vLLM's queues need {needed / sizing.MIB:.0f} MiB of /dev/shm"


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_probes_cover_vllms_start_and_scale_with_the_weights(rendered, case) -> None:
    chart, objs, s = rendered[case]
    c = engine(objs)
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert c[probe]["httpGet"] == {"path": engines.HEALTH_PATH, "port": ENGINE_PORT, "scheme": "HTTP"}, probe
    stored = stored_bytes(MODELS[case[0]])
    budget = startup_budget_seconds(stored, "vllm")
    assert chart.startup_probe_seconds == budget
    startup = c["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= budget > VLLM_COLD_START_SECONDS, (
        "the measured cold start fits"
    )
    assert budget > startup_budget_seconds(s.weights_bytes), "vLLM's compile warm-up is on top of llama-server's load"
    deadline = objs["Deployment"]["spec"]["progressDeadlineSeconds"]
    assert deadline >= budget + download_budget_seconds(stored)
    assert startup_budget_seconds(10 * stored, "vllm") > budget


def test_disk_holds_a_float32_checkpoint_unless_its_size_is_known() -> None:
    """Hub checkpoints are often stored in float32 and cast to --dtype at load: without size_bytes the model's
    emptyDir must hold 4 bytes a parameter, or the kubelet evicts the pod mid-download."""

    def models_volume(objs: dict[str, dict[str, Any]]) -> int:
        (v,) = [v for v in pod(objs)["volumes"] if v["name"] == "models"]
        return int(v["emptyDir"]["sizeLimit"].removesuffix("Mi")) * sizing.MIB

    spec = MODELS["chat-2b"]
    _, unknown = render(workload("chat-2b", NODES[0]))
    assert models_volume(unknown) >= int(spec.parameters_billions * 1e9 * 4) > 2 * sizing.weights_bytes(spec) - 1
    known = int(spec.parameters_billions * 1e9 * 2) + 5 * sizing.MIB
    chart, pinned = render(workload("chat-2b", NODES[0], size_bytes=known))
    assert known <= models_volume(pinned) < models_volume(unknown)
    assert chart.startup_probe_seconds == startup_budget_seconds(known, "vllm")


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_the_init_container_fetches_the_snapshot_directory(rendered, case) -> None:
    chart, objs, _ = rendered[case]
    (fetch,) = pod(objs)["initContainers"]
    fenv = env_of(fetch)
    assert fenv["MODEL_URI"] == chart.props.model.model_uri and fenv["MODEL_URI"].endswith("/")
    assert fenv["MODEL_PATH"] == env_of(engine(objs))["MODEL_PATH"] == f"/models/{case[0]}"
    assert "cpu-inference.manifest" in fetch["command"][2], "the prefix script reads the copy job's manifest"
    mounts = {m["mountPath"]: m for m in engine(objs)["volumeMounts"]}
    assert mounts["/models"]["readOnly"] is True and "readOnly" not in mounts["/tmp"]


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_keda_scales_on_vllms_queue_gauges(rendered, case) -> None:
    chart, _, s = rendered[case]
    so = chart.scaled_object.to_dict()
    running, waiting = engines.queue_metrics("vllm")
    queries = {t["name"]: t["metadata"]["query"] for t in so["spec"]["triggers"]}
    assert queries == {
        "running": f'sum({running}{{app="{case[0]}",namespace="inference"}}) or vector(0)',
        "waiting": f'sum({waiting}{{app="{case[0]}",namespace="inference"}}) or vector(0)',
    }
    assert (running, waiting) == ("vllm:num_requests_running", "vllm:num_requests_waiting")
    mods = so["spec"]["advanced"]["scalingModifiers"]
    assert mods["formula"] == "running + (waiting * 10)" and mods["target"] == str(queue_target(s.slots))
    assert validate_custom(so) == []


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_every_object_validates_and_the_pod_is_restricted(rendered, case) -> None:
    chart, objs, _ = rendered[case]
    assert set(objs) == {"ServiceAccount", "Deployment", "Service", "PodDisruptionBudget", "NetworkPolicy"}
    assert [p for o in objs.values() for p in validate_core(o, MINOR)] == []
    assert restricted_violations(objs["Deployment"]) == []
    p = pod(objs)
    for c in p["containers"] + p["initContainers"]:
        sc = c["securityContext"]
        assert (
            sc["readOnlyRootFilesystem"] is True
            and sc["runAsUser"] == 65532
            and sc["capabilities"] == {"drop": ["ALL"]}
        )
    assert objs["PodDisruptionBudget"]["spec"]["maxUnavailable"] == 1
    assert {c["topologyKey"] for c in p["topologySpreadConstraints"]} == {
        "topology.kubernetes.io/zone",
        "kubernetes.io/hostname",
    }
    labels = objs["Deployment"]["spec"]["template"]["metadata"]["labels"]
    assert labels["cpu-inference/engine"] == "vllm" and labels["app.kubernetes.io/component"] == "llama-server", (
        "router egress selects it"
    )
    callers, scrapers = objs["NetworkPolicy"]["spec"]["ingress"]
    assert callers["ports"] == [{"port": ENGINE_PORT, "protocol": "TCP"}] and scrapers["ports"] == [
        {"port": METRICS_PORT, "protocol": "TCP"}
    ]


def test_writable_paths_are_mounted_where_vllm_writes() -> None:
    """vLLM writes its compile caches under HOME (~/.cache/vllm), torch inductor's under tempfile.gettempdir() and
    its queues in /dev/shm: an strace of the real server (vllm-cpu 0.32.0, this host) saw writes only to HOME, /tmp,
    /dev/shm and /dev/null. With a read-only root, those must all be the pod's volumes."""
    _, objs = render(workload("smol", NODES[0]))
    env = env_of(engine(objs))
    mounted = {m["mountPath"] for m in engine(objs)["volumeMounts"] if not m.get("readOnly")}
    assert mounted == {"/tmp", "/dev/shm"} and env["HOME"].startswith("/tmp")


@pytest.mark.parametrize(
    "kw, message",
    [
        (
            dict(model_uri=f"s3://models-bucket/models/smol/{COMMIT}/model.gguf"),
            r"vllm serves a Hugging Face safetensors checkpoint, not a GGUF",
        ),
        (dict(model_uri=f"s3://models-bucket/models/smol/{COMMIT}/config.json"), r"prefix ending in '/'"),
        (dict(model_uri="https://x/models/smol/"), r"s3://<bucket>/models/<name>/<commit>/"),
        (dict(extra_env={"SERVE_MAX_NUM_SEQS": "64"}), "extra_env must not set"),
        (dict(extra_env={"VLLM_CPU_KVCACHE_SPACE": "40"}), "extra_env must not set"),
        (dict(extra_env={"SERVE_MODEL_NAME": "other"}), "extra_env must not set"),
        (dict(extra_env={"HOME": "/root"}), "extra_env must not set"),
        (dict(spec=replace(MODELS["smol"], task="embedding")), "not served by vllm here"),
    ],
)
def test_vllm_mistakes_fail_with_the_key_and_the_fix(kw: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message) as err:
        render(workload("smol", NODES[0], **kw))
    assert "\n" not in str(err.value)


def test_extra_env_reaches_the_engine_and_a_gguf_stays_llama_cpp() -> None:
    _, objs = render(workload("smol", NODES[0], extra_env={"SERVE_EXTRA_ARGS": "--enable-prefix-caching"}))
    assert env_of(engine(objs))["SERVE_EXTRA_ARGS"] == "--enable-prefix-caching"
    llama = replace(MODELS["smol"], engine="llama.cpp")
    with pytest.raises(ValueError, match=r"is a prefix \(a checkpoint directory\): llama.cpp needs the .gguf"):
        render(workload("smol", NODES[0], spec=llama))


def test_a_vllm_model_cannot_join_a_farm_pool() -> None:
    specs = {"tiny": sizing.ModelSpec(0.135, task="classification"), "smol": MODELS["smol"]}
    with pytest.raises(
        ValueError, match=r"models \['smol'\] use engine vllm, which serves one model per process"
    ) as err:
        pool_sizing.pool_plan(specs, cpu=4, memory_bytes=8 * sizing.GIB)
    assert "\n" not in str(err.value)


def _vllm_metric_names() -> set[str]:
    """The series names vLLM's Prometheus logger registers (counters gain `_total`, histograms `_sum`/`_count`)."""
    text = (vllm_source() / "v1" / "metrics" / "loggers.py").read_text()
    names: set[str] = set()
    for cls, name in re.findall(r"self\._(gauge|counter|histogram)_cls\(\s*name=\"(vllm:[a-z_]+)\"", text):
        names |= (
            {f"{name}_total"}
            if cls == "counter"
            else {f"{name}_sum", f"{name}_count"}
            if cls == "histogram"
            else {name}
        )
    return names


@pytest.mark.vllm  # reads vLLM's own source in the test environment (scripts/build_vllm_env.sh)
def test_vllm_alerts_use_vllms_own_series() -> None:
    models = [
        ModelAlertSpec("classifier", slots=16, memory_limit_bytes=2 * sizing.GIB),
        ModelAlertSpec("smol", slots=8, memory_limit_bytes=3 * sizing.GIB, engine="vllm"),
    ]
    doc = rule_groups("inference", models)
    text = json.dumps(doc)
    used = set(re.findall(r"vllm:[a-z_]+", text))
    assert used >= {
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:generation_tokens_total",
        "vllm:inter_token_latency_seconds_count",
    }
    alerts = {r["alert"]: r for g in doc["groups"] for r in g["rules"] if "alert" in r}
    assert {
        "VllmRequestsQueued",
        "VllmSlotsSaturated",
        "VllmKvCacheHigh",
        "VllmTokenThroughputLow",
        "VllmMemoryNearLimit",
        "VllmMetricsMissing",
        "LlamaRequestsQueued",
        "LlamaSlotsSaturated",
    } <= set(alerts)
    assert (
        'container="vllm"' in alerts["VllmMemoryNearLimit"]["expr"]
        and 'engine="vllm"' in alerts["VllmRequestsQueued"]["expr"]
    )
    assert 'engine="llama.cpp"' in alerts["LlamaRequestsQueued"]["expr"], (
        "each engine's queue alert covers its own apps"
    )
    assert "llamacpp:" not in json.dumps(
        [r for r in alerts.values() if r["alert"].startswith("Vllm") and "RequestsQueued" not in r["alert"]]
    )
    dash = json.dumps(dashboard("inference", models))
    assert "vllm:num_requests_running" in dash and "llamacpp:requests_processing" in dash
    exported = _vllm_metric_names()
    assert used <= exported, f"not exported by vLLM: {sorted(used - exported)}"


def test_placement_counts_dev_shm_in_the_fit() -> None:
    """A node whose allocatable holds the sized memory but not the /dev/shm volume on top is not a fit for vLLM."""
    from cpu_inference.k8s.workloads.model_placement import fits

    s = sizing.size(MODELS["smol"], sizing.instance(NODES[0]), target="eks", cpu=2)
    tight = replace(s, memory_available_bytes=s.memory_needed_bytes + VLLM_SHM_MIB * sizing.MIB // 2)
    assert tight.fits and not fits(tight), "sizing alone would place it; the pod's limit would not fit"
    assert fits(replace(tight, engine="llama.cpp")), "llama.cpp pods have no /dev/shm volume"
