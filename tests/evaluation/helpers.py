"""Helpers for the evaluation tests: read the engine's own Prometheus counters."""

from __future__ import annotations

import re
import urllib.request


def prometheus_value(base_url: str, name: str) -> float:
    """One sample of the server's own /metrics (the independent count the reports are checked against)."""
    with urllib.request.urlopen(f"{base_url}/metrics", timeout=10) as r:
        text = r.read().decode()
    m = re.search(rf"^{re.escape(name)}\s+(\S+)$", text, re.M)
    if not m:
        raise AssertionError(f"{name} missing from {base_url}/metrics")
    return float(m.group(1))


def tokens_predicted(base_url: str) -> int:
    return int(prometheus_value(base_url, "llamacpp:tokens_predicted_total"))
