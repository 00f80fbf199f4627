"""One definition per fact: change the one owner of a default or rule, re-render every shipped config (config.yaml and
examples/*.yaml, synthesized as `cdk synth` does), and EVERY rendered occurrence of the fact changes — so nothing
renders it from a second place.

Each fact is a row of FACTS:
- `Patch` rows monkeypatch the owner (a module attribute read when rendering: a rule function, or a constant only the
  owner's functions read) in this process;
- `Edit` rows are for defaults bound when a class is defined (a dataclass or pydantic field default): they edit the
  owner's source line in a copy of the package, as a newcomer would, and render in a subprocess from that copy.
`occurrences(template)` maps every rendered place of the fact to its value; the row passes when every place found in
the baseline has a different value after the change. To add a fact: add a row.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.k8s import objects

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ["config.yaml", *sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "examples").glob("*.yaml"))]
Occurrences = Callable[[dict[str, Any]], dict[str, Any]]


def _target(config: str) -> str:
    return str(yaml.safe_load((ROOT / config).read_text())["target"])


EKS = [c for c in CONFIGS if _target(c) == "eks"]
SAGEMAKER = [c for c in CONFIGS if _target(c) == "sagemaker"]


# -- rendering ---------------------------------------------------------------------------------------------------

_RENDER = """
import json, sys
import aws_cdk as cdk
from aws_cdk.assertions import Template
from cpu_inference.app import build_app
from cpu_inference.config.loader import parse

def render(text):
    _, stack = build_app(parse(text), app=cdk.App())
    return Template.from_stack(stack).to_json()
"""


def config_text(config: str, *, drop_slo: bool = False) -> str:
    """The config's YAML; drop_slo: without `slo.p95_latency_ms`, so its default applies."""
    text = (ROOT / config).read_text()
    if not drop_slo:
        return text
    doc = yaml.safe_load(text)
    doc.get("slo", {}).pop("p95_latency_ms", None)
    return yaml.safe_dump(doc, sort_keys=False)


def render(text: str) -> dict[str, Any]:
    namespace: dict[str, Any] = {}
    exec(_RENDER, namespace)  # the same render function the Edit rows' subprocess runs
    return namespace["render"](text)


_baseline: dict[tuple[str, bool], dict[str, Any]] = {}


def baseline(config: str, drop_slo: bool) -> dict[str, Any]:
    key = (config, drop_slo)
    if key not in _baseline:
        _baseline[key] = render(config_text(config, drop_slo=drop_slo))
    return _baseline[key]


# -- where each fact renders -------------------------------------------------------------------------------------


def queue_scaled_objects(field: str | tuple[str, ...]) -> Occurrences:
    """scalingModifiers `field` of every ScaledObject that scales on an engine's queue (a `waiting` trigger)."""
    fields = (field,) if isinstance(field, str) else field

    def occurrences(template: dict[str, Any]) -> dict[str, Any]:
        out = {}
        for o in objects(template):
            if o["kind"] == "ScaledObject" and any(t["name"] == "waiting" for t in o["spec"]["triggers"]):
                mods = o["spec"]["advanced"]["scalingModifiers"]
                out[f"{o['metadata']['namespace']}/{o['metadata']['name']}"] = tuple(mods.get(f) for f in fields)
        return out

    return occurrences


def _latency_alarms(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        k: r["Properties"]
        for k, r in template["Resources"].items()
        if r["Type"] == "AWS::CloudWatch::Alarm" and r["Properties"].get("MetricName") == "ModelLatency"
    }


_BASIS = re.compile(r"\((?P<slo>[\d.]+) ms first-token SLO \+ (?P<tokens>\d+) output tokens x (?P<tpot>[\d.]+) ms")


def latency_thresholds(template: dict[str, Any]) -> dict[str, Any]:
    """Every SageMaker latency alarm's threshold."""
    return {k: p["Threshold"] for k, p in _latency_alarms(template).items()}


def alarm_basis(part: str, *, capped_only: bool = False) -> Occurrences:
    """`part` (slo / tokens / tpot) of the basis every engine endpoint's latency alarm states in its description;
    capped_only: the thresholds of the alarms capped below the generation budget."""

    def occurrences(template: dict[str, Any]) -> dict[str, Any]:
        out = {}
        for k, p in _latency_alarms(template).items():
            m = _BASIS.search(p["AlarmDescription"])
            if m is None:
                continue  # the router's alarm: its SLO alone
            if capped_only:
                if "capped at" in p["AlarmDescription"]:
                    out[k] = p["Threshold"]
            else:
                out[k] = m[part]
        return out

    return occurrences


def routed_slo(template: dict[str, Any]) -> dict[str, Any]:
    """The threshold of every alarm that is an end-to-end SLO alone (the router endpoint's)."""
    return {k: p["Threshold"] for k, p in _latency_alarms(template).items() if not _BASIS.search(p["AlarmDescription"])}


def eks_latency_alert(template: dict[str, Any]) -> dict[str, Any]:
    """The p95 latency alert's threshold in the rule groups (seconds)."""
    found = re.findall(r"cpu_inference:router_latency_seconds:p95 > ([0-9.]+)", json.dumps(template))
    return {f"alert-{i}": v for i, v in enumerate(found)}


def first_token_slo(template: dict[str, Any]) -> dict[str, Any]:
    return {**eks_latency_alert(template), **alarm_basis("slo")(template)}


# -- the facts ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Patch:
    """Monkeypatch `module.attribute` with change(original value)."""

    module: str
    attribute: str
    change: Callable[[Any], Any]


@dataclass(frozen=True)
class Edit:
    """Replace the line `old` of `path` (relative to the repository) by `new`, in a copy of the package."""

    path: str
    old: str
    new: str
    # Entry-point defaults to compare too: a Python expression (run in the subprocess) per name.
    defaults: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Fact:
    name: str
    owner: Patch | Edit
    configs: tuple[str, ...]
    occurrences: Occurrences
    drop_slo: bool = False  # render the configs without slo.p95_latency_ms (the fact is that default)


def _wrap_latency_alarm(original: Callable[..., Any]) -> Callable[..., Any]:
    from cpu_inference.monitoring.latency import LatencyAlarm

    def patched(*args: Any, **kwargs: Any) -> Any:
        alarm = original(*args, **kwargs)
        return LatencyAlarm(alarm.threshold_ms + 1234, alarm.basis)

    return patched


SCALING = "cpu_inference.k8s.workloads.model_scaling"
LATENCY = "cpu_inference.monitoring.latency"
FACTS = [
    Fact(
        "KEDA queue formula",
        Patch(SCALING, "queue_formula", lambda f: lambda **kw: f(**kw) + " + (0 * waiting)"),
        tuple(EKS),
        queue_scaled_objects("formula"),
    ),
    Fact(
        "KEDA queue weight",
        Patch(SCALING, "QUEUE_WEIGHT", lambda w: w + 1),
        tuple(EKS),
        queue_scaled_objects(("formula", "target")),
    ),
    Fact(
        "KEDA queue target",
        Patch(SCALING, "queue_target", lambda f: lambda slots: f(slots) + 1),
        tuple(EKS),
        queue_scaled_objects("target"),
    ),
    Fact(
        "KEDA activation",
        Patch(SCALING, "QUEUE_ACTIVATION", lambda a: a + 1),
        tuple(EKS),
        queue_scaled_objects("activationTarget"),
    ),
    Fact(
        "SageMaker latency alarm rule",
        Patch(LATENCY, "latency_alarm", _wrap_latency_alarm),
        tuple(SAGEMAKER),
        latency_thresholds,
    ),
    Fact(
        "alarm output tokens by task",
        Patch(LATENCY, "ALARM_OUTPUT_TOKENS", lambda t: {k: v + 1 for k, v in t.items()}),
        tuple(SAGEMAKER),
        alarm_basis("tokens"),
    ),
    Fact(
        "decode time per output token",
        Patch(LATENCY, "TIME_PER_OUTPUT_TOKEN_MS", lambda t: {k: v + 1 for k, v in t.items()}),
        tuple(SAGEMAKER),
        alarm_basis("tpot"),
    ),
    Fact(
        "latency alarm cap (share of the generation budget)",
        Patch(LATENCY, "LATENCY_ALARM_BUDGET_FRACTION", lambda f: f - 0.1),
        tuple(SAGEMAKER),
        alarm_basis("", capped_only=True),
    ),
    Fact(
        "first-token SLO default",
        Edit(
            "constructs/cpu_inference/config/schema.py",
            "FIRST_TOKEN_SLO_MS = 2000",
            "FIRST_TOKEN_SLO_MS = 2345",
            defaults=(
                ("Slo", "config.schema.Slo().p95_latency_ms"),
                ("DeploymentProps", "fields_of(patterns.deployment.DeploymentProps)['p95_latency_ms'].default"),
                (
                    "GravitonEndpointProps",
                    "fields_of(sagemaker.props.GravitonEndpointProps)['latency_slo'].default_factory().to_milliseconds()",
                ),
                (
                    "MultiModelEndpointProps",
                    "fields_of(sagemaker.multi_model_props.MultiModelEndpointProps)['latency_slo'].default_factory().to_milliseconds()",
                ),
            ),
        ),
        ("config.yaml", "examples/slm-prefilter-sagemaker.yaml", "examples/model-farm-sagemaker.yaml"),
        first_token_slo,
        drop_slo=True,
    ),
    Fact(
        "routed request SLO default",
        Edit(
            "constructs/cpu_inference/monitoring/latency.py",
            "ROUTED_REQUEST_SLO_MS = 10_000",
            "ROUTED_REQUEST_SLO_MS = 12_345",
            defaults=(
                (
                    "RouterEndpointProps",
                    "fields_of(sagemaker.router_props.RouterEndpointProps)['latency_slo'].default_factory().to_milliseconds()",
                ),
            ),
        ),
        tuple(c for c in SAGEMAKER if yaml.safe_load((ROOT / c).read_text())["pattern"] == "slm-prefilter"),
        routed_slo,
    ),
]


def _defaults(expressions: tuple[tuple[str, str], ...]) -> str:
    return textwrap.dedent(f"""
        import dataclasses
        import cpu_inference.config.schema, cpu_inference.patterns.deployment, cpu_inference.sagemaker.props
        import cpu_inference.sagemaker.multi_model_props, cpu_inference.sagemaker.router_props
        from cpu_inference import config, patterns, sagemaker
        fields_of = lambda cls: {{f.name: f for f in dataclasses.fields(cls)}}
        defaults = {{name: eval(expr) for name, expr in {list(expressions)!r}}}
    """)


def _render_edited(edit: Edit, texts: dict[str, str], tmp: Path) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """Copy the package, apply `edit`, and render `texts` (config → YAML) and the defaults from the copy."""
    shutil.copytree(
        ROOT / "constructs" / "cpu_inference",
        tmp / "constructs" / "cpu_inference",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    for top in (
        "containers",
        "lambda",
    ):  # the runtime trees the package finds beside constructs/ (_resources.runtime_dir)
        (tmp / top).symlink_to(ROOT / top)
    owner = tmp / edit.path
    source = owner.read_text()
    assert source.count(edit.old) == 1, f"{edit.path}: {edit.old!r} must occur once — the owner changed; update the row"
    owner.write_text(source.replace(edit.old, edit.new))
    (tmp / "configs.json").write_text(json.dumps(texts))
    script = (
        _RENDER
        + _defaults(edit.defaults)
        + textwrap.dedent(f"""
        texts = json.loads(open({str(tmp / "configs.json")!r}).read())
        out = {{"templates": {{c: render(t) for c, t in texts.items()}}, "defaults": defaults}}
        open({str(tmp / "out.json")!r}, "w").write(json.dumps(out))
    """)
    )
    paths = [str(tmp / "constructs"), str(ROOT / "lambda"), str(ROOT / "containers" / "router"), str(ROOT)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    run = subprocess.run([sys.executable, "-c", script], cwd=tmp, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads((tmp / "out.json").read_text())
    return out["templates"], out["defaults"]


def _current_defaults(expressions: tuple[tuple[str, str], ...]) -> dict[str, Any]:
    namespace: dict[str, Any] = {}
    exec(_defaults(expressions), namespace)
    return namespace["defaults"]


@pytest.mark.parametrize("fact", FACTS, ids=[f.name for f in FACTS])
def test_changing_the_owner_changes_every_rendered_occurrence(
    fact: Fact, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    before = {c: fact.occurrences(baseline(c, fact.drop_slo)) for c in fact.configs}
    assert any(before.values()), f"{fact.name}: no shipped config renders it — the occurrences finder is stale"
    if isinstance(fact.owner, Patch):
        import importlib

        module = importlib.import_module(fact.owner.module)
        monkeypatch.setattr(module, fact.owner.attribute, fact.owner.change(getattr(module, fact.owner.attribute)))
        after = {c: fact.occurrences(render(config_text(c, drop_slo=fact.drop_slo))) for c in fact.configs}
    else:
        texts = {c: config_text(c, drop_slo=fact.drop_slo) for c in fact.configs}
        templates, defaults = _render_edited(fact.owner, texts, tmp_path)
        after = {c: fact.occurrences(templates[c]) for c in fact.configs}
        old_defaults = _current_defaults(fact.owner.defaults)
        same = sorted(name for name, value in defaults.items() if value == old_defaults[name])
        assert not same, f"{fact.name}: the default of {same} did not follow {fact.owner.path} — a second definition"
    unchanged = [
        f"{c}: {where} = {value!r}"
        for c in fact.configs
        for where, value in before[c].items()
        if after[c].get(where) == value
    ]
    assert not unchanged, f"{fact.name}: rendered from somewhere other than its owner:\n" + "\n".join(unchanged)


def test_every_scaled_object_is_accounted_for() -> None:
    """Every ScaledObject a shipped config renders scales on an engine's queue (the queue rule above) or on the
    gateway's/router's in-flight gauge (a pool's or the router's own target): a third kind would escape the rows."""
    for config in EKS:
        for o in objects(baseline(config, False)):
            if o["kind"] != "ScaledObject":
                continue
            names = {t["name"] for t in o["spec"]["triggers"]}
            assert "waiting" in names or names == {"in_flight"}, (config, o["metadata"]["name"], names)


def test_the_readme_alarm_example_is_what_the_shipped_config_renders() -> None:
    """The SageMaker README's worked latency alarm (the Zephyr-7B endpoint of examples/slm-prefilter-sagemaker.yaml)
    states the threshold that config's stack renders."""
    text = (ROOT / "constructs" / "cpu_inference" / "sagemaker" / "README.md").read_text()
    m = re.search(
        r"(?P<slo>[\d.]+) s \+ (?P<tokens>\d+) × (?P<tpot>\d+) ms = (?P<total>[\d.]+) s for `(?P<model>[a-z0-9-]+)`",
        text,
    )
    assert m, "the README's worked example is gone or reworded: update this test with it"
    config = "examples/slm-prefilter-sagemaker.yaml"
    doc = yaml.safe_load((ROOT / config).read_text())
    assert float(m["slo"]) * 1000 == doc["slo"]["p95_latency_ms"]
    alarms = [
        p for p in _latency_alarms(baseline(config, False)).values() if f"-{m['model']}-" in p["AlarmDescription"]
    ]
    assert len(alarms) == 1, alarms
    basis = _BASIS.search(alarms[0]["AlarmDescription"])
    assert basis is not None and (basis["tokens"], basis["tpot"]) == (m["tokens"], m["tpot"])
    assert alarms[0]["Threshold"] == pytest.approx(float(m["total"]) * 1_000_000)  # ModelLatency is in µs
    # The example's SLO is the default one: a config that leaves `slo` out renders the same alarm.
    from cpu_inference.config.schema import FIRST_TOKEN_SLO_MS

    assert float(m["slo"]) * 1000 == FIRST_TOKEN_SLO_MS
    defaulted = [
        p for p in _latency_alarms(baseline(config, True)).values() if f"-{m['model']}-" in p["AlarmDescription"]
    ]
    assert [p["Threshold"] for p in defaulted] == [alarms[0]["Threshold"]]


def test_the_k8s_readme_states_the_owners_queue_rule() -> None:
    """The EKS README's scaling section quotes model_scaling's rule: stale prose fails here, not in review."""
    from cpu_inference.k8s.workloads.model_scaling import QUEUE_ACTIVATION, QUEUE_WEIGHT, queue_formula

    text = " ".join((ROOT / "constructs" / "cpu_inference" / "k8s" / "README.md").read_text().split())
    for phrase in (
        f"`{queue_formula()}`",
        f"`{queue_formula(cold_start=True)}`",
        f"`queue_target(slots) = slots + {QUEUE_WEIGHT}`",
        f"`activationTarget` is {QUEUE_ACTIVATION}.",
    ):
        assert phrase in text, f"k8s/README.md no longer says {phrase}: update it from k8s/workloads/model_scaling.py"
