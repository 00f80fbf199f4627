"""Sizing of a multi-model pool: one llama-server in router mode (or the SageMaker multi-model adapter) that loads
a model on its first request as a child server and unloads the least recently used one above `models_max`.

Per loaded model (one child llama-server):
    footprint = weights + KV cache (its slots x context per slot) + compute buffers + CHILD_RUNTIME_BYTES
`models_max` is how many of the pool's models fit at once: (memory - the router's own RSS) / the largest
footprint, so any set of loaded models fits. Pure functions, like sizing.py (whose per-model terms it reuses).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from cpu_inference import sizing
from cpu_inference.engines import VLLM
from cpu_inference.engines.pool_preset import PoolModel
from cpu_inference.engines.tasks import task_options

# Measured here (x86_64, 2 vCPUs) with the engine pin's llama-server (llama-cpp-python 0.3.36 sdist) in router mode,
# a --models-preset of SmolLM2-135M Q4_1 (93.8 MiB file) and Gemma-3-270M Q4_K_M (241.4 MiB), threads 1, after one
# 8-token chat request each; /proc/<pid>/smaps_rollup (tests/test_pool_sizing.py re-measures it against this plan):
#   router process alone: 11.7 MiB RSS, 12.0-12.2 MiB with two children loaded (every run here)
#   child RSS beyond its weights file: smollm2 44.4 MiB (-c 512 -np 1), 78.5 MiB (-c 2048 -np 2);
#                                      gemma   82.9 MiB (-c 512 -np 1), 109.1 MiB (-c 2048 -np 2)
#   minus its f16 KV cache (smollm2 22.5 KiB/token, gemma 18 KiB/token: exactly the growth between the two contexts):
#       smollm2 33.3 MiB, gemma 73.5 MiB — compute buffers (they grow with the vocabulary: 49k vs 262k) + runtime
#   minus sizing.COMPUTE_BUFFER_FRACTION x weights (9.4 / 24.1 MiB): 23.9 and 49.4 MiB of per-child runtime.
# The larger measurement, rounded up to a MiB, is the per-child figure (not sizing.RUNTIME_OVERHEAD_BYTES, 256 MiB:
# an estimate for a whole pod with its metrics sidecar).
CHILD_RUNTIME_BYTES = 50 * sizing.MIB
# The router process itself, one per pool replica: 11.7-12.2 MiB measured (above and in the test); 16 MiB leaves a
# quarter for its proxy buffers under many concurrent streams (not measured here).
ROUTER_RSS_BYTES = 16 * sizing.MIB

# On EKS every pool replica also reserves room for its node's Mountpoint for S3 pod, which the scheduler and Karpenter
# do not see (why this way: k8s/charts/model_pool_chart.py, "Room on the node"). Size: one sequential reader's prefetch
# window grows to 2 GiB (mountpoint-s3 1.22.3 mountpoint-s3-fs/src/prefetch.rs DEFAULT_READ_WINDOW_SIZE), and Mountpoint
# before 1.23.0 sizes its memory limiter from the node, not a cgroup (cli.rs mem_limit: 95% of total memory; CSI driver
# CHANGELOG, unreleased after v2.7.0: "Fix memory limiter ignoring container cgroup memory limits"): one cold load per
# replica at a time. Not measured here (no FUSE): settle with the Mountpoint pod's RSS during a cold multi-GB load.
MOUNTPOINT_MEMORY_BYTES = 2 * sizing.GIB

FARM_SLOTS_SMALL_MODEL = 2  # < 2B parameters: two concurrent requests per loaded model
FARM_SLOTS = 1  # larger farm models: one (a pool's CPUs are shared by every loaded model)


@dataclass(frozen=True)
class ModelSlots:
    """How one pooled model runs when loaded: llama-server `--ctx-size` (total over its slots: -c 2048 -np 2 gives
    1024 per slot) and `--parallel`, and the memory it takes while loaded."""

    ctx_size: int
    parallel: int
    memory_bytes: int
    task: str = "chat"  # engines.tasks: an embedding model also runs with --embeddings, a reranker with --reranking

    @property
    def ctx_per_slot(self) -> int:
        return self.ctx_size // self.parallel


@dataclass(frozen=True)
class PoolPlan:
    models_max: int  # models loaded at once per replica (--models-max): the override, else models_max_fit
    models_max_fit: int  # how many fit in memory_bytes at the largest footprint (0: not even the largest alone)
    threads_per_model: int  # --threads of every loaded model
    per_model: dict[str, ModelSlots]
    memory_request_bytes: int  # the router + the models_max largest footprints: the most a replica can hold
    memory_bytes: int  # the budget the plan was made for
    cpu: float
    largest_model: str

    def pool_model(self, name: str, path: str, *, threads: int | None = None) -> PoolModel:
        """Model `name` as its pool runs it (its preset section; `path`: its GGUF's key under the farm prefix):
        its slots' ctx-size and parallel, the plan's threads (or `threads`), its task's switches. The one mapping
        from the plan to a loaded model's llama-server: the EKS chart, `cpu-inference local` and engine_args."""
        s = self.per_model[name]
        return PoolModel(
            name,
            path,
            ctx_size=s.ctx_size,
            parallel=s.parallel,
            threads=self.threads_per_model if threads is None else threads,
            options=task_options(s.task),
        )

    def engine_args(self, name: str) -> dict[str, str]:
        """llama-server flags of model `name` when loaded (the MME tarball's engine.json, the catalog's engine_args):
        exactly the flags of its preset section (PoolModel.flags, llama_flags.pooled_model_flags)."""
        return self.pool_model(name, name).flags()

    @property
    def concurrent_models(self) -> int:
        """Loaded models that can decode at once without sharing a core."""
        return concurrent_models(self.cpu, self.threads_per_model)

    @property
    def fits(self) -> bool:
        return self.models_max_fit >= 1 and self.memory_request_bytes <= self.memory_bytes


def concurrent_models(cpu: float, threads_per_model: int) -> int:
    """Loaded models of a pool replica (EKS) or a multi-model instance (SageMaker: its `slots`) that decode at once,
    each on `threads_per_model` whole cores of `cpu`, at least one."""
    return max(1, int(cpu) // threads_per_model)


def farm_slots(spec: sizing.ModelSpec) -> int:
    if spec.parallel_slots:
        return spec.parallel_slots
    return FARM_SLOTS_SMALL_MODEL if spec.parameters_billions < 2 else FARM_SLOTS


def model_slots(spec: sizing.ModelSpec) -> ModelSlots:
    """The loaded footprint of one pooled model (sizing's weights, KV and compute terms + the measured child)."""
    parallel = farm_slots(spec)
    ctx = sizing.context_per_slot(spec)
    weights = sizing.weights_bytes(spec)
    kv = parallel * ctx * sizing.kv_bytes_per_token(spec)
    memory = weights + kv + int(sizing.COMPUTE_BUFFER_FRACTION * weights) + CHILD_RUNTIME_BYTES
    return ModelSlots(ctx_size=parallel * ctx, parallel=parallel, memory_bytes=memory, task=spec.task)


def pool_threads(specs: Mapping[str, sizing.ModelSpec], cpu: float) -> int:
    """Threads per loaded model: what a dedicated pod of the pool's largest model would get (sizing.default_pod_cpu:
    decode is memory-bandwidth bound, small models gain little past 1-2 threads), at most the pool's CPUs, so
    cpu // threads models decode at once without oversubscribing."""
    largest = max(specs.values(), key=lambda s: s.parameters_billions)
    return max(1, min(int(cpu), int(sizing.default_pod_cpu(largest))))


def pool_plan(
    specs: Mapping[str, sizing.ModelSpec],
    *,
    cpu: float,
    memory_bytes: int,
    models_max: int | None = None,
    router_bytes: int = ROUTER_RSS_BYTES,
) -> PoolPlan:
    """Plan one pool replica of `cpu` vCPUs and `memory_bytes` for the models `specs` (name -> spec)."""
    if not specs:
        raise ValueError("pool_plan: a pool needs at least one model")
    vllm = sorted(name for name, spec in specs.items() if spec.engine == VLLM)
    if vllm:  # a pool is llama-server's router mode (many GGUFs, one process); vLLM serves one model per process
        raise ValueError(
            f"pool_plan: models {vllm[:5]} use engine vllm, which serves one model per process and cannot join a "
            "multi-model pool — give each its own workload (a dedicated model), or engine llama.cpp with a GGUF"
        )
    per_model = {name: model_slots(spec) for name, spec in specs.items()}
    largest = max(per_model, key=lambda n: per_model[n].memory_bytes)
    fit = max(0, (memory_bytes - router_bytes) // per_model[largest].memory_bytes)
    chosen = models_max if models_max is not None else min(len(specs), fit)
    heaviest = sorted((s.memory_bytes for s in per_model.values()), reverse=True)[: max(1, chosen)]
    return PoolPlan(
        models_max=chosen,
        models_max_fit=int(fit),
        threads_per_model=pool_threads(specs, cpu),
        per_model=per_model,
        memory_request_bytes=router_bytes + sum(heaviest),
        memory_bytes=memory_bytes,
        cpu=cpu,
        largest_model=largest,
    )


def replica_memory_bytes(plan_memory_bytes: int) -> int:
    """An EKS pool replica's memory request = limit: the plan's memory_request_bytes + MOUNTPOINT_MEMORY_BYTES."""
    return plan_memory_bytes + MOUNTPOINT_MEMORY_BYTES


def memory_request_mib(plan: PoolPlan) -> int:
    return math.ceil(plan.memory_request_bytes / sizing.MIB)
