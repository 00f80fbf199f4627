"""farm.pools and serving: which models share a multi-model pool, and the rules that keep a pool deployable
(one precise line each: key path — fix). SageMaker facts come from botocore's service model and the AWS docs."""

from __future__ import annotations

import math
from pathlib import Path

import botocore.session
import pytest
import yaml

from cpu_inference import sizing
from cpu_inference.config import ConfigError, parse, warnings_for
from cpu_inference.config.rules import plan_pool
from cpu_inference.sizing import pools as pool_sizing

ROOT = Path(__file__).resolve().parents[2]
SM = botocore.session.get_session().get_service_model("sagemaker")
HOSTING_TYPES = set(SM.shape_for("ProductionVariantInstanceType").enum)


def _model(name: str, **kw) -> dict:
    return {
        "name": name,
        "source": {"hf_repo": "acme/farm-GGUF", "file": f"{name}.gguf"},
        "parameters_billions": 0.135,
        "task": "embedding",
        **kw,
    }


def _doc(target: str = "eks", pools: list | None = None, models: list | None = None, **over) -> dict:
    doc: dict = {
        "target": target,
        "pattern": "model-farm",
        "models": models or [_model("a"), _model("b"), _model("hot", serving="dedicated")],
    }
    if pools is not None:
        doc["farm"] = {"pools": pools}
    doc.update(over)
    return doc


def _errors(doc: dict) -> list[str]:
    with pytest.raises(ConfigError) as exc:
        parse(yaml.safe_dump(doc, sort_keys=False))
    return str(exc.value).splitlines()


def _warnings(doc: dict) -> list[str]:
    return [w.render("config.yaml") for w in warnings_for(parse(yaml.safe_dump(doc, sort_keys=False)))]


def test_farm_models_are_pooled_by_default_in_the_first_pool() -> None:
    config = parse(
        yaml.safe_dump(
            _doc(
                pools=[{"name": "small"}, {"name": "big", "memory_gib": 32}],
                models=[_model("a"), _model("b", pool="big"), _model("hot", serving="dedicated")],
            )
        )
    )
    assert [config.serving_of(m) for m in config.models] == ["pool", "pool", "dedicated"]
    assert [p.name if (p := config.pool_of(m)) else None for m in config.models] == ["small", "big", None]
    assert [m.name for m in config.pool_models("small")] == ["a"]
    default = parse(yaml.safe_dump(_doc()))
    assert (
        [p.name for p in default.farm.pools] == ["default"]
        and default.farm.gateway.min == 2
        and default.farm.gateway.max == 6
    )
    pool = default.farm.pools[0]
    assert (
        pool.cpu,
        pool.memory_gib,
        pool.replicas.min,
        pool.replicas.max,
        pool.replication,
        pool.models_max,
        pool.instance_type,
    ) == (4, 16, 1, 4, 2, None, None)


def test_slm_prefilter_models_are_dedicated_and_may_not_be_pooled() -> None:
    base = yaml.safe_load((ROOT / "config.yaml").read_text())
    config = parse(yaml.safe_dump(base))
    assert {config.serving_of(m) for m in config.models} == {"dedicated"}
    base["models"][0]["serving"] = "pool"
    assert _errors(base) == [
        "config.yaml: models[0].serving: pool serving is only for farm models of pattern model-farm (pattern is slm-prefilter) — remove serving (the model gets its own replicas) or use pattern: model-farm"
    ]


def test_pool_names_are_unique_and_a_models_pool_must_exist() -> None:
    doc = _doc(pools=[{"name": "small"}, {"name": "small"}], models=[_model("a", pool="smal"), _model("b")])
    assert _errors(doc) == [
        "config.yaml: farm.pools[1].name: pool name 'small' appears twice — pool names must be unique",
        "config.yaml: models[0].pool: 'smal' is not a pool in farm.pools — did you mean 'small'?",
    ]


def test_a_dedicated_model_names_no_pool() -> None:
    doc = _doc(models=[_model("a"), _model("hot", serving="dedicated", pool="default")])
    assert _errors(doc) == [
        "config.yaml: models[1].pool: hot is served dedicated, so pool 'default' is not used — remove pool, or set serving: pool (model-farm only)"
    ]


def test_replication_is_at_most_the_pools_replicas() -> None:
    doc = _doc(pools=[{"name": "small", "replicas": {"min": 1, "max": 2}, "replication": 3}])
    assert _errors(doc) == [
        "config.yaml: farm.pools[0].replication: 3 is more than the pool's replicas.max (2): each model is routed to `replication` distinct replicas — lower replication or raise replicas.max"
    ]


def test_a_pooled_model_must_fit_the_pools_memory_on_eks() -> None:
    doc = _doc(
        pools=[{"name": "small", "memory_gib": 2}, {"name": "big", "memory_gib": 32}],
        models=[_model("a"), _model("llm", parameters_billions=8, task="chat")],
    )
    need = pool_sizing.model_slots(sizing.ModelSpec(parameters_billions=8, task="chat")).memory_bytes
    gib = -(-(need + pool_sizing.ROUTER_RSS_BYTES) // sizing.GIB)
    assert _errors(doc) == [
        f"config.yaml: models[1]: llm needs {need / sizing.GIB:.1f} GiB loaded (1 slot(s) of 4096 tokens) but pool 'small' has 2.0 GiB for models per replica — raise farm.pools[0].memory_gib to {gib} or more, move it to another pool (pool: big), or set serving: dedicated"
    ]
    doc["models"][1]["pool"] = "big"
    parse(yaml.safe_dump(doc))


def test_a_pool_replica_must_fit_an_allowed_node() -> None:
    doc = _doc(pools=[{"name": "small", "cpu": 96, "memory_gib": 1000}], eks={"instance_families": ["c7g"]})
    assert _errors(doc) == [
        "config.yaml: farm.pools[0].cpu: 96 vCPUs per pool replica is more than the largest allowed node can give (63.5) — lower cpu or allow larger instance types",
        "config.yaml: farm.pools[0].memory_gib: 1000 GiB per pool replica + 2.0 GiB it reserves for the node's Mountpoint pod is more than the largest allowed node (c7g.16xlarge, 116.4 GiB allocatable) — set farm.pools[0].memory_gib to 114.3 or less, or allow larger (r-family) instance types",
    ]


def test_a_pool_replica_counts_the_mountpoint_allowance_against_the_node() -> None:
    # The pod requests memory_gib's plan + pool_sizing.MOUNTPOINT_MEMORY_BYTES (request = limit): 116 GiB is under
    # c7g.16xlarge's 116.4 GiB allocatable, 118 GiB is not, so Karpenter has no node for the replica.
    largest = sizing.usable_memory_bytes(sizing.instance("c7g.16xlarge"), target="eks")
    assert 116 * sizing.GIB <= largest < 116 * sizing.GIB + pool_sizing.MOUNTPOINT_MEMORY_BYTES
    doc = _doc(pools=[{"name": "small", "memory_gib": 116}], eks={"instance_families": ["c7g"]})
    assert _errors(doc) == [
        "config.yaml: farm.pools[0].memory_gib: 116 GiB per pool replica + 2.0 GiB it reserves for the node's Mountpoint pod is more than the largest allowed node (c7g.16xlarge, 116.4 GiB allocatable) — set farm.pools[0].memory_gib to 114.3 or less, or allow larger (r-family) instance types",
    ]
    doc["farm"]["pools"][0]["memory_gib"] = 114.3  # the fix the message names fits, to the MiB the chart renders
    parse(yaml.safe_dump(doc))
    assert (
        math.ceil((int(114.3 * sizing.GIB) + pool_sizing.MOUNTPOINT_MEMORY_BYTES) / sizing.MIB) * sizing.MIB <= largest
    )


def test_sagemaker_pooled_models_take_the_pools_endpoint_instance() -> None:
    # One multi-model endpoint per pool: a pooled model has no instance of its own.
    doc = _doc(
        "sagemaker",
        pools=[{"name": "small", "instance_type": "ml.c7g.xlarge"}],
        models=[
            _model("a", instance_type="ml.c7g.2xlarge"),
            _model("hot", serving="dedicated", instance_type="ml.c7g.2xlarge"),
        ],
    )
    assert _errors(doc) == [
        "config.yaml: models[0].instance_type: a is served by pool 'small', one multi-model endpoint on ml.c7g.xlarge (farm.pools[0].instance_type) — remove instance_type from the model, set it on the pool, or set serving: dedicated for an endpoint of its own"
    ]


def test_sagemaker_pool_instance_is_a_hosting_type_from_botocore() -> None:
    # "Multi-model endpoints support all of the CPU instance types" (docs.aws.amazon.com/sagemaker/latest/dg/
    # multi-model-support.html): the hosting enum decides. ml.m7g does not exist there; ml.m8g does.
    assert "ml.m7g.xlarge" not in HOSTING_TYPES and "ml.m8g.xlarge" in HOSTING_TYPES
    doc = _doc("sagemaker", pools=[{"name": "small", "instance_type": "ml.m7g.xlarge"}])
    assert _errors(doc) == [
        "config.yaml: farm.pools[0].instance_type: 'ml.m7g.xlarge' is not a SageMaker hosting instance type (not in ProductionVariantInstanceType) — use ml.m8g.xlarge (4 vCPUs, 16 GiB)"
    ]


def test_sagemaker_pool_keeps_an_instance() -> None:
    # botocore: ProductionVariant.InitialInstanceCount is shape InitialTaskCount, min 1.
    shape = SM.shape_for("ProductionVariant").members["InitialInstanceCount"]
    assert shape.metadata["min"] == 1
    doc = _doc("sagemaker", pools=[{"name": "small", "replicas": {"min": 0, "max": 2}}])
    assert _errors(doc) == [
        "config.yaml: farm.pools[0].replicas.min: 0 is not possible on a SageMaker multi-model endpoint (InitialInstanceCount ≥ 1) — use 1 or more"
    ]


def test_sagemaker_model_too_big_for_the_pool_gets_a_hosting_type_that_fits() -> None:
    doc = _doc(
        "sagemaker",
        pools=[{"name": "small", "instance_type": "ml.c7g.large"}],
        models=[_model("llm", parameters_billions=7, task="chat", quantization="Q8_0")],
    )
    (line,) = _errors(doc)
    assert (
        line.startswith("config.yaml: models[0]: llm needs ")
        and "but pool 'small' runs on ml.c7g.large with 3.0 GiB for models — set farm.pools[0].instance_type to "
        in line
    )
    suggested = line.split("instance_type to ")[1].split(",")[0]
    assert suggested in HOSTING_TYPES
    doc["farm"]["pools"][0]["instance_type"] = suggested
    config = parse(yaml.safe_dump(doc))
    plan = plan_pool(config, config.farm.pools[0])
    assert plan is not None and plan.fits


def test_pooled_models_own_replicas_and_cpu_are_warned_once_per_group() -> None:
    doc = _doc(models=[_model("hot", serving="dedicated")])
    doc["model_groups"] = [
        {
            "defaults": {
                "source": {"hf_repo": "acme/farm-GGUF"},
                "parameters_billions": 0.1,
                "replicas": {"min": 0, "max": 2},
            },
            "models": [{"name": f"m-{i}", "source": {"file": f"m-{i}.gguf"}} for i in range(3)],
        }
    ]
    doc["model_groups"][0]["models"][1]["cpu"] = 2
    assert _warnings(doc) == [
        "config.yaml: warning: model_groups[0].defaults.replicas: not used for a pooled model (its pool's replicas scale: farm.pools[].replicas) — remove it, or set serving: dedicated to give the model replicas of its own (and 2 more models of this group)",
        "config.yaml: warning: model_groups[0].models[1].cpu: not used for a pooled model (its pool's cpu is shared by the loaded models: farm.pools[].cpu) — remove it, or set serving: dedicated to give the model replicas of its own",
    ]


def test_a_models_max_above_what_fits_is_a_warning() -> None:
    models = [_model(f"m-{i}", parameters_billions=1.0, task="chat") for i in range(10)]
    doc = _doc(pools=[{"name": "small", "memory_gib": 4, "models_max": 10}], models=models)
    (line,) = _warnings(doc)
    config = parse(yaml.safe_dump(doc))
    plan = plan_pool(config, config.farm.pools[0])
    assert plan is not None and plan.models_max == 10 and plan.models_max_fit < 10
    assert line.startswith("config.yaml: warning: farm.pools[0].models_max: 10 models at once need up to ")
    assert line.endswith(
        f"room for {plan.models_max_fit} of its largest (m-0) — remove models_max (sizing then uses {plan.models_max_fit}) or give the pool more memory"
    )


def test_an_unused_pool_and_farm_outside_model_farm_are_warnings() -> None:
    doc = _doc(pools=[{"name": "small"}, {"name": "spare"}])
    assert _warnings(doc) == [
        "config.yaml: warning: farm.pools[1]: pool 'spare' serves no model — remove it or set pool: spare on models"
    ]
    doc = _doc(
        pools=[{"name": "small"}],
        pattern="slm-prefilter",
        models=[_model("a", role="slm", task="classification")],
        escalation={"kind": "bedrock", "model_id": "anthropic.claude-3-5-haiku-20241022-v1:0"},
    )
    assert (
        "config.yaml: warning: farm: only pattern model-farm has pools — remove farm or use pattern: model-farm"
        in _warnings(doc)
    )


def test_an_eks_pool_keeps_a_replica() -> None:
    # The pool chart refuses replicas_min 0 (the gateway routes to stable replicas and wakes no pool at zero):
    # the config says so with the fix, instead of `validate` passing and the synth failing.
    from cpu_inference.engines.pool_preset import PoolModel
    from cpu_inference.k8s.charts.model_pool_chart import ModelPoolChartProps

    props = ModelPoolChartProps(
        name="small",
        image="i@sha256:" + "f" * 64,
        models=(PoolModel("m", "m/0/m.gguf", 512),),
        models_max=1,
        cpu=1,
        memory_bytes=2**30,
        bucket_name="models-bucket",
        region="us-east-1",
        replicas_min=0,
    )
    with pytest.raises(ValueError, match="replicas_min"):
        props.validate()
    doc = _doc("eks", pools=[{"name": "small", "replicas": {"min": 0, "max": 2}}])
    assert _errors(doc) == [
        "config.yaml: farm.pools[0].replicas.min: 0 is not possible for a pool: a pool keeps at least one replica for the gateway to load its models on — use 1 or more (a model that should scale to zero: serving: dedicated with replicas.min 0)"
    ]
