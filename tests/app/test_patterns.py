"""The patterns as config.yaml wires them (the session's synthesized apps): the router talks to the right SLM
and escalation target with a config the router itself accepts, IAM is scoped to exactly that target, the farm
packs onto the memory pool behind one gateway, and SageMaker gets one endpoint per model and no cluster."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

from cpu_inference.testing.crd_validation import TOKEN  # what flatten puts where an intrinsic was
from tests.support import k8s

ROOT = Path(__file__).resolve().parents[2]


def _router_config_module():
    path = ROOT / "containers" / "router" / "slm_router" / "config.py"
    spec = importlib.util.spec_from_file_location("router_config_under_test", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _objects(synthesized, config_id: str) -> list[dict]:
    return k8s.objects(synthesized[config_id].template)


def _find(objs: list[dict], kind: str, name: str) -> dict:
    hits = [o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(hits) == 1, f"{kind}/{name}: {len(hits)} found"
    return hits[0]


def _router_config(objs: list[dict], name: str) -> dict:
    return json.loads(_find(objs, "ConfigMap", name)["data"]["config.json"])


def _policies(template: dict) -> list[dict]:
    return [r["Properties"] for r in template["Resources"].values() if r["Type"] == "AWS::IAM::Policy"]


def test_self_hosted_escalation_routes_slm_then_llm(synthesized) -> None:
    s = synthesized["examples/slm-prefilter-eks.yaml"]
    cfg = _router_config(_objects(synthesized, "examples/slm-prefilter-eks.yaml"), "router")
    assert cfg["slm_url"] == "http://smollm2-1-7b.slm-prefilter.svc.cluster.local:8080"
    assert cfg["escalation"] == {
        "kind": "openai",
        "url": "http://llama-3-1-8b.slm-prefilter.svc.cluster.local:8080/v1",
        "model_id": "llama-3-1-8b",
    }
    assert cfg["labels"] == s.config.router.labels and cfg["slm_labels"] == s.config.router.slm_labels
    assert cfg["confidence_threshold"] == s.config.router.confidence_threshold
    assert cfg["few_shot"] == s.config.router.few_shot
    # The router's own loader accepts what the construct rendered (unknown keys or bad values exit 2 there).
    loaded = _router_config_module().from_dict(cfg)
    assert list(loaded.labels) == s.config.router.labels


def test_bedrock_escalation_is_one_model_arn_for_the_router_only(synthesized) -> None:
    s = synthesized["config.yaml"]
    cfg = _router_config(_objects(synthesized, "config.yaml"), "router")
    assert cfg["escalation"]["kind"] == "bedrock" and cfg["escalation"]["model_id"] == s.config.escalation.model_id
    # The stack's region reaches the router at deploy time (Pod Identity gives credentials, not a region):
    # a CloudFormation reference in the manifest, which the extraction renders as its placeholder.
    assert cfg["escalation"]["region"] == TOKEN
    _router_config_module().from_dict(cfg)
    bedrock = [
        st
        for p in _policies(s.template)
        for st in p["PolicyDocument"]["Statement"]
        if any(
            str(a).startswith("bedrock:") for a in ([st["Action"]] if isinstance(st["Action"], str) else st["Action"])
        )
    ]
    assert len(bedrock) == 1, bedrock
    assert sorted(bedrock[0]["Action"]) == ["bedrock:InvokeModel", "bedrock:InvokeModelWithResponseStream"]
    resource = json.dumps(bedrock[0]["Resource"])
    assert f"foundation-model/{s.config.escalation.model_id}" in resource and "*" not in resource


def test_each_model_gets_its_own_read_only_prefix(synthesized) -> None:
    s = synthesized["examples/slm-prefilter-eks.yaml"]
    text = json.dumps(s.template)
    # Copies are pinned to the resolved Hub commit (models/<name>/<commit>/<file>), so a role reads every commit
    # of its own model (a rolling update still reads the old one) and nothing of another model.
    for m in s.config.models:
        assert f"models/{m.name}/*" in text
    assert '"models/*"' not in text and 'models/*"' not in text
    for obj in _objects(synthesized, "examples/slm-prefilter-eks.yaml"):
        if obj["kind"] == "Deployment" and obj["metadata"]["name"] != "router":
            init = obj["spec"]["template"]["spec"]["initContainers"]
            assert any(f"models/{obj['metadata']['name']}/" in json.dumps(c) for c in init), obj["metadata"]["name"]


def test_model_farm_packs_on_the_memory_pool_behind_one_gateway(synthesized) -> None:
    s = synthesized["examples/model-farm-eks.yaml"]
    objs = _objects(synthesized, "examples/model-farm-eks.yaml")
    dedicated = {m.name for m in s.config.models if s.config.serving_of(m) == "dedicated"}
    pooled = {m.name: s.config.pool_of(m).name for m in s.config.models if s.config.serving_of(m) == "pool"}
    assert dedicated and pooled, "the example shows both: hot dedicated models and pools"
    gateway = _router_config(objs, "gateway")
    assert gateway["mode"] == "gateway"
    assert {m["name"] for m in gateway["gateway"]["models"]} == dedicated
    for m in gateway["gateway"]["models"]:
        assert m["url"] == f"http://{m['name']}.model-farm.svc.cluster.local:8080"
    # Every pooled model is routed to its pool, whose replicas are the StatefulSet's stable pod names.
    routed = {name: p["name"] for p in gateway["gateway"]["pools"] for name in p["models"]}
    assert routed == pooled
    for p in gateway["gateway"]["pools"]:
        _find(objs, "StatefulSet", f"pool-{p['name']}")
        settings = next(x for x in s.config.farm.pools if x.name == p["name"])
        assert len(p["replicas"]) == settings.replicas.max and p["replication"] == settings.replication
        assert p["replicas"][0] == f"http://pool-{p['name']}-0.pool-{p['name']}.model-farm.svc.cluster.local:8080"
        # The preset the pool runs lists exactly its models.
        preset = next(o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"] == f"pool-{p['name']}")
        sections = {
            line[1:-1]
            for text in preset["data"].values()
            for line in text.splitlines()
            if line.startswith("[") and line != "[*]"
        }
        assert sections == set(p["models"])
    _router_config_module().from_dict(gateway)
    node_pools = {o["metadata"]["name"]: o for o in objs if o["kind"] == "NodePool"}
    assert "memory-optimized" in node_pools
    taint = node_pools["memory-optimized"]["spec"]["template"]["spec"]["taints"][0]
    workloads = [_find(objs, "Deployment", n) for n in dedicated] + [
        _find(objs, "StatefulSet", f"pool-{p}") for p in set(pooled.values())
    ]
    for w in workloads:
        pod = w["spec"]["template"]["spec"]
        assert any(
            t.get("key") == taint["key"] and t.get("effect") == taint["effect"] for t in pod.get("tolerations", [])
        ), w["metadata"]["name"]
    # No per-model Deployment for a pooled model: Kubernetes objects are per pool.
    assert not [o for o in objs if o["kind"] == "Deployment" and o["metadata"]["name"] in pooled]
    cold = [m.name for m in s.config.models if m.replicas.min == 0 and m.name in dedicated]
    assert cold, "the example should show scale-to-zero"
    for name in cold:
        assert _find(objs, "ScaledObject", name)["spec"]["minReplicaCount"] == 0


def test_sagemaker_farm_serves_each_pool_from_one_multi_model_endpoint(synthesized) -> None:
    s = synthesized["examples/model-farm-sagemaker.yaml"]
    res = list(s.template["Resources"].values())
    multi = [
        r["Properties"]
        for r in res
        if r["Type"] == "AWS::SageMaker::Model" and r["Properties"]["PrimaryContainer"].get("Mode") == "MultiModel"
    ]
    used_pools = {s.config.pool_of(m).name for m in s.config.models if s.config.serving_of(m) == "pool"}
    assert len(multi) == len(used_pools) >= 1
    for m in multi:
        assert json.dumps(m["PrimaryContainer"]["ModelDataUrl"]).endswith('/farm/"]]}'), m["PrimaryContainer"][
            "ModelDataUrl"
        ]
    dedicated = [m for m in s.config.models if s.config.serving_of(m) == "dedicated"]
    single = [
        r
        for r in res
        if r["Type"] == "AWS::SageMaker::Model" and r["Properties"]["PrimaryContainer"].get("Mode") != "MultiModel"
    ]
    assert len(single) == len(dedicated)
    # One copy for every model, pooled or dedicated (a dedicated GGUF model too), not one per model; the deploy
    # awaits the dedicated ones with one waiter.
    assert len([r for r in res if r["Type"] == "Custom::ModelCatalogCopy"]) == 1
    assert not [r for r in res if r["Type"] == "Custom::ModelArtifact"]
    assert len([r for r in res if r["Type"] == "Custom::DedicatedModelsReady"]) == (1 if dedicated else 0)
    assert not [r for r in res if r["Type"].startswith("AWS::EKS::")]


def test_sagemaker_target_has_one_endpoint_per_model_and_no_cluster(synthesized) -> None:
    s = synthesized["examples/slm-prefilter-sagemaker.yaml"]
    res = list(s.template["Resources"].values())
    models = [r["Properties"] for r in res if r["Type"] == "AWS::SageMaker::Model"]
    configs = [r["Properties"] for r in res if r["Type"] == "AWS::SageMaker::EndpointConfig"]
    engine = [m for m in models if "LLAMA_THREADS" in json.dumps(m)]
    assert len(engine) == len(s.config.models)
    wanted = sorted((m.instance_type or s.config.sagemaker.instance_type) for m in s.config.models)
    engine_types = sorted(c["ProductionVariants"][0]["InstanceType"] for c in configs)
    for t in wanted:
        assert t in engine_types
    assert not [r for r in res if r["Type"].startswith("AWS::EKS::")]


def test_each_multi_model_endpoints_latency_alarm_budgets_its_members_longest_answer(synthesized) -> None:
    """An embedding/classification pool is alarmed near the SLO, a generating pool gets its answer's decode time on
    top (the same budget a single model's endpoint gets: SLO + output tokens x 100 ms), capped below the time at
    which the endpoint cuts a non-streamed answer (review F4/F5: 60 s - the 30 s cold load - 10 s, x 0.9)."""
    from cpu_inference.monitoring.latency import ALARM_OUTPUT_TOKENS, LATENCY_ALARM_BUDGET_FRACTION
    from cpu_inference.sagemaker.engine_settings import ANSWER_MARGIN_SECONDS, INVOKE_TIMEOUT_SECONDS

    s = synthesized["examples/model-farm-sagemaker.yaml"]
    slo_ms = s.config.slo.p95_latency_ms
    cut_ms = (
        INVOKE_TIMEOUT_SECONDS - INVOKE_TIMEOUT_SECONDS // 2 - ANSWER_MARGIN_SECONDS
    ) * 1000  # the default cold_load_alarm
    want = set()
    for pool in s.config.farm.pools:
        members = s.config.pool_models(pool.name)
        if members:
            tokens = max(ALARM_OUTPUT_TOKENS.get(m.task, ALARM_OUTPUT_TOKENS["chat"]) for m in members)
            want.add(min(slo_ms + tokens * 100, LATENCY_ALARM_BUDGET_FRACTION * cut_ms) * 1000)  # ModelLatency is in µs
    assert len(want) == 2, want  # the example's small pool classifies/embeds, its medium pool generates
    thresholds = {
        r["Properties"]["Threshold"]
        for r in s.template["Resources"].values()
        if r["Type"] == "AWS::CloudWatch::Alarm" and r["Properties"].get("MetricName") == "ModelLatency"
    }
    assert want <= thresholds, (want, thresholds)


def _container(objs: list[dict], name: str) -> dict:
    spec = _find(objs, "Deployment", name)["spec"]["template"]["spec"]
    return next(c for c in spec["containers"] if c["name"] != "metrics")


def test_a_vllm_model_on_eks_runs_the_vllm_image_sized_by_sizing_and_scaled_on_vllms_gauges(synthesized) -> None:
    from cpu_inference.config import size_model
    from cpu_inference.engines import queue_metrics

    s = synthesized["examples/vllm-eks.yaml"]
    objs = _objects(synthesized, "examples/vllm-eks.yaml")
    (vllm,) = (m for m in s.config.models if m.engine == "vllm")
    engine = _container(objs, vllm.name)
    env = {e["name"]: e.get("value") for e in engine["env"]}
    sized = size_model(s.config, vllm)
    assert sized is not None
    assert {k: env[k] for k in sized.engine_env()} == sized.engine_env()  # exactly the sizing's vLLM environment
    assert env["MODEL_PATH"] == f"/models/{vllm.name}" and env["SERVE_MODEL_NAME"] == vllm.name
    assert engine["command"] == ["python3", "/opt/vllm/app/entrypoint.py"]  # the vLLM image's ENTRYPOINT
    assert any(lid.startswith("ModelFarmServingVllmImage") for lid in s.template["Resources"])  # built only for vLLM
    triggers = _find(objs, "ScaledObject", vllm.name)["spec"]["triggers"]
    assert [t["metadata"]["query"].split("{")[0] for t in triggers] == [f"sum({m}" for m in queue_metrics("vllm")]
    # The gateway reaches it under the name vLLM serves (vLLM answers 404 to any other).
    gateway = _router_config(objs, "gateway")["gateway"]["models"]
    assert {"name": vllm.name, "url": f"http://{vllm.name}.model-farm.svc.cluster.local:8080"} in gateway


def test_a_vllm_llm_on_sagemaker_gets_its_snapshot_and_the_router_names_it(synthesized) -> None:
    s = synthesized["examples/vllm-sagemaker.yaml"]
    res = s.template["Resources"]
    models = {
        r["Properties"]["PrimaryContainer"]["Environment"].get("SERVE_MODEL_NAME"): r["Properties"]["PrimaryContainer"]
        for r in res.values()
        if r["Type"] == "AWS::SageMaker::Model"
    }
    qwen = models["qwen3-4b"]
    assert qwen["ModelDataSource"]["S3DataSource"]["S3DataType"] == "S3Prefix"
    assert qwen["ModelDataSource"]["S3DataSource"]["CompressionType"] == "None"
    assert "VllmImage" in json.dumps(qwen["Image"]) and qwen["Environment"]["VLLM_CPU_OMP_THREADS_BIND"] == "auto"
    router_env = next(
        r["Properties"]["PrimaryContainer"]["Environment"]
        for r in res.values()
        if r["Type"] == "AWS::SageMaker::Model" and "ROUTER_CONFIG_JSON" in json.dumps(r)
    )
    rendered = "".join(p if isinstance(p, str) else "REGION" for p in router_env["ROUTER_CONFIG_JSON"]["Fn::Join"][1])
    escalation = json.loads(rendered)["escalation"]
    assert escalation["kind"] == "sagemaker" and escalation["model_id"] == "qwen3-4b"
