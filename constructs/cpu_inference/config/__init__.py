"""config.yaml: schema, loader (errors name the key path and the fix) and decision rules."""

from cpu_inference.config.loader import load, parse, warnings_for
from cpu_inference.config.problems import ConfigError, Problem
from cpu_inference.config.rules import eks_candidates, model_spec, plan_pool, pool_budget, pool_instance_of, size_model
from cpu_inference.config.schema import Config, Farm, FarmPool, Model, ModelGroup

__all__ = [
    "Config",
    "ConfigError",
    "Farm",
    "FarmPool",
    "Model",
    "ModelGroup",
    "Problem",
    "eks_candidates",
    "load",
    "model_spec",
    "parse",
    "plan_pool",
    "pool_budget",
    "pool_instance_of",
    "size_model",
    "warnings_for",
]
