# Sourced by the build scripts: the ONE cache rule and the ONE way to get the pinned engine sdist.
#   cache: $CPU_INFERENCE_CACHE, else $XDG_CACHE_HOME/cpu-inference, else ~/.cache/cpu-inference
#          (the same rule as cpu_inference._internal.resources.cache_dir(), which the library and the tests use).
#   pinned_sdist: prints the path of the llama-cpp-python sdist of containers/llama-server/engine-pin.env in
#          $cache/sdist/, downloading it from PyPI once and checking its sha256 every time.
# shellcheck shell=bash
_lib_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=/dev/null
. "$_lib_root/containers/llama-server/engine-pin.env"
cache=${CPU_INFERENCE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/cpu-inference}

pinned_sdist() {
  local dir="$cache/sdist" sdist="$cache/sdist/$LLAMA_CPP_PYTHON_SDIST" part
  if [ ! -f "$sdist" ]; then
    mkdir -p "$dir"
    part=$(mktemp -d "$dir/.download.XXXXXX")
    echo "downloading llama-cpp-python $LLAMA_CPP_PYTHON_VERSION sdist" >&2
    "${PYTHON:-python3}" -m pip download -q --no-deps --no-binary :all: --no-build-isolation \
      "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION" -d "$part" >&2 2>/dev/null \
      || "${PYTHON:-python3}" -m pip download -q --no-deps --no-binary :all: "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION" -d "$part" >&2
    echo "$LLAMA_CPP_PYTHON_SHA256  $part/$LLAMA_CPP_PYTHON_SDIST" | sha256sum -c --quiet - >&2
    mv "$part/$LLAMA_CPP_PYTHON_SDIST" "$sdist"  # same filesystem: atomic, so a reader never sees half a file
    rm -rf "$part"
  else
    echo "$LLAMA_CPP_PYTHON_SHA256  $sdist" | sha256sum -c --quiet - >&2  # a cached copy, checked at every use
  fi
  echo "$sdist"
}
