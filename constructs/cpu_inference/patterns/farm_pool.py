"""A multi-model pool of the model farm: many models behind shared replicas, each loading the models it is asked
for and unloading the least recently used one at its cap (llama-server router mode on EKS, a SageMaker
multi-model endpoint on SageMaker)."""

from __future__ import annotations

import re
from dataclasses import dataclass

_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$")


@dataclass(frozen=True)
class FarmPoolSettings:
    """name: DNS label (the StatefulSet is `pool-<name>`, the endpoint `<stack>-<name>`). cpu / memory_gib: one
    replica's size (EKS pod; SageMaker uses instance_type). replicas_min / replicas_max: replica bounds (KEDA on
    EKS, target tracking on SageMaker). replication: how many replicas each model is routed to (EKS gateway
    affinity). models_max: models loaded at once per replica (default: pool_sizing from memory).
    instance_type: the multi-model endpoint's instance (target sagemaker). preload: the pool's hot models, loaded
    on every replica when it starts instead of on their first request (EKS only: on SageMaker the multi-model endpoint
    decides what is loaded), at most models_max of them (engines/pool_preset.py LOAD_ON_STARTUP)."""

    name: str = "default"
    cpu: float = 4
    memory_gib: float = 16
    replicas_min: int = 1
    replicas_max: int = 4
    replication: int = 2
    models_max: int | None = None
    instance_type: str | None = None
    preload: tuple[str, ...] = ()

    def validate(self) -> None:
        if not _NAME.match(self.name):
            raise ValueError(f"FarmPoolSettings.name must be a DNS label of at most 40 characters, got {self.name!r}")
        if not 0 <= self.replicas_min <= self.replicas_max or self.replicas_max < 1:
            raise ValueError(
                f"pool {self.name}: need 0 ≤ replicas_min ({self.replicas_min}) ≤ replicas_max ({self.replicas_max}), max ≥ 1"
            )
        if not 1 <= self.replication <= self.replicas_max:
            raise ValueError(
                f"pool {self.name}: replication ({self.replication}) must be 1..replicas_max ({self.replicas_max})"
            )
        if self.cpu <= 0 or self.memory_gib <= 0:
            raise ValueError(f"pool {self.name}: cpu and memory_gib must be > 0")
        if self.models_max is not None and self.models_max < 1:
            raise ValueError(f"pool {self.name}: models_max must be ≥ 1, got {self.models_max}")
