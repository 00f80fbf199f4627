"""Numbers from the environment, for every image (stdlib only): the one place an image turns a variable into an int
or a float, so each wrong value is one line naming the variable, what it must be, and what it got.

    env_int(env, "LLAMA_PARALLEL", 1, minimum=1)   -> "LLAMA_PARALLEL must be an integer >= 1, got 'two'"
    env_float(env, "X", 5.0, minimum=0, hint="0 = do not watch")
                                                   -> "X must be a number >= 0 (0 = do not watch), got -1"

An unset or blank variable is its default. The error is EngineConfigError (the entrypoints print it as one line and
exit 2); the router turns it into its own ConfigError. tests/runtime/test_inference_runtime.py checks that no image
parses a number from the environment any other way.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TypeVar, overload

N = TypeVar("N", int, float)


class EngineConfigError(ValueError):
    """The environment does not describe something this image can run (the message names the variable)."""


def _what(kind: str, minimum: float | None, hint: str) -> str:
    bound = "" if minimum is None else f" >= {minimum:g}"
    return f"{kind}{bound}{f' ({hint})' if hint else ''}"


def _parse(
    env: Mapping[str, str],
    name: str,
    default: N | None,
    parse: Callable[[str], N],
    kind: str,
    minimum: float | None,
    hint: str,
) -> N | None:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = parse(raw)
    except ValueError:
        raise EngineConfigError(f"{name} must be {_what(kind, minimum, hint)}, got {raw!r}") from None
    if minimum is not None and value < minimum:
        raise EngineConfigError(f"{name} must be {_what(kind, minimum, hint)}, got {raw}")
    return value


@overload
def env_int(env: Mapping[str, str], name: str, default: int, *, minimum: int | None = None, hint: str = "") -> int: ...
@overload
def env_int(
    env: Mapping[str, str], name: str, default: None, *, minimum: int | None = None, hint: str = ""
) -> int | None: ...
def env_int(
    env: Mapping[str, str], name: str, default: int | None, *, minimum: int | None = None, hint: str = ""
) -> int | None:
    """`name` as an integer (at least `minimum`), `default` when it is unset or blank."""
    return _parse(env, name, default, int, "an integer", minimum, hint)


@overload
def env_float(
    env: Mapping[str, str], name: str, default: float, *, minimum: float | None = None, hint: str = ""
) -> float: ...
@overload
def env_float(
    env: Mapping[str, str], name: str, default: None, *, minimum: float | None = None, hint: str = ""
) -> float | None: ...
def env_float(
    env: Mapping[str, str], name: str, default: float | None, *, minimum: float | None = None, hint: str = ""
) -> float | None:
    """`name` as a number (at least `minimum`), `default` when it is unset or blank."""
    return _parse(env, name, default, float, "a number", minimum, hint)


def env_str(env: Mapping[str, str], name: str, default: str) -> str:
    """`name` stripped, `default` when it is unset or blank."""
    return env.get(name, "").strip() or default
