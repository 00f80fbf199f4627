"""Sizing is pure arithmetic: check it against hand-computed figures for real model shapes."""

from __future__ import annotations

import pytest

from cpu_inference import sizing
from cpu_inference.sizing import GIB, MIB, ModelSpec


def test_catalog_covers_graviton_amd_intel_gen_7_and_8() -> None:
    cpus = {it.cpu for it in sizing.CATALOG.values()}
    assert {"Graviton3", "Graviton4", "AMD EPYC Genoa (Zen 4)", "Intel Sapphire Rapids"} <= cpus
    c7g = sizing.instance("c7g.8xlarge")
    assert (c7g.vcpus, c7g.memory_gib, c7g.arch) == (32, 64, "arm64")
    assert sizing.instance("r7i.4xlarge").memory_gib == 128
    assert sizing.instance("ml.c7g.8xlarge") is c7g


def test_unknown_and_non_sagemaker_types_are_rejected() -> None:
    with pytest.raises(sizing.UnknownInstanceType):
        sizing.instance("c7g.3xlarge")
    with pytest.raises(sizing.UnknownInstanceType):
        sizing.instance("ml.c7a.2xlarge")  # no SageMaker equivalent in the catalog


def test_kv_cache_from_known_shape() -> None:
    # SmolLM2-135M: 30 layers, 3 KV heads, head dim 64 -> 2*30*3*64*2 bytes per token
    m = ModelSpec(0.135, "Q4_1", layers=30, kv_heads=3, head_dim=64)
    assert sizing.kv_bytes_per_token(m) == 23040


def test_weights_from_quantization_bits_or_file_size() -> None:
    assert sizing.weights_bytes(ModelSpec(8, "Q4_K_M")) == int(8e9 * 4.85 / 8)
    assert sizing.weights_bytes(ModelSpec(8, "Q4_K_M", file_size_bytes=4_920_000_000)) == 4_920_000_000


def test_8b_q4_k_m_on_ml_c7g_8xlarge() -> None:
    """The issue's reference: every one of the 8 slots gets the full 4k context (the AWS sample gave 256)."""
    s = sizing.size(ModelSpec(8, "Q4_K_M", context_window=4096, task="chat"), sizing.instance("ml.c7g.8xlarge"))
    assert (s.threads, s.slots, s.ctx_per_slot, s.ctx_total) == (32, 8, 4096, 32768)
    assert s.kv_cache_bytes == 8 * 4096 * 128 * 1024  # 4 GiB
    weights = int(8e9 * 4.85 / 8)
    assert s.memory_needed_bytes == weights + 4 * GIB + 256 * MIB + int(0.1 * weights)
    assert s.fits and s.memory_available_bytes == 63 * GIB
    env = s.engine_env()
    assert (
        env["LLAMA_THREADS"] == env["OMP_NUM_THREADS"] == env["MKL_NUM_THREADS"] == env["OPENBLAS_NUM_THREADS"] == "32"
    )
    assert env["NUM_INTER_THREADS"] == "1"


def test_classification_uses_short_context_per_slot() -> None:
    s = sizing.size(
        ModelSpec(0.135, "Q4_1", context_window=8192, task="classification"),
        sizing.instance("c7g.xlarge"),
        target="eks",
        cpu=2,
    )
    assert s.ctx_per_slot == 512
    assert s.threads == 2 and s.slots == 4  # small model: 2 slots per thread, measured 1.5x over -np 1


def test_a_context_floor_raises_the_task_context_within_the_window() -> None:
    """min_context_per_slot (the SLM pre-filter's router prompt + answer) wins over the task's short context,
    never over context_window or an explicit context_per_slot; memory follows the larger slots."""
    base = ModelSpec(1.7, "Q4_K_M", context_window=4096, task="classification")
    floored = ModelSpec(1.7, "Q4_K_M", context_window=4096, task="classification", min_context_per_slot=2176)
    assert sizing.context_per_slot(base) == 512 and sizing.context_per_slot(floored) == 2176
    assert (
        sizing.context_per_slot(ModelSpec(1.7, context_window=2048, task="classification", min_context_per_slot=2176))
        == 2048
    )
    assert sizing.context_per_slot(ModelSpec(1.7, context_window=4096, task="chat", min_context_per_slot=2176)) == 4096
    it = sizing.instance("c7g.2xlarge")
    small, big = sizing.size(base, it, target="eks"), sizing.size(floored, it, target="eks")
    assert big.ctx_total == big.slots * 2176 and big.kv_cache_bytes > small.kv_cache_bytes


def test_eks_threads_equal_the_pod_cpu_not_the_node() -> None:
    s = sizing.size(ModelSpec(8, "Q4_K_M"), sizing.instance("c7g.16xlarge"), target="eks")
    assert s.threads == 8 and s.cpu_request == 8.0
    assert s.instance.vcpus == 64


def test_slots_shrink_until_the_model_fits() -> None:
    m = ModelSpec(8, "Q4_K_M", context_window=65536, context_per_slot=65536)
    s = sizing.size(m, sizing.instance("ml.c7g.8xlarge"))  # 8 slots x 8 GiB of KV cache cannot fit in 64 GiB
    assert s.fits and s.slots == 7
    assert sizing.memory_needed(m, s.slots + 1, 65536) > s.memory_available_bytes


def test_ram_at_least_one_and_a_half_times_the_file() -> None:
    m = ModelSpec(70, "Q4_K_M", context_window=512, parallel_slots=1)
    assert sizing.memory_needed(m, 1, 512) == int(1.5 * sizing.weights_bytes(m))


def test_eks_allocatable_is_below_instance_memory() -> None:
    it = sizing.instance("m7g.xlarge")  # 16 GiB
    alloc = sizing.usable_memory_bytes(it, target="eks")
    assert 12 * GIB < alloc < 15 * GIB
    assert sizing.usable_vcpus(it, target="eks") < 4


def test_smallest_fitting_respects_cpu_and_memory() -> None:
    cands = [sizing.instance(n) for n in ("c7g.large", "c7g.xlarge", "c7g.2xlarge", "r7g.large")]
    s = sizing.smallest_fitting(ModelSpec(1.7, "Q4_K_M", task="classification"), cands)
    assert s is not None and s.instance.name == "c7g.2xlarge"  # a 4-vCPU pod does not fit a 4-vCPU node
    assert sizing.smallest_fitting(ModelSpec(70, "Q8_0", task="batch"), cands) is None
