"""Build-context material for the image tests: the repo's real engine pin and a stand-in Dockerfile."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
REAL_PIN = ROOT / "containers" / "llama-server" / "engine-pin.env"

# A stand-in Dockerfile: the construct only ships the context; these tests never build it.
DOCKERFILE = """\
FROM public.ecr.aws/docker/library/debian:bookworm-slim
ARG LLAMA_CPP_PYTHON_VERSION
ARG LLAMA_CPP_PYTHON_SDIST
ARG LLAMA_CPP_PYTHON_SHA256
RUN echo "engine $LLAMA_CPP_PYTHON_VERSION"
"""
