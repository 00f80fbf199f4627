"""CloudFormation's own update semantics, from the resource provider schemas cfn-lint ships: a change to a
createOnly property replaces the resource (new physical resource, old one deleted after the update)."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import cfnlint

_SCHEMAS = Path(cfnlint.__file__).parent / "data" / "schemas"


@functools.cache
def create_only(resource_type: str, region: str = "us-east-1") -> frozenset[str]:
    index = json.loads((_SCHEMAS / "providers" / f"{region}.json").read_text())
    schema = json.loads((_SCHEMAS / "resources" / f"{index[resource_type]}.json").read_text())
    return frozenset(p.removeprefix("/properties/") for p in schema.get("createOnlyProperties", []))


def replaced_by(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """The createOnly properties whose values differ between two versions of one logical resource."""
    assert old["Type"] == new["Type"]
    props_old, props_new = old.get("Properties", {}), new.get("Properties", {})
    return sorted(p for p in create_only(old["Type"]) if props_old.get(p) != props_new.get(p))
