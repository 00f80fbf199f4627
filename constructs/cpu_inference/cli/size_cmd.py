"""`cpu-inference size CONFIG`: a table per model — instance, memory needed vs available, threads, slots, context."""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.table import Table

from .. import sizing
from ..config import load, size_model


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
            table.add_row(it.name, str(it.vcpus), f"{it.memory_gib:g} GiB", it.arch, it.cpu, it.isa, it.sagemaker_name if it.sagemaker else "—")
        console.print(table)
        return 0
    config = load(args.config)
    where = "SageMaker endpoint per model" if config.target == "sagemaker" else "EKS pod per replica, on the smallest fitting node"
    table = Table(
        "model", "params", "quant", "instance", "weights", "KV cache", "memory needed", "available", "threads",
        "slots", "ctx/slot", "fits", title=f"{args.config}: {config.pattern} on {config.target} ({where})",
    )
    for m in config.models:
        s = size_model(config, m)
        assert s is not None  # load() already rejected models that fit nowhere
        inst = s.instance.sagemaker_name if config.target == "sagemaker" else s.instance.name
        table.add_row(
            m.name, f"{m.parameters_billions:g}B", m.quantization, inst, _gib(s.weights_bytes), _gib(s.kv_cache_bytes),
            _gib(s.memory_needed_bytes), _gib(s.memory_available_bytes), str(s.threads), str(s.slots), str(s.ctx_per_slot),
            "yes" if s.fits else "NO",
        )
    console.print(table)
    return 0
