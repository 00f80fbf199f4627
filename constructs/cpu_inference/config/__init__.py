"""config.yaml: schema, loader (errors name the key path and the fix) and decision rules."""

from .loader import load, parse, warnings_for
from .problems import ConfigError, Problem
from .rules import eks_candidates, model_spec, size_model
from .schema import Config, Model

__all__ = ["Config", "ConfigError", "Model", "Problem", "eks_candidates", "load", "model_spec", "parse", "size_model", "warnings_for"]
