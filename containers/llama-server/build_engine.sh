#!/usr/bin/env bash
# Builds the image's llama-server from the engine pin's sdist with RUNTIME CPU dispatch, into PREFIX/bin.
#   usage: build_engine.sh SDIST SHA256 PREFIX
#          build_engine.sh --cmake-flags     (prints the configure flags, one a line; the tests configure
#                                              the pinned tree with exactly these for amd64 and arm64)
#   (CPU_ALL_VARIANTS=OFF builds one baseline CPU module instead: a quick local check of the packaging)
# GGML_BACKEND_DL + GGML_CPU_ALL_VARIANTS build one CPU backend per ISA level (x86: SSE4.2 .. AVX-512
# VNNI/BF16 (AMX dropped, see below); Arm: armv8.0 .. armv8.6 SVE2 / armv9.2 SME) and pick the best one for the host at start-up,
# so one image serves Graviton 2/3/4 or Zen/Sapphire Rapids, not just the build host's CPU.
# The armv9.2 (SME) variants need GCC >= 14: the image builds on Debian trixie.
set -euo pipefail
# $ORIGIN: the binary, its libraries and the CPU variant modules live in one directory (ggml looks
# for backend modules next to the executable).
# shellcheck disable=SC2016
flags=(
  -DCMAKE_BUILD_TYPE=Release
  -DBUILD_SHARED_LIBS=ON -DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS="${CPU_ALL_VARIANTS:-ON}" -DGGML_NATIVE=OFF
  -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF
  -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF
  -DCMAKE_BUILD_WITH_INSTALL_RPATH=ON -DCMAKE_INSTALL_RPATH='$ORIGIN'
)
if [ "${1:-}" = "--cmake-flags" ]; then
  printf '%s\n' "${flags[@]}"
  exit 0
fi
sdist=$1 sha256=$2 prefix=$3
echo "$sha256  $sdist" | sha256sum -c -
work=$(mktemp -d)
tar -xzf "$sdist" -C "$work"
src=$(find "$work" -mindepth 3 -maxdepth 3 -type d -path '*/vendor/llama.cpp')
cmake -S "$src" -B "$work/build" "${flags[@]}"
cmake --build "$work/build" --target llama-server -j "${JOBS:-$(nproc)}"
mkdir -p "$prefix/bin"
cp "$work/build/bin/llama-server" "$prefix/bin/"
cp -P "$work/build/bin/"*.so* "$prefix/bin/"
# No AMX module: with this pin, AMX hosts crash at the first decode (reproduced on a Sapphire Rapids-class
# VM: this script's sapphirerapids module dies with SIGILL, a -march=native build segfaults in
# ggml_backend_amx_mul_mat; upstream llama.cpp#20824). Without it they load the zen4 module
# (AVX-512 VNNI + BF16), which serves on the same VM.
# Revisit when the pin moves past a fix (tests/runtime/engine/test_image_definition.py lists AMX variants).
rm -f "$prefix/bin/libggml-cpu-sapphirerapids.so"
# OpenMP runtime of the same toolchain, so the runtime stage needs no package manager.
cp -L "$("${CC:-gcc}" -print-file-name=libgomp.so.1)" "$prefix/bin/"
rm -rf "$work"
"$prefix/bin/llama-server" --version
