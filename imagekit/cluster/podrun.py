"""One run's Pods and what they need, from creation to cleanup: the helper every flow that
starts Pods shares (probe, gpu-preflight, the fleet preflight, gpujob, cluster accept).

- `create`/`apply`: the run's objects (ConfigMaps, Services, Jobs), remembered in order;
  `pull_secret`: the run's own pull Secret (deleted with it, never shared);
- `start`: a Pod, created safely (`pods.recreate_pod`: an old one of that name is deleted and
  watched until gone first);
- `wait`: a watch until the Pod is done, ready or stuck (`pods.wait_for_pod`);
- `follow`: its log, line by line, on a connection of its own (a thread);
- `collect`: its status, events and log;
- `cleanup`: every DELETE first, in reverse order (a run stopped by a credential that could
  not be renewed has only the last good credential's remaining moments, and those go to the
  deletes), then a watch until each Pod (and each object the server kept, marked for
  deletion) is gone. What could not be deleted is named in the
  report (`left`), never dropped silently.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from imagekit.cluster.pods import PodOutcome, recreate_pod, wait_for_pod, wait_gone
from imagekit.errors import ImagekitError
from imagekit.kube import Kube, WaitTimeout
from imagekit.kube.watch import wait_for, wait_for_selection
from imagekit.results import CheckResult, Status

#: seconds a Pod of a run gets to stop at cleanup: its results are collected by then, and a
#: container's PID 1 ignores SIGTERM unless it handles it, so Kubernetes' default 30 s grace
#: would be spent waiting (an interrupted run's Pods are gone within seconds, not half a minute)
STOP_GRACE_S = 5


@dataclass
class Collected:
    """What the cluster says about a Pod at the end: its status, its events, its log."""

    pod: dict | None
    events: list[dict]
    log: str

    @property
    def status(self) -> dict:
        return (self.pod or {}).get("status", {})


@dataclass
class CleanupReport:
    """What `cleanup` did: per object (`Kind name`) the error that kept it, and how long each
    Pod took to be gone."""

    deleted: list[str] = field(default_factory=list)
    errors: dict[str, ImagekitError] = field(default_factory=dict)
    waited: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def left(self) -> list[str]:
        return sorted(self.errors)

    def raise_first(self, kind: str) -> None:
        """Raise the first error of an object of `kind` (a flow that must not go on quietly
        when, say, its ConfigMap stayed)."""
        for label, error in self.errors.items():
            if label.startswith(f"{kind} "):
                raise error

    def pod_check(self, name: str) -> CheckResult:
        """The `cleanup` check of one Pod, as the flows have always worded it."""
        error = self.errors.get(f"Pod {name}")
        if error is not None:
            return CheckResult(name="cleanup", status=Status.ERROR, detail=error.one_line())
        return CheckResult(name="cleanup", status=Status.PASS,
                           detail=f"pod deleted and gone after {self.waited.get(name, 0.0):.1f}s")

    def secret_check(self, secret: str) -> CheckResult:
        error = self.errors.get(f"Secret {secret}")
        if error is not None:
            return CheckResult(name="cleanup-pull-secret", status=Status.ERROR,
                               detail=f"pull Secret {secret} left behind: {error.one_line()}")
        return CheckResult(name="cleanup-pull-secret", status=Status.PASS,
                           detail=f"pull Secret {secret} deleted")


class LogFollower(threading.Thread):
    """Follows one container's log on its own connection; retries while the container is not
    running yet (400 ContainerCreating) and after its stream broke off; hands each line to
    `on_line` once (a log followed again is read from its top: the lines handed on before are
    skipped)."""

    def __init__(self, kube: Kube, namespace: str, pod: str, container: str | None,
                 on_line: Callable[[str], None]) -> None:
        super().__init__(daemon=True, name=f"log-{pod}")
        self.kube, self.namespace, self.pod, self.container = kube, namespace, pod, container
        self.on_line = on_line
        self.stop = threading.Event()
        self.ended = threading.Event()

    def run(self) -> None:
        delivered = 0   # a log followed again (its stream broke off) starts from its top
        with self.kube.another() as kube:
            while not self.stop.is_set():
                try:
                    seen = 0
                    for line in kube.follow_logs(self.namespace, self.pod, self.container):
                        seen += 1
                        if seen <= delivered:
                            continue    # handed on before the break
                        delivered = seen
                        self.on_line(line)
                        if self.stop.is_set():
                            return
                    self.ended.set()
                    return
                except ImagekitError:
                    time.sleep(1.0)  # ContainerCreating: 400 until it runs


class PodRun:
    """The objects one run created in `namespace`, and the Pods among them."""

    def __init__(self, kube: Kube, namespace: str, name: str, *,
                 pod_selector: str | None = None) -> None:
        """`pod_selector`: the labels of Pods this run makes through a controller (a Job's
        Pods): `cleanup` deletes them too and waits until none is left."""
        self.kube, self.namespace, self.name = kube, namespace, name
        self.pod_selector = pod_selector
        self.objects: list[dict] = []    # manifests as created, in order
        self.secret: str | None = None
        self.followers: list[LogFollower] = []

    # ------------------------------------------------------------------ create
    def _track(self, obj: dict) -> None:
        key = (obj.get("kind"), obj["metadata"]["name"])
        if all((o.get("kind"), o["metadata"]["name"]) != key for o in self.objects):
            self.objects.append(obj)

    def create(self, obj: dict) -> dict:
        created = self.kube.create(obj)
        self._track(obj)
        return created

    def apply(self, obj: dict) -> dict:
        applied = self.kube.apply(obj)
        self._track(obj)
        return applied

    def pull_secret(self, registry: str, docker_config_dir: Path | None) -> str | None:
        """The run's own pull Secret for `registry` (`<run>-pull`), or None without a
        credential; deleted by `cleanup`."""
        from imagekit.cluster.probe import pull_secret_for

        self.secret = pull_secret_for(self.kube, self.namespace, registry, docker_config_dir,
                                      name=f"{self.name}-pull")
        return self.secret

    def start(self, pod: dict) -> dict:
        """Create the Pod (an old one of that name deleted and watched until gone first)."""
        outcome = recreate_pod(self.kube, pod)
        self._track(pod)
        return outcome.pod

    # ------------------------------------------------------------------ follow and collect
    def wait(self, pod: str, timeout: float, until: str = "done") -> PodOutcome:
        return wait_for_pod(self.kube, self.namespace, pod, timeout=timeout, until=until)

    def wait_ended(self, pod: str, timeout: float) -> dict | None:
        """The Pod once Succeeded or Failed (None: it is gone); after `timeout`, as it is."""
        try:
            return wait_for(self.kube.resource("Pod"), pod, self.namespace,
                            lambda p: {"pod": p} if p is None or p.get("status", {}).get(
                                "phase") in ("Succeeded", "Failed") else None,
                            timeout=timeout, what=f"pod {pod} to end")["pod"]
        except WaitTimeout as exc:
            return exc.last

    def follow(self, pod: str, container: str | None, on_line: Callable[[str], None]
               ) -> LogFollower:
        follower = LogFollower(self.kube, self.namespace, pod, container, on_line)
        self.followers.append(follower)
        follower.start()
        return follower

    def collect(self, pod: str, container: str | None = None) -> Collected:
        current = self.kube.get_pod(self.namespace, pod)
        events = self.kube.events_for(self.namespace, "Pod", pod)
        return Collected(pod=current, events=events,
                         log=self.kube.pod_logs(self.namespace, pod, container))

    # ------------------------------------------------------------------ cleanup
    def cleanup(self, *, timeout: float = 120, grace_seconds: int | None = STOP_GRACE_S,
                keep_secret: bool = False) -> CleanupReport:
        """Delete everything this run created (its Secret too unless `keep_secret`), deletes
        first and in reverse order, then wait until each is gone. A Pod still running gets
        `grace_seconds` to stop (None: its own terminationGracePeriodSeconds)."""
        started = time.monotonic()
        for follower in self.followers:
            follower.stop.set()
        report = CleanupReport()
        pending: list[tuple[str, str, str | None]] = []   # (kind, name, uid) to wait for
        targets = list(reversed(self.objects))
        if self.secret and not keep_secret:
            targets.append({"apiVersion": "v1", "kind": "Secret",
                            "metadata": {"name": self.secret, "namespace": self.namespace}})
        for obj in targets:
            kind, name = obj.get("kind", ""), obj["metadata"]["name"]
            label = f"{kind} {name}"
            try:
                resource = self.kube.resource_of(obj)
                uid = None
                if kind == "Pod":
                    current = resource.maybe_get(name, self.namespace)
                    if current is None:
                        report.waited[name] = 0.0
                        continue
                    uid = current["metadata"]["uid"]
                    if current["metadata"].get("deletionTimestamp") and grace_seconds is None:
                        pending.append((kind, name, uid))
                        continue
                deleted = resource.delete(name, self.namespace, uid=uid,
                                          grace_seconds=grace_seconds if kind == "Pod" else None)
                if deleted is not None:
                    report.deleted.append(label)
                    # waited for: a Pod (graceful termination), or what the server kept
                    # (its answer is the object, marked for deletion: finalizers)
                    if kind == "Pod" or (deleted.get("kind") != "Status" and (
                            deleted.get("metadata") or {}).get("deletionTimestamp")):
                        pending.append((kind, name, uid))
            except ImagekitError as exc:
                report.errors[label] = exc
        pods = self.kube.resource("Pod")
        if self.pod_selector:
            # Background propagation: the garbage collector deletes a Job's Pods; they are
            # deleted here too, so the wait does not depend on its pace
            try:
                for pod in pods.list(self.namespace, label_selector=self.pod_selector):
                    pods.delete(pod["metadata"]["name"], self.namespace,
                                uid=pod["metadata"].get("uid"), grace_seconds=grace_seconds)
            except ImagekitError as exc:
                report.errors[f"Pods {self.pod_selector}"] = exc
        for kind, name, uid in pending:
            label = f"{kind} {name}"
            begun = time.monotonic()
            try:
                if kind == "Pod":
                    report.waited[name] = wait_gone(self.kube, self.namespace, name, uid=uid,
                                                    timeout=timeout)
                else:
                    wait_for(self.kube.resource(kind, _api_version(self.objects, kind)), name,
                             self.namespace, lambda o: True if o is None else None,
                             timeout=timeout, what=f"{kind} {name} to be gone")
                    report.waited[name] = time.monotonic() - begun
            except ImagekitError as exc:
                report.errors[label] = exc
        if self.pod_selector and f"Pods {self.pod_selector}" not in report.errors:
            try:
                wait_for_selection(pods, self.namespace, self.pod_selector,
                                   lambda items: True if not items else None, timeout=timeout,
                                   what=f"the Pods {self.pod_selector} to be gone")
            except ImagekitError as exc:
                report.errors[f"Pods {self.pod_selector}"] = exc
        report.seconds = time.monotonic() - started
        return report


def _api_version(objects: list[dict], kind: str) -> str:
    return next((o.get("apiVersion", "v1") for o in objects if o.get("kind") == kind), "v1")
