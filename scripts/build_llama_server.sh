#!/usr/bin/env bash
# Builds llama-server from the ONE engine pin (the llama.cpp tree vendored in the llama-cpp-python sdist)
# into a cache, and prints the binary's path. The container image builds from the same sdist and sha256
# (containers/llama-server/engine-pin.env), so what the tests run is what the image ships.
set -euo pipefail
# shellcheck source=scripts/cache_lib.sh
. "$(dirname "$0")/cache_lib.sh"  # $cache, the pin's variables, pinned_sdist
dest="$cache/llama-server-$LLAMA_CPP_PYTHON_VERSION"
bin="$dest/bin/llama-server"
# The cached binary is reused only if it was built by this recipe (a changed flag set rebuilds it).
recipe="pin=$LLAMA_CPP_PYTHON_SHA256 native no-amx-on-x86 v2"
if [ -x "$bin" ] && [ "$(cat "$dest/recipe" 2>/dev/null)" = "$recipe" ] && "$bin" --version >/dev/null 2>&1; then
  echo "$bin"; exit 0
fi
# One build at a time: a second caller (another pytest session, `make test` beside a test run) waits for the
# first instead of wiping its work tree, then reuses its binary.
mkdir -p "$dest"
exec 9>"$dest/.lock"
flock 9
if [ -x "$bin" ] && [ "$(cat "$dest/recipe" 2>/dev/null)" = "$recipe" ] && "$bin" --version >/dev/null 2>&1; then
  echo "$bin"; exit 0
fi
work="$dest/work"
rm -rf "$work"; mkdir -p "$work" "$dest/bin"
# Kept in $cache/sdist: the tests read upstream's own files (gguf-py, the cmake tree) from the same sdist.
sdist=$(pinned_sdist)
tar -xzf "$sdist" -C "$work"
src="$work/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION/vendor/llama.cpp"
# Native ISA is right for a local test binary; the image uses runtime dispatch instead (see Dockerfile).
# Minus AMX on x86: the pinned llama.cpp segfaults in ggml_backend_amx_mul_mat at the first decode on AMX
# hosts (llama.cpp#20824), and the image ships no AMX module either (containers/llama-server/build_engine.sh).
no_amx=()
if [ "$(uname -m)" = x86_64 ]; then
  no_amx=("-DCMAKE_C_FLAGS=-mno-amx-tile -mno-amx-int8 -mno-amx-bf16" "-DCMAKE_CXX_FLAGS=-mno-amx-tile -mno-amx-int8 -mno-amx-bf16")
fi
cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
  -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_CURL=OFF \
  -DLLAMA_OPENSSL=OFF -DGGML_NATIVE=ON "${no_amx[@]}" >&2
cmake --build "$work/build" --target llama-server -j "$(nproc)" >&2
cp "$work/build/bin/llama-server" "$bin.tmp" && mv "$bin.tmp" "$bin"
echo "$recipe" > "$dest/recipe"
rm -rf "$work"
echo "$bin"
