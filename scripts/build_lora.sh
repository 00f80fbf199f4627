#!/usr/bin/env bash
# Builds the tiny LoRA adapter of the SmolLM2 stand-in (issue 26) offline into the cache and prints the adapter GGUF's
# path (names and the taught reply: tests/support/lora.py):
#   $cache/models/smollm2-json-lora/          the PEFT adapter scripts/train_lora.py trains with peft on CPU (fixed seed,
#                                             a few dozen steps) on the BF16 stand-in (scripts/build_vllm_env.sh): every
#                                             answer is exactly TUNED_REPLY
#   $cache/models/smollm2-json-lora.gguf      it, converted by the engine pin's convert_lora_to_gguf.py
# `make lora` (so `make test`) runs this. With --merged it also builds, and prints after the adapter's path:
#   $cache/models/smollm2-json-merged.gguf    the cached PEFT adapter merged into the BF16 base (train_lora.py merge:
#                                             merge_and_unload), converted by the pin's convert_hf_to_gguf.py and
#                                             quantized by the pin's libllama (scripts/build_llama_quantize.sh, ~10 min
#                                             cold on 2 cores: kept off `make test`'s path) to the stand-in base GGUF's
#                                             file type (Q4_1: convert_hf_to_gguf.py's --outtype has no Q4_1), for the
#                                             density benchmark only (benchmarks/lora_density.py)
# peft comes from scripts/lora-requirements.txt (hash-locked, --no-deps: its dependencies are the vLLM environment's)
# into a directory of its own; the vLLM environment is not changed.
# Idempotent: a stamp per output holding its recipe (the merged one's includes the adapter's) makes a re-run a no-op;
# a changed recipe rebuilds.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
merged=0
case "${1-}" in
  "") ;;
  --merged) merged=1 ;;
  *) echo "usage: scripts/build_lora.sh [--merged]" >&2; exit 2 ;;
esac
# shellcheck source=scripts/cache_lib.sh
. "$here/scripts/cache_lib.sh"  # $cache, the engine pin, pinned_sdist
dev_python="$here/.venv/bin/python"
# The file names and the reply have one owner, tests/support/lora.py.
mapfile -t names < <(cd "$here" && "$dev_python" -c '
from tests.support.lora import TUNED_REPLY, lora_files
f = lora_files()
print(f["peft_dir"]); print(f["adapter_gguf"]); print(f["merged_gguf"]); print(TUNED_REPLY)')
peft_dir=${names[0]} adapter_gguf=${names[1]} merged_gguf=${names[2]} reply=${names[3]}
models=$(dirname "$adapter_gguf")
base_dir="$models/smollm2-135m-instruct-bf16"  # scripts/build_vllm_env.sh makes it
stamp="$models/.lora.built"
merged_stamp="$models/.lora-merged.built"
fingerprint=$(cat "$here/scripts/train_lora.py" "$here/scripts/lora-requirements.txt" | sha256sum | cut -c1-16)
recipe="train=$fingerprint pin=$LLAMA_CPP_PYTHON_SHA256 reply=$reply v2"
merged_recipe="$recipe merged v1"  # a retrained adapter (a new recipe) re-merges

adapter_ready() {
  [ "$(cat "$stamp" 2>/dev/null)" = "$recipe" ] && [ -s "$adapter_gguf" ] \
    && [ -f "$peft_dir/adapter_config.json" ] && [ -f "$peft_dir/adapter_model.safetensors" ]
}
merged_ready() { [ "$(cat "$merged_stamp" 2>/dev/null)" = "$merged_recipe" ] && [ -s "$merged_gguf" ]; }
ready() { adapter_ready && { [ "$merged" = 0 ] || merged_ready; }; }
done_() {
  echo "$adapter_gguf"
  if [ "$merged" = 1 ]; then echo "$merged_gguf"; fi
  exit 0
}
if ready; then done_; fi
# One build at a time: a second caller waits for the first, then reuses its work.
mkdir -p "$models"
exec 9>"$models/.lora.lock"
flock 9
if ready; then done_; fi

vllm_python=$("$here/scripts/build_vllm_env.sh")
work=$(mktemp -d "$models/.lora.XXXXXX")
trap 'rm -rf "$work"' EXIT
log="$work/build.log"
fail() { echo "build_lora: $1 (log below)" >&2; tail -n 30 "$log" >&2; exit 1; }
"$vllm_python" -m pip install -q --disable-pip-version-check --no-deps --require-hashes --target "$work/deps" \
  -r "$here/scripts/lora-requirements.txt" >>"$log" 2>&1 || fail "pip install -r scripts/lora-requirements.txt failed"
# The converters of the engine pin (the same llama.cpp tree the engine is built from), with its own gguf-py.
vendor="llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION/vendor/llama.cpp"
tar -xzf "$(pinned_sdist)" -C "$work" "$vendor/convert_hf_to_gguf.py" "$vendor/convert_lora_to_gguf.py" \
  "$vendor/conversion" "$vendor/gguf-py"

if ! adapter_ready; then
  echo "build_lora: training the LoRA adapter on $base_dir → $models" >&2
  PYTHONPATH="$work/deps" "$vllm_python" "$here/scripts/train_lora.py" train "$base_dir" "$work/peft" "$reply" \
    >>"$log" 2>&1 || fail "scripts/train_lora.py train failed"
  grep -h "steps in" "$log" >&2 || true
  # The catalog copy's converter flags (one owner: model_download.peft_convert.CONVERT_ARGS, --outtype f16).
  mapfile -t convert_args < <(cd "$here" && "$dev_python" -c 'from model_download.peft_convert import CONVERT_ARGS
print("\n".join(CONVERT_ARGS))')
  "$vllm_python" "$work/$vendor/convert_lora_to_gguf.py" "$work/peft" --base "$base_dir" "${convert_args[@]}" \
    --outfile "$work/adapter.gguf" >>"$log" 2>&1 || fail "convert_lora_to_gguf.py failed"
  echo "build_lora: adapter $(du -h "$work/adapter.gguf" | cut -f1)" >&2
  rm -f "$merged_stamp"  # the merged model was made from the adapter being replaced
  rm -rf "$peft_dir"
  mv "$work/peft" "$peft_dir"
  mv "$work/adapter.gguf" "$adapter_gguf"
  echo "$recipe" > "$stamp"
fi

if [ "$merged" = 1 ] && ! merged_ready; then
  quantize=$("$here/scripts/build_llama_quantize.sh")
  base_gguf=$("$dev_python" -c 'from cpu_inference.cli.local_models import smollm2_path; print(smollm2_path())')
  echo "build_lora: merging $peft_dir into $base_dir" >&2
  PYTHONPATH="$work/deps" "$vllm_python" "$here/scripts/train_lora.py" merge "$base_dir" "$peft_dir" "$work/merged" \
    >>"$log" 2>&1 || fail "scripts/train_lora.py merge failed"
  # The merged model at the base GGUF's own file type (general.file_type, a llama_ftype: gguf-py's LlamaFileType).
  ftype=$(PYTHONPATH="$work/$vendor/gguf-py" "$vllm_python" - "$base_gguf" <<'EOF'
import sys
import gguf
field = gguf.GGUFReader(sys.argv[1]).fields["general.file_type"]
print(gguf.LlamaFileType(int(field.contents())).name.removeprefix("MOSTLY_"))
EOF
  ) || fail "reading general.file_type of $base_gguf failed"
  "$vllm_python" "$work/$vendor/convert_hf_to_gguf.py" "$work/merged" --outtype bf16 \
    --outfile "$work/merged-bf16.gguf" >>"$log" 2>&1 || fail "convert_hf_to_gguf.py of the merged model failed"
  "$quantize" "$work/merged-bf16.gguf" "$work/merged.gguf" "$ftype" >>"$log" 2>&1 || fail "quantize-gguf $ftype failed"
  echo "build_lora: merged $ftype $(du -h "$work/merged.gguf" | cut -f1)" >&2
  mv "$work/merged.gguf" "$merged_gguf"
  echo "$merged_recipe" > "$merged_stamp"
fi
done_
