#!/usr/bin/env bash
# Prints the path of the pinned llama-cpp-python sdist (containers/llama-server/engine-pin.env) in the cache,
# downloading it from PyPI once, sha256-checked. Tests read upstream's own files (gguf-py, the cmake tree) from it.
set -euo pipefail
# shellcheck source=scripts/cache_lib.sh
. "$(dirname "$0")/cache_lib.sh"
pinned_sdist
