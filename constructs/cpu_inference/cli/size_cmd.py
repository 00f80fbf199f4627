"""`cpu-inference size CONFIG`: a table per model — instance, memory needed vs available, threads, slots, context;
for a model farm, dedicated models in that table and a table per pool — models, models-max, threads, memory request."""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.table import Table

from cpu_inference import sizing
from cpu_inference.config import Config, load, size_model
from cpu_inference.config.rules import plan_pool, pool_budget, pool_instance_of
from cpu_inference.sizing import pools as pool_sizing


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("size", help="size every model of a config: memory, threads, slots, context per slot")
    p.add_argument("config", nargs="?", default="config.yaml")
    p.add_argument("--list", action="store_true", help="print the instance catalog instead")
    p.set_defaults(func=run)


def _gib(n: float) -> str:
    return f"{n / sizing.GIB:.1f} GiB"


def run(args: argparse.Namespace) -> int:
    console = Console(width=160)
    if args.list:
        table = Table("instance", "vCPU", "memory", "arch", "CPU", "ISA", "SageMaker", title="instance catalog")
        for it in sizing.CATALOG.values():
            table.add_row(
                it.name,
                str(it.vcpus),
                f"{it.memory_gib:g} GiB",
                it.arch,
                it.cpu,
                it.isa,
                it.sagemaker_name if it.sagemaker else "—",
            )
        console.print(table)
        return 0
    config = load(args.config)
    dedicated = [m for m in config.models if config.serving_of(m) == "dedicated"]
    if dedicated or config.pattern != "model-farm":
        console.print(_model_table(args.config, config, dedicated))
    if config.pattern == "model-farm":
        console.print(_pool_table(args.config, config))
    return 0


def _pool_table(filename: str, config: Config) -> Table:
    on = (
        "one multi-model endpoint per pool"
        if config.target == "sagemaker"
        else "a StatefulSet of llama-server routers per pool"
    )
    table = Table(
        "pool",
        "models",
        "models_max",
        "threads",
        "memory request",
        "replica",
        "replicas",
        "replication",
        "largest model",
        title=f"{filename}: pools ({on}; models load on first request, LRU unload above models_max)",
    )
    for pool in config.farm.pools:
        plan = plan_pool(config, pool)
        cpu, memory = pool_budget(config, pool)
        replica = (
            f"{pool_instance_of(config, pool)} {cpu:g} vCPU {_gib(memory)}"
            if config.target == "sagemaker"
            else f"{cpu:g} vCPU {_gib(memory)}"
        )
        # SageMaker routes a multi-model endpoint's invocations itself: the gateway's replication is EKS only.
        replication = "—" if config.target == "sagemaker" else str(pool.replication)
        if plan is None:
            table.add_row(
                pool.name, "0", "—", "—", "—", replica, f"{pool.replicas.min}–{pool.replicas.max}", replication, "—"
            )
            continue
        largest = plan.per_model[plan.largest_model]
        table.add_row(
            pool.name,
            str(len(plan.per_model)),
            str(plan.models_max),
            str(plan.threads_per_model),
            f"{pool_sizing.memory_request_mib(plan)} MiB",
            replica,
            f"{pool.replicas.min}–{pool.replicas.max}",
            replication,
            f"{plan.largest_model} {_gib(largest.memory_bytes)}",
        )
    return table


def _model_table(filename: str, config: Config, models: list) -> Table:
    where = (
        "SageMaker endpoint per model"
        if config.target == "sagemaker"
        else "EKS pod per replica, on the smallest fitting node"
    )
    if config.pattern == "model-farm":
        where = "dedicated models: " + where
    table = Table(
        "model",
        "params",
        "quant",
        "instance",
        "weights",
        "KV cache",
        "memory needed",
        "available",
        "threads",
        "slots",
        "ctx/slot",
        "fits",
        title=f"{filename}: {config.pattern} on {config.target} ({where})",
    )
    for m in models if config.pattern == "model-farm" else config.models:
        s = size_model(config, m)
        assert s is not None  # load() already rejected models that fit nowhere
        inst = s.instance.sagemaker_name if config.target == "sagemaker" else s.instance.name
        table.add_row(
            m.name,
            f"{m.parameters_billions:g}B",
            m.weights_label,
            inst,
            _gib(s.weights_bytes),
            _gib(s.kv_cache_bytes),
            _gib(s.memory_needed_bytes),
            _gib(s.memory_available_bytes),
            str(s.threads),
            str(s.slots),
            str(s.ctx_per_slot),
            "yes" if s.fits else "NO",
        )
    return table
