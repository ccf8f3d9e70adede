"""The Pod Security Standards (baseline, restricted), judged on a Pod before it is submitted.

Pod Security admission (Kubernetes 1.23+) reads `pod-security.kubernetes.io/enforce` on the
namespace and refuses a Pod that breaks that level, after the ConfigMaps and Secrets of a run
already exist. Judged here first, a Pod that would be refused is named with the field at fault
and nothing is created. The rules are those of the standard's "latest" version
(https://kubernetes.io/docs/concepts/security/pod-security-standards/); the kubernetes package
has no evaluator of them (client-go's is `k8s.io/pod-security-admission`, Go only), so they are
written out here, one function per control, as the standard lists them.

An API server older than 1.23 ignores the label: the judgement here is then the only one.
"""

from __future__ import annotations

from collections.abc import Iterator

from imagekit.errors import InvalidInput

LEVELS = ("privileged", "baseline", "restricted")
#: capabilities baseline lets a container add
BASELINE_CAPABILITIES = frozenset({
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
    "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"})
#: the only volume sources restricted allows
RESTRICTED_VOLUMES = frozenset({"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
                                "persistentVolumeClaim", "projected", "secret", "image"})
SAFE_SYSCTLS = frozenset({"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range",
                          "net.ipv4.ip_unprivileged_port_start", "net.ipv4.tcp_syncookies",
                          "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
                          "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout",
                          "net.ipv4.tcp_keepalive_intvl", "net.ipv4.tcp_keepalive_probes"})

Violation = tuple[str, str]   # (field path, what the level requires)


def level(value: str | None, where: str) -> str:
    """An enforce label's value: a level, or one line naming the unknown one (admission
    itself treats an unknown value as an error in the namespace's configuration)."""
    if value is None:
        return "privileged"
    if value not in LEVELS:
        raise InvalidInput(f"namespace label pod-security.kubernetes.io/enforce={value!r} is "
                           f"not a Pod Security level ({', '.join(LEVELS)})", where=where)
    return value


def pod_spec(obj: dict) -> tuple[dict, str]:
    """(the Pod spec, its path) of a Pod, or of a Job's Pod template."""
    if obj.get("kind") == "Job":
        return (obj.get("spec", {}).get("template", {}).get("spec", {}),
                "spec.template.spec")
    return obj.get("spec", {}), "spec"


def _containers(spec: dict, at: str) -> Iterator[tuple[dict, str]]:
    for field in ("initContainers", "containers", "ephemeralContainers"):
        for i, container in enumerate(spec.get(field) or []):
            yield container, f"{at}.{field}[{i}]"


def _baseline(spec: dict, at: str) -> Iterator[Violation]:
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(field):
            yield f"{at}.{field}", "must be unset or false"
    pod_ctx = spec.get("securityContext") or {}
    if (pod_ctx.get("windowsOptions") or {}).get("hostProcess"):
        yield f"{at}.securityContext.windowsOptions.hostProcess", "must be unset or false"
    if (pod_ctx.get("seccompProfile") or {}).get("type") == "Unconfined":
        yield f"{at}.securityContext.seccompProfile.type", "must not be Unconfined"
    for sysctl in pod_ctx.get("sysctls") or []:
        if sysctl.get("name") not in SAFE_SYSCTLS:
            yield f"{at}.securityContext.sysctls", f"{sysctl.get('name')} is not a safe sysctl"
    for i, volume in enumerate(spec.get("volumes") or []):
        if "hostPath" in volume:
            yield f"{at}.volumes[{i}].hostPath", "hostPath volumes are not allowed"
    for container, path in _containers(spec, at):
        ctx = container.get("securityContext") or {}
        if ctx.get("privileged"):
            yield f"{path}.securityContext.privileged", "must be unset or false"
        if (ctx.get("windowsOptions") or {}).get("hostProcess"):
            yield f"{path}.securityContext.windowsOptions.hostProcess", "must be unset or false"
        added = set((ctx.get("capabilities") or {}).get("add") or []) - BASELINE_CAPABILITIES
        if added:
            yield (f"{path}.securityContext.capabilities.add",
                   f"{', '.join(sorted(added))} beyond the baseline set")
        if ctx.get("procMount") not in (None, "Default"):
            yield f"{path}.securityContext.procMount", "must be Default"
        if (ctx.get("seccompProfile") or {}).get("type") == "Unconfined":
            yield f"{path}.securityContext.seccompProfile.type", "must not be Unconfined"
        for j, port in enumerate(container.get("ports") or []):
            if port.get("hostPort"):
                yield f"{path}.ports[{j}].hostPort", "must be unset or 0"


def _restricted(spec: dict, at: str) -> Iterator[Violation]:
    for i, volume in enumerate(spec.get("volumes") or []):
        kinds = [k for k in volume if k != "name"]
        if kinds and not set(kinds) <= RESTRICTED_VOLUMES:
            yield f"{at}.volumes[{i}]", f"volume type {', '.join(kinds)} is not allowed"
    pod_ctx = spec.get("securityContext") or {}
    if pod_ctx.get("runAsUser") == 0:
        yield f"{at}.securityContext.runAsUser", "must not be 0"
    pod_seccomp = (pod_ctx.get("seccompProfile") or {}).get("type")
    for container, path in _containers(spec, at):
        ctx = container.get("securityContext") or {}
        if ctx.get("allowPrivilegeEscalation") is not False:
            yield f"{path}.securityContext.allowPrivilegeEscalation", "must be false"
        non_root = ctx.get("runAsNonRoot", pod_ctx.get("runAsNonRoot"))
        if non_root is not True:
            yield f"{path}.securityContext.runAsNonRoot", "must be true (here or in the Pod)"
        if ctx.get("runAsUser") == 0:
            yield f"{path}.securityContext.runAsUser", "must not be 0"
        seccomp = (ctx.get("seccompProfile") or {}).get("type") or pod_seccomp
        if seccomp not in ("RuntimeDefault", "Localhost"):
            yield (f"{path}.securityContext.seccompProfile.type",
                   "must be RuntimeDefault or Localhost (here or in the Pod)")
        capabilities = ctx.get("capabilities") or {}
        if "ALL" not in (capabilities.get("drop") or []):
            yield f"{path}.securityContext.capabilities.drop", "must include ALL"
        added = set(capabilities.get("add") or []) - {"NET_BIND_SERVICE"}
        if added:
            yield (f"{path}.securityContext.capabilities.add",
                   f"only NET_BIND_SERVICE may be added, not {', '.join(sorted(added))}")


def violations(obj: dict, enforce: str) -> list[Violation]:
    """What in a Pod (or a Job's Pod template) breaks the `enforce` level."""
    if enforce == "privileged":
        return []
    spec, at = pod_spec(obj)
    found = list(_baseline(spec, at))
    if enforce == "restricted":
        found += list(_restricted(spec, at))
    return found


def meets(obj: dict) -> str:
    """The strictest level the Pod meets."""
    if not violations(obj, "baseline"):
        return "restricted" if not violations(obj, "restricted") else "baseline"
    return "privileged"


def require(objects: list[dict], enforce: str, namespace: str) -> None:
    """One line naming the first field that breaks `enforce`, before anything is created."""
    for obj in objects:
        found = violations(obj, enforce)
        if found:
            field, rule = found[0]
            more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
            name = (obj.get("metadata") or {}).get("name", "?")
            raise InvalidInput(f"namespace {namespace} enforces Pod Security level {enforce!r}: "
                               f"{obj.get('kind', 'Pod')} {name}: {field} {rule}{more}; "
                               "nothing was submitted")
