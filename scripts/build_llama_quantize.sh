#!/usr/bin/env bash
# Builds a GGUF quantizer from the ONE engine pin (the llama.cpp tree vendored in the llama-cpp-python sdist) into a
# cache, and prints the binary's path: `quantize-gguf IN.gguf OUT.gguf TYPE`. Used by benchmarks/engines.py to make
# Q8_0 / Q4_K_M GGUFs from the same checkpoint vLLM serves, so both engines run the same weights.
#
# Why not the `llama-quantize` target: it links llama-common (51 compile units of chat parsers, argument handling,
# downloads), which took the 2-vCPU test machine past 12 minutes. Quantizing is one library call,
# llama_model_quantize() in libllama (src/llama-quant.cpp); `llama-quantize IN OUT TYPE` with no options calls it
# with llama_model_quantize_default_params() between llama_backend_init() and llama_backend_free()
# (tools/quantize/quantize.cpp). The driver below makes exactly that call, so only libllama + ggml are built.
# A work tree left by an interrupted run is resumed (cmake builds incrementally), not wiped.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/cache_lib.sh
. "$here/scripts/cache_lib.sh"  # $cache, the pin's variables, pinned_sdist
dest="$cache/llama-quantize-$LLAMA_CPP_PYTHON_VERSION"
bin="$dest/bin/quantize-gguf"
recipe="pin=$LLAMA_CPP_PYTHON_SHA256 native no-amx-on-x86 libllama-driver v2"
cached() { [ -x "$bin" ] && [ "$(cat "$dest/recipe" 2>/dev/null)" = "$recipe" ] && { "$bin" >/dev/null 2>&1 || [ $? -eq 2 ]; }; }
if cached; then echo "$bin"; exit 0; fi
mkdir -p "$dest"
exec 9>"$dest/.lock"
flock 9
if cached; then echo "$bin"; exit 0; fi
work="$dest/work"
src="$work/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION/vendor/llama.cpp"
if [ "$(cat "$work/pin" 2>/dev/null)" != "$LLAMA_CPP_PYTHON_SHA256" ] || [ ! -d "$src" ]; then
  rm -rf "$work"; mkdir -p "$work"
  sdist=$(pinned_sdist)
  tar -xzf "$sdist" -C "$work"
  echo "$LLAMA_CPP_PYTHON_SHA256" > "$work/pin"
fi
flags=()
if [ "$(uname -m)" = x86_64 ]; then
  # As build_llama_server.sh: no AMX code (llama.cpp#20824 segfaults on AMX hosts with this pin).
  flags=(-mno-amx-tile -mno-amx-int8 -mno-amx-bf16)
fi
cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
  -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_CURL=OFF \
  -DLLAMA_OPENSSL=OFF -DGGML_NATIVE=ON "-DCMAKE_C_FLAGS=${flags[*]}" "-DCMAKE_CXX_FLAGS=${flags[*]}" >&2
cmake --build "$work/build" --target llama -j "${JOBS:-2}" >&2
mkdir -p "$dest/bin"
cat > "$work/quantize_gguf.cpp" <<'EOF'
// quantize-gguf IN.gguf OUT.gguf TYPE: `llama-quantize IN OUT TYPE` without options (tools/quantize/quantize.cpp).
#include "llama.h"
#include <cstdio>
#include <cstring>
static const struct { const char * name; llama_ftype ftype; } TYPES[] = {
    {"Q4_0", LLAMA_FTYPE_MOSTLY_Q4_0}, {"Q4_1", LLAMA_FTYPE_MOSTLY_Q4_1}, {"Q5_0", LLAMA_FTYPE_MOSTLY_Q5_0},
    {"Q5_1", LLAMA_FTYPE_MOSTLY_Q5_1}, {"Q8_0", LLAMA_FTYPE_MOSTLY_Q8_0}, {"Q4_K_S", LLAMA_FTYPE_MOSTLY_Q4_K_S},
    {"Q4_K_M", LLAMA_FTYPE_MOSTLY_Q4_K_M}, {"Q5_K_M", LLAMA_FTYPE_MOSTLY_Q5_K_M}, {"Q6_K", LLAMA_FTYPE_MOSTLY_Q6_K},
    {"F16", LLAMA_FTYPE_MOSTLY_F16}, {"BF16", LLAMA_FTYPE_MOSTLY_BF16},
};
int main(int argc, char ** argv) {
    if (argc != 4) { fprintf(stderr, "usage: %s IN.gguf OUT.gguf TYPE (Q8_0, Q4_K_M, ...)\n", argv[0]); return 2; }
    llama_model_quantize_params params = llama_model_quantize_default_params();
    bool known = false;
    for (const auto & t : TYPES) { if (strcmp(t.name, argv[3]) == 0) { params.ftype = t.ftype; known = true; } }
    if (!known) { fprintf(stderr, "quantize-gguf: unknown type %s\n", argv[3]); return 2; }
    llama_backend_init();
    const uint32_t rc = llama_model_quantize(argv[1], argv[2], &params);
    llama_backend_free();
    if (rc != 0) { fprintf(stderr, "quantize-gguf: llama_model_quantize failed (%u)\n", rc); return 1; }
    return 0;
}
EOF
b="$work/build"
c++ -O2 -std=c++17 "${flags[@]}" -I"$src/include" -I"$src/ggml/include" "$work/quantize_gguf.cpp" \
  "$b/src/libllama.a" "$b/ggml/src/libggml.a" "$b/ggml/src/libggml-cpu.a" "$b/ggml/src/libggml-base.a" \
  -fopenmp -lpthread -ldl -lm -o "$bin.tmp"
mv "$bin.tmp" "$bin"
echo "$recipe" > "$dest/recipe"
rm -rf "$work"
echo "$bin"
