"""CDK tokens inside rendered text: a value known only at deploy time renders as `${Token[NAME.N]}` (e.g.
`${Token[AWS.Region.12]}`), where N is a per-process counter — the same code numbers it differently in two synths.
A digest of rendered text that goes into a template (a rollout annotation, an object's name) must not see N, or every
synth from a fresh process changes the template and rolls pods for nothing."""

from __future__ import annotations

import hashlib
import re

TOKEN_TEXT = re.compile(r"\$\{Token\[([^\]]*?)(?:\.\d+)?\]\}")


def is_token(value: str) -> bool:
    """Whether `value` holds a deploy-time token (its literal text is not the value)."""
    return "${Token[" in value


def stable_digest(text: str) -> str:
    """sha256 of `text` with each token's counter dropped (its name kept: a different kind of value still changes
    the digest)."""
    return hashlib.sha256(TOKEN_TEXT.sub(lambda m: "${Token[" + m.group(1) + "]}", text).encode()).hexdigest()
