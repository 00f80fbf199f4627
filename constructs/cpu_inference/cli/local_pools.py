"""`cpu-inference local` for a model farm's pools: one llama-server in router mode per pool, as a pool replica runs.

The deployment (patterns/model_farm.py, k8s/charts/model_pool_chart.py) sizes a pool with config.rules.plan_pool
(ctx-size / parallel per model, threads per loaded model, models_max from memory), renders its ConfigMap's
preset with pool_preset.pool_preset over the catalog's keys (`<name>/<idhash>/<file>` under /models) and runs
`entrypoint.py pool` (LLAMA_MODELS_PRESET, LLAMA_MODELS_MAX). Locally the same plan and the same preset function
run, with /models moved to a directory of symlinks at the same keys (each to the file serving the model: the
cached GGUF, --model-map's or a stand-in), threads capped by this machine (as for dedicated engines) and
models_max capped by its memory; the same entrypoint supervises the router. One replica: the gateway routes
the pool's models to it (replication 1).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from cpu_inference.cli.local_plan import Engine, _selected, farm_stand_in
from cpu_inference.cli.main import UserError
from cpu_inference.engines.pool_preset import PoolModel, pool_preset, with_preload
from cpu_inference.sizing.pools import ROUTER_RSS_BYTES, PoolPlan


@dataclass
class LocalPool:
    name: str
    plan: PoolPlan  # the deployment's plan of the whole pool (config.rules.plan_pool)
    members: list[Engine]  # its started models: serve_files picks their files; never processes of their own
    keys: dict[str, str]  # model -> its key under the farm prefix (catalog gguf_key minus `farm/`)
    models_max: int  # the plan's, capped by this machine's memory (cap_pools)
    threads: int  # per loaded model: the plan's, capped by this machine's CPUs
    preset: Path | None = None
    port: int = 0
    status_port: int = 0  # the supervisor's side port (/status for the gateway, /metrics for `farm report`)
    proc: subprocess.Popen | None = None
    preload: tuple[str, ...] = ()  # farm.pools[].preload: loaded when the pool starts (config validate checked it)
    adapter_keys: dict[str, str] = field(default_factory=dict)  # adapter -> its key under the farm prefix
    models_dir: Path | None = None  # where the preset reads the files (write_pool_dir)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def status_url(self) -> str:
        return f"http://127.0.0.1:{self.status_port}"

    def hot(self) -> list[str]:
        """The preloaded models started here, at most models_max as capped here (more would stop the router at
        start: pool_preset.LOAD_ON_STARTUP)."""
        return [n for n in self.preload if n in self.keys][: self.models_max]

    def pool_models(self) -> list[PoolModel]:
        """The PoolModels the chart builds from the plan (PoolPlan.pool_model), threads as run here."""
        models = [
            replace(
                self.plan.pool_model(e.name, self.keys[e.name], threads=self.threads),
                adapters=tuple(self.adapter_keys[name] for name, _, _ in e.adapters),
            )
            for e in self.members
        ]
        return list(with_preload(models, self.hot()))

    def adapter_path(self, name: str) -> str:
        """Where the pool's preset names adapter `name` (its `lora` item; what the replica's /status lists)."""
        assert self.models_dir is not None
        return f"{self.models_dir}/{self.adapter_keys[name]}"


def deployed_key(m) -> str:
    """Where the deployment's pool reads model `m` under /models: the catalog's gguf_key without `farm/`."""
    from model_download.catalog import FARM_PREFIX, CatalogEntry, gguf_key

    s = m.source
    return gguf_key(
        CatalogEntry(name=m.name, hf_repo=s.hf_repo, file=s.file, revision=s.revision, sha256=s.sha256)
    ).removeprefix(FARM_PREFIX)


def deployed_adapter_key(adapter, base: str) -> str:
    """Where the deployment's pool reads `adapter` of model `base` under /models: its catalog entry's gguf_key
    without `farm/` (an adapter is copied like a model: INTERFACE §3)."""
    from model_download.catalog import FARM_PREFIX, CatalogEntry, gguf_key

    s = adapter.source
    entry = CatalogEntry(
        name=adapter.name, hf_repo=s.hf_repo, file=s.catalog_file, revision=s.revision, sha256=s.sha256, base=base
    )
    return gguf_key(entry).removeprefix(FARM_PREFIX)


def plan_pools(config, only: list[str] | None) -> list[LocalPool]:
    """The pools to start (those with a started model) with the deployment's plan; [] for an slm-prefilter."""
    from cpu_inference.config.rules import plan_pool

    if config.pattern != "model-farm":
        return []
    started = {m.name for m in _selected(config, only)}
    pools = []
    for fp in config.farm.pools:
        plan = plan_pool(config, fp)
        members = [m for m in config.pool_models(fp.name) if m.name in started]
        if plan is None or not members:
            continue
        # A pooled embedding / rerank model's section carries `embeddings` / `reranking` (PoolPlan.pool_model, as the
        # chart renders it); its stand-in is the encoder / cross-encoder (farm_stand_in), as for a dedicated one.
        engines = [
            Engine(m.name, m, plan.per_model[m.name].parallel, plan.per_model[m.name].ctx_per_slot, farm_stand_in(m))
            for m in members
        ]
        pools.append(
            LocalPool(
                fp.name,
                plan,
                engines,
                {m.name: deployed_key(m) for m in members},
                models_max=plan.models_max,
                threads=plan.threads_per_model,
                preload=tuple(fp.preload),
                adapter_keys={a.name: deployed_adapter_key(a, m.name) for m in members for a in m.adapters},
            )
        )
    return pools


def cap_pools(
    pools: list[LocalPool], engines: list[Engine], memory, *, stand_ins: bool, mapping: Mapping[str, Path]
) -> list[str]:
    """Cap each pool's models_max by what this machine holds after the dedicated engines (the way local checks
    dedicated engines: sizing's numbers against machine_memory), before any download; a pool that cannot hold
    its largest model even alone is refused with one line. Models served by a stand-in are not counted (as for
    dedicated engines: a stand-in is ~100-250 MiB). Returns notes."""
    from cpu_inference.cli.model_cache import _size, engine_memory

    if memory is None:  # unknown here: the plan's models_max stands
        return []

    def own(e: Engine) -> bool:  # served by a file of its model (the stand-ins are not counted)
        return e.model is not None and (not stand_ins or e.name in mapping)

    def needed(e: Engine) -> int:  # what fetch_models checks for a dedicated engine (sizing's numbers)
        return engine_memory(e.name, e.model, file_size=None, slots=e.slots, ctx_per_slot=e.ctx_per_slot).needed  # type: ignore[arg-type]

    room = memory.bytes - sum(needed(e) for e in engines if own(e))
    after = f", {_size(max(0, room))} of it after the dedicated engines" if any(own(e) for e in engines) else ""
    notes = []
    for pool in pools:
        loaded = {e.name: pool.plan.per_model[e.name] for e in pool.members if own(e)}
        if not loaded:
            continue
        largest = max(loaded, key=lambda n: loaded[n].memory_bytes)
        need = loaded[largest].memory_bytes
        fit = max(0, (room - ROUTER_RSS_BYTES) // need)
        if fit < 1:
            s = loaded[largest]
            raise UserError(
                f"pool {pool.name!r} cannot hold its largest model {largest} on this machine: it needs {_size(need)} loaded "
                f"({s.parallel} slot(s) × {s.ctx_per_slot} tokens, the pool plan) + {ROUTER_RSS_BYTES // 2**20} MiB for the "
                f"router, but this machine has {memory}{after} — serve a smaller file with --model-map {largest}=PATH, leave "
                "it out with --models, or use --stand-ins"
            )
        if fit < pool.models_max:
            hot = pool.hot()
            notes.append(
                f"pool {pool.name}: models_max {pool.models_max} → {fit} here: {fit} × {largest} ({_size(need)} loaded) "
                f"fit in this machine's {memory}" + (f"; preloads only {hot[:fit]}" if len(hot) > fit else "")
            )
            pool.models_max = int(fit)
        room -= ROUTER_RSS_BYTES + pool.models_max * need
    return notes


def write_pool_dir(pool: LocalPool, root: Path) -> Path:
    """`root/models/<key>` -> the file serving each model, and `root/preset.ini` (the chart's pool_preset with
    /models moved to root/models). Returns the preset's path."""
    models_dir = root / "models"
    for e in pool.members:
        assert e.gguf is not None
        link = models_dir / pool.keys[e.name]
        link.parent.mkdir(parents=True, exist_ok=True)
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(Path(e.gguf).resolve())
        for name, path, _ in e.adapters:
            link = models_dir / pool.adapter_keys[name]
            link.parent.mkdir(parents=True, exist_ok=True)
            if link.is_symlink() or link.exists():
                link.unlink()
            link.symlink_to(path.resolve())
    pool.models_dir = models_dir
    preset = root / "preset.ini"
    preset.write_text(pool_preset(pool.pool_models(), model_dir=str(models_dir)))
    pool.preset = preset
    return preset


def pool_process(pool: LocalPool, binary: Path) -> tuple[list[str], dict[str, str]]:
    """argv and environment of the pool's process: the image's `entrypoint.py pool` (the same file, from this
    package's runtime tree), on loopback, with this machine's llama-server."""
    from cpu_inference._internal.resources import LLAMA_SERVER, runtime_dir
    from model_download.catalog import COPY_FAILED_NAME

    assert pool.preset is not None
    try:
        entrypoint = runtime_dir(LLAMA_SERVER) / "entrypoint.py"
    except FileNotFoundError as exc:
        raise UserError(str(exc)) from None
    env = {
        **os.environ,
        "LLAMA_SERVER_BIN": str(binary),
        "LLAMA_MODELS_PRESET": str(pool.preset),
        "LLAMA_MODELS_MAX": str(pool.models_max),
        "LLAMA_HOST": "127.0.0.1",
        "LLAMA_PORT": str(pool.port),
        "LLAMA_POOL_STATUS_PORT": str(pool.status_port),
        # The deployment's copy-failure marker (the pool chart sets the same): a model that failed to copy is named
        # as such. Locally every file is in place before the pool starts, so it only matters to tests that remove one.
        "LLAMA_POOL_COPY_FAILED_FILE": COPY_FAILED_NAME,
    }
    return [sys.executable, str(entrypoint), "pool"], env
