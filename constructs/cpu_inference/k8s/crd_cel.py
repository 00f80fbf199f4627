"""Moved to cpu_inference.testing.crd_cel (a test helper, not part of what the constructs render); this path keeps
old imports working."""

from ..testing.crd_cel import (  # noqa: F401
    BLOCKING_KEYWORDS,
    MAX_MESSAGE_EXPRESSION_BYTES,
    Rule,
    RuleChecker,
    apply_defaults,
    checker,
    engine,
    schema_rules,
    validate_rules,
)
