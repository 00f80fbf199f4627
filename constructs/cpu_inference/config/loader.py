"""YAML -> Config, with one precise line per problem: `config.yaml: <key path>: <what> — <fix>`."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, get_args

import yaml
from pydantic import BaseModel, ValidationError

from cpu_inference.config.problems import ConfigError, Problem
from cpu_inference.config.rules import check
from cpu_inference.config.schema import Config


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML silently keeps the last of two equal keys; a config must not."""


class _FastUniqueKeyLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """The same with libyaml's parser when PyYAML has it: a 1,000-model farm parses in ~0.1 s instead of ~0.6 s.
    Its syntax errors are terser, so a file it refuses is parsed again by _UniqueKeyLoader for the message."""


def _construct_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r} (first on line {seen[key] + 1}) — keep one", key_node.start_mark
            )
        seen[key] = key_node.start_mark.line
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
_FastUniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def format_path(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _model_class(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model inside an annotation such as `Model`, `list[Model]` or `Model | None`."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = _model_class(arg)
        if found:
            return found
    return None


def _walk(loc: tuple[Any, ...]) -> tuple[type[BaseModel] | None, str | None, type[BaseModel] | None]:
    """Follow `loc` through the schema: (the model holding the last key, that key, the key's own model)."""
    cls: type[BaseModel] | None = Config
    parent: type[BaseModel] | None = None
    key: str | None = None
    for part in loc:
        if isinstance(part, int) or cls is None:
            continue
        field = cls.model_fields.get(part)
        if field is None:
            return cls, str(part), None
        parent, key = cls, part
        cls = _model_class(field.annotation)
    return parent, key, cls


def _description(loc: tuple[Any, ...]) -> str | None:
    parent, key, _ = _walk(loc)
    if parent is None or key is None or key not in parent.model_fields:
        return None
    return parent.model_fields[key].description


def _allowed_keys(loc: tuple[Any, ...]) -> list[str]:
    holder = _walk(loc[:-1])[2] if len(loc) > 1 else Config
    return list(holder.model_fields) if holder else []


def _problem_from_pydantic(err: Mapping[str, Any]) -> Problem:  # pydantic_core.ErrorDetails
    loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and ("[" in p or p.startswith("function-"))))
    path = format_path(loc)
    kind = err["type"]
    desc = _description(loc)
    if kind == "extra_forbidden":
        if loc[:1] == ("model_groups",) and loc[2:] == ("defaults", "name"):
            return Problem(path, f"a name is per model — give each entry of model_groups[{loc[1]}].models its own name")
        allowed = _allowed_keys(loc)
        close = difflib.get_close_matches(str(loc[-1]), allowed, n=1, cutoff=0.6)
        hint = f"did you mean '{close[0]}'?" if close else f"allowed keys: {', '.join(allowed)}"
        return Problem(path, f"unknown key — {hint}")
    if kind == "missing":
        if (
            len(loc) > 4 and loc[0] == "model_groups" and loc[2] == "models" and loc[4] != "name"
        ):  # merged over defaults
            return Problem(
                path, f"required — set it in this entry or in model_groups[{loc[1]}].defaults: {desc or 'add this key'}"
            )
        return Problem(path, f"required — {desc or 'add this key'}")
    msg = err["msg"]
    if kind in ("value_error", "assertion_error"):
        msg = msg.removeprefix("Value error, ").removeprefix("Assertion failed, ")
        return Problem(path, msg if "—" in msg else f"{msg} — {desc or 'fix this value'}")
    if kind in ("literal_error", "enum"):
        got = err.get("input")
        return Problem(path, f"{got!r} is not allowed — {msg.replace('Input should be', 'use')}")
    got = err.get("input")
    shown = f" (got {got!r})" if not isinstance(got, (dict, list)) else ""
    return Problem(path, f"{msg[0].lower()}{msg[1:]}{shown} — {desc or 'fix this value'}")


def parse(text: str, filename: str = "config.yaml") -> Config:
    """Parse YAML text into a Config, raising ConfigError with every problem found (never a traceback)."""
    try:
        try:
            data = yaml.load(text, Loader=_FastUniqueKeyLoader)  # noqa: S506 - (C)SafeLoader subclass
        except yaml.YAMLError:
            data = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        what = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(filename, [Problem(where, f"invalid YAML: {what} — fix the syntax at that place")]) from None
    if data is None:
        raise ConfigError(filename, [Problem("", "the file is empty — start from the repository's config.yaml")])
    if not isinstance(data, dict):
        raise ConfigError(
            filename, [Problem("", "the top level must be a mapping of keys (project:, target:, models: …)")]
        )
    try:
        config = Config.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(filename, [_problem_from_pydantic(e) for e in exc.errors()]) from None
    problems = check(config)
    errors = [p for p in problems if p.severity == "error"]
    if errors:
        raise ConfigError(filename, errors)
    return config


def load(path: str | Path) -> Config:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(str(path), [Problem("", "file not found — pass the path of a config.yaml")]) from None
    return parse(text, str(path))


def warnings_for(config: Config) -> list[Problem]:
    return [p for p in check(config) if p.severity == "warning"]
