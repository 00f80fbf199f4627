"""One owner per llama-server flag (issue 24): every spelling of a pooled or dedicated model's llama-server option
that the library renders, and every one the llama-server image renders at run time, comes from its row in
inference_runtime.llama_flags (containers/inference_runtime: the library imports it, the image copies it).

The test renames rows of that table (the ctx-size flag, the embeddings switch and its variable, the image's
threads variable), re-synthesizes every shipped config (config.yaml and examples/*.yaml, as `cdk synth` does) and
re-renders `cpu-inference local`'s pool presets, then reads back everything a llama-server is given:
- the pool preset INI of every EKS pool (its ConfigMap in the template) and of every local pool;
- the engine.json of every pooled model of a SageMaker multi-model endpoint (the catalog's entries rendered by
  model_download.catalog.engine_json, the bytes the copy job writes into each tarball);
- the container environment of every multi-model endpoint, every dedicated llama.cpp endpoint and Deployment
  (and, as no shipped config has a dedicated embedding model, sizing's engine_env of one: what both targets render).
Each must carry the renamed spelling and never the old one: a renderer that spells a flag itself fails here.
The image's side is re-rendered in process the same way: a single engine's command line and env contract
(engine_flags), a multi-model child's engine.json keys and command line (mme_adapter), a pool replica's router
command line and its preset keys (pool_mode).
"""

from __future__ import annotations

import configparser
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest

from cpu_inference import sizing
from cpu_inference.app import build_app
from cpu_inference.cli.local_pools import plan_pools
from cpu_inference.config import load
from cpu_inference.engines.pool_preset import pool_preset
from cpu_inference.testing import flatten
from inference_runtime import llama_flags
from model_download.catalog import engine_json
from tests.support.k8s import objects

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = [ROOT / "config.yaml", *sorted((ROOT / "examples").glob("*.yaml"))]
PROBE = "-probe"


@dataclass
class Rendered:
    presets: list[str] = field(default_factory=list)  # every pool preset INI (EKS ConfigMaps, local pools)
    engine_jsons: dict[str, dict[str, Any]] = field(default_factory=dict)  # pooled model -> its engine.json
    embedding_pooled: set[str] = field(default_factory=set)  # pooled models whose task is embedding
    mme_envs: list[dict[str, str]] = field(default_factory=list)  # multi-model endpoints' container env
    llama_envs: list[dict[str, str]] = field(default_factory=list)  # dedicated llama.cpp engines' env


def render_all() -> Rendered:
    """Everything the shipped configs give a llama-server, rendered now (after any change to the table)."""
    out = Rendered()
    for path in CONFIGS:
        config = load(path)
        _, stack = build_app(config, app=cdk.App())
        template = dict(cdk.assertions.Template.from_stack(stack).to_json())
        # A dedicated llama.cpp engine's environment is the one with LLAMA_PARALLEL (sizing's engine_env; not renamed).
        for obj in objects(template):
            if obj["kind"] == "ConfigMap" and "preset.ini" in (obj.get("data") or {}):
                out.presets.append(obj["data"]["preset.ini"])
            if obj["kind"] == "Deployment":
                for c in obj["spec"]["template"]["spec"]["containers"]:
                    env = {e["name"]: flatten(e.get("value", "")) for e in c.get("env", [])}
                    if "LLAMA_PARALLEL" in env:
                        out.llama_envs.append(env)
        for res in template["Resources"].values():
            if res["Type"] != "AWS::SageMaker::Model":
                continue
            props = res["Properties"]
            for c in [props["PrimaryContainer"]] if "PrimaryContainer" in props else props.get("Containers", []):
                env = {k: flatten(v) for k, v in (c.get("Environment") or {}).items()}
                if "MME_MEMORY_BUDGET_BYTES" in env:
                    out.mme_envs.append(env)
                elif "LLAMA_PARALLEL" in env:
                    out.llama_envs.append(env)
        farm = stack.node.try_find_child("ModelFarm")
        catalog = getattr(farm, "catalog", None)
        tasks = {m.name: m.task for m in config.models}
        pooled = {m.name for m in farm.props.deployment.models if m.pool is not None} if farm is not None else set()
        if catalog is not None:
            for entry in catalog.catalog.entries:
                if entry.name not in pooled:  # a dedicated model copied through the catalog: no engine.json
                    continue
                out.engine_jsons[f"{path.name}:{entry.name}"] = json.loads(engine_json(entry))
                if tasks[entry.name] == "embedding":
                    out.embedding_pooled.add(f"{path.name}:{entry.name}")
        out.presets += [pool_preset(p.pool_models(), model_dir="/local") for p in plan_pools(config, None)]
    return out


def preset_keys(text: str) -> Iterator[tuple[str, str, str]]:
    """(section, key, value) of a preset INI."""
    parser = configparser.ConfigParser(interpolation=None, delimiters=("=",))
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(f"[top]\n{text}")
    for name in parser.sections():
        for key, value in parser[name].items():
            yield name, key, value


@pytest.fixture
def renamed() -> Iterator[None]:
    """The rows renamed in place (frozen dataclasses: object.__setattr__), restored afterwards."""
    rows = [
        (llama_flags.CTX_SIZE, "flag"),
        (llama_flags.EMBEDDINGS, "flag"),
        (llama_flags.EMBEDDINGS, "arg_env"),
        (llama_flags.THREADS, "image_env"),
    ]
    saved = [(row, attr, getattr(row, attr)) for row, attr in rows]
    try:
        for row, attr, old in saved:
            object.__setattr__(row, attr, old + (PROBE if attr == "flag" else PROBE.upper().replace("-", "_")))
        yield
    finally:
        for row, attr, old in saved:
            object.__setattr__(row, attr, old)


def test_renaming_a_row_renames_every_rendered_flag(renamed: None) -> None:
    r = render_all()
    ctx, emb, emb_env, threads_env = (
        "ctx-size-probe",
        "embeddings-probe",
        "LLAMA_ARG_EMBEDDINGS_PROBE",
        "LLAMA_THREADS_PROBE",
    )
    # Something of each kind was rendered (the shipped configs pool models on both targets, pool embedding models,
    # and run dedicated llama.cpp engines): the checks below are not vacuous.
    assert r.presets and r.engine_jsons and r.embedding_pooled and r.mme_envs and r.llama_envs, r
    for text in r.presets:
        entries = list(preset_keys(text))
        keys = {k for _, k, _ in entries}
        assert "ctx-size" not in keys and "embeddings" not in keys, text
        assert ("*", ctx) in {(s, k) for s, k, _ in entries}, text
    assert any((k, v) == (emb, "true") for text in r.presets for _, k, v in preset_keys(text))
    for name, flags in r.engine_jsons.items():
        assert ctx in flags and "ctx-size" not in flags and "embeddings" not in flags, (name, flags)
        assert (flags.get(emb) == "true") == (name in r.embedding_pooled), (name, flags)
    for env in r.mme_envs:
        assert threads_env in env and "LLAMA_THREADS" not in env, env
    for env in r.llama_envs:
        assert threads_env in env and "LLAMA_THREADS" not in env and "LLAMA_ARG_EMBEDDINGS" not in env, env
    encoder = sizing.ModelSpec(parameters_billions=0.1, task="embedding", context_window=512)
    for target in ("eks", "sagemaker"):
        env = sizing.size(encoder, sizing.instance("m8g.xlarge"), target=target).engine_env()
        assert env.get(emb_env) == "true" and "LLAMA_ARG_EMBEDDINGS" not in env and threads_env in env, env


def test_the_table_is_what_ships() -> None:
    """Unrenamed, the same walk finds the pinned llama.cpp's spellings (common/arg.cpp; tools/server/README.md
    "Model presets": keys are the flags without dashes) — the renamed run above is therefore a real change."""
    r = render_all()
    assert all(("*", "ctx-size") in {(s, k) for s, k, _ in preset_keys(text)} for text in r.presets)
    assert all("ctx-size" in flags and "parallel" in flags and "threads" in flags for flags in r.engine_jsons.values())
    assert all(
        flags.get("embeddings") == "true" for name, flags in r.engine_jsons.items() if name in r.embedding_pooled
    )
    assert all("LLAMA_THREADS" in env for env in [*r.mme_envs, *r.llama_envs])


ENGINE_DIR = ROOT / "containers" / "llama-server"  # the image's scripts (mme_adapter, pool_mode) import flat


@pytest.fixture
def runtime_renamed(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Rows the image reads renamed in place (long flags, a short flag, the image's variables), restored afterwards."""
    monkeypatch.syspath_prepend(str(ENGINE_DIR))
    rows = [
        (llama_flags.MODEL, "flag"),
        (llama_flags.THREADS, "flag"),
        (llama_flags.CTX_SIZE, "flag"),
        (llama_flags.PARALLEL, "short"),
        (llama_flags.MODELS_MAX, "flag"),
        (llama_flags.THREADS, "image_env"),
        (llama_flags.CACHE_RAM, "image_env"),
        (llama_flags.MODELS_PRESET, "image_env"),
    ]
    saved = [(row, attr, getattr(row, attr)) for row, attr in rows]
    try:
        for row, attr, old in saved:
            object.__setattr__(
                row, attr, old + (PROBE if attr in ("flag", "short") else PROBE.upper().replace("-", "_"))
            )
        yield
    finally:
        for row, attr, old in saved:
            object.__setattr__(row, attr, old)


def _after(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def test_renaming_a_row_renames_what_the_image_runs(runtime_renamed: None, tmp_path: Path) -> None:
    import mme_adapter
    import pool_mode
    from inference_runtime import engine_flags

    model_dir = tmp_path / "m"
    model_dir.mkdir()
    gguf = model_dir / "m.gguf"
    gguf.write_bytes(b"GGUF")
    # One engine (EKS / SageMaker mode): the env contract's variables and the command line's flags are the rows'.
    env = {
        "MODEL_PATH": str(gguf),
        "LLAMA_THREADS_PROBE": "3",
        "LLAMA_THREADS": "9",
        "LLAMA_CACHE_RAM_MIB_PROBE": "7",
        "LLAMA_PARALLEL": "2",
        "LLAMA_CTX_PER_SLOT": "512",
    }
    argv = engine_flags.llama_server_args(engine_flags.config_from_env(env, cpus=1, memory_limit=None))
    assert _after(argv, "--threads-probe") == "3" and "--threads" not in argv, argv
    assert _after(argv, "--ctx-size-probe") == "1024" and "--ctx-size" not in argv, argv
    assert _after(argv, "--model-probe") == str(gguf) and "--model" not in argv, argv
    assert _after(argv, "--cache-ram") == "7", argv
    # A multi-model child: engine.json keys by the row (its long key, its short one), its command line by the row.
    (model_dir / "engine.json").write_text(
        json.dumps({"ctx-size-probe": "1024", "np-probe": "2", "threads-probe": "1"})
    )
    defaults = mme_adapter.child_defaults(
        {"LLAMA_CACHE_RAM_MIB_PROBE": "5", "LLAMA_CACHE_RAM_MIB": "9"}, binary="-", threads=4
    )
    child = mme_adapter.child_config("m", model_dir, defaults)
    assert (child.parallel, child.ctx_per_slot, child.threads, child.cache_ram_mib) == (2, 512, 1, 5), child
    child_argv = engine_flags.llama_server_args(child)
    assert _after(child_argv, "--ctx-size-probe") == "1024" and _after(child_argv, "--threads-probe") == "1", child_argv
    # A pool replica's router: the preset's model key, the router's flags and the image's variables are the rows'.
    preset = tmp_path / "preset.ini"
    preset.write_text(f"[m]\nmodel-probe = {gguf}\nthreads-probe = 1\n")
    pool = pool_mode.pool_command(
        {"LLAMA_MODELS_PRESET_PROBE": str(preset), "LLAMA_MODELS_MAX": "2", "LLAMA_CACHE_RAM_MIB_PROBE": "6"},
        "/bin/true",
        memory_limit=1 << 30,
    )
    assert [(m.name, m.path, m.threads) for m in pool.models] == [("m", gguf, "1")]
    assert _after(pool.command, "--models-max-probe") == "2" and "--models-max" not in pool.command, pool.command
    assert _after(pool.command, "--models-preset") == str(preset) and _after(pool.command, "--cache-ram") == "6"


def _pinned_arg_cpp() -> str:
    """common/arg.cpp of the pinned llama.cpp (the llama-cpp-python sdist the image and the tests build)."""
    import tarfile

    from tests.support.engine import pinned_sdist

    with tarfile.open(pinned_sdist()) as tar:
        (member,) = [m for m in tar.getmembers() if m.name.endswith("/vendor/llama.cpp/common/arg.cpp")]
        data = tar.extractfile(member)
        assert data is not None
        return data.read().decode()


def test_every_row_is_the_pinned_llama_servers() -> None:
    """Each row's flag, variable and kind are those of one option of the pinned common/arg.cpp (`add_opt(common_arg(
    {"-c", "--ctx-size"}, ... [](common_params & params, int value) ...).set_env("LLAMA_ARG_CTX_SIZE"))`; a switch's
    handler takes no value), and its preset / engine.json key is one of that option's names without dashes, which is
    how common/preset.cpp get_map_key_opt maps a preset key to an option (`mapping[rm_leading_dashes(arg)] = opt`)."""
    import re

    upstream: dict[str, tuple[tuple[str, ...], set[str], bool]] = {}
    for chunk in _pinned_arg_cpp().split("add_opt(common_arg(")[1:]:
        names = re.match(r"\s*\{([^}]*)\}", chunk)
        if names is None:
            continue
        flags = tuple(re.findall(r'"([^"]+)"', names.group(1)))
        envs = set(re.findall(r'\.set_env\("([A-Z_]+)"\)', chunk.split("add_opt(")[0]))
        switch = re.search(r"\[\]\(common_params\s*&\s*params\)", chunk) is not None
        for flag in flags:
            upstream[flag] = (flags, envs, switch)
    rows = [v for v in vars(llama_flags).values() if isinstance(v, llama_flags.LlamaOption)]
    assert {r.flag for r in rows} >= {"--ctx-size", "--parallel", "--threads", "--embeddings", "--reranking"}
    for row in rows:
        assert row.flag in upstream, f"{row.flag} is not a flag of the pinned llama-server"
        flags, envs, switch = upstream[row.flag]
        assert (row.arg_env in envs if row.arg_env else not envs) and row.switch == switch, (row, flags, envs, switch)
        assert row.key in {f.lstrip("-") for f in flags}, (row, flags)
        assert row.short in {f for f in flags if not f.startswith("--")} | {""}, (row, flags)
        assert bool(row.short) == any(not f.startswith("--") for f in flags), (row, flags)  # every short one is known
    assert f"--{llama_flags.MODEL_KEY}" in upstream
