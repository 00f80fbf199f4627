"""config.yaml (Config) -> pattern props. The only place where the config meets the constructs: constructs never
read config.yaml, the app does, through these pure functions."""

from __future__ import annotations

from ..config import Config, model_spec
from .served_model import ServedModel


def served_models(config: Config) -> tuple[ServedModel, ...]:
    return tuple(
        ServedModel(
            name=m.name, hf_repo=m.source.hf_repo, file=m.source.file, revision=m.source.revision,
            sha256=m.source.sha256, token_secret_name=m.source.token_secret_name, spec=model_spec(m),
            role=config.role_of(m), replicas_min=m.replicas.min, replicas_max=m.replicas.max,
            instance_type=(m.instance_type or config.sagemaker.instance_type) if config.target == "sagemaker" else None,
            cpu=m.cpu,
        )
        for m in config.models
    )
