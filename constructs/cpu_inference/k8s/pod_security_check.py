"""Moved to cpu_inference.testing.pod_security (checks rendered objects against Pod Security "restricted"; a test
helper, not part of what the constructs render — the settings that make our pods pass are workload_defaults.py).
This re-export (and pod_security.py, the older path) keeps old imports working."""

from ..testing.pod_security import (  # noqa: F401
    BASELINE_CAPABILITIES,
    RESTRICTED_VOLUME_TYPES,
    SAFE_SYSCTLS,
    SELINUX_TYPES,
    has_pod_spec,
    pod_specs,
    pod_violations,
    restricted_violations,
)
