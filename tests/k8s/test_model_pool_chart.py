"""ModelPoolChart: one multi-model pool = a fixed set of Kubernetes objects, whatever the number of models.

Checked against sources that are not the chart: kubernetes-validate (Kubernetes 1.35, strict), the KEDA CRD's
schema and CEL rules (../shared/crds), Pod Security "restricted" (pod_security.py), the Mountpoint for S3 CSI
driver's static-provisioning contract (github.com/awslabs/mountpoint-s3-csi-driver docs/CONFIGURATION.md), the
gateway's own config loader (containers/router, run for real), and — "what deploys is what is tested" — the real
llama-server in router mode started by the real `entrypoint.py pool` with exactly the rendered preset, command
and environment.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from dataclasses import replace
from pathlib import Path
from typing import Any

import cdk8s
import pytest

from cpu_inference.eks.manifests import DEFAULT_MAX_BYTES, bucketize, object_key
from cpu_inference.engines.pool_preset import PoolModel, render_preset
from cpu_inference.k8s.charts.model_pool_chart import (
    CSI_DRIVER,
    NEGATIVE_METADATA_TTL_SECONDS,
    PRESET_FILE,
    STATUS_PORT,
    ModelPoolChart,
    ModelPoolChartProps,
    pool_replica_urls,
)
from cpu_inference.k8s.charts.router_chart import CONFIG_FILE, RouterChart, RouterChartProps, gateway_pool
from cpu_inference.k8s.workloads.engine_container import ENGINE_PORT
from cpu_inference.k8s.workloads.serving_policy import KedaSource, ServingPolicy
from cpu_inference.testing.crd_cel import validate_rules
from cpu_inference.testing.pod_security import restricted_violations
from tests.support.engine import free_port, stop_process, wait_healthy
from tests.support.k8s import crd_schema, validate_core, validate_custom

ROOT = Path(__file__).resolve().parents[2]
ENGINE_DIR = ROOT / "containers" / "llama-server"
ROUTER_DIR = ROOT / "containers" / "router"
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/llama-server@sha256:" + "b" * 64
ROUTER_IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/router@sha256:" + "c" * 64
NS = "model-farm"
AMP = KedaSource(
    "https://aps-workspaces.us-east-1.amazonaws.com/workspaces/ws-1",
    aws_region="us-east-1",
    authentication_ref="amp-sigv4",
)
POLICY = ServingPolicy(namespace=NS, pattern="model-farm", keda=AMP)


def pool_models(n: int, *, threads: int = 2) -> tuple[PoolModel, ...]:
    # Key layout of lambda/model_download/catalog.gguf_key without the farm/ prefix: <name>/<16 hex>/<file>.
    return tuple(
        PoolModel(
            f"m-{i:04d}",
            f"m-{i:04d}/{i:016x}/smollm2-135m-instruct-q4_1.gguf",
            ctx_size=2048,
            parallel=1,
            threads=threads,
        )
        for i in range(n)
    )


def props(n: int = 3, **kw: Any) -> ModelPoolChartProps:
    base = ModelPoolChartProps(
        name="small",
        image=IMAGE,
        models=pool_models(n),
        models_max=2,
        cpu=4,
        memory_bytes=8 << 30,
        bucket_name="cpu-inference-models-123456789012",
        region="us-east-1",
        replicas_max=4,
        policy=POLICY,
    )
    return replace(base, **kw)


def render(p: ModelPoolChartProps) -> tuple[ModelPoolChart, dict[str, dict[str, Any]]]:
    chart = ModelPoolChart(cdk8s.App(), f"pool-{p.name}", props=p)
    return chart, {o["kind"]: o for o in chart.to_json()}


@pytest.fixture(scope="module")
def rendered() -> tuple[ModelPoolChart, dict[str, dict[str, Any]]]:
    return render(props())


def pod(objs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return objs["StatefulSet"]["spec"]["template"]["spec"]


def test_every_object_validates_and_the_pods_are_restricted(rendered) -> None:
    chart, objs = rendered
    assert set(objs) == {
        "ServiceAccount",
        "ConfigMap",
        "PersistentVolume",
        "PersistentVolumeClaim",
        "Service",
        "StatefulSet",
        "PodDisruptionBudget",
        "NetworkPolicy",
    }
    assert [p for o in objs.values() for p in validate_core(o, "1.35")] == []
    assert restricted_violations(objs["StatefulSet"]) == []
    assert "namespace" not in objs["PersistentVolume"]["metadata"]  # cluster-scoped
    scaled = chart.scaled_object.to_dict()
    assert validate_custom(scaled) == []
    assert validate_rules(scaled, crd_schema(scaled["apiVersion"], scaled["kind"])) == []


def test_stateful_set_gives_stable_names_behind_a_headless_service(rendered) -> None:
    chart, objs = rendered
    sts, svc = objs["StatefulSet"], objs["Service"]
    assert sts["metadata"]["name"] == "pool-small" and sts["spec"]["podManagementPolicy"] == "Parallel"
    assert sts["spec"]["serviceName"] == svc["metadata"]["name"] == "pool-small"
    assert svc["spec"]["clusterIP"] == "None" and svc["spec"]["publishNotReadyAddresses"] is True
    assert svc["spec"]["selector"] == sts["spec"]["selector"]["matchLabels"] == chart.selector
    assert "replicas" not in sts["spec"]  # KEDA owns it
    # <pod>.<governing service>.<ns>.svc.cluster.local: the StatefulSet's stable network identity.
    assert (
        chart.replica_urls
        == pool_replica_urls("small", NS, 4)
        == [f"http://pool-small-{i}.pool-small.{NS}.svc.cluster.local:{ENGINE_PORT}" for i in range(4)]
    )


def test_model_volume_is_a_read_only_mountpoint_static_volume(rendered) -> None:
    _, objs = rendered
    pv, pvc = objs["PersistentVolume"], objs["PersistentVolumeClaim"]
    # Static provisioning per mountpoint-s3-csi-driver docs/CONFIGURATION.md: storageClassName "" on both, the PV
    # reserved for its claim by claimRef (with the namespace), the claim naming the PV, bucketName required.
    assert pv["spec"]["csi"]["driver"] == CSI_DRIVER == "s3.csi.aws.com"
    assert pv["spec"]["storageClassName"] == pvc["spec"]["storageClassName"] == ""
    assert pv["spec"]["claimRef"] == {"namespace": NS, "name": pvc["metadata"]["name"]}
    assert pvc["spec"]["volumeName"] == pv["metadata"]["name"] == pv["spec"]["csi"]["volumeHandle"]
    assert pv["spec"]["csi"]["volumeAttributes"]["bucketName"] == "cpu-inference-models-123456789012"
    assert {"region us-east-1", "prefix farm/"} <= set(pv["spec"]["mountOptions"])
    # ReadOnlyMany: the driver adds --read-only (pkg/driver/node/node.go, MULTI_NODE_READER_ONLY).
    assert pv["spec"]["accessModes"] == pvc["spec"]["accessModes"] == ["ReadOnlyMany"]
    spec = pod(objs)
    (models,) = [v for v in spec["volumes"] if v["name"] == "models"]
    assert models["persistentVolumeClaim"] == {"claimName": pvc["metadata"]["name"], "readOnly": True}
    (mount,) = [m for m in spec["containers"][0]["volumeMounts"] if m["name"] == "models"]
    assert mount == {"mountPath": "/models", "name": "models", "readOnly": True}
    # v2 maps the pod's fsGroup to --gid/--allow-other (node.go): the non-root engine reads the files.
    assert spec["securityContext"]["fsGroup"] == spec["securityContext"]["runAsUser"] == 65532


def test_a_second_pool_or_namespace_gets_its_own_volume_handle() -> None:
    handles = {
        render(p)[1]["PersistentVolume"]["spec"]["csi"]["volumeHandle"]
        for p in (props(), props(name="medium"), props(policy=replace(POLICY, namespace="farm-b")))
    }
    assert len(handles) == 3  # docs: "Kubernetes only processes a volume once per volumeHandle"


def test_preset_holds_every_per_model_setting_and_the_command_none(rendered) -> None:
    chart, objs = rendered
    assert objs["ConfigMap"]["data"][PRESET_FILE] == chart.preset
    c = pod(objs)["containers"][0]
    assert c["command"] == ["python3", "/opt/llama/entrypoint.py", "pool"] and "args" not in c
    env = {e["name"]: e["value"] for e in c["env"]}
    assert env["LLAMA_MODELS_PRESET"] == "/etc/llama/preset.ini" and env["LLAMA_MODELS_MAX"] == "2"
    assert not {"LLAMA_THREADS", "LLAMA_CTX_SIZE", "LLAMA_PARALLEL", "MODEL_PATH"} & set(env)
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    assert mounts["/etc/llama"] == "preset"
    # The plan's 8 GiB + the node's Mountpoint pod allowance (pool_sizing.MOUNTPOINT_MEMORY_BYTES, 2 GiB).
    assert (
        c["resources"]["requests"]["cpu"] == "4000m"
        and c["resources"]["requests"]["memory"] == c["resources"]["limits"]["memory"] == "10240Mi"
    )


def test_render_preset_puts_common_values_in_star_and_overrides_in_sections() -> None:
    models = (
        PoolModel("a", "a/1/a.gguf", 2048, 1, 2),
        PoolModel("b", "b/1/b.gguf", 512, 4, 2),
        PoolModel("c", "c/1/c.gguf", 2048, 1, 2),
    )
    text = render_preset(models, defaults={"load-mode": "none"})
    assert text == (
        "version = 1\n[*]\nload-mode = none\nctx-size = 2048\nparallel = 1\nthreads = 2\n"
        "[a]\nmodel = /models/a/1/a.gguf\n[b]\nmodel = /models/b/1/b.gguf\nctx-size = 512\nparallel = 4\n"
        "[c]\nmodel = /models/c/1/c.gguf\n"
    )


def test_network_policy_admits_the_gateway_and_the_scrapers_only_and_allows_no_egress(rendered) -> None:
    _, objs = rendered
    spec = objs["NetworkPolicy"]["spec"]
    assert spec["policyTypes"] == ["Ingress", "Egress"] and spec["egress"] == []
    clients, scrapers = spec["ingress"]
    # The gateway: the API and the supervisor's /status (it asks why a replica does not know a model).
    assert clients["from"] == [{"podSelector": {"matchLabels": {"app.kubernetes.io/component": "router"}}}]
    assert clients["ports"] == [{"port": ENGINE_PORT, "protocol": "TCP"}, {"port": STATUS_PORT, "protocol": "TCP"}]
    # The scrapers: only the status port, which serves the supervisor's /metrics (cold loads per model).
    assert scrapers["ports"] == [{"port": STATUS_PORT, "protocol": "TCP"}]
    assert all(peer.keys() <= {"ipBlock", "namespaceSelector"} for peer in scrapers["from"])


def test_the_pods_are_scraped_on_the_status_port_and_expose_it(rendered) -> None:
    _, objs = rendered
    template = objs["StatefulSet"]["spec"]["template"]
    assert template["metadata"]["annotations"] == {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": str(STATUS_PORT),
        "prometheus.io/path": "/metrics",
    }
    (container,) = template["spec"]["containers"]
    assert {"containerPort": STATUS_PORT, "name": "status"} in container["ports"]
    assert {"name": "status", "port": STATUS_PORT, "targetPort": STATUS_PORT} in objs["Service"]["spec"]["ports"]


def test_a_missing_model_is_not_remembered_forever_by_mountpoint(rendered) -> None:
    # A model lands after the pool starts: Mountpoint must look again (its negative TTL defaults to metadata-ttl,
    # which is indefinite here — mountpoint-s3 v1.15.0 CHANGELOG, #1246).
    _, objs = rendered
    options = objs["PersistentVolume"]["spec"]["mountOptions"]
    assert "metadata-ttl indefinite" in options
    assert f"negative-metadata-ttl {NEGATIVE_METADATA_TTL_SECONDS}" in options


def test_keda_scales_the_stateful_set_on_the_gateways_pool_gauge(rendered) -> None:
    chart, _ = rendered
    so = chart.scaled_object.to_dict()
    assert so["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "pool-small"}
    (trigger,) = so["spec"]["triggers"]
    assert (
        trigger["metadata"]["query"] == 'sum(gateway_pool_in_flight{namespace="model-farm",pool="small"}) or vector(0)'
    )
    mods = so["spec"]["advanced"]["scalingModifiers"]
    assert mods == {"formula": "in_flight", "target": str(chart.slots_per_replica), "metricType": "AverageValue"}
    assert (so["spec"]["minReplicaCount"], so["spec"]["maxReplicaCount"]) == (1, 4)


def test_policy_placement_reaches_the_pods() -> None:
    toleration = {"key": "cpu-inference/memory", "operator": "Equal", "value": "true", "effect": "NoSchedule"}
    _, objs = render(
        props(
            policy=replace(
                POLICY, tolerations=(toleration,), preferred_pools=("memory-optimized",), cpu_limit="request"
            )
        )
    )
    spec = pod(objs)
    assert spec["tolerations"] == [toleration]
    preferred = spec["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert preferred[0]["preference"]["matchExpressions"][0]["values"] == ["memory-optimized"]
    assert spec["containers"][0]["resources"]["limits"]["cpu"] == "4000m"
    assert {c["topologyKey"] for c in spec["topologySpreadConstraints"]} == {
        "topology.kubernetes.io/zone",
        "kubernetes.io/hostname",
    }


def _gateway_config(charts: list[ModelPoolChart]) -> dict[str, Any]:
    pools = [
        gateway_pool(c.props.name, c.props.replication, [m.name for m in c.props.models], c.replica_urls)
        for c in charts
    ]
    router = RouterChart(
        cdk8s.App(),
        "gw",
        props=RouterChartProps(
            image=ROUTER_IMAGE,
            mode="gateway",
            name="gateway",
            namespace=NS,
            pattern="model-farm",
            config={"gateway": {"pools": pools, "cold_load_timeout_s": 60, "health_interval_s": 5, "retry_after_s": 5}},
        ),
    )
    return {o["kind"]: o for o in router.to_json()}["ConfigMap"]


def test_gateway_config_with_pools_is_what_the_gateway_loads(rendered, tmp_path: Path) -> None:
    chart, _ = rendered
    cm = _gateway_config([chart])
    path = tmp_path / CONFIG_FILE
    path.write_text(cm["data"][CONFIG_FILE])
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROUTER_")} | {
        "ROUTER_CONFIG": str(path),
        "PYTHONPATH": str(ROUTER_DIR),
    }
    out = subprocess.run(
        [sys.executable, "-m", "slm_router", "--print-config"], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    gw = json.loads(out.stdout)["gateway"]
    (pool,) = gw["pools"]
    assert pool["name"] == "small" and pool["models"] == ["m-0000", "m-0001", "m-0002"] and pool["replication"] == 2
    assert pool["replicas"] == chart.replica_urls
    assert (gw["cold_load_timeout_s"], gw["health_interval_s"]) == (60, 5)


def test_a_thousand_models_cost_objects_per_pool_and_bytes_per_model() -> None:
    small_chart, small = render(props(3))
    big_chart, big = render(props(1000))
    assert sorted(small) == sorted(big)  # the same 8 objects (and one ScaledObject) for 3 or 1,000 models
    assert small_chart.scaled_object is not None and big_chart.scaled_object is not None

    def size(o: dict[str, Any]) -> int:
        return len(json.dumps(o, separators=(",", ":")))

    per_model_preset = (size(big["ConfigMap"]) - size(small["ConfigMap"])) / 997
    per_model_gateway = (size(_gateway_config([big_chart])) - size(_gateway_config([small_chart]))) / 997
    assert per_model_preset < 120, per_model_preset
    assert per_model_gateway < 40, per_model_gateway
    # Every other object is byte-identical; the StatefulSet differs only in its startup budget (model count class).
    for kind in set(big) - {"ConfigMap", "StatefulSet"}:
        assert big[kind] == small[kind], kind
    assert size(big["StatefulSet"]) == size(small["StatefulSet"])
    # The pool's objects fit one bounded manifest (eks/manifests.py), keyed as InferenceWorkloads keys them.
    buckets = bucketize(list(big.values()), DEFAULT_MAX_BYTES, key=lambda o: "pool/small")
    assert len(buckets) == 1 and sum(size(o) for o in buckets[0].objects) < DEFAULT_MAX_BYTES
    assert size(_gateway_config([big_chart])) < DEFAULT_MAX_BYTES
    assert {object_key(o) for o in big.values()} == {object_key(o) for o in small.values()}


def _template(p: ModelPoolChartProps) -> dict[str, Any]:
    return render(p)[1]["StatefulSet"]["spec"]["template"]


def test_a_model_list_change_does_not_roll_the_pool_but_what_the_pod_runs_with_does() -> None:
    """A StatefulSet rolls every replica when its pod template changes (RollingUpdate): the preset must reach
    running replicas through the ConfigMap volume alone (entrypoint.py pool applies it in place)."""
    a_b = props(models=(PoolModel("a", "a/1/a.gguf", 512), PoolModel("b", "b/1/b.gguf", 512)))
    a_c = props(models=(PoolModel("a", "a/1/a.gguf", 512), PoolModel("c", "c/1/c.gguf", 1024)))
    assert render(a_b)[0].preset != render(a_c)[0].preset
    assert _template(a_b) == _template(a_c)  # B out, C in, C with another ctx-size: no roll
    assert _template(props(3)) == _template(props(4))  # one model more within the size class: no roll
    assert _template(props(3)) != _template(props(3, models_max=3))  # LLAMA_MODELS_MAX is the router's argv
    assert _template(props(3)) != _template(props(3, memory_bytes=16 << 30))  # resources
    assert _template(props(3)) != _template(props(3, image=IMAGE.replace("b" * 64, "d" * 64)))
    assert _template(props(3)) != _template(props(600))  # a new size class: the startup budget grows


def test_the_preset_is_mounted_as_a_directory_so_the_kubelet_updates_it(rendered) -> None:
    """kubernetes.io/docs/concepts/configuration/configmap/#mounted-configmaps-are-updated-automatically: "A
    container using a ConfigMap as a subPath volume mount will not receive ConfigMap updates"."""
    _, objs = rendered
    (mount,) = [m for m in pod(objs)["containers"][0]["volumeMounts"] if m["name"] == "preset"]
    assert "subPath" not in mount and "subPathExpr" not in mount
    assert f"{mount['mountPath']}/{PRESET_FILE}" == "/etc/llama/preset.ini"
    (volume,) = [v for v in pod(objs)["volumes"] if v["name"] == "preset"]
    assert volume["configMap"]["name"] == objs["ConfigMap"]["metadata"]["name"] == "pool-small"  # a stable name
    env = {e["name"]: e.get("value") for e in pod(objs)["containers"][0]["env"]}
    assert env["LLAMA_MODELS_PRESET"] == f"{mount['mountPath']}/{PRESET_FILE}"


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        (dict(name="Small"), "DNS label"),
        (dict(models=()), "at least one PoolModel"),
        (dict(models=(PoolModel("a", "a/1/a.gguf", 512), PoolModel("a", "a/2/a.gguf", 512))), "appears twice"),
        (dict(models=(PoolModel("a:q4", "a/1/a.gguf", 512),)), "letters, digits"),
        (dict(models=(PoolModel("a", "/abs/a.gguf", 512),)), "relative key"),
        (dict(models=(PoolModel("a", "a/1/a.bin", 512),)), "ending in .gguf"),
        (dict(models=(PoolModel("a", "a/1/a.gguf", 0),)), "ctx_size must be ≥ 1"),
        (dict(models_max=0), "models_max"),
        (dict(replicas_min=0), "does not scale from zero"),
        (dict(cpu=0), "whole number"),
        (dict(memory_bytes=1 << 20), "memory_bytes"),
        (dict(bucket_name="Bad_Bucket"), "bucket name"),
        (dict(region="mars"), "AWS Region"),
        (dict(prefix="/farm"), "key prefix"),
        (dict(extra_env={"LLAMA_MODELS_MAX": "9"}), "extra_env must not set"),
    ],
)
def test_mistakes_fail_with_the_key(kw: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        render(props(**kw))


# --- what deploys is what is tested ------------------------------------------------------------------------------


def _chat(base: str, model: str) -> tuple[int, dict]:
    body = json.dumps(
        {"model": model, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2, "ignore_eos": True}
    ).encode()
    req = urllib.request.Request(base + "/v1/chat/completions", data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=180) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


@pytest.mark.engine
def test_rendered_pool_runs_in_router_mode_and_every_model_answers(
    llama_server_bin: Path, smollm2_gguf: Path, tmp_path: Path
) -> None:
    """The rendered ConfigMap's preset, the container's command and env, run by the real entrypoint and router.
    Only the /models root moves to a temp dir laid out like the mount (farm/<name>/<idhash>/<file>), the port to a
    free one, and threads are scaled down to 1 (a chart input, not a rewrite)."""
    chart, objs = render(props(3, models=pool_models(3, threads=1), models_max=2))
    mount = tmp_path / "mnt"
    for m in chart.props.models:
        dest = mount / m.path
        dest.parent.mkdir(parents=True)
        shutil.copyfile(smollm2_gguf, dest)  # byte copies: distinct files, as on the bucket
    preset = objs["ConfigMap"]["data"][PRESET_FILE]
    assert preset.count("model = /models/") == 3
    preset_path = tmp_path / PRESET_FILE
    preset_path.write_text(preset.replace("model = /models/", f"model = {mount}/"))
    c = pod(objs)["containers"][0]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LLAMA_", "MODEL_", "SAGEMAKER_"))}
    env |= {e["name"]: e["value"] for e in c["env"]}
    env |= {
        "LLAMA_MODELS_PRESET": str(preset_path),
        "LLAMA_HOST": "127.0.0.1",
        "LLAMA_PORT": str(free_port()),
        "LLAMA_SERVER_BIN": str(llama_server_bin),
    }
    assert c["command"][1:] == ["/opt/llama/entrypoint.py", "pool"]
    command = [sys.executable, str(ENGINE_DIR / "entrypoint.py"), *c["command"][2:]]
    base = f"http://127.0.0.1:{env['LLAMA_PORT']}"
    with open(tmp_path / "pool.log", "wb") as log:
        proc = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path)
    try:
        wait_healthy(base, proc, timeout=60)
        with urllib.request.urlopen(base + "/v1/models", timeout=30) as r:
            listing = json.loads(r.read())
        args = {m["id"]: m["status"]["args"] for m in listing["data"]}
        assert set(args) == {"m-0000", "m-0001", "m-0002"}
        for a in args.values():  # the preset's [*] reached every child: no mmap on a FUSE mount, sized context
            assert a[a.index("--load-mode") + 1] == "none" and a[a.index("--ctx-size") + 1] == "2048"
            assert a[a.index("--threads") + 1] == "1"
        for name in args:
            status, body = _chat(base, name)
            assert status == 200, (name, body, (tmp_path / "pool.log").read_text()[-2000:])
            assert body["model"] == name and body["usage"]["completion_tokens"] == 2
    finally:
        stop_process(proc, timeout=30)


def test_props_from_the_pool_plan_carry_its_numbers_into_preset_and_pod() -> None:
    from cpu_inference import sizing
    from cpu_inference.sizing.pools import pool_plan

    specs = {
        "tiny": sizing.ModelSpec(0.135, quantization="Q4_1", task="chat"),
        "small": sizing.ModelSpec(0.27, task="chat"),
    }
    plan = pool_plan(specs, cpu=4, memory_bytes=4 << 30)
    p = ModelPoolChartProps.from_plan(
        name="small",
        image=IMAGE,
        plan=plan,
        paths={n: f"{n}/0123456789abcdef/{n}.gguf" for n in specs},
        bucket_name="models-bucket",
        region="us-east-1",
        policy=POLICY,
    )
    chart, objs = render(p)
    assert chart.props.models_max == plan.models_max and chart.props.cpu == 4
    for m in chart.props.models:
        assert (m.ctx_size, m.parallel, m.threads) == (
            plan.per_model[m.name].ctx_size,
            plan.per_model[m.name].parallel,
            plan.threads_per_model,
        )
    limits = pod(objs)["containers"][0]["resources"]["limits"]["memory"]
    assert int(limits.removesuffix("Mi")) * 1024 * 1024 >= plan.memory_request_bytes
    assert f"threads = {plan.threads_per_model}" in chart.preset
    with pytest.raises(ValueError, match="no path for models"):
        ModelPoolChartProps.from_plan(
            name="small", image=IMAGE, plan=plan, paths={}, bucket_name="models-bucket", region="us-east-1"
        )
