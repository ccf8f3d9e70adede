"""GPU preflight Pod: precheck first, submit only when nothing stands in the way.

The record's GPU pre-check ran each fixed image on the target node with all eight GPUs. Before
such a Pod is submitted, `precheck` must pass on the very spec that would be submitted (not on
a description of it): node, labels, taints, storage, free GPUs, Priority admission. A finding
means nothing is created — no Pod, no PriorityClass, nothing evicted.
"""

from __future__ import annotations

import secrets as _secrets
import time
from dataclasses import dataclass, field
from pathlib import Path

from imagekit.cluster import admit, manifests
from imagekit.cluster.podrun import PodRun
from imagekit.cluster.pods import observed
from imagekit.cluster.precheck import PodIntent, StorageNeed, precheck
from imagekit.evidence import EvidenceStore
from imagekit.evidence.kinds import GpuPreflightResult
from imagekit.kube import Kube
from imagekit.oci import ImageReference
from imagekit.results import CheckReport, CheckResult, Status

MOUNT = "/imagekit"


@dataclass(frozen=True)
class ShippedScript:
    """A preflight script or package as ConfigMap files, how the volume lays them out and what
    runs it. ConfigMaps are flat: a package's modules are keys `<package>.<module>.py`, mounted
    through the volume's items as `<package>/<module>.py`, and run as `python3 -m <package>`
    from the mount (the container's workingDir)."""

    files: dict[str, str]
    layout: dict[str, str]   # key -> path inside the mount (only keys that are not their path)
    run: list[str]           # after python3 or torch.distributed.run
    package: str | None = None

    def items(self, keys: list[str]) -> list[dict[str, str]] | None:
        """The volume's items for every key of the ConfigMap (None: flat, no items needed)."""
        if not self.layout:
            return None
        return [{"key": k, "path": self.layout.get(k, k)} for k in sorted(keys)]


def ship_script(script: Path) -> ShippedScript:
    """A plain script (`x.py`: run as /imagekit/x.py), or a package: its folder or its
    `__main__.py` (gpu_checks/preflight: run as `-m preflight`)."""
    root = script if script.is_dir() else script.parent if script.name == "__main__.py" else None
    if root is not None and (root / "__main__.py").is_file() and (root / "__init__.py").is_file():
        files, layout = {}, {}
        for path in sorted(root.glob("*.py")):
            key = f"{root.name}.{path.name}"
            files[key] = path.read_text()
            layout[key] = f"{root.name}/{path.name}"
        return ShippedScript(files, layout, ["-m", root.name], root.name)
    return ShippedScript({script.name: script.read_text()}, {}, [f"{MOUNT}/{script.name}"])


def add_files(pod: dict, configmap: dict, files: dict[str, str]) -> None:
    """Put more plain files into a rendered preflight ConfigMap (and its volume's items)."""
    configmap["data"].update(files)
    volume = pod["spec"]["volumes"][0]["configMap"]
    if "items" in volume:
        volume["items"] += [{"key": k, "path": k} for k in sorted(files)]


@dataclass
class PreflightOptions:
    namespace: str = "imagekit"
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: list[dict] = field(default_factory=lambda: [manifests.GPU_TOLERATION])
    gpus: int = 8
    priority_class_name: str | None = None
    preemption_policy: str | None = None
    storage: StorageNeed | None = None
    script: Path | None = None          # a script or a package (ship_script); run with python3
    command: list[str] | None = None    # default: python3 /imagekit/<script> or -m <package>
    timeout_s: float = 900.0
    docker_config_dir: Path | None = None
    manifests_dir: Path | None = None   # the Pod templates' folder (default the packaged one)


def render_preflight(pinned: ImageReference, options: PreflightOptions, name: str
                     ) -> tuple[dict, dict]:
    shipped = ship_script(options.script) if options.script is not None else None
    files = shipped.files if shipped else {}
    command = options.command or (["python3", *shipped.run] if shipped else
                                  ["nvidia-smi", "-L"])
    configmap = manifests.configmap(f"{name}-scripts", options.namespace, files,
                                    labels={"imagekit.dev/role": "gpu-preflight"})
    pod = manifests.render(
        "gpu-preflight-pod.yaml.j2", template_dir=options.manifests_dir, name=name,
        namespace=options.namespace, image=pinned,
        node_selector=options.node_selector, tolerations=options.tolerations,
        priority_class_name=options.priority_class_name,
        preemption_policy=options.preemption_policy, command=command, gpus=options.gpus,
        configmap=configmap["metadata"]["name"], deadline_seconds=int(options.timeout_s) + 60)
    items = shipped.items(list(files)) if shipped else None
    if items is not None:  # a package: laid out by the volume's items, run from the mount
        pod["spec"]["volumes"][0]["configMap"]["items"] = items
        pod["spec"]["containers"][0]["workingDir"] = MOUNT
    return pod, configmap


def run_preflight(kube: Kube, pinned: ImageReference, options: PreflightOptions,
                  store: EvidenceStore, submit: bool) -> CheckReport:
    """Precheck the rendered Pod; with `submit` and a clean precheck, run it and keep its log."""
    assert pinned.digest is not None
    name = f"gpu-preflight-{pinned.digest.hex[:12]}-{_secrets.token_hex(2)}"
    pod, configmap = render_preflight(pinned, options, name)
    # permissions, the namespace and its Pod Security level: refused before anything exists
    admit.prepare(kube, "gpu-preflight", options.namespace, [pod])
    intent = PodIntent.from_pod(pod, storage=options.storage)
    with store.attempt(pinned.digest, "gpu-preflight", reference=str(pinned),
                       namespace=options.namespace, pod=name, submit=submit) as attempt:
        attempt.write_json("pod-manifest.json", pod)
        checks = precheck(kube, intent)
        blocked = [c for c in checks if not c.status.is_pass]
        if blocked or not submit:
            note = (f"not submitted: {len(blocked)} precheck finding(s); nothing was created"
                    if blocked else "precheck clean; dry run (no --submit), nothing created")
            checks.append(CheckResult(name="submission", status=Status.DEFERRED if not blocked
                                      else Status.FAIL, detail=note))
        else:
            checks.extend(_submit(kube, pod, configmap, options, attempt))
        for check in checks:
            attempt.add_check(check)
        attempt.write_result(GpuPreflightResult(reference=str(pinned),
                                                namespace=options.namespace, pod=name,
                                                submitted=submit and not blocked))
    return CheckReport.of(str(pinned), checks, digest=str(pinned.digest),
                          evidence=str(attempt.path))


def _submit(kube: Kube, pod: dict, configmap: dict, options: PreflightOptions, attempt
            ) -> list[CheckResult]:
    ns, name = options.namespace, pod["metadata"]["name"]
    ref = ImageReference.parse(pod["spec"]["containers"][0]["image"])
    run = PodRun(kube, ns, name)
    secret = run.pull_secret(ref.registry, options.docker_config_dir)  # the run's own
    if secret:
        pod["spec"]["imagePullSecrets"] = [{"name": secret}]
    run.create(configmap)
    checks: list[CheckResult] = []
    started = time.monotonic()
    try:
        run.start(pod)
        outcome = run.wait(name, timeout=options.timeout_s)
        attempt.write_json("pod-status.json", outcome.pod.get("status", {}))
        log = kube.pod_logs(ns, name)
        attempt.write_text("pod.log", log)
        if outcome.stuck_reason:
            status, detail = Status.FAIL, f"stuck in {outcome.stuck_reason}: " \
                f"{outcome.stuck_message or ''}"
        elif outcome.timed_out:
            status, detail = Status.ERROR, f"no outcome after {options.timeout_s:.0f}s"
        elif outcome.refusal:
            status, detail = Status.ERROR, outcome.refusal
        else:
            status = Status.PASS if outcome.phase == "Succeeded" else Status.FAIL
            detail = f"preflight Pod {outcome.phase} after {time.monotonic() - started:.1f}s"
        checks.append(CheckResult(name="preflight_pod", status=status, detail=detail,
                                  data={"observed": observed(outcome.pod)}))
    finally:
        report = run.cleanup(timeout=120)
        checks.append(report.pod_check(name))
        if secret:
            checks.append(report.secret_check(secret))
        report.raise_first("ConfigMap")
    return checks
