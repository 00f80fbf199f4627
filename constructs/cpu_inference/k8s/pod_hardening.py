"""Moved to workload_defaults.py (what every workload we render gets); this path keeps old imports working."""

from .workload_defaults import (  # noqa: F401
    ARCH_LABEL,
    ARCHITECTURES,
    HOST_LABEL,
    NON_ROOT_UID,
    ZONE_LABEL,
    add_spread,
    container_security_context,
    one_at_a_time_budget,
    pod_security_context,
    pre_stop_sleep,
    prefer_pools,
    require_architectures,
    restrict,
    spread_constraints,
    tolerate,
    unmanaged_replicas,
)
