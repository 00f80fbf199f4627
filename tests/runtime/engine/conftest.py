"""Engine container tests: the entrypoint's own code (containers/llama-server) driving the real llama-server."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.runtime.engine.serving import ENGINE_DIR, start_endpoint, stop_endpoint

# The container's modules are plain top-level modules next to entrypoint.py (no package in the image).
if str(ENGINE_DIR) not in sys.path:
    sys.path.insert(0, str(ENGINE_DIR))


@pytest.fixture(scope="module")
def endpoint(llama_server_bin: Path, smollm2_gguf: Path, tmp_path_factory: pytest.TempPathFactory):
    ep = start_endpoint(llama_server_bin, smollm2_gguf, tmp_path_factory.mktemp("sagemaker"))
    yield ep
    stop_endpoint(ep)
