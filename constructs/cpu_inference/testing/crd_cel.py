"""Evaluate a CRD's CEL validation rules (`x-kubernetes-validations`) on an object, as the API server does.

The JSON-schema check in crd_validation.py cannot run these rules; this module does, with the semantics of
Kubernetes' "Validation rules" (kubernetes.io/docs/tasks/extend-kubernetes/custom-resources/
custom-resource-definitions/#validation-rules) as implemented in k8s.io/apiextensions-apiserver
(pkg/apiserver/schema/cel/validation.go, schema/defaulting/algorithm.go, registry/customresource/strategy.go):

- a rule belongs to the schema node that declares it and runs with `self` = that node's value, once per
  instance (every array item, every additionalProperties value); an absent or null node runs no rules;
- schema defaults are applied first (structural defaulting: a missing field, or a null one that is not
  nullable, gets its default; other non-nullable nulls are dropped), so rules see defaulted fields;
- transition rules (those that reference `oldSelf`) run only on update, when an old value correlates
  (object properties, map values, list-type=map items by key); on create (`old=None`) they are skipped,
  unless `optionalOldSelf: true`, which runs them with `oldSelf` = `optional.none()`;
- a rule that is false reports `messageExpression` (when it evaluates to a non-empty one-line string), else
  `message`, else "failed rule: <rule>", at the node's path plus `fieldPath`, as Invalid/Forbidden/Required/
  Duplicate per `reason`; an evaluation error reports "<error> evaluating rule: <message or rule>"; a rule
  that does not compile reports "rule compile error" — no rule is ever skipped silently.

Engine: cel-expr-python (a dev dependency), the CEL project's Python wrapper of its C++ runtime — the same
spec and standard library as cel-go, which the API server embeds — with its strings (`split`, ...),
bindings and optional extensions. Kubernetes adds libraries of its own; the only function these CRDs use
that cel-expr-python lacks is the Kubernetes regex library's `<string>.find(<regex>)` (the first match, or
''), registered below with Python's `re` (same result as Go's RE2 for the RE2 patterns the API server
accepted with the CRD). Any other missing function fails compilation and is reported as a problem.

Not modelled: the runtime cost budget; static typing from the schema (`self` is dyn here: the API server
already type-checked every rule when it accepted the CRD); pruning of unknown fields; `format: date|date-time|
duration|byte` strings becoming CEL timestamps/durations/bytes (cel-expr-python takes none nested in a map;
a rule that compared one would fail with a type error, not pass — and no rule of the pinned CRDs reads such
a field, which tests/k8s/test_crd_cel.py checks).
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

# The object would be rejected with these structural errors before any rule ran (strategy.go hasBlockingErr:
# NotSupported, Required, TooLong, TooMany, TypeInvalid), by the jsonschema keyword that reports them.
BLOCKING_KEYWORDS = frozenset({"enum", "required", "maxLength", "maxItems", "maxProperties", "type"})
# celconfig.MaxEvaluatedMessageExpressionSizeBytes
MAX_MESSAGE_EXPRESSION_BYTES = 5 * 1024
_OLD_VALUE = "oldSelfValue_"  # binds optionalOldSelf's old value; not a name a CRD rule can use


@dataclass(frozen=True)
class Rule:
    """One `x-kubernetes-validations` entry and where it is declared (`location`: a schema path such as
    `spec.template.spec.requirements[*].key`; `[*]` = every array item, `{*}` = every map value)."""

    location: str
    rule: str
    message: str = ""
    message_expression: str = ""
    reason: str = ""
    field_path: str = ""
    optional_old_self: bool = False

    @classmethod
    def from_schema(cls, location: str, entry: dict[str, Any]) -> Rule:
        return cls(
            location=location,
            rule=entry["rule"],
            message=entry.get("message", ""),
            message_expression=entry.get("messageExpression", ""),
            reason=entry.get("reason", ""),
            field_path=entry.get("fieldPath", ""),
            optional_old_self=bool(entry.get("optionalOldSelf", False)),
        )

    def error_string(self) -> str:
        """What the API server names a rule by in errors (validation.go ruleErrorString)."""
        return self.message.strip() or self.rule.strip()


def _node_rules(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield from node.get("x-kubernetes-validations") or ()
    for sub in node.get("allOf") or ():  # the API server runs rules in allOf too, on the same value
        yield from _node_rules(sub)


def schema_rules(schema: dict[str, Any], location: str = "") -> list[Rule]:
    """Every rule in an openAPIV3Schema, in schema order."""
    out = [Rule.from_schema(location, r) for r in _node_rules(schema)]
    for name, sub in (schema.get("properties") or {}).items():
        out += schema_rules(sub, f"{location}.{name}" if location else name)
    if isinstance(schema.get("items"), dict):
        out += schema_rules(schema["items"], f"{location}[*]")
    if isinstance(schema.get("additionalProperties"), dict):
        out += schema_rules(schema["additionalProperties"], f"{location}{{*}}")
    return out


# --- defaulting (defaulting/algorithm.go Default + prunenulls.go) ------------------------------------------


def apply_defaults(value: Any, schema: dict[str, Any]) -> None:
    """Structural defaulting in place, as the API server does before validation."""
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        for key, sub in props.items():
            if "default" in sub and (key not in value or (value[key] is None and not sub.get("nullable"))):
                value[key] = copy.deepcopy(sub["default"])
        addl = schema.get("additionalProperties")
        for key in list(value):
            sub = props.get(key) if key in props else (addl if isinstance(addl, dict) else None)
            if sub is None:
                continue
            if value[key] is None and not sub.get("nullable"):
                if "default" not in sub:
                    del value[key]
                    continue
                value[key] = copy.deepcopy(sub["default"])
            apply_defaults(value[key], sub)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        items = schema["items"]
        for i, item in enumerate(value):
            if item is None and not items.get("nullable") and "default" in items:
                value[i] = copy.deepcopy(items["default"])
            apply_defaults(value[i], items)


# --- the CEL environment -----------------------------------------------------------------------------------


def _find(text: str, pattern: str) -> str:
    """Kubernetes regex library: `<string>.find(<string>) -> string`, the first match or ''."""
    match = re.search(pattern, text)
    return match.group(0) if match else ""


class _Engine:
    """cel-expr-python environments (with and without `oldSelf`) and a cache of compiled rules."""

    def __init__(self) -> None:
        try:
            from cel_expr_python import cel
            from cel_expr_python.ext import ext_bindings, ext_optional, ext_strings
        except ImportError as exc:  # a dev dependency: say how to get it instead of skipping the rules
            raise ImportError(
                "evaluating the CRDs' CEL rules needs cel-expr-python: pip install 'cdk-cpu-inference[dev]' (or pip install cel-expr-python)"
            ) from exc
        self.cel = cel
        find = cel.FunctionDecl(
            "find",
            [
                cel.Overload(
                    "string_find_string",
                    cel.Type.STRING,
                    [cel.Type.STRING, cel.Type.STRING],
                    is_member=True,
                    impl=_find,
                )
            ],
        )

        def env(*names: str) -> Any:
            extensions = [ext_strings.ExtStrings(), ext_bindings.ExtBindings(), ext_optional.ExtOptional()]
            return cel.NewEnv(variables={n: cel.Type.DYN for n in names}, extensions=extensions, functions=[find])

        self.create_env, self.update_env, self.optional_env = (
            env("self"),
            env("self", "oldSelf"),
            env("self", _OLD_VALUE),
        )
        self._cache: dict[tuple[str, bool], Any] = {}

    def compile(self, source: str, optional_old_self: bool = False) -> tuple[Any, bool]:
        """(program, uses oldSelf) — raises with the compiler's message when the source does not compile.
        A rule uses oldSelf when it compiles only with `oldSelf` declared (the checker resolves the name)."""
        key = (source, optional_old_self)
        if key not in self._cache:
            if optional_old_self:
                none = self.optional_env.compile(f"cel.bind(oldSelf, optional.none(), {source})")
                some = self.optional_env.compile(f"cel.bind(oldSelf, optional.of({_OLD_VALUE}), {source})")
                self._cache[key] = ((none, some), True)
            else:
                try:
                    self._cache[key] = (self.create_env.compile(source), False)
                except Exception:
                    self._cache[key] = (self.update_env.compile(source), True)
        return self._cache[key]

    def run(self, program: Any, data: dict[str, Any]) -> tuple[Any, str | None]:
        """(value, None) or (None, error message)."""
        try:
            result = program.eval(data=data)
        except Exception as exc:  # the runtime raises for some failures and returns error values for others
            return None, str(exc)
        if result.type() == self.cel.Type.ERROR:
            return None, str(result.value())
        return result.value(), None


_engine: _Engine | None = None


def engine() -> _Engine:
    global _engine
    if _engine is None:
        _engine = _Engine()
    return _engine


# --- evaluation --------------------------------------------------------------------------------------------


def _scalar(value: Any) -> bool:
    return not isinstance(value, (dict, list))


def _field_error(path: str, value: Any, detail: str, reason: str) -> str:
    """apimachinery field.Error text for validation.go fieldErrorForReason."""
    if reason == "FieldValueForbidden":
        return f"{path}: Forbidden: {detail}"
    if reason == "FieldValueRequired":
        return f"{path}: Required value: {detail}"
    if reason == "FieldValueDuplicate":
        return f"{path}: Duplicate value: {json.dumps(value)}"
    shown = f" {json.dumps(value)}:" if _scalar(value) else ""
    return f"{path}: Invalid value:{shown} {detail}"


class RuleChecker:
    """One CRD version's schema with its rules; `validate` returns the API server's CEL errors for an object.
    `evaluated` collects every Rule that ran (true or false) — for coverage checks."""

    def __init__(self, schema: dict[str, Any]) -> None:
        self.schema = schema
        self.rules = schema_rules(schema)
        self.evaluated: set[Rule] = set()

    def compile_errors(self) -> dict[Rule, str]:
        """Rules (and messageExpressions) that do not compile here, with the compiler's message."""
        errors: dict[Rule, str] = {}
        eng = engine()
        for r in self.rules:
            for source in (r.rule, r.message_expression):
                if source:
                    try:
                        eng.compile(source, r.optional_old_self and source == r.rule)
                    except Exception as exc:
                        errors.setdefault(r, str(exc))
        return errors

    def validate(self, obj: dict[str, Any], old: dict[str, Any] | None = None) -> list[str]:
        new = copy.deepcopy(obj)
        apply_defaults(new, self.schema)
        if old is not None:
            old = copy.deepcopy(old)
            apply_defaults(old, self.schema)
        problems: list[str] = []
        self._walk(self.schema, "", "", new, old, problems)
        return problems

    def _walk(self, schema: dict[str, Any], location: str, path: str, value: Any, old: Any, out: list[str]) -> None:
        """`location` is the schema path (as in Rule.location), `path` the object's field path (as the API server
        prints it)."""
        if value is None:
            return
        for entry in _node_rules(schema):
            self._check(Rule.from_schema(location, entry), path or "<root>", value, old, out)
        if isinstance(value, dict):
            # every map type the API server knows (granular, atomic) correlates old values by key
            old_map = (
                old
                if isinstance(old, dict) and schema.get("x-kubernetes-map-type", "granular") in ("granular", "atomic")
                else {}
            )
            props, addl = schema.get("properties") or {}, schema.get("additionalProperties")
            for key, sub in value.items():
                if isinstance(addl, dict):
                    self._walk(addl, f"{location}{{*}}", f"{path}[{key}]", sub, old_map.get(key), out)
                if key in props:
                    child = f"{location}.{key}" if location else key
                    self._walk(props[key], child, f"{path}.{key}" if path else key, sub, old_map.get(key), out)
        elif isinstance(value, list) and isinstance(schema.get("items"), dict):
            old_items = _correlated_items(schema, old)
            for i, item in enumerate(value):
                self._walk(schema["items"], f"{location}[*]", f"{path}[{i}]", item, old_items(item), out)

    def _check(self, r: Rule, path: str, value: Any, old: Any, out: list[str]) -> None:
        eng = engine()  # outside the try: a missing engine is an ImportError for the caller, not a rule's problem
        try:
            program, uses_old_self = eng.compile(r.rule, r.optional_old_self)
        except Exception as exc:
            out.append(f"{path}: Invalid value: rule compile error: {exc} (rule: {r.rule})")
            return
        if r.optional_old_self:
            program = program[0] if old is None else program[1]
            data = {"self": value} if old is None else {"self": value, _OLD_VALUE: old}
        elif uses_old_self:
            if old is None:
                return  # a transition rule: create, or no correlatable old value (validation.go)
            data = {"self": value, "oldSelf": old}
        else:
            data = {"self": value}
        self.evaluated.add(r)
        result, error = eng.run(program, data)
        if error is not None:
            out.append(f"{path}: Invalid value: {error} evaluating rule: {r.error_string()}")
            return
        if result is True:
            return
        if result is not False:
            out.append(f"{path}: Invalid value: rule evaluated to {result!r}, not a bool: {r.error_string()}")
            return
        variables = {"self": value} if old is None else {"self": value, "oldSelf": old}
        detail = _message(r, variables) or r.message.strip() or f"failed rule: {r.rule.strip()}"
        out.append(_field_error(path + _normalized(r.field_path), value, detail, r.reason))


def _message(r: Rule, variables: dict[str, Any]) -> str:
    """messageExpression's value, or '' when unset or unusable (the API server then falls back to message)."""
    if not r.message_expression:
        return ""
    try:
        program, uses_old_self = engine().compile(r.message_expression)
    except Exception:
        return ""
    if uses_old_self and "oldSelf" not in variables:
        return ""
    result, error = engine().run(program, variables if uses_old_self else {"self": variables["self"]})
    if error is not None or not isinstance(result, str):
        return ""
    text = result.strip()
    return text if text and "\n" not in text and len(text.encode()) <= MAX_MESSAGE_EXPRESSION_BYTES else ""


def _normalized(field_path: str) -> str:
    """A rule's fieldPath, relative to its node (".a.b" or "['a.b']"), appended to the node's path."""
    if not field_path:
        return ""
    return field_path if field_path.startswith((".", "[")) else f".{field_path}"


def _correlated_items(schema: dict[str, Any], old: Any):
    """Old list items by list-map keys: only x-kubernetes-list-type=map lists correlate (validation.go makeMapList)."""
    keys = schema.get("x-kubernetes-list-map-keys") or []
    if schema.get("x-kubernetes-list-type") != "map" or not keys or not isinstance(old, list):
        return lambda item: None
    by_key = {tuple(o.get(k) for k in keys): o for o in old if isinstance(o, dict)}
    return lambda item: by_key.get(tuple(item.get(k) for k in keys)) if isinstance(item, dict) else None


_checkers: dict[int, tuple[dict[str, Any], RuleChecker]] = {}


def checker(schema: dict[str, Any]) -> RuleChecker:
    """The RuleChecker for a schema, built once per schema object."""
    hit = _checkers.get(id(schema))
    if hit is None or hit[0] is not schema:
        hit = _checkers[id(schema)] = (schema, RuleChecker(schema))  # holding the schema keeps its id unique
    return hit[1]


def validate_rules(obj: dict[str, Any], schema: dict[str, Any], old: dict[str, Any] | None = None) -> list[str]:
    """CEL-rule problems for one object (create when `old` is None, else update), [] when every rule holds."""
    return checker(schema).validate(obj, old)
