"""Pod Security Standards, judged twice: every Pod imagekit renders (through its own builders,
no cluster), one hostile Pod per control, and checkov — the independent checker — with the map
from each control of the standard to the checkov checks that cover it.

checkov lives in its own venv (it pins dozens of packages the project's venv does not want):
`checker()` makes it once per machine under $IMAGEKIT_TOOLS_DIR (default
/var/lib/imagekit/tools/checkov-<version>), with the same install-once-then-marker code the
engines use, and `judge()` runs ONE checkov process over a directory of manifests (JSON out).
"""

from __future__ import annotations

import copy
import functools
import json
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from imagekit.cluster import manifests

REPO = Path(__file__).resolve().parents[2]
IMAGE = "127.0.0.1:5001/imagekit/vllm@sha256:" + "cd" * 32
CHECKOV_VERSION = "3.3.30"
TOOLS_ROOT = Path(os.environ.get("IMAGEKIT_TOOLS_DIR", "/var/lib/imagekit/tools"))

#: each control of the standard (podsecurity.Control.key) → the checkov checks that judge it.
#: Empty: checkov 3.3 has no check for that control; it is judged by imagekit alone.
CHECKOV_MAP: dict[str, tuple[str, ...]] = {
    "baseline: HostProcess": (),
    "baseline: Host Namespaces": ("CKV_K8S_17", "CKV_K8S_18", "CKV_K8S_19"),
    "baseline: Privileged Containers": ("CKV_K8S_16",),
    "baseline: Capabilities": ("CKV_K8S_25", "CKV_K8S_39"),
    "baseline: HostPath Volumes": ("CKV_K8S_27",),
    "baseline: Host Ports": ("CKV_K8S_26",),
    "baseline: Host Probes / Lifecycle Hooks": (),
    "baseline: AppArmor": (),
    "baseline: SELinux": (),
    "baseline: /proc Mount Type": (),
    "baseline: Seccomp": ("CKV_K8S_31",),
    "baseline: Sysctls": (),
    "restricted: Volume Types": (),
    "restricted: Privilege Escalation": ("CKV_K8S_20",),
    "restricted: Running as Non-root": ("CKV_K8S_23",),
    "restricted: Running as Non-root user": ("CKV_K8S_23", "CKV_K8S_40"),
    "restricted: Seccomp": ("CKV_K8S_31",),
    "restricted: Capabilities": ("CKV_K8S_37", "CKV_K8S_28", "CKV_K8S_25"),
}
#: how each mapped check differs from the control (shown in the docs' table)
CHECKOV_NOTES: dict[str, str] = {
    "baseline: Host Namespaces": "same fields (hostPID, hostIPC, hostNetwork)",
    "baseline: Privileged Containers": "same field",
    "baseline: Capabilities": "stricter: CKV_K8S_25 fails any `add`, even one baseline "
                              "allows; CKV_K8S_39 names SYS_ADMIN",
    "baseline: HostPath Volumes": "narrower: only a hostPath of /var/run/docker.sock",
    "baseline: Host Ports": "same field (fails any hostPort key, even 0)",
    "baseline: Seccomp": "stricter: requires RuntimeDefault (Localhost and unset fail)",
    "restricted: Privilege Escalation": "same rule (must be false)",
    "restricted: Running as Non-root": "looser: runAsUser > 0 without runAsNonRoot passes",
    "restricted: Running as Non-root user": "CKV_K8S_40 stricter (UID ≥ 10000); CKV_K8S_23 "
                                            "passes UID 0 beside runAsNonRoot: true",
    "restricted: Seccomp": "stricter: RuntimeDefault only (Localhost fails)",
    "restricted: Capabilities": "CKV_K8S_37 = drop ALL; CKV_K8S_28 drop NET_RAW or ALL; "
                                "CKV_K8S_25 fails any add (NET_BIND_SERVICE too)",
}
EPHEMERAL_UNSEEN = "checkov's container checks read containers and initContainers only"
MAPPED_CHECKS = tuple(sorted({c for ids in CHECKOV_MAP.values() for c in ids},
                             key=lambda c: int(c.rsplit("_", 1)[1])))


# ------------------------------------------------------------------ the Pods imagekit renders

def product_pods() -> dict[str, dict]:
    """Every Pod (or Job) manifest imagekit submits, built by the product's own builders with
    the options each command passes, keyed by a name for the test ids (a fresh copy each call:
    a test may change its own)."""
    return copy.deepcopy(_product_pods())


@functools.cache
def _product_pods() -> dict[str, dict]:
    from imagekit.cluster import gpujob, preflight
    from imagekit.clusteraccept.run import CONTROLLER_MODEL_MOUNT
    from imagekit.launch.budget import ProbeBudget
    from imagekit.launch.pod import engine_pod
    from imagekit.oci import ImageReference

    pinned = ImageReference.parse(IMAGE)
    gpu = gpujob.GpuJobOptions(nodes=2, gpus_per_node=8, namespace="ns",
                               node_selector={"nvidia.com/gpu.present": "true"},
                               script=REPO / "gpu_checks" / "preflight")
    indexed = gpujob.render(pinned, gpu, "gj", gpujob.MODE_INDEXED)
    per_index = gpujob.render(pinned, gpu, "gj", gpujob.MODE_PER_INDEX, rdzv_ip="10.96.0.7")
    preflight_pod, _ = preflight.render_preflight(
        pinned, preflight.PreflightOptions(namespace="ns", script=REPO / "gpu_checks" /
                                           "preflight"), "pf")
    pods = {
        # cluster probe (no tolerations by default) and the probe Pod of cluster accept
        "probe": manifests.render("probe-pod.yaml.j2", name="p", namespace="ns", image=IMAGE,
                                  node_name=None, node_selector={}, tolerations=[],
                                  configmap="c", deadline_seconds=60, memory_limit="1Gi"),
        "probe-in-pod": manifests.render(
            "probe-pod.yaml.j2", name="pp", namespace="ns", image=IMAGE, node_name=None,
            node_selector={}, tolerations=[manifests.GPU_TOLERATION], configmap="c",
            deadline_seconds=60, memory_limit="2Gi"),
        "gpu-preflight": preflight_pod,
        "indexed-probe-job": gpujob.indexed_probe_job("ns"),
        "engine-accept-model-claim": _engine(model_claim="model"),
        "engine-launch": engine_pod(_serve_config(), pinned, ProbeBudget.covering(120),
                                    name="e", namespace="ns")[0],
        "controller-bundle": manifests.controller_bundle("ctl", "ns", IMAGE)[0],
        "controller-accept-model-claim": manifests.render(
            "controller-pod.yaml.j2", name="run-controller", namespace="ns",
            model_claim="model", model_mount=CONTROLLER_MODEL_MOUNT, image=IMAGE,
            node_selector={}, tolerations=[], pull_secrets=[], configmap="run-scripts",
            env=[{"name": "MODEL_DIR", "value": CONTROLLER_MODEL_MOUNT}],
            deadline_seconds=600),
    }
    for i, job in enumerate(indexed.jobs):
        pods[f"gpujob-indexed-{i}"] = job
    for i, job in enumerate(per_index.jobs):
        pods[f"gpujob-per-index-{i}"] = job
    return pods


def _serve_config():
    from imagekit.clusteraccept.run import CPU_ENGINE_ARGS, CPU_ENGINE_ENV, AcceptOptions
    from imagekit.clusteraccept.run import serve_config as accept_serve_config

    return accept_serve_config(AcceptOptions(namespace="ns", model_claim=None,
                                             engine_env=CPU_ENGINE_ENV,
                                             engine_args=list(CPU_ENGINE_ARGS),
                                             served_model_name="m"), None)


def _engine(model_claim: str | None) -> dict:
    from imagekit.clusteraccept.run import CPU_ENGINE_ARGS, CPU_ENGINE_ENV, AcceptOptions, render
    from imagekit.oci import ImageReference

    options = AcceptOptions(namespace="ns", model_claim=model_claim, engine_env=CPU_ENGINE_ENV,
                            engine_args=list(CPU_ENGINE_ARGS), served_model_name="m")
    return render(options, ImageReference.parse(IMAGE), "run1", 120, [])[0]


# ------------------------------------------------------------------- one hostile Pod per control

@dataclass
class Hostile:
    """A compliant Pod (imagekit's probe Pod) with one control broken."""

    name: str
    control: str                       # the control it breaks (podsecurity.Control.key)
    pod: dict
    #: every control imagekit must name (some breaks are two controls, as in the standard)
    broken: set[str] = field(default_factory=set)
    #: the checkov checks that must fail on it (empty: checkov has none for the control)
    checkov: set[str] = field(default_factory=set)
    #: why checkov cannot see this break although it has checks for the control
    unseen_by_checkov: str = ""


def compliant() -> dict:
    return product_pods()["probe"]


def _with(name: str, control: str, change, *, also: tuple[str, ...] = (),
          checkov: tuple[str, ...] = (), unseen: str = "") -> Hostile:
    pod = copy.deepcopy(compliant())
    pod["metadata"]["name"] = f"hostile-{name}"
    change(pod, pod["spec"], pod["spec"]["containers"][0])
    return Hostile(name, control, pod, {control, *also}, set(checkov), unseen)


def _init_copy(spec: dict, container: dict) -> dict:
    init = copy.deepcopy(container)
    init["name"] = "init"
    spec["initContainers"] = [init]
    return init


def _ephemeral_copy(spec: dict, container: dict) -> dict:
    extra = {k: copy.deepcopy(v) for k, v in container.items()
             if k in ("image", "command", "securityContext", "env")}
    extra["name"] = "debug"
    spec["ephemeralContainers"] = [extra]
    return extra


def hostile_pods() -> list[Hostile]:
    def ctx(container: dict) -> dict:
        return container.setdefault("securityContext", {})

    return [
        _with("host-process", "baseline: HostProcess",
              lambda p, s, c: ctx(c).update(windowsOptions={"hostProcess": True})),
        _with("host-pid", "baseline: Host Namespaces",
              lambda p, s, c: s.update(hostPID=True), checkov=("CKV_K8S_17",)),
        _with("host-network", "baseline: Host Namespaces",
              lambda p, s, c: s.update(hostNetwork=True), checkov=("CKV_K8S_19",)),
        _with("host-ipc", "baseline: Host Namespaces",
              lambda p, s, c: s.update(hostIPC=True), checkov=("CKV_K8S_18",)),
        _with("privileged", "baseline: Privileged Containers",
              lambda p, s, c: ctx(c).update(privileged=True), checkov=("CKV_K8S_16",)),
        _with("privileged-init-container", "baseline: Privileged Containers",
              lambda p, s, c: ctx(_init_copy(s, c)).update(privileged=True),
              checkov=("CKV_K8S_16",)),
        _with("capability-sys-admin", "baseline: Capabilities",
              lambda p, s, c: ctx(c)["capabilities"].update(add=["SYS_ADMIN"]),
              also=("restricted: Capabilities",), checkov=("CKV_K8S_25", "CKV_K8S_39")),
        _with("host-path", "baseline: HostPath Volumes",
              lambda p, s, c: s["volumes"].append(
                  {"name": "docker", "hostPath": {"path": "/var/run/docker.sock"}}),
              also=("restricted: Volume Types",), checkov=("CKV_K8S_27",)),
        _with("host-port", "baseline: Host Ports",
              lambda p, s, c: c.update(ports=[{"containerPort": 8080, "hostPort": 8080}]),
              checkov=("CKV_K8S_26",)),
        _with("host-probe", "baseline: Host Probes / Lifecycle Hooks",
              lambda p, s, c: c.update(readinessProbe={"httpGet": {
                  "host": "169.254.169.254", "path": "/", "port": 80}})),
        _with("host-lifecycle-init-container", "baseline: Host Probes / Lifecycle Hooks",
              lambda p, s, c: _init_copy(s, c).update(lifecycle={"preStop": {"httpGet": {
                  "host": "10.0.0.1", "path": "/", "port": 80}}})),
        _with("apparmor-annotation", "baseline: AppArmor",
              lambda p, s, c: p["metadata"].setdefault("annotations", {}).update(
                  {"container.apparmor.security.beta.kubernetes.io/probe": "unconfined"})),
        _with("apparmor-pod-profile", "baseline: AppArmor",
              lambda p, s, c: s["securityContext"].update(
                  appArmorProfile={"type": "Unconfined"})),
        _with("apparmor-container-profile", "baseline: AppArmor",
              lambda p, s, c: ctx(c).update(appArmorProfile={"type": "Unconfined"})),
        _with("selinux-type", "baseline: SELinux",
              lambda p, s, c: s["securityContext"].update(seLinuxOptions={"type": "spc_t"})),
        _with("selinux-user-role", "baseline: SELinux",
              lambda p, s, c: ctx(c).update(seLinuxOptions={"user": "system_u",
                                                            "role": "system_r"})),
        _with("proc-mount", "baseline: /proc Mount Type",
              lambda p, s, c: ctx(c).update(procMount="Unmasked")),
        _with("proc-mount-ephemeral-container", "baseline: /proc Mount Type",
              lambda p, s, c: ctx(_ephemeral_copy(s, c)).update(procMount="Unmasked")),
        _with("seccomp-unconfined", "baseline: Seccomp",
              lambda p, s, c: s["securityContext"].update(seccompProfile={"type": "Unconfined"}),
              also=("restricted: Seccomp",), checkov=("CKV_K8S_31",)),
        _with("sysctl", "baseline: Sysctls",
              lambda p, s, c: s["securityContext"].update(
                  sysctls=[{"name": "kernel.msgmax", "value": "65536"}])),
        _with("volume-nfs", "restricted: Volume Types",
              lambda p, s, c: s["volumes"].append(
                  {"name": "share", "nfs": {"server": "nfs.example", "path": "/"}})),
        _with("privilege-escalation", "restricted: Privilege Escalation",
              lambda p, s, c: ctx(c).update(allowPrivilegeEscalation=True),
              checkov=("CKV_K8S_20",)),
        _with("privilege-escalation-ephemeral-container", "restricted: Privilege Escalation",
              lambda p, s, c: ctx(_ephemeral_copy(s, c)).pop("allowPrivilegeEscalation"),
              unseen=EPHEMERAL_UNSEEN),
        _with("run-as-root-allowed", "restricted: Running as Non-root",
              lambda p, s, c: [s["securityContext"].update(runAsNonRoot=False),
                               s["securityContext"].pop("runAsUser")],
              checkov=("CKV_K8S_23", "CKV_K8S_40")),
        _with("run-as-uid-0", "restricted: Running as Non-root user",
              lambda p, s, c: ctx(c).update(runAsUser=0), checkov=("CKV_K8S_40",)),
        _with("seccomp-unset", "restricted: Seccomp",
              lambda p, s, c: s["securityContext"].pop("seccompProfile"),
              checkov=("CKV_K8S_31",)),
        _with("capabilities-not-dropped", "restricted: Capabilities",
              lambda p, s, c: ctx(c).pop("capabilities"),
              checkov=("CKV_K8S_37", "CKV_K8S_28")),
        _with("capability-beyond-net-bind", "restricted: Capabilities",
              lambda p, s, c: ctx(c)["capabilities"].update(add=["CHOWN"]),
              checkov=("CKV_K8S_25",)),
        _job("privileged-job", "baseline: Privileged Containers",
             lambda spec: spec["containers"][0]["securityContext"].update(privileged=True),
             checkov=("CKV_K8S_16",)),
    ]


def _job(name: str, control: str, change, *, checkov: tuple[str, ...] = ()) -> Hostile:
    """A GPU preflight Job (the Pod template is what is judged) with one control broken."""
    job = copy.deepcopy(product_pods()["gpujob-per-index-0"])
    job["metadata"]["name"] = f"hostile-{name}"
    change(job["spec"]["template"]["spec"])
    return Hostile(name, control, job, {control}, set(checkov))


# ------------------------------------------------------------------------------- checkov

def checker() -> Path:
    """checkov's own venv (made once per machine; a fresh one installs it from PyPI)."""
    from imagekit.infra import engines

    spec = engines.EngineSpec(name="checkov", version=CHECKOV_VERSION,
                              requirements=(f"checkov=={CHECKOV_VERSION}",),
                              probe="import checkov.main")
    python = engines.ensure(spec, root=TOOLS_ROOT, timeout=900)
    return python.parent / "checkov"


@dataclass
class Verdict:
    """checkov's failed and passed checks for one manifest file."""

    failed: set[str] = field(default_factory=set)
    passed: set[str] = field(default_factory=set)


def judge(checkov: Path, objects: dict[str, dict], directory: Path,
          checks: tuple[str, ...] = MAPPED_CHECKS) -> dict[str, Verdict]:
    """One checkov process over `objects` (one YAML file each, named by key) → verdicts."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, obj in objects.items():
        (directory / f"{name}.yaml").write_text(yaml.safe_dump(obj, sort_keys=False))
    done = subprocess.run(
        [str(checkov), "--directory", str(directory), "--framework", "kubernetes",
         "--output", "json", "--check", ",".join(checks), "--compact", "--skip-download",
         "--soft-fail"],
        capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "BC_SKIP_MAPPING": "TRUE", "CHECKOV_RUN_SCA_PACKAGE_SCAN_V2": ""})
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    reports = report if isinstance(report, list) else [report]
    verdicts = {name: Verdict() for name in objects}
    for one in reports:
        results = one.get("results") or {}
        for outcome, into in (("failed_checks", "failed"), ("passed_checks", "passed")):
            for result in results.get(outcome) or []:
                name = Path(result["file_path"]).stem
                getattr(verdicts[name], into).add(result["check_id"])
    missing = [name for name, v in verdicts.items() if not (v.failed or v.passed)]
    assert not missing, f"checkov judged no check on {missing}: {done.stderr[-1000:]}"
    return verdicts


def assert_both_admit(checkov: Path, objects: dict[str, dict], directory: Path) -> None:
    """imagekit finds no violation of restricted in any of `objects`, and checkov fails none of
    the checks mapped to the standard's controls (one checkov process for all of them)."""
    from imagekit.cluster import podsecurity

    # a list's items (PodsSeen reads Pods by listing) carry no kind: they are the list's Pods
    objects = {name: {"apiVersion": "v1", "kind": "Pod", **obj} for name, obj in objects.items()}
    for name, obj in objects.items():
        assert podsecurity.violations(obj, "restricted") == [], name
    verdicts = judge(checkov, objects, directory)
    failed = {name: sorted(v.failed) for name, v in verdicts.items() if v.failed}
    assert failed == {}, f"checkov disagrees: {failed}"
    for name, verdict in verdicts.items():
        assert verdict.passed == set(MAPPED_CHECKS), (name, sorted(verdict.passed))


def docs_table() -> str:
    """The mapping as docs/design/cluster.md shows it (a test keeps the page in step)."""
    lines = ["| control | level | checkov checks | how the check differs |",
             "|---|---|---|---|"]
    for key, ids in CHECKOV_MAP.items():
        level, name = key.split(": ", 1)
        shown = ", ".join(f"`{i}`" for i in ids) if ids else "none: judged by imagekit alone"
        lines.append(f"| {name} | {level} | {shown} | {CHECKOV_NOTES.get(key, '')} |")
    return "\n".join(lines)
