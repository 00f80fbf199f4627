"""LlamaServerChart for three models (135M classifier, 8B chat, 30B batch) on two node sizes: every number
in the rendered objects is the sizing module's output for that model on that node (asserted against
`sizing.size(...)`, never literals), the engine flags are what the container's own engine_flags computes
from the rendered env, every object validates against the Kubernetes 1.35 schema (ScaledObjects against
the upstream KEDA CRD), and every pod spec passes Pod Security "restricted"."""

from __future__ import annotations

import copy
import math
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import cdk8s
import pytest

from cpu_inference import sizing
from cpu_inference.k8s.charts.llama_server_chart import FETCH_MEMORY_MIB, LlamaServerChart, LlamaServerChartProps
from cpu_inference.k8s.charts.namespace_chart import ServingNamespaceChart, ServingNamespaceProps
from cpu_inference.k8s.specs.keda import RUNNING_METRIC, WAITING_METRIC
from cpu_inference.k8s.workloads.engine_container import ENGINE_PORT
from cpu_inference.k8s.workloads.metrics_proxy import METRICS_PORT
from cpu_inference.k8s.workloads.model_scaling import MIN_SCALE_DOWN_STABILIZATION, queue_target
from cpu_inference.k8s.workloads.model_time_budgets import download_budget_seconds, startup_budget_seconds
from cpu_inference.k8s.workloads.model_workload import ModelWorkload
from cpu_inference.k8s.workloads.serving_policy import KedaSource, ServingPolicy
from cpu_inference.testing.pod_security import restricted_violations
from tests.support.k8s import validate_core, validate_custom

ROOT = Path(__file__).resolve().parents[2]
ENGINE_DIR = ROOT / "containers" / "llama-server"
if str(ENGINE_DIR) not in sys.path:
    sys.path.insert(0, str(ENGINE_DIR))
from inference_runtime import engine_flags  # noqa: E402  (the container's own module: the flags the pod will really run)

IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/llama-server@sha256:" + "c" * 64
AMP = "https://aps-workspaces.us-east-1.amazonaws.com/workspaces/ws-1"
MINOR = "1.35"
NODE_SIZES = ("m7g.4xlarge", "c7g.8xlarge")
MODELS = {
    "classifier-135m": dict(
        spec=sizing.ModelSpec(0.135, task="classification", context_window=2048), cpu=None, sha256="a" * 64
    ),
    "chat-8b": dict(spec=sizing.ModelSpec(8.0, task="chat", context_window=8192), cpu=None, sha256=None),
    "batch-30b": dict(spec=sizing.ModelSpec(30.0, task="batch", context_window=8192), cpu=12.0, sha256=None),
}
POLICY = ServingPolicy(
    namespace="inference",
    pattern="slm-prefilter",
    keda=KedaSource(AMP, aws_region="us-east-1", authentication_ref="amp-sigv4"),
    aws_region="us-east-1",
)


def workload(name: str, node: str, **kw: Any) -> ModelWorkload:
    m = MODELS[name]
    args: dict[str, Any] = dict(
        name=name,
        image=IMAGE,
        model_uri=f"s3://models-bucket/models/{name}/main/{name}-Q4_K_M.gguf",
        spec=m["spec"],
        cpu=m["cpu"],
        node_type=node,
        sha256=m["sha256"],
        replicas_min=1,
        replicas_max=5,
    )
    args.update(kw)
    return ModelWorkload(**args)


def render(w: ModelWorkload, policy: ServingPolicy = POLICY) -> tuple[LlamaServerChart, dict[str, dict[str, Any]]]:
    chart = LlamaServerChart(cdk8s.App(), w.name, props=LlamaServerChartProps(model=w, policy=policy))
    return chart, {o["kind"]: o for o in chart.to_json()}


@pytest.fixture(scope="module")
def rendered() -> dict[tuple[str, str], tuple[LlamaServerChart, dict[str, dict[str, Any]], sizing.Sizing]]:
    out = {}
    for name, m in MODELS.items():
        for node in NODE_SIZES:
            w = workload(name, node)
            expected = sizing.size(
                m["spec"], sizing.instance(node), target="eks", cpu=m["cpu"] or sizing.default_pod_cpu(m["spec"])
            )
            chart, objs = render(w)
            out[(name, node)] = (chart, objs, expected)
    return out


CASES = [(n, node) for n in MODELS for node in NODE_SIZES]


def engine(objs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return objs["Deployment"]["spec"]["template"]["spec"]["containers"][0]


def env_of(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container["env"]}


@pytest.mark.parametrize("case", CASES, ids=[f"{n}@{node}" for n, node in CASES])
def test_requests_and_limits_come_from_sizing(rendered, case) -> None:
    chart, objs, s = rendered[case]
    assert chart.sizing == s
    res = engine(objs)["resources"]
    assert res["requests"]["cpu"] == f"{int(s.cpu_request * 1000)}m"
    assert res["requests"]["memory"] == f"{s.memory_request_mib}Mi"
    assert s.memory_needed_bytes == sizing.memory_needed(MODELS[case[0]]["spec"], s.slots, s.ctx_per_slot)
    assert res["limits"] == {"memory": res["requests"]["memory"]}, (
        "memory limit = request, no CPU limit (see the chart docstring)"
    )
    assert s.fits and s.cpu_request <= s.cpu_available


@pytest.mark.parametrize("case", CASES, ids=[f"{n}@{node}" for n, node in CASES])
def test_thread_discipline_and_context_from_sizing(rendered, case) -> None:
    _, objs, s = rendered[case]
    env = env_of(engine(objs))
    threads = str(int(s.cpu_request))
    for var in ("LLAMA_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "INTRA_OP_NUM_THREADS"):
        assert env[var] == threads, var
    assert env["NUM_INTER_THREADS"] == "1"
    assert env["LLAMA_PARALLEL"] == str(s.slots)
    assert env["LLAMA_CTX_PER_SLOT"] == str(s.ctx_per_slot) == str(sizing.context_per_slot(MODELS[case[0]]["spec"]))
    assert {k: env[k] for k in s.engine_env()} == s.engine_env()


def test_context_per_slot_follows_the_task(rendered) -> None:
    ctx = {name: rendered[(name, NODE_SIZES[0])][2].ctx_per_slot for name in MODELS}
    assert (
        ctx["classifier-135m"] == sizing.TASK_CONTEXT["classification"] < ctx["chat-8b"] == sizing.TASK_CONTEXT["chat"]
    )


@pytest.mark.parametrize("case", CASES, ids=[f"{n}@{node}" for n, node in CASES])
def test_engine_flags_are_what_the_container_computes_from_the_rendered_env(rendered, case, tmp_path: Path) -> None:
    _, objs, s = rendered[case]
    c = engine(objs)
    env = env_of(c)
    assert c["command"] == ["python3", "/opt/llama/entrypoint.py"], "EKS mode: the entrypoint without arguments"
    model = tmp_path / Path(env["MODEL_PATH"]).name
    model.write_bytes(b"GGUF")
    cfg = engine_flags.config_from_env(
        {**env, "MODEL_PATH": str(model)}, memory_limit=s.memory_request_mib * sizing.MIB
    )
    args = engine_flags.llama_server_args(cfg)
    flag = lambda name: args[args.index(name) + 1]  # noqa: E731
    assert flag("--threads") == flag("--threads-batch") == str(int(s.cpu_request))
    assert flag("--parallel") == str(s.slots)
    assert flag("--ctx-size") == str(s.slots * s.ctx_per_slot) == str(s.ctx_total)
    assert (flag("--host"), flag("--port")) == ("0.0.0.0", str(ENGINE_PORT))
    assert flag("--alias") == case[0]
    assert "--metrics" in args, "KEDA's two metrics need --metrics"
    # --cache-ram comes from the cgroup limit the chart sets (memory limit = request).
    assert int(flag("--cache-ram")) == engine_flags.default_cache_ram_mib(s.memory_request_mib * sizing.MIB)


@pytest.mark.parametrize("case", CASES, ids=[f"{n}@{node}" for n, node in CASES])
def test_probes_are_sized_to_the_model(rendered, case) -> None:
    chart, objs, s = rendered[case]
    c = engine(objs)
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert c[probe]["httpGet"] == {"path": "/health", "port": ENGINE_PORT, "scheme": "HTTP"}, probe
    startup = c["startupProbe"]
    budget = startup_budget_seconds(s.weights_bytes)
    assert chart.startup_probe_seconds == budget
    assert startup["periodSeconds"] * startup["failureThreshold"] >= budget
    deadline = objs["Deployment"]["spec"]["progressDeadlineSeconds"]
    assert deadline >= budget + download_budget_seconds(s.weights_bytes), "the rollout deadline covers download + load"


def test_startup_budget_grows_with_the_model(rendered) -> None:
    budgets = [
        rendered[(n, NODE_SIZES[0])][0].startup_probe_seconds for n in ("classifier-135m", "chat-8b", "batch-30b")
    ]
    assert budgets == sorted(budgets) and budgets[0] < budgets[2]


@pytest.mark.parametrize("case", CASES, ids=[f"{n}@{node}" for n, node in CASES])
def test_pdb_spread_and_affinity(rendered, case) -> None:
    chart, objs, _ = rendered[case]
    dep = objs["Deployment"]
    selector = dep["spec"]["selector"]["matchLabels"]
    assert selector == chart.selector
    assert objs["PodDisruptionBudget"]["spec"] == {
        "maxUnavailable": 1,
        "selector": {"matchLabels": selector},
        "unhealthyPodEvictionPolicy": "AlwaysAllow",
    }
    pod = dep["spec"]["template"]["spec"]
    spread = {c["topologyKey"]: c for c in pod["topologySpreadConstraints"]}
    assert set(spread) == {"topology.kubernetes.io/zone", "kubernetes.io/hostname"}
    for c in spread.values():
        assert c["labelSelector"]["matchLabels"] == selector and c["maxSkew"] == 1
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [
        {"matchExpressions": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64", "amd64"]}]}
    ]
    assert objs["Service"]["spec"]["selector"] == selector
    assert "replicas" not in dep["spec"], "KEDA owns the replica count"


@pytest.mark.parametrize("case", CASES, ids=[f"{n}@{node}" for n, node in CASES])
def test_model_is_downloaded_and_verified_by_the_init_container(rendered, case) -> None:
    chart, objs, s = rendered[case]
    pod = objs["Deployment"]["spec"]["template"]["spec"]
    (fetch,) = pod["initContainers"]
    fenv = env_of(fetch)
    eenv = env_of(engine(objs))
    assert fenv["MODEL_PATH"] == eenv["MODEL_PATH"]
    assert fenv["MODEL_URI"] == chart.props.model.model_uri
    assert ("MODEL_SHA256" in fenv) == (MODELS[case[0]]["sha256"] is not None)
    mounts = {m["mountPath"]: m for m in fetch["volumeMounts"]}
    emounts = {m["mountPath"]: m for m in engine(objs)["volumeMounts"]}
    assert mounts["/models"]["name"] == emounts["/models"]["name"] and emounts["/models"]["readOnly"] is True
    volume = next(v for v in pod["volumes"] if v["name"] == mounts["/models"]["name"])
    size_limit = volume["emptyDir"]["sizeLimit"]
    assert size_limit.endswith("Mi") and int(size_limit[:-2]) * sizing.MIB >= s.weights_bytes
    # The init container borrows the engine's requests: no extra capacity on the node.
    assert fetch["resources"]["requests"]["cpu"] == engine(objs)["resources"]["requests"]["cpu"]
    assert int(fetch["resources"]["requests"]["memory"][:-2]) <= s.memory_request_mib
    assert fetch["resources"]["limits"] == {"memory": f"{FETCH_MEMORY_MIB}Mi"}
    assert pod["serviceAccountName"] == case[0] and objs["ServiceAccount"]["automountServiceAccountToken"] is False


@pytest.mark.parametrize("case", CASES, ids=[f"{n}@{node}" for n, node in CASES])
def test_keda_queue_depth_scaled_object(rendered, case) -> None:
    chart, _, s = rendered[case]
    so = chart.scaled_object.to_dict()
    spec = so["spec"]
    mods = spec["advanced"]["scalingModifiers"]
    assert mods["formula"] == "running + (waiting * 10)"
    assert mods["target"] == str(queue_target(s.slots)) == str(s.slots + 10)
    assert mods["activationTarget"] == "5"
    queries = {t["name"]: t["metadata"]["query"] for t in spec["triggers"]}
    assert queries == {
        "running": f'sum({RUNNING_METRIC}{{app="{case[0]}",namespace="inference"}}) or vector(0)',
        "waiting": f'sum({WAITING_METRIC}{{app="{case[0]}",namespace="inference"}}) or vector(0)',
    }
    assert (spec["minReplicaCount"], spec["maxReplicaCount"]) == (1, 5)
    hold = spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"]
    assert hold >= MIN_SCALE_DOWN_STABILIZATION and hold >= 2 * (
        startup_budget_seconds(s.weights_bytes) + download_budget_seconds(s.weights_bytes)
    )
    assert validate_custom(so) == []


def test_targets_can_be_given_and_cold_models_need_a_demand_signal() -> None:
    chart, _ = render(workload("chat-8b", NODE_SIZES[0], scale_target=25, activation_target=5))
    assert chart.scaled_object.to_dict()["spec"]["advanced"]["scalingModifiers"]["target"] == "25"
    with pytest.raises(ValueError, match="replicas_min 0 needs cold_start_query"):
        render(workload("classifier-135m", NODE_SIZES[0], replicas_min=0))
    cold, _ = render(
        workload(
            "classifier-135m",
            NODE_SIZES[0],
            replicas_min=0,
            cold_start_query='sum(rate(gateway_requests_total{model="classifier-135m"}[2m]))',
        )
    )
    so = cold.scaled_object.to_dict()
    assert so["spec"]["minReplicaCount"] == 0
    assert [t["name"] for t in so["spec"]["triggers"]] == ["running", "waiting", "demand"]
    assert so["spec"]["advanced"]["scalingModifiers"]["formula"] == "running + (waiting * 10) + (demand * 10)"
    assert validate_custom(so) == []


@pytest.mark.parametrize("case", CASES, ids=[f"{n}@{node}" for n, node in CASES])
def test_every_object_validates_against_kubernetes_1_35(rendered, case) -> None:
    _, objs, _ = rendered[case]
    assert set(objs) == {"ServiceAccount", "Deployment", "Service", "PodDisruptionBudget", "NetworkPolicy"}
    assert [p for o in objs.values() for p in validate_core(o, MINOR)] == []


@pytest.mark.parametrize("case", CASES, ids=[f"{n}@{node}" for n, node in CASES])
def test_pods_meet_pod_security_restricted(rendered, case) -> None:
    _, objs, _ = rendered[case]
    assert restricted_violations(objs["Deployment"]) == []
    pod = objs["Deployment"]["spec"]["template"]["spec"]
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    for c in pod["containers"] + pod["initContainers"]:
        sc = c["securityContext"]
        assert (
            sc["readOnlyRootFilesystem"] is True
            and sc["runAsNonRoot"] is True
            and sc["capabilities"] == {"drop": ["ALL"]}
        )
        assert "/tmp" in {m["mountPath"] for m in c["volumeMounts"]}, "read-only root: /tmp is an emptyDir"


@pytest.mark.parametrize(
    "mutate, message",
    [
        (
            lambda p: p["containers"][0]["securityContext"].update(allowPrivilegeEscalation=True),
            "allowPrivilegeEscalation must be false",
        ),
        (lambda p: p["initContainers"][0]["securityContext"].pop("capabilities"), "capabilities.drop must include ALL"),
        (lambda p: p["containers"][0]["securityContext"]["capabilities"].update(add=["SYS_ADMIN"]), "capabilities.add"),
        (
            lambda p: (
                p["securityContext"].pop("runAsNonRoot"),
                [c["securityContext"].pop("runAsNonRoot") for c in p["containers"]],
            ),
            "runAsNonRoot must be true",
        ),
        (lambda p: p["securityContext"].pop("seccompProfile"), "seccompProfile must be RuntimeDefault"),
        (lambda p: p["containers"][0]["securityContext"].update(runAsUser=0), "runAsUser must not be 0"),
        (lambda p: p["volumes"].append({"name": "host", "hostPath": {"path": "/"}}), "hostPath volumes are forbidden"),
        (lambda p: p.update(hostNetwork=True), "hostNetwork"),
        (lambda p: p["containers"][0]["ports"][0].update(hostPort=8080), "hostPort"),
        (lambda p: p["containers"][0]["securityContext"].update(privileged=True), "privileged"),
        (lambda p: p["volumes"].append({"name": "nfs", "nfs": {"server": "x", "path": "/"}}), "is not allowed"),
    ],
)
def test_the_pod_security_check_catches_each_restricted_rule(rendered, mutate, message) -> None:
    _, objs, _ = rendered[CASES[0]]
    bad = copy.deepcopy(objs["Deployment"])
    mutate(bad["spec"]["template"]["spec"])
    problems = restricted_violations(bad)
    assert any(message in p for p in problems), problems


def test_network_policy_admits_only_the_router_and_the_scraper(rendered) -> None:
    chart, objs, _ = rendered[CASES[0]]
    spec = objs["NetworkPolicy"]["spec"]
    assert spec["podSelector"]["matchLabels"] == chart.selector and spec["policyTypes"] == ["Ingress", "Egress"]
    callers, scrapers = spec["ingress"]
    assert callers["from"] == [{"podSelector": {"matchLabels": {"app.kubernetes.io/component": "router"}}}]
    assert scrapers["from"][0]["namespaceSelector"]["matchExpressions"][0]["values"] == ["monitoring"]
    assert callers["ports"] == [{"port": ENGINE_PORT, "protocol": "TCP"}]
    assert scrapers["ports"] == [{"port": METRICS_PORT, "protocol": "TCP"}], "scrapers reach only the metrics sidecar"
    egress_ports = {(p["port"], p["protocol"]) for r in spec["egress"] for p in r["ports"]}
    assert egress_ports == {(53, "UDP"), (53, "TCP"), (80, "TCP"), (443, "TCP")}
    agent = next(r for r in spec["egress"] if r["ports"][0]["port"] == 80)
    assert {p["ipBlock"]["cidr"] for p in agent["to"]} == {"169.254.170.23/32", "fd00:ec2::23/128"}, (
        "port 80 only to the Pod Identity agent"
    )


def test_namespaces_and_cidrs_widen_the_callers() -> None:
    policy = replace(POLICY, client_namespaces=("apps",), metrics_cidrs=("10.0.0.0/19",), metrics_namespaces=())
    _, objs = render(workload("classifier-135m", NODE_SIZES[0]), policy)
    callers, scrapers = objs["NetworkPolicy"]["spec"]["ingress"]
    assert callers["from"][1]["namespaceSelector"]["matchExpressions"][0]["values"] == ["apps"]
    assert scrapers["from"] == [{"ipBlock": {"cidr": "10.0.0.0/19"}}]


def test_farm_placement_and_guaranteed_cpu_option() -> None:
    policy = replace(
        POLICY,
        tolerations=(
            {"key": "cpu-inference/memory-optimized", "operator": "Equal", "value": "true", "effect": "NoSchedule"},
        ),
        preferred_pools=("memory-optimized",),
        cpu_limit="request",
    )
    chart, objs = render(workload("classifier-135m", NODE_SIZES[0], role="farm"), policy)
    pod = objs["Deployment"]["spec"]["template"]["spec"]
    assert pod["tolerations"] == [
        {"key": "cpu-inference/memory-optimized", "operator": "Equal", "value": "true", "effect": "NoSchedule"}
    ]
    preferred = pod["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert preferred[0]["preference"]["matchExpressions"] == [
        {"key": "cpu-inference/pool", "operator": "In", "values": ["memory-optimized"]}
    ]
    res = engine(objs)["resources"]
    assert res["limits"]["cpu"] == res["requests"]["cpu"] == f"{int(chart.sizing.cpu_request * 1000)}m"
    assert res["limits"]["memory"] == res["requests"]["memory"]
    assert [p for o in objs.values() for p in validate_core(o, MINOR)] == []


def test_node_type_default_is_the_smallest_fitting_candidate() -> None:
    w = workload("chat-8b", NODE_SIZES[0], node_type=None)
    chart, _ = render(w)
    candidates = [it for it in sizing.CATALOG.values() if it.family in POLICY.node_families]
    assert chart.sizing == sizing.smallest_fitting(w.spec, candidates, target="eks", cpu=w.pod_cpu)


def test_without_keda_the_replicas_are_fixed() -> None:
    chart, objs = render(workload("chat-8b", NODE_SIZES[0], replicas_min=2), replace(POLICY, keda=None))
    assert chart.scaled_object is None
    assert objs["Deployment"]["spec"]["replicas"] == 2


@pytest.mark.parametrize(
    "model, kw, message",
    [
        ("chat-8b", dict(cpu=1.5), "whole number of vCPUs"),
        ("batch-30b", dict(node_type="c7g.2xlarge"), "does not fit c7g.2xlarge"),
        ("chat-8b", dict(node_type="z9.large"), "not in the instance catalog"),
        ("chat-8b", dict(name="Bad_Name"), "DNS label"),
        ("chat-8b", dict(model_uri="https://x/y.gguf"), r"s3://<bucket>/<key>\.gguf"),
        ("chat-8b", dict(extra_env={"LLAMA_THREADS": "64"}), "extra_env must not set"),
        ("chat-8b", dict(sha256="abc"), "64 lowercase hex"),
        ("chat-8b", dict(replicas_min=3, replicas_max=2), "replicas_min"),
    ],
)
def test_mistakes_fail_with_the_key_and_the_fix(model: str, kw: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        render(replace(workload(model, NODE_SIZES[0]), **kw))


def test_namespace_chart_enforces_restricted_at_the_cluster_minor() -> None:
    chart = ServingNamespaceChart(cdk8s.App(), "ns", props=ServingNamespaceProps("model-farm", "model-farm", MINOR))
    ns, deny = chart.to_json()
    labels = ns["metadata"]["labels"]
    for mode in ("enforce", "audit", "warn"):
        assert labels[f"pod-security.kubernetes.io/{mode}"] == "restricted"
        assert labels[f"pod-security.kubernetes.io/{mode}-version"] == f"v{MINOR}"
    assert deny["spec"] == {"podSelector": {}, "policyTypes": ["Ingress"]}
    assert [p for o in (ns, deny) for p in validate_core(o, MINOR)] == []
    with pytest.raises(ValueError, match="kubernetes_minor"):
        ServingNamespaceProps("x", "y", "135").validate()


def test_memory_covers_weights_kv_and_overhead(rendered) -> None:
    for (name, _), (_, _, s) in rendered.items():
        w, kv = s.weights_bytes, s.kv_cache_bytes
        assert s.memory_request_mib * sizing.MIB >= w + kv + sizing.RUNTIME_OVERHEAD_BYTES
        assert s.memory_request_mib * sizing.MIB >= math.floor(sizing.RAM_TO_FILE_RATIO * w), name


def test_readme_example_renders() -> None:
    import re

    readme = (ROOT / "constructs" / "cpu_inference" / "k8s" / "README.md").read_text()
    (code,) = re.findall(r"```python\n(.*?)```", readme, re.S)
    scope: dict[str, Any] = {}
    exec(compile(code.replace("print(", "(lambda *a: a)("), "README", "exec"), scope)
    kinds = [o["kind"] for o in scope["objects"]]
    assert kinds == ["ServiceAccount", "Deployment", "Service", "PodDisruptionBudget", "NetworkPolicy"]
    assert scope["scaled"]["spec"]["advanced"]["scalingModifiers"]["formula"] == "running + (waiting * 10)"
