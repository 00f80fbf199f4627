"""cdk-cpu-inference: AWS CDK + cdk8s constructs for CPU-first LLM/SLM inference with llama.cpp.

The public API is re-exported here; see README.md for the architecture and examples."""

from . import sizing
from .config import Config, ConfigError, load as load_config

__all__ = ["Config", "ConfigError", "load_config", "sizing"]
