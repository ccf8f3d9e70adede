"""The Pod Security Standards (baseline, restricted), judged on a Pod before it is submitted.

Pod Security admission (Kubernetes 1.23+) reads `pod-security.kubernetes.io/enforce` on the
namespace and refuses a Pod that breaks that level, after the ConfigMaps and Secrets of a run
already exist. Judged here first, a Pod that would be refused is named with the field at fault
and nothing is created. The rules are those of the standard's "latest" version
(https://kubernetes.io/docs/concepts/security/pod-security-standards/): every control of
baseline and restricted, each one function below (`CONTROLS`, in the page's order), with the
page's restricted fields and allowed values. The kubernetes package has no evaluator of them
(client-go's is `k8s.io/pod-security-admission`, Go only); the tests judge every Pod imagekit
renders with checkov as well (docs/design/cluster.md "Pod Security").

Every control that names containers covers `initContainers`, `containers` and
`ephemeralContainers`, as admission does. An API server older than 1.23 ignores the label: the
judgement here is then the only one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import NamedTuple

from imagekit.errors import InvalidInput

LEVELS = ("privileged", "baseline", "restricted")
#: capabilities baseline lets a container add
BASELINE_CAPABILITIES = frozenset({
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
    "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"})
#: the only volume sources restricted allows
RESTRICTED_VOLUMES = frozenset({"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
                                "persistentVolumeClaim", "projected", "secret"})
SAFE_SYSCTLS = frozenset({"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range",
                          "net.ipv4.ip_unprivileged_port_start", "net.ipv4.tcp_syncookies",
                          "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
                          "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout",
                          "net.ipv4.tcp_keepalive_intvl", "net.ipv4.tcp_keepalive_probes"})
#: seLinuxOptions.type values baseline allows ("" is unset)
SELINUX_TYPES = frozenset({"", "container_t", "container_init_t", "container_kvm_t",
                           "container_engine_t"})
APPARMOR_ANNOTATION_PREFIX = "container.apparmor.security.beta.kubernetes.io/"
CONFINED_PROFILE_TYPES = frozenset({"RuntimeDefault", "Localhost"})
PROBES = ("livenessProbe", "readinessProbe", "startupProbe")
HANDLERS = ("postStart", "preStop")


class Violation(NamedTuple):
    """One field that breaks a control: where, what the control allows, and which control."""

    field: str
    rule: str
    control: str


@dataclass(frozen=True)
class Pod:
    """The parts of a Pod (or of a Job's Pod template) the controls read, with their paths."""

    spec: dict
    at: str                   # the spec's path: "spec" or "spec.template.spec"
    annotations: dict
    annotations_at: str

    @property
    def context(self) -> dict:
        return self.spec.get("securityContext") or {}

    def containers(self) -> Iterator[tuple[dict, str]]:
        for field in ("initContainers", "containers", "ephemeralContainers"):
            for i, container in enumerate(self.spec.get(field) or []):
                yield container, f"{self.at}.{field}[{i}]"

    @property
    def windows(self) -> bool:
        """spec.os.name windows: the Linux-only restricted controls do not apply."""
        return (self.spec.get("os") or {}).get("name") == "windows"

    @property
    def own_user_namespace(self) -> bool:
        """hostUsers: false — root in the Pod is not root on the node, so the two non-root
        controls are relaxed (as admission does, KEP-127)."""
        return self.spec.get("hostUsers") is False


Check = Callable[[Pod], Iterator[tuple[str, str]]]


@dataclass(frozen=True)
class Control:
    level: str                # the lowest level that enforces it
    name: str                 # as the standard's page names it
    check: Check

    @property
    def key(self) -> str:
        return f"{self.level}: {self.name}"


def _ctx(container: dict) -> dict:
    return container.get("securityContext") or {}


# ----------------------------------------------------------------------------- baseline

def _host_process(pod: Pod) -> Iterator[tuple[str, str]]:
    if (pod.context.get("windowsOptions") or {}).get("hostProcess"):
        yield f"{pod.at}.securityContext.windowsOptions.hostProcess", "must be unset or false"
    for container, path in pod.containers():
        if (_ctx(container).get("windowsOptions") or {}).get("hostProcess"):
            yield (f"{path}.securityContext.windowsOptions.hostProcess",
                   "must be unset or false")


def _host_namespaces(pod: Pod) -> Iterator[tuple[str, str]]:
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.spec.get(field):
            yield f"{pod.at}.{field}", "must be unset or false"


def _privileged(pod: Pod) -> Iterator[tuple[str, str]]:
    for container, path in pod.containers():
        if _ctx(container).get("privileged"):
            yield f"{path}.securityContext.privileged", "must be unset or false"


def _capabilities_baseline(pod: Pod) -> Iterator[tuple[str, str]]:
    for container, path in pod.containers():
        added = set((_ctx(container).get("capabilities") or {}).get("add") or [])
        beyond = added - BASELINE_CAPABILITIES
        if beyond:
            yield (f"{path}.securityContext.capabilities.add",
                   f"{', '.join(sorted(beyond))} beyond the baseline set")


def _host_path(pod: Pod) -> Iterator[tuple[str, str]]:
    for i, volume in enumerate(pod.spec.get("volumes") or []):
        if volume.get("hostPath") is not None:
            yield f"{pod.at}.volumes[{i}].hostPath", "hostPath volumes are not allowed"


def _host_ports(pod: Pod) -> Iterator[tuple[str, str]]:
    for container, path in pod.containers():
        for j, port in enumerate(container.get("ports") or []):
            if port.get("hostPort"):
                yield f"{path}.ports[{j}].hostPort", "must be unset or 0"


def _host_probes(pod: Pod) -> Iterator[tuple[str, str]]:
    for container, path in pod.containers():
        handlers = [(f"{path}.{probe}", container.get(probe)) for probe in PROBES]
        lifecycle = container.get("lifecycle") or {}
        handlers += [(f"{path}.lifecycle.{hook}", lifecycle.get(hook)) for hook in HANDLERS]
        for where, handler in handlers:
            for action in ("httpGet", "tcpSocket"):
                if ((handler or {}).get(action) or {}).get("host"):
                    yield f"{where}.{action}.host", "must be unset or empty"


def _apparmor(pod: Pod) -> Iterator[tuple[str, str]]:
    for key, value in sorted(pod.annotations.items()):
        if key.startswith(APPARMOR_ANNOTATION_PREFIX) and value and \
                value != "runtime/default" and not str(value).startswith("localhost/"):
            yield (f"{pod.annotations_at}[{key}]",
                   "must be unset, runtime/default or localhost/*")
    contexts = [(pod.context, f"{pod.at}.securityContext")]
    contexts += [(_ctx(c), f"{path}.securityContext") for c, path in pod.containers()]
    for ctx, where in contexts:
        profile = ctx.get("appArmorProfile")
        if profile is not None and profile.get("type") not in CONFINED_PROFILE_TYPES:
            yield f"{where}.appArmorProfile.type", "must be unset, RuntimeDefault or Localhost"


def _selinux(pod: Pod) -> Iterator[tuple[str, str]]:
    contexts = [(pod.context, f"{pod.at}.securityContext")]
    contexts += [(_ctx(c), f"{path}.securityContext") for c, path in pod.containers()]
    for ctx, where in contexts:
        options = ctx.get("seLinuxOptions") or {}
        if (options.get("type") or "") not in SELINUX_TYPES:
            yield (f"{where}.seLinuxOptions.type",
                   f"must be unset or one of {', '.join(sorted(SELINUX_TYPES - {''}))}")
        for field in ("user", "role"):
            if options.get(field):
                yield f"{where}.seLinuxOptions.{field}", "must be unset"


def _proc_mount(pod: Pod) -> Iterator[tuple[str, str]]:
    for container, path in pod.containers():
        if _ctx(container).get("procMount") not in (None, "Default"):
            yield f"{path}.securityContext.procMount", "must be unset or Default"


def _seccomp_baseline(pod: Pod) -> Iterator[tuple[str, str]]:
    contexts = [(pod.context, f"{pod.at}.securityContext")]
    contexts += [(_ctx(c), f"{path}.securityContext") for c, path in pod.containers()]
    for ctx, where in contexts:
        if (ctx.get("seccompProfile") or {}).get("type") == "Unconfined":
            yield f"{where}.seccompProfile.type", "must not be Unconfined"


def _sysctls(pod: Pod) -> Iterator[tuple[str, str]]:
    for i, sysctl in enumerate(pod.context.get("sysctls") or []):
        if sysctl.get("name") not in SAFE_SYSCTLS:
            yield (f"{pod.at}.securityContext.sysctls[{i}].name",
                   f"{sysctl.get('name')} is not a safe sysctl")


# --------------------------------------------------------------------------- restricted

def _volume_types(pod: Pod) -> Iterator[tuple[str, str]]:
    for i, volume in enumerate(pod.spec.get("volumes") or []):
        # a volume naming no source is an emptyDir (the API server's default)
        kinds = sorted(k for k in volume if k != "name")
        if kinds and not set(kinds) <= RESTRICTED_VOLUMES:
            yield (f"{pod.at}.volumes[{i}]",
                   f"volume type {', '.join(kinds)} is not allowed "
                   f"(only {', '.join(sorted(RESTRICTED_VOLUMES))})")


def _privilege_escalation(pod: Pod) -> Iterator[tuple[str, str]]:
    if pod.windows:
        return
    for container, path in pod.containers():
        if _ctx(container).get("allowPrivilegeEscalation") is not False:
            yield f"{path}.securityContext.allowPrivilegeEscalation", "must be false"


def _run_as_non_root(pod: Pod) -> Iterator[tuple[str, str]]:
    if pod.own_user_namespace:
        return
    pod_value = pod.context.get("runAsNonRoot")
    if pod_value is False:
        yield f"{pod.at}.securityContext.runAsNonRoot", "must not be false"
    for container, path in pod.containers():
        value = _ctx(container).get("runAsNonRoot")
        if value is False:
            yield f"{path}.securityContext.runAsNonRoot", "must not be false"
        elif value is None and pod_value is not True:
            yield (f"{path}.securityContext.runAsNonRoot",
                   "must be true (here or in the Pod)")


def _run_as_user(pod: Pod) -> Iterator[tuple[str, str]]:
    if pod.own_user_namespace:
        return
    if pod.context.get("runAsUser") == 0:
        yield f"{pod.at}.securityContext.runAsUser", "must not be 0"
    for container, path in pod.containers():
        if _ctx(container).get("runAsUser") == 0:
            yield f"{path}.securityContext.runAsUser", "must not be 0"


def _seccomp_restricted(pod: Pod) -> Iterator[tuple[str, str]]:
    if pod.windows:
        return
    pod_type = (pod.context.get("seccompProfile") or {}).get("type")
    if pod_type is not None and pod_type not in CONFINED_PROFILE_TYPES:
        yield (f"{pod.at}.securityContext.seccompProfile.type",
               "must be RuntimeDefault or Localhost")
    for container, path in pod.containers():
        own = (_ctx(container).get("seccompProfile") or {}).get("type")
        if own is not None and own not in CONFINED_PROFILE_TYPES:
            yield (f"{path}.securityContext.seccompProfile.type",
                   "must be RuntimeDefault or Localhost")
        elif own is None and pod_type not in CONFINED_PROFILE_TYPES:
            yield (f"{path}.securityContext.seccompProfile.type",
                   "must be RuntimeDefault or Localhost (here or in the Pod)")


def _capabilities_restricted(pod: Pod) -> Iterator[tuple[str, str]]:
    if pod.windows:
        return
    for container, path in pod.containers():
        capabilities = _ctx(container).get("capabilities") or {}
        if "ALL" not in (capabilities.get("drop") or []):
            yield f"{path}.securityContext.capabilities.drop", "must include ALL"
        added = set(capabilities.get("add") or []) - {"NET_BIND_SERVICE"}
        if added:
            yield (f"{path}.securityContext.capabilities.add",
                   f"only NET_BIND_SERVICE may be added, not {', '.join(sorted(added))}")


#: every control of the standard, in the page's order
CONTROLS: tuple[Control, ...] = (
    Control("baseline", "HostProcess", _host_process),
    Control("baseline", "Host Namespaces", _host_namespaces),
    Control("baseline", "Privileged Containers", _privileged),
    Control("baseline", "Capabilities", _capabilities_baseline),
    Control("baseline", "HostPath Volumes", _host_path),
    Control("baseline", "Host Ports", _host_ports),
    Control("baseline", "Host Probes / Lifecycle Hooks", _host_probes),
    Control("baseline", "AppArmor", _apparmor),
    Control("baseline", "SELinux", _selinux),
    Control("baseline", "/proc Mount Type", _proc_mount),
    Control("baseline", "Seccomp", _seccomp_baseline),
    Control("baseline", "Sysctls", _sysctls),
    Control("restricted", "Volume Types", _volume_types),
    Control("restricted", "Privilege Escalation", _privilege_escalation),
    Control("restricted", "Running as Non-root", _run_as_non_root),
    Control("restricted", "Running as Non-root user", _run_as_user),
    Control("restricted", "Seccomp", _seccomp_restricted),
    Control("restricted", "Capabilities", _capabilities_restricted),
)


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


def _pod(obj: dict) -> Pod:
    spec, at = pod_spec(obj)
    if obj.get("kind") == "Job":
        meta = (obj.get("spec", {}).get("template", {}).get("metadata") or {})
        meta_at = "spec.template.metadata.annotations"
    else:
        meta, meta_at = obj.get("metadata") or {}, "metadata.annotations"
    return Pod(spec=spec or {}, at=at, annotations=meta.get("annotations") or {},
               annotations_at=meta_at)


def violations(obj: dict, enforce: str) -> list[Violation]:
    """What in a Pod (or a Job's Pod template) breaks the `enforce` level, control by
    control."""
    if enforce == "privileged":
        return []
    pod = _pod(obj)
    wanted = ("baseline",) if enforce == "baseline" else ("baseline", "restricted")
    return [Violation(field, rule, control.key)
            for control in CONTROLS if control.level in wanted
            for field, rule in control.check(pod)]


def broken_controls(obj: dict, enforce: str = "restricted") -> list[str]:
    """The controls (`Control.key`) the Pod breaks at `enforce`, each once, in order."""
    return list(dict.fromkeys(v.control for v in violations(obj, enforce)))


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
            first = found[0]
            more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
            name = (obj.get("metadata") or {}).get("name", "?")
            raise InvalidInput(f"namespace {namespace} enforces Pod Security level {enforce!r}: "
                               f"{obj.get('kind', 'Pod')} {name}: {first.field} {first.rule} "
                               f"[{first.control}]{more}; nothing was submitted")
