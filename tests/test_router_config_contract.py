"""One router config contract (issue 15): slm_router/config.py's dataclasses are the only definition of the router's
JSON. Every config the library renders — the EKS router and farm gateway of each shipped example, the SageMaker
router endpoint's ROUTER_CONFIG_JSON, `cpu-inference local`'s router and gateway — is read by the router's own
loader (`from_dict`: type-checked and validated as the pod starts it) and rendered back to the same bytes by the
same definition (`to_dict`), so no producer writes a key or a shape of its own. The config table in
containers/router/README.md is checked against the same fields and defaults, so the docs cannot drift."""

from __future__ import annotations

import json
import re
from dataclasses import MISSING, fields
from pathlib import Path
from typing import Any

import pytest

from slm_router import config as rc
from tests.support.k8s import objects
from tests.support.rendered import sagemaker_environments, template

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "containers" / "router" / "README.md"

# Every shipped config, and the router configs it renders: EKS ConfigMaps (name) and SageMaker environments.
# model-farm on SageMaker has none: its pools are multi-model endpoints addressed by TargetModel, no gateway.
SHIPPED = {
    "config.yaml": {"eks": ("router",), "sagemaker": 0},
    "examples/slm-prefilter-eks.yaml": {"eks": ("router",), "sagemaker": 0},
    "examples/model-farm-eks.yaml": {"eks": ("gateway",), "sagemaker": 0},
    "examples/slm-prefilter-sagemaker.yaml": {"eks": (), "sagemaker": 1},
    "examples/model-farm-sagemaker.yaml": {"eks": (), "sagemaker": 0},
    "examples/vllm-eks.yaml": {"eks": ("gateway",), "sagemaker": 0},
    "examples/vllm-sagemaker.yaml": {"eks": (), "sagemaker": 1},
}


def test_every_shipped_config_is_covered() -> None:
    shipped = {"config.yaml", *(str(p.relative_to(ROOT)) for p in (ROOT / "examples").glob("*.yaml"))}
    assert shipped == set(SHIPPED), "a new example: add it to SHIPPED with the router configs it renders"


def _eks_configs(config: str) -> dict[str, str]:
    return {
        o["metadata"]["name"]: o["data"]["config.json"]
        for o in objects(template(config))
        if o["kind"] == "ConfigMap" and "config.json" in o.get("data", {})
    }


def _loaded_back(data: dict[str, Any]) -> rc.Config:
    """The router's loader on a rendered config; what it read renders back to the same object."""
    loaded = rc.from_dict(data)
    assert loaded.to_dict() == data
    return loaded


@pytest.mark.parametrize("config", sorted(SHIPPED))
def test_the_eks_router_and_gateway_of_each_example_are_what_the_router_reads(config: str) -> None:
    rendered = _eks_configs(config)
    assert tuple(sorted(rendered)) == SHIPPED[config]["eks"]
    for name, text in rendered.items():
        loaded = _loaded_back(json.loads(text))
        assert loaded.mode == name
        # Byte for byte: the ConfigMap is json.dumps(to_dict(), indent=2, sort_keys=True) of the one definition.
        assert json.dumps(loaded.to_dict(), indent=2, sort_keys=True) == text
        if name == "gateway" and config == "examples/model-farm-eks.yaml":
            assert loaded.gateway.models and loaded.gateway.pools  # dedicated models and the farm's pools


@pytest.mark.parametrize("config", sorted(SHIPPED))
def test_the_sagemaker_router_endpoint_config_is_what_the_router_reads(config: str) -> None:
    envs = [e["ROUTER_CONFIG_JSON"] for e in sagemaker_environments(config) if "ROUTER_CONFIG_JSON" in e]
    assert len(envs) == SHIPPED[config]["sagemaker"]
    for text in envs:  # deploy-time values (endpoint names, Region) are cpu_inference.testing.crd_validation.TOKEN here
        loaded = _loaded_back(json.loads(text))
        assert loaded.slm_endpoint_name and loaded.escalation.kind == "sagemaker"
        assert json.dumps(loaded.to_dict(), separators=(",", ":"), ensure_ascii=False) == text


def _local_engines(config) -> list:
    from cpu_inference.cli.local_plan import plan

    engines, _ = plan(config, None)
    for port, e in enumerate(engines, start=18100):
        e.port = port
    return engines


@pytest.mark.parametrize("config", ["config.yaml", "examples/slm-prefilter-eks.yaml"])
def test_local_runs_the_router_config_the_deployment_renders(config: str) -> None:
    from cpu_inference.cli.local_config import router_config
    from cpu_inference.config import load

    cfg = load(ROOT / config)
    slm, llm = _local_engines(cfg)
    local = _loaded_back(router_config(cfg, slm, llm, "127.0.0.1", 8000).to_dict())
    assert (local.slm_url, local.escalation.url) == (slm.url, f"{llm.url}/v1")
    # The decision keys are the deployment's, key for key (the upstreams, address and timeouts are this machine's).
    local_only = {"slm_url", "escalation", "listen_host", "listen_port", "timeouts"}
    deployed = json.loads(_eks_configs(config)["router"])
    assert {k: v for k, v in local.to_dict().items() if k not in local_only} == {
        k: v for k, v in deployed.items() if k not in local_only
    }


def test_local_runs_a_gateway_the_router_reads() -> None:
    from cpu_inference.cli.local_config import gateway_config
    from cpu_inference.config import load

    cfg = load(ROOT / "examples/model-farm-eks.yaml")
    engines = _local_engines(cfg)[:2]  # --models: the others point at a closed port
    local = _loaded_back(gateway_config(cfg, engines, "127.0.0.1", 8000).to_dict())
    assert [m.name for m in local.gateway.models] == [m.name for m in cfg.models]


def test_the_router_endpoint_props_render_each_escalation_as_the_router_reads_it() -> None:
    from cpu_inference.sagemaker import RouterEndpointProps, RouterEscalation

    for escalation in (
        RouterEscalation.sagemaker("big-llm", model_id="zephyr"),
        RouterEscalation.bedrock("amazon.nova-lite-v1:0"),
        RouterEscalation.openai("http://llm.internal/v1", model_id="m"),
    ):
        props = RouterEndpointProps(
            image=None,
            slm="slm-endpoint",
            escalation=escalation,  # type: ignore[arg-type]
            few_shot=({"text": "hi", "label": "simple"},),
            config_overrides={"timeouts": {"classify_s": 10}, "log_level": "DEBUG"},
        )
        loaded = _loaded_back(props.router_config("eu-west-1"))
        assert loaded.escalation.kind == escalation.kind and loaded.timeouts.classify_s == 10


def test_a_wrong_override_fails_at_synth_with_the_key() -> None:
    """config_overrides are typed as the router reads them: a wrong type is refused when the props are checked,
    not by a router that exits 2 on every instance of the endpoint (the old props rendered it)."""
    from cpu_inference.sagemaker import RouterEndpointProps, RouterEscalation

    props = RouterEndpointProps(
        image=None,
        slm="slm-endpoint",
        escalation=RouterEscalation.bedrock("amazon.nova-lite-v1:0"),  # type: ignore[arg-type]
        config_overrides={"timeouts": {"classify_s": "ten"}},
    )
    with pytest.raises(
        ValueError, match=r"RouterEndpointProps\.config_overrides\.timeouts\.classify_s: must be a number"
    ):
        props.router_config("eu-west-1")


def test_every_escalation_target_kind_is_the_routers_one_escalation_type() -> None:
    from cpu_inference.patterns import EscalationTarget

    targets = (
        EscalationTarget(kind="openai", url="https://llm.example/v1", model_id="m", api_key_secret_name="prod/key"),
        EscalationTarget(kind="sagemaker", endpoint_name="big-llm"),
        EscalationTarget(kind="bedrock", model_id="amazon.nova-lite-v1:0"),
        EscalationTarget(kind="model", model="llama"),
    )
    for target in targets:
        escalation = target.router_escalation(llm_url="http://llama.ns.svc.cluster.local:8080", region="eu-west-1")
        assert isinstance(escalation, rc.Escalation)
        assert _loaded_back(rc.Config.of(escalation=escalation).to_dict()).escalation == escalation


def test_a_producer_renders_exactly_the_keys_it_set_in_the_order_it_set_them() -> None:
    """Keys left out keep the router's defaults (and stay out of the rendered JSON, as the producers rendered them
    by hand before); a default given explicitly is rendered; `updated` keeps places and appends new keys."""
    esc = rc.Escalation.of(kind="sagemaker", endpoint_name="big-llm", region="eu-west-1")
    cfg = rc.Config.of(labels=("simple", "complex"), confidence_threshold=0.7, escalation=esc)
    assert list(cfg.to_dict()) == ["labels", "confidence_threshold", "escalation"]
    assert cfg.to_dict()["labels"] == ["simple", "complex"]  # the router's default, set on purpose: rendered
    later = cfg.updated(mode="router", labels=("a", "b"))
    assert list(later.to_dict()) == ["labels", "confidence_threshold", "escalation", "mode"] and later.labels == (
        "a",
        "b",
    )
    assert rc.Config().to_dict() == {} and rc.Timeouts(first_byte_s=300).to_dict() == {"first_byte_s": 300}
    assert (
        json.dumps(rc.unvalidated({"timeouts": {"total_s": 900}}).to_dict()) == '{"timeouts": {"total_s": 900}}'
    )  # an int stays one


# --- the README's config table, checked against the definition ------------------------------------------


def defined_keys() -> dict[str, tuple[Any, tuple[str, ...]]]:
    """Every key of the config file as its dotted path: (default, the keys of a list's elements)."""
    out: dict[str, tuple[Any, tuple[str, ...]]] = {}

    def walk(cls: type, prefix: str) -> None:
        for f in fields(cls):
            default = f.default if f.default is not MISSING else f.default_factory()  # type: ignore[misc]
            if isinstance(default, rc.Document):
                walk(type(default), f"{prefix}{f.name}.")
                continue
            element = re.fullmatch(r"tuple\[(\w+), \.\.\.\]", str(f.type))
            item = getattr(rc, element[1], None) if element else None
            subkeys = (
                tuple(g.name for g in fields(item)) if isinstance(item, type) and issubclass(item, rc.Document) else ()
            )
            out[prefix + f.name] = (default, subkeys)

    walk(rc.Config, "")
    return out


def documented_keys(readme: str) -> dict[str, tuple[str, str]]:
    """The README's config tables (section "Config contract"): dotted key -> (default cell, meaning cell). A
    row may list keys as `a.b` / `c` (c is a.c) with defaults `x` / `y`."""
    section = readme.split("\n## Config contract\n", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, tuple[str, str]] = {}
    for line in section.splitlines():
        if not line.startswith("| `"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        keys, default, meaning = cells[0], cells[1], "|".join(cells[2:])
        names = [n.strip().strip("`") for n in keys.split(" / ")]
        defaults = [d.strip() for d in default.split(" / ")] if len(names) > 1 else [default]
        prefix = ""
        for name, value in zip(names, defaults, strict=True):
            if "." in name:
                prefix = name.rsplit(".", 1)[0] + "."
            rows[name if "." in name else prefix + name] = (value, meaning)
    return rows


def table_problems(readme: str) -> list[str]:
    defined, documented = defined_keys(), documented_keys(readme)
    problems = [f"{k}: not in the README's config table" for k in defined if k not in documented]
    problems += [f"{k}: in the README but not a config key" for k in documented if k not in defined]
    for key, (default, subkeys) in defined.items():
        if key not in documented:
            continue
        cell, meaning = documented[key]
        if isinstance(default, tuple) and default and isinstance(default[0], rc.Document):
            ok = re.fullmatch(rf"{len(default)} examples", cell) is not None
        elif key == "instructions":
            ok = cell.startswith("see `config.py`") and bool(default)
        else:
            literal = re.fullmatch(r"`([^`]*)`", cell)
            try:
                value = json.loads(literal[1]) if literal else MISSING
            except ValueError:
                value = literal[1] if literal else MISSING
            ok = value == rc._json(default)
        if not ok:
            problems.append(f"{key}: the README says default {cell}, the definition has {rc._json(default)!r}")
        problems += [
            f"{key}: the README does not name its elements' key {s!r}"
            for s in subkeys
            if not re.search(rf"[`\"]{s}[`\"]", meaning)
        ]
    return problems


def test_the_readme_config_table_matches_the_definition() -> None:
    text = README.read_text(encoding="utf-8")
    assert table_problems(text) == []
    missing = [name for name in rc.ENV_OVERRIDES if f"`{name}`" not in text]
    assert missing == [], f"env overrides not in the README: {missing}"


def test_the_table_check_catches_a_missing_key_a_wrong_default_and_an_unknown_key() -> None:
    text = README.read_text(encoding="utf-8")
    row = next(line for line in text.splitlines() if line.startswith("| `top_logprobs` |"))
    assert table_problems(text.replace(row + "\n", "")) == ["top_logprobs: not in the README's config table"]
    assert table_problems(text.replace(row, row.replace("`10`", "`12`"))) == [
        "top_logprobs: the README says default `12`, the definition has 10"
    ]
    assert table_problems(text.replace(row, row.replace("`top_logprobs`", "`top_k`"))) == [
        "top_logprobs: not in the README's config table",
        "top_k: in the README but not a config key",
    ]
    pools = next(line for line in text.splitlines() if line.startswith("| `gateway.pools` |"))
    assert table_problems(text.replace(pools, pools.replace("`hot_in_flight`", "hot in flight"))) == [
        "gateway.pools: the README does not name its elements' key 'hot_in_flight'"
    ]
