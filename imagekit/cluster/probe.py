"""`imagekit cluster probe REF`: acceptance of an image by tag, on a real cluster.

The record (section 5): on the target cluster, run a zero-GPU Pod with the fixed image, verify
the actual imageID and the probe results, archive, clean up. Steps:

1. resolve the tag to a digest through the registry (verified: the manifest bytes hash to it);
2. run the probe Pod pinned to `repo@sha256:…` (containerd verifies the manifest against it),
   with the registry credentials as an imagePullSecret built from docker's config.json;
3. wait for the outcome (a stuck image pull returns early with the kubelet's reason);
4. check that the digest part of `containerStatuses[].imageID` equals the pinned digest — when
   it differs, compare both manifests' config digests before calling it FAIL (imageid.py);
5. split the Pod log into the in-Pod probe results;
6. store Pod status, log and events in evidence; delete the Pod and watch until it is gone.
"""

from __future__ import annotations

import base64
import contextlib
import json
import re
import secrets as _secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from imagekit import packaged
from imagekit.cluster import admit, manifests
from imagekit.cluster.imageid import compare_image_id
from imagekit.cluster.podrun import PodRun
from imagekit.cluster.pods import PodOutcome, observed
from imagekit.errors import ImagekitError, InvalidInput
from imagekit.evidence import EvidenceStore, Role
from imagekit.evidence.kinds import ClusterProbeResult
from imagekit.evidence.store import Attempt
from imagekit.kube import Conflict, Kube
from imagekit.kube.watch import wait_for
from imagekit.oci import Digest, ImageReference
from imagekit.results import CheckReport, CheckResult, Status

RUNNER = "probe/probe-runner.sh"
_BEGIN = re.compile(r"^==> imagekit-probe (?P<name>\S+)\s*$")
_END = re.compile(r"^<== imagekit-probe (?P<name>\S+) rc=(?P<rc>-?\d+)\s*$")


@dataclass
class ProbeOptions:
    namespace: str = "imagekit"
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: list[dict] = field(default_factory=lambda: [manifests.GPU_TOLERATION])
    probes_dir: Path | None = None
    manifests_dir: Path | None = None   # the Pod templates' folder (default the packaged one)
    timeout_s: float = 300.0
    memory_limit: str = "2Gi"
    docker_config_dir: Path | None = None  # where config.json (registry credentials) lives
    keep_pod: bool = False
    #: the run's pull Secret is deleted with the Pod unless asked to keep it (or the Pod is kept)
    keep_pull_secret: bool = False
    expect_digest: Digest | None = None  # e.g. from the build record: the tag must name this
    #: which probes run, with their arguments (e.g. ("find_spec", ["nixl", "sglang"])); None:
    #: every probes/*.py not starting with "_", without arguments
    plan: list[tuple[str, list[str]]] | None = None


# ---------------------------------------------------------------------------------- helpers

def ensure_namespace(kube: Kube, namespace: str) -> None:
    """Create the namespace if missing and wait for its default ServiceAccount (admission
    refuses Pods until the controller-manager made it)."""
    if not kube.resource("Namespace").exists(namespace):
        with contextlib.suppress(Conflict):
            kube.create({"apiVersion": "v1", "kind": "Namespace",
                         "metadata": {"name": namespace,
                                      "labels": {"app.kubernetes.io/managed-by": "imagekit"}}})
    wait_for(kube.resource("ServiceAccount"), "default", namespace,
             lambda account: account, timeout=60,
             what=f"ServiceAccount default in namespace {namespace}")


def pull_secret_for(kube: Kube, namespace: str, registry: str,
                    docker_config_dir: Path | None, name: str | None = None) -> str | None:
    """Create/refresh a kubernetes.io/dockerconfigjson Secret holding only `registry`'s entry
    from docker's config.json; returns its name, or None when there is no credential. The
    credential goes from file to API object; it is never printed, logged or put in evidence.
    `name`: a Secret of this run only (created; deleted with it), else one shared per
    registry (created or replaced)."""
    from imagekit.registry.credentials import CredentialSource

    credential = CredentialSource(docker_config_dir).lookup(registry).credential
    if credential is None:
        return None
    if credential.identity_token:
        raise InvalidInput("the credential for this registry is an identity token, which "
                           "imagePullSecrets cannot carry", where=registry)
    auth = base64.b64encode(f"{credential.username}:{credential.secret}".encode()).decode()
    config = {"auths": {registry: {"auth": auth}}}
    # a run's own is created (one of the same name is not the run's); a shared one refreshed
    send = kube.create if name is not None else kube.apply
    name = name or "imagekit-pull-" + re.sub(r"[^a-z0-9-]", "-", registry.lower()).strip("-")
    send({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/dockerconfigjson",
          "metadata": {"name": name, "namespace": namespace,
                       "labels": {"app.kubernetes.io/managed-by": "imagekit"}},
          "data": {".dockerconfigjson": base64.b64encode(json.dumps(config).encode()).decode()}})
    return name


def parse_probe_log(log: str) -> list[CheckResult]:
    """Split the runner's framed output into one check per probe. A probe whose last output
    line is a JSON object with a "status" (PASS/FAIL/DEFERRED/ERROR) is taken at its word;
    otherwise the exit code decides. A probe that started but never ended is ERROR."""
    checks: list[CheckResult] = []
    current: str | None = None
    body: list[str] = []
    for line in log.splitlines():
        if m := _BEGIN.match(line):
            current, body = m["name"], []
            continue
        if (m := _END.match(line)) and current is not None and current == m["name"]:
            rc = int(m["rc"])
            checks.append(_probe_check(current, rc, body))
            current = None
            continue
        if current is not None:
            body.append(line)
    if current is not None:
        checks.append(CheckResult(name=f"probe:{current}", status=Status.ERROR,
                                  detail="probe output ends without an exit code (Pod killed?)",
                                  data={"tail": body[-20:]}))
    return checks


def _probe_check(name: str, rc: int, body: list[str]) -> CheckResult:
    tail = body[-20:]
    last = next((line for line in reversed(body) if line.strip()), "")
    if last.startswith("{"):
        try:
            doc = json.loads(last)
            status = Status(str(doc.get("status", "")).upper())
            return CheckResult(name=f"probe:{name}", status=status,
                               detail=str(doc.get("detail", ""))[:500] or f"exit {rc}",
                               data={"rc": rc, "result": doc, "tail": tail})
        except (ValueError, TypeError):
            pass
    if rc == 127 and "python3 not found" in "\n".join(body):
        return CheckResult(name=f"probe:{name}", status=Status.ERROR,
                           detail="python3 not found in the image", data={"rc": rc})
    status = Status.PASS if rc == 0 else Status.FAIL
    return CheckResult(name=f"probe:{name}", status=status,
                       detail=f"exit {rc}" + (f": {last[:300]}" if last else ""),
                       data={"rc": rc, "tail": tail})


def probe_files(probes_dir: Path | None,
                plan: list[tuple[str, list[str]]] | None = None,
                manifests_dir: Path | None = None) -> dict[str, str]:
    """The ConfigMap's files: the runner, every probes/*.py (helpers like _common.py too, the
    probes import them), and probe-plan.txt when a plan is given."""
    files = manifests.script_files(RUNNER, template_dir=manifests_dir)
    if probes_dir is not None and probes_dir.is_dir():
        for path in sorted(probes_dir.glob("*.py")):
            files[path.name] = path.read_text()
        # the fit rules torch_arch loads: one file, the preflight package's (ConfigMaps are flat)
        files.setdefault("_cudafit.py", packaged.path("preflight", "fit.py").read_text())
    if plan is not None:
        lines = []
        for name, args in plan:
            if not re.fullmatch(r"[A-Za-z0-9_.-]+", name) or \
                    any(not a or any(ch.isspace() for ch in a) for a in args):
                raise InvalidInput("probe names and arguments cannot be empty or hold spaces",
                                   where=f"{name} {args}")
            if f"{name}.py" not in files:
                raise InvalidInput(f"no probe named {name} in {probes_dir}", where=name)
            lines.append(" ".join([name, *args]))
        files["probe-plan.txt"] = "\n".join(lines) + "\n"
    return files


# ---------------------------------------------------------------------------------- operation

@dataclass
class Resolved:
    ref: ImageReference          # pinned: registry/repo@sha256:…
    digest: Digest
    tag: str | None


def run_probe(kube: Kube, ref: ImageReference, registry_client, options: ProbeOptions,
              store: EvidenceStore) -> CheckReport:
    """Resolve, run, verify, archive, clean up. `registry_client` is an
    `imagekit.registry.RegistryClient` for `ref.registry` (tag → digest, manifests)."""
    checks: list[CheckResult] = []
    if ref.digest is not None:
        blob = registry_client.get_manifest(ref.repository, ref.digest)
        digest = blob.digest
        checks.append(CheckResult(name="resolve", status=Status.PASS,
                                  detail=f"pinned reference; manifest present ({digest.short})"))
    else:
        digest = registry_client.resolve_tag(ref.repository, ref.tag or "latest")  # a HEAD
        checks.append(CheckResult(name="resolve", status=Status.PASS,
                                  detail=f"tag {ref.tag or 'latest'} resolves to {digest}"))
    pinned = ref.with_digest(digest)
    if options.expect_digest is not None and digest != options.expect_digest:
        checks.append(CheckResult(
            name="expected_digest", status=Status.FAIL,
            data={"resolved": str(digest), "expected": str(options.expect_digest)},
            detail=f"{ref} resolves to {digest.short}, not the expected "
                   f"{options.expect_digest.short}; no Pod was started for the wrong image"))
        with store.attempt(digest, "cluster-probe", reference=str(ref),
                           expected=str(options.expect_digest)) as attempt:
            attempt.add_subject(digest, Role.SUBJECT, str(ref))
            attempt.write_result(ClusterProbeResult(reference=str(ref), pinned=str(pinned),
                                                    expected=str(options.expect_digest)))
            for check in checks:
                attempt.add_check(check)
        return CheckReport.of(str(ref), checks, digest=str(digest), evidence=str(attempt.path))

    def fetch(d: Digest) -> bytes:
        return registry_client.get_manifest(ref.repository, d).data

    files = probe_files(options.probes_dir, options.plan, options.manifests_dir)
    suffix = _secrets.token_hex(3)
    name = f"probe-{digest.hex[:12]}-{suffix}"
    pod = manifests.render("probe-pod.yaml.j2", template_dir=options.manifests_dir,
                           name=name, namespace=options.namespace,
                           image=pinned, node_name=None,
                           node_selector=options.node_selector,
                           tolerations=options.tolerations, pull_secrets=[],
                           configmap=f"{name}-probes",
                           deadline_seconds=int(options.timeout_s) + 60,
                           memory_limit=options.memory_limit)
    # permissions, the namespace and its Pod Security level: refused before anything exists
    admit.prepare(kube, "probe", options.namespace, [pod])
    with store.attempt(digest, "cluster-probe", reference=str(ref), pinned=str(pinned),
                       namespace=options.namespace, pod=name,
                       kubeconfig=str(kube.kubeconfig)) as attempt:
        attempt.add_subject(digest, Role.SUBJECT, str(ref))
        attempt.write_result(ClusterProbeResult(
            reference=str(ref), pinned=str(pinned), namespace=options.namespace, pod=name,
            expected=str(options.expect_digest) if options.expect_digest else None))
        run = PodRun(kube, options.namespace, name)
        # the run's own Secret (not one shared per registry): deleted with the run below
        secret = run.pull_secret(ref.registry, options.docker_config_dir)
        cm = manifests.configmap(f"{name}-probes", options.namespace, files,
                                 labels={"imagekit.dev/role": "probe"})
        try:
            run.create(cm)
        except BaseException:
            _drop_secret(run, options, checks)
            raise
        if secret:
            pod["spec"]["imagePullSecrets"] = [{"name": secret}]
        attempt.write_json("pod-manifest.json", pod)
        attempt.write_json("probe-files.json", sorted(files))
        started = time.monotonic()
        try:
            run.start(pod)
            outcome = run.wait(name, timeout=options.timeout_s)
            checks.extend(_outcome_checks(run, outcome, options, name, pinned, digest, fetch,
                                          attempt, started))
        finally:
            if options.keep_pod:
                _drop_secret(run, options, checks)
            else:
                _cleanup(run, options, name, secret, checks)
        attempt.write_json("checks.json", [c.model_dump(mode="json") for c in checks])
        for check in checks:
            attempt.add_check(check)
    return CheckReport.of(str(ref), checks, digest=str(digest), evidence=str(attempt.path))


def _cleanup(run: PodRun, options: ProbeOptions, name: str, secret: str | None,
             checks: list[CheckResult]) -> None:
    """The Pod, its ConfigMap and the run's pull Secret (unless kept): every DELETE first,
    then the wait until the Pod is gone (`PodRun.cleanup`)."""
    report = run.cleanup(keep_secret=options.keep_pull_secret)
    if secret is not None and not options.keep_pull_secret:
        checks.append(report.secret_check(secret))
    checks.append(report.pod_check(name))
    report.raise_first("ConfigMap")


def _drop_secret(run: PodRun, options: ProbeOptions, checks: list[CheckResult]) -> None:
    """Delete the run's pull Secret (credentials created for a run leave with it), unless the
    user asked to keep it or the Pod was kept (it may still need to pull)."""
    if run.secret is None or options.keep_pull_secret or options.keep_pod:
        return
    checks.append(drop_run_secret(run.kube, run.namespace, run.secret))


def drop_run_secret(kube: Kube, namespace: str, secret: str) -> CheckResult:
    """Delete a pull Secret created for one run (`pull_secret_for(..., name=<run>-pull)`):
    credentials made in the cluster for a run leave with it."""
    try:
        kube.resource("Secret").delete(secret, namespace)
        return CheckResult(name="cleanup-pull-secret", status=Status.PASS,
                           detail=f"pull Secret {secret} deleted")
    except ImagekitError as exc:
        return CheckResult(name="cleanup-pull-secret", status=Status.ERROR,
                           detail=f"pull Secret {secret} left behind: {exc.one_line()}")


def _outcome_checks(run: PodRun, outcome: PodOutcome, options: ProbeOptions, name: str,
                    pinned: ImageReference, digest: Digest, fetch: Callable[[Digest], bytes],
                    attempt: Attempt, started: float) -> list[CheckResult]:
    checks: list[CheckResult] = []
    pod = outcome.pod
    collected = run.collect(name, "probe")
    events, log = collected.events, collected.log
    attempt.write_json("pod-status.json", pod.get("status", {}))
    attempt.write_json("events.json", [
        {k: e.get(k) for k in ("type", "reason", "message", "count", "firstTimestamp",
                               "lastTimestamp")} for e in events])
    attempt.write_text("pod.log", log)
    elapsed = time.monotonic() - started
    if outcome.stuck_reason:
        pull_events = [e.get("message", "") for e in events
                       if e.get("reason") in ("Failed", "ErrImagePull")]
        message = outcome.stuck_message or (pull_events[-1] if pull_events else "")
        checks.append(CheckResult(name="pod_completed", status=Status.FAIL,
                                  detail=f"container stuck in {outcome.stuck_reason}: {message}",
                                  data={"phase": outcome.phase, "reason": outcome.stuck_reason}))
    elif outcome.timed_out:
        checks.append(CheckResult(name="pod_completed", status=Status.ERROR,
                                  detail=f"no outcome after {options.timeout_s:.0f}s "
                                         f"(phase {outcome.phase})"))
    elif outcome.refusal:
        checks.append(CheckResult(name="pod_completed", status=Status.ERROR,
                                  detail=outcome.refusal,
                                  data={"phase": outcome.phase, "observed": observed(pod)}))
    else:
        status = Status.PASS if outcome.phase == "Succeeded" else Status.FAIL
        checks.append(CheckResult(name="pod_completed", status=status,
                                  detail=f"pod {outcome.phase} after {elapsed:.1f}s",
                                  data={"phase": outcome.phase, "observed": observed(pod)}))
    statuses = pod.get("status", {}).get("containerStatuses", [])
    image_id = statuses[0].get("imageID", "") if statuses else ""
    if image_id:
        check = compare_image_id(digest, image_id, fetch)
    elif outcome.refusal:   # nothing was pulled: no imageID to judge, either way
        check = CheckResult(name="image_id", status=Status.DEFERRED,
                            data={"pinned": str(digest), "image_id": ""},
                            detail=f"{outcome.refusal}, so no image was pulled and there is "
                                   f"no imageID to compare with {digest.short}")
    else:
        check = CheckResult(name="image_id", status=Status.FAIL,
                            data={"pinned": str(digest), "image_id": ""},
                            detail="the container never started, so no imageID to compare "
                                   f"with {digest.short}")
    checks.append(check)
    probe_checks = parse_probe_log(log)
    if not probe_checks and outcome.phase == "Succeeded":
        probe_checks = [CheckResult(name="in_pod_probes", status=Status.DEFERRED,
                                    detail="no probes mounted (no probes/*.py found)")]
    checks.extend(probe_checks)
    return checks


# ---------------------------------------------------------------------------------- probes alone

@dataclass
class InPodProbes:
    """What a probe Pod said, without the cluster probe's checks around it (imageID, archive):
    for a flow that needs one probe's verdict now (`cluster accept` asks the image's own parser
    about a launch command no record shows parsed)."""

    pod: str
    manifest: dict
    log: str
    #: one per probe the Pod's log framed (`parse_probe_log`)
    checks: list[CheckResult]
    #: why the Pod gave no verdict (a stuck pull, a refusal, a time-out, a failed Pod); None
    #: when it ran to its end
    failure: str | None = None


def probes_in_pod(kube: Kube, pinned: ImageReference, plan: list[tuple[str, list[str]]], *,
                  name: str, namespace: str, probes_dir: Path,
                  node_selector: dict[str, str] | None = None,
                  tolerations: list[dict] | None = None, manifests_dir: Path | None = None,
                  docker_config_dir: Path | None = None, enforce: str | None = None,
                  timeout_s: float = 300.0, memory_limit: str = "2Gi") -> InPodProbes:
    """Run `plan`'s probes in a zero-GPU Pod of the image pinned by digest (the probe Pod of
    `cluster probe`, its pull Secret and ConfigMap the run's own), read their verdicts from
    its log and delete everything, waiting until it is gone. `enforce`: the namespace's Pod
    Security level the Pod is judged against before it is created."""
    from imagekit.cluster import podsecurity

    if pinned.digest is None:
        raise InvalidInput("the probe Pod runs an image pinned by digest", where=str(pinned))
    files = probe_files(probes_dir, plan, manifests_dir)
    pod = manifests.render("probe-pod.yaml.j2", template_dir=manifests_dir, name=name,
                           namespace=namespace, image=pinned, node_name=None,
                           node_selector=node_selector or {},
                           tolerations=tolerations if tolerations is not None
                           else [manifests.GPU_TOLERATION], pull_secrets=[],
                           configmap=f"{name}-probes", deadline_seconds=int(timeout_s) + 60,
                           memory_limit=memory_limit)
    if enforce is not None:
        podsecurity.require([pod], enforce, namespace)
    run = PodRun(kube, namespace, name)
    try:
        secret = run.pull_secret(pinned.registry, docker_config_dir)
        if secret:
            pod["spec"]["imagePullSecrets"] = [{"name": secret}]
        run.create(manifests.configmap(f"{name}-probes", namespace, files,
                                      labels={"imagekit.dev/role": "probe"}))
        run.start(pod)
        outcome = run.wait(name, timeout=timeout_s)
        log = run.collect(name, "probe").log
    finally:
        report = run.cleanup()
    if report.errors:
        raise next(iter(report.errors.values()))
    if outcome.stuck_reason:
        failure: str | None = f"container stuck in {outcome.stuck_reason}: " \
                              f"{outcome.stuck_message or ''}".rstrip(": ")
    elif outcome.timed_out:
        failure = f"no outcome after {timeout_s:.0f} s (phase {outcome.phase})"
    elif outcome.refusal:
        failure = outcome.refusal
    elif outcome.phase != "Succeeded":
        failure = f"the Pod {outcome.phase}"
    else:
        failure = None
    return InPodProbes(pod=name, manifest=pod, log=log, checks=parse_probe_log(log),
                       failure=failure)
