"""Checks rendered objects against the Pod Security Standards "restricted" profile (Kubernetes 1.35, which
includes "baseline"; the settings that make our pods pass live in k8s/workloads/workload_defaults.py).
These are the plain checks the API server's Pod Security admission enforces in a namespace labelled
`pod-security.kubernetes.io/enforce: restricted`, so a violation fails at synth/test time instead of as a
rejected ReplicaSet at deploy time.

    restricted_violations(obj)  -> ["Deployment/x: containers[0] (llama): allowPrivilegeEscalation must be false", ...]

The rules follow https://kubernetes.io/docs/concepts/security/pod-security-standards/ (policy version latest).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from cpu_inference._internal.k8s_object import (
    pod_specs,
)

RESTRICTED_VOLUME_TYPES = frozenset(
    {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret"}
)
BASELINE_CAPABILITIES = frozenset(
    {
        "AUDIT_WRITE",
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "KILL",
        "MKNOD",
        "NET_BIND_SERVICE",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_CHROOT",
    }
)
SAFE_SYSCTLS = frozenset(
    {
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.ip_unprivileged_port_start",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
        "net.ipv4.ip_local_reserved_ports",
        "net.ipv4.tcp_keepalive_time",
        "net.ipv4.tcp_fin_timeout",
        "net.ipv4.tcp_keepalive_intvl",
        "net.ipv4.tcp_keepalive_probes",
    }
)
SELINUX_TYPES = frozenset({"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"})


def _containers(spec: Mapping[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for kind in ("initContainers", "containers", "ephemeralContainers"):
        for i, c in enumerate(spec.get(kind) or []):
            yield f"{kind}[{i}] ({c.get('name')})", c


def pod_violations(metadata: Mapping[str, Any], spec: Mapping[str, Any]) -> list[str]:
    out: list[str] = []
    psc = spec.get("securityContext") or {}
    # --- baseline ---
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(key):
            out.append(f"{key} must be unset or false")
    if (psc.get("windowsOptions") or {}).get("hostProcess"):
        out.append("securityContext.windowsOptions.hostProcess must be unset or false")
    for v in spec.get("volumes") or []:
        types = [k for k in v if k != "name"]
        if "hostPath" in types:
            out.append(f"volume {v.get('name')}: hostPath volumes are forbidden")
        elif any(t not in RESTRICTED_VOLUME_TYPES for t in types):
            out.append(
                f"volume {v.get('name')}: type {types} is not allowed (restricted allows {sorted(RESTRICTED_VOLUME_TYPES)})"
            )
    for s in psc.get("sysctls") or []:
        if s.get("name") not in SAFE_SYSCTLS:
            out.append(f"sysctl {s.get('name')} is not in the safe set")
    for key, value in (metadata.get("annotations") or {}).items():
        if key.startswith("container.apparmor.security.beta.kubernetes.io/") and not (
            value == "runtime/default" or value.startswith("localhost/")
        ):
            out.append(f"annotation {key}={value}: AppArmor must be runtime/default or localhost/*")
    if (psc.get("appArmorProfile") or {}).get("type") == "Unconfined":
        out.append("securityContext.appArmorProfile must not be Unconfined")
    out += _selinux("securityContext", psc)
    pod_seccomp = (psc.get("seccompProfile") or {}).get("type")
    if pod_seccomp == "Unconfined":
        out.append("securityContext.seccompProfile must not be Unconfined")
    # --- restricted (pod level) ---
    if psc.get("runAsUser") == 0:
        out.append("securityContext.runAsUser must not be 0")
    pod_non_root = psc.get("runAsNonRoot") is True
    if psc.get("runAsNonRoot") is False:
        out.append("securityContext.runAsNonRoot must not be false")
    pod_seccomp_ok = pod_seccomp in ("RuntimeDefault", "Localhost")

    for where, c in _containers(spec):
        sc = c.get("securityContext") or {}
        p = f"{where}: "
        if sc.get("privileged"):
            out.append(p + "privileged must be unset or false")
        if (sc.get("windowsOptions") or {}).get("hostProcess"):
            out.append(p + "windowsOptions.hostProcess must be unset or false")
        for port in c.get("ports") or []:
            if port.get("hostPort"):
                out.append(p + f"hostPort {port['hostPort']} is forbidden")
        if sc.get("procMount", "Default") != "Default":
            out.append(p + "procMount must be Default")
        if (sc.get("appArmorProfile") or {}).get("type") == "Unconfined":
            out.append(p + "appArmorProfile must not be Unconfined")
        out += [p + m for m in _selinux("securityContext", sc)]
        caps = sc.get("capabilities") or {}
        added = set(caps.get("add") or [])
        if added - BASELINE_CAPABILITIES:
            out.append(p + f"capabilities.add {sorted(added - BASELINE_CAPABILITIES)} are not allowed")
        # restricted
        if sc.get("allowPrivilegeEscalation") is not False:
            out.append(p + "allowPrivilegeEscalation must be false")
        if "ALL" not in (caps.get("drop") or []):
            out.append(p + "capabilities.drop must include ALL")
        if added - {"NET_BIND_SERVICE"}:
            out.append(p + f"capabilities.add may hold only NET_BIND_SERVICE, got {sorted(added)}")
        if sc.get("runAsNonRoot") is False or (not pod_non_root and sc.get("runAsNonRoot") is not True):
            out.append(p + "runAsNonRoot must be true (on the pod or on every container)")
        if sc.get("runAsUser") == 0:
            out.append(p + "runAsUser must not be 0")
        c_seccomp = (sc.get("seccompProfile") or {}).get("type")
        if c_seccomp == "Unconfined" or (not pod_seccomp_ok and c_seccomp not in ("RuntimeDefault", "Localhost")):
            out.append(p + "seccompProfile must be RuntimeDefault or Localhost (on the pod or on every container)")
    return out


def _selinux(where: str, sc: Mapping[str, Any]) -> list[str]:
    opts = sc.get("seLinuxOptions") or {}
    out = []
    if opts.get("type", "") not in SELINUX_TYPES:
        out.append(f"{where}.seLinuxOptions.type {opts.get('type')!r} is not allowed")
    if opts.get("user") or opts.get("role"):
        out.append(f"{where}.seLinuxOptions.user/role must be unset")
    return out


def restricted_violations(obj: Mapping[str, Any]) -> list[str]:
    """Every Pod Security "restricted" violation of one object's pod spec(s), prefixed with Kind/name."""
    name = f"{obj.get('kind')}/{obj.get('metadata', {}).get('name')}"
    return [f"{name}: {v}" for meta, spec in pod_specs(obj) for v in pod_violations(meta, spec)]


def has_pod_spec(obj: Mapping[str, Any]) -> bool:
    return any(True for _ in pod_specs(obj))
