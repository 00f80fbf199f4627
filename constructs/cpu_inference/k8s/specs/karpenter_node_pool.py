"""Typed Karpenter v1 NodePool (`karpenter.sh/v1`): requirements, taints, disruption budgets, rendered to the
CRD's dict; `validate()` repeats the CEL rules a JSON-schema check cannot see.

Spot preference: in Karpenter v1 a NodePool whose `karpenter.sh/capacity-type` requirement lists both
`spot` and `on-demand` launches Spot when it is available and falls back to On-Demand when it is not
(Karpenter's price-capacity-optimized Spot is tried first). One pool listing both is therefore "Spot
preferred with On-Demand fallback"; no second pool or weight trick is needed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cpu_inference.k8s.specs.karpenter_rules import (
    ARCH,
    ARCHITECTURES,
    CAPACITY_TYPE,
    CAPACITY_TYPES,
    CONSOLIDATION_POLICIES,
    DURATION,
    EFFECTS,
    INSTANCE_CATEGORY,
    INSTANCE_FAMILY,
    INSTANCE_GENERATION,
    INSTANCE_TYPE,
    NODECLASS_GROUP,
    NODEPOOL_API,
    OPERATORS,
    OS,
    check_key,
    check_name,
    family_architecture,
)

_BUDGET_NODES = re.compile(r"^((100|[0-9]{1,2})%|[0-9]+)$")


@dataclass(frozen=True)
class Requirement:
    """One NodeSelectorRequirement (with Karpenter's optional minValues)."""

    key: str
    operator: str
    values: tuple[str, ...] = ()
    min_values: int | None = None

    def validate(self) -> None:
        check_key("requirement", self.key)
        if self.operator not in OPERATORS:
            raise ValueError(f"requirement {self.key}: operator {self.operator!r} is not one of {OPERATORS}")
        if self.operator == "In" and not self.values:
            raise ValueError(f"requirement {self.key}: operator In needs at least one value")
        if self.operator in ("Gt", "Lt", "Gte", "Lte") and (len(self.values) != 1 or not self.values[0].isdigit()):
            raise ValueError(
                f"requirement {self.key}: operator {self.operator} needs exactly one non-negative integer value"
            )
        if self.min_values is not None and self.operator == "In" and len(self.values) < self.min_values:
            raise ValueError(
                f"requirement {self.key}: minValues {self.min_values} exceeds the {len(self.values)} values listed"
            )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"key": self.key, "operator": self.operator}
        if self.values:
            out["values"] = list(self.values)
        if self.min_values is not None:
            out["minValues"] = self.min_values
        return out


@dataclass(frozen=True)
class Taint:
    key: str
    value: str | None = None
    effect: str = "NoSchedule"

    def validate(self) -> None:
        if self.effect not in EFFECTS:
            raise ValueError(f"taint {self.key}: effect {self.effect!r} is not one of {EFFECTS}")

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"key": self.key, "effect": self.effect}
        if self.value is not None:
            out["value"] = self.value
        return out

    def toleration(self) -> dict[str, Any]:
        """The pod toleration that lets a workload land on nodes with this taint."""
        if self.value is None:
            return {"key": self.key, "operator": "Exists", "effect": self.effect}
        return {"key": self.key, "operator": "Equal", "value": self.value, "effect": self.effect}


@dataclass(frozen=True)
class Budget:
    """At most `nodes` (count or percent) disrupted at once, optionally only for some reasons or in a window."""

    nodes: str = "20%"
    reasons: tuple[str, ...] = ()
    schedule: str | None = None
    duration: str | None = None

    def validate(self) -> None:
        if not _BUDGET_NODES.match(self.nodes):
            raise ValueError(f"disruption budget nodes {self.nodes!r} must be a count (e.g. 2) or a percent (e.g. 20%)")
        if (self.schedule is None) != (self.duration is None):
            raise ValueError("disruption budget: schedule and duration must be set together")
        bad = [r for r in self.reasons if r not in ("Underutilized", "Empty", "Drifted")]
        if bad:
            raise ValueError(f"disruption budget reasons {bad} are not Underutilized, Empty or Drifted")

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"nodes": self.nodes}
        if self.reasons:
            out["reasons"] = list(self.reasons)
        if self.schedule is not None:
            out["schedule"] = self.schedule
            out["duration"] = self.duration
        return out


@dataclass(frozen=True)
class Disruption:
    consolidation_policy: str = "WhenEmptyOrUnderutilized"
    consolidate_after: str = "1m"
    budgets: tuple[Budget, ...] = (Budget("20%"),)

    def validate(self) -> None:
        if self.consolidation_policy not in CONSOLIDATION_POLICIES:
            raise ValueError(
                f"consolidationPolicy {self.consolidation_policy!r} is not one of {CONSOLIDATION_POLICIES}"
            )
        if not DURATION.match(self.consolidate_after):
            raise ValueError(f"consolidateAfter {self.consolidate_after!r} must look like 30s, 5m, 1h or Never")
        for b in self.budgets:
            b.validate()

    def to_dict(self) -> dict[str, Any]:
        return {
            "consolidationPolicy": self.consolidation_policy,
            "consolidateAfter": self.consolidate_after,
            "budgets": [b.to_dict() for b in self.budgets],
        }


@dataclass(frozen=True)
class NodePoolSpec:
    """A Karpenter NodePool. Defaults: Spot preferred with On-Demand fallback, consolidation of empty or
    underutilized nodes with at most 20% of nodes disrupted at once, nodes recycled after 30 days."""

    name: str
    node_class: str
    architectures: tuple[str, ...] = ("arm64",)
    capacity_types: tuple[str, ...] = ("spot", "on-demand")
    instance_families: tuple[str, ...] = ()
    instance_categories: tuple[str, ...] = ()
    min_generation: int | None = None  # rendered as instance-generation Gt (min_generation - 1)
    instance_types: tuple[str, ...] = ()
    extra_requirements: tuple[Requirement, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    startup_taints: tuple[Taint, ...] = ()
    disruption: Disruption = Disruption()
    limit_cpu: int | None = 256
    limit_memory: str | None = None
    weight: int | None = None
    expire_after: str = "720h"
    termination_grace_period: str | None = None

    def requirements(self) -> list[Requirement]:
        reqs = [
            Requirement(ARCH, "In", tuple(self.architectures)),
            Requirement(OS, "In", ("linux",)),
            Requirement(CAPACITY_TYPE, "In", tuple(self.capacity_types)),
        ]
        if self.instance_categories:
            reqs.append(Requirement(INSTANCE_CATEGORY, "In", tuple(self.instance_categories)))
        if self.instance_families:
            reqs.append(Requirement(INSTANCE_FAMILY, "In", tuple(self.instance_families)))
        if self.min_generation is not None:
            reqs.append(Requirement(INSTANCE_GENERATION, "Gt", (str(self.min_generation - 1),)))
        if self.instance_types:
            reqs.append(Requirement(INSTANCE_TYPE, "In", tuple(self.instance_types)))
        return reqs + list(self.extra_requirements)

    def validate(self) -> None:
        check_name("NodePool", self.name)
        check_name("NodePool nodeClassRef", self.node_class)
        if not self.architectures or any(a not in ARCHITECTURES for a in self.architectures):
            raise ValueError(
                f"NodePool {self.name}: architectures {self.architectures} must be a non-empty subset of {ARCHITECTURES}"
            )
        if not self.capacity_types or any(c not in CAPACITY_TYPES for c in self.capacity_types):
            raise ValueError(
                f"NodePool {self.name}: capacity_types {self.capacity_types} must be a non-empty subset of {CAPACITY_TYPES}"
            )
        for fam in self.instance_families:
            arch = family_architecture(fam)
            if arch not in self.architectures:
                raise ValueError(
                    f"NodePool {self.name}: instance family {fam} is {arch} but the pool allows only {list(self.architectures)}"
                )
        if self.min_generation is not None and self.min_generation < 1:
            raise ValueError(f"NodePool {self.name}: min_generation must be ≥ 1")
        if not DURATION.match(self.expire_after):
            raise ValueError(f"NodePool {self.name}: expireAfter {self.expire_after!r} must look like 720h or Never")
        if self.weight is not None and not 1 <= self.weight <= 100:
            raise ValueError(f"NodePool {self.name}: weight {self.weight} must be between 1 and 100")
        if self.limit_cpu is not None and self.limit_cpu <= 0:
            raise ValueError(f"NodePool {self.name}: limit_cpu must be positive")
        for label in self.labels:
            check_key(f"NodePool {self.name} label", label)
        for t in self.taints + self.startup_taints:
            t.validate()
        for r in self.requirements():
            r.validate()
        self.disruption.validate()

    def to_dict(self) -> dict[str, Any]:
        self.validate()
        template_spec: dict[str, Any] = {
            "nodeClassRef": {"group": NODECLASS_GROUP, "kind": "EC2NodeClass", "name": self.node_class},
            "requirements": [r.to_dict() for r in self.requirements()],
            "expireAfter": self.expire_after,
        }
        if self.taints:
            template_spec["taints"] = [t.to_dict() for t in self.taints]
        if self.startup_taints:
            template_spec["startupTaints"] = [t.to_dict() for t in self.startup_taints]
        if self.termination_grace_period:
            template_spec["terminationGracePeriod"] = self.termination_grace_period
        template: dict[str, Any] = {"spec": template_spec}
        if self.labels:
            template["metadata"] = {"labels": dict(self.labels)}
        spec: dict[str, Any] = {"template": template, "disruption": self.disruption.to_dict()}
        limits: dict[str, Any] = {}
        if self.limit_cpu is not None:
            limits["cpu"] = str(self.limit_cpu)
        if self.limit_memory is not None:
            limits["memory"] = self.limit_memory
        if limits:
            spec["limits"] = limits
        if self.weight is not None:
            spec["weight"] = self.weight
        return {"apiVersion": NODEPOOL_API, "kind": "NodePool", "metadata": {"name": self.name}, "spec": spec}
