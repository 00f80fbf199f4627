"""Moved to cpu_inference.testing.pod_security (checks rendered objects against Pod Security "restricted"); this
path keeps old imports working."""

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
