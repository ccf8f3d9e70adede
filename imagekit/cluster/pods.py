"""Pod lifecycle done safely: wait until really gone, wait for an outcome, recreate.

The record (section 6): nodeSelector is immutable, so a changed Pod must be deleted and created
again; right after the DELETE returns, the old object may still be Terminating and an immediate
create answers 409 (or an apply becomes an illegal update). So deletion is confirmed by a watch
on that very object (name + uid) until its DELETED event, then by a GET that answers 404 —
never by sleeping, never by blind retries of the create.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from imagekit.errors import TransportError
from imagekit.kube import Conflict, Kube, WaitTimeout
from imagekit.kube.watch import observe, wait_for

#: Container waiting reasons that will not resolve by themselves.
STUCK_REASONS = {"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull",
                 "CreateContainerConfigError", "CreateContainerError", "RunContainerError",
                 "CrashLoopBackOff"}


class StillPresent(WaitTimeout):
    """The object did not disappear in time (finalizers, or no kubelet to confirm)."""


def _uid(obj: dict | None) -> str | None:
    return obj["metadata"]["uid"] if obj else None


def wait_gone(kube: Kube, namespace: str, name: str, uid: str | None = None,
              timeout: float = 120) -> float:
    """Block until Pod `name` (optionally: that uid) no longer exists; returns seconds waited.

    A watch from the list's own resourceVersion (`imagekit.kube.watch`), so a DELETED event
    between the read and the watch cannot be missed; a newer Pod of the same name (other uid)
    counts as "gone"."""
    start = time.monotonic()
    try:
        wait_for(kube.resource("Pod"), name, namespace,
                 lambda pod: True if pod is None or (uid is not None and _uid(pod) != uid)
                 else None, timeout=timeout, what=f"pod {name} to be gone")
    except WaitTimeout as exc:
        current = exc.last or {}
        meta = current.get("metadata", {})
        phase = "Terminating" if meta.get("deletionTimestamp") else \
            current.get("status", {}).get("phase", "?")
        raise StillPresent(f"pod {name} still exists after {timeout:.0f}s ({phase}; "
                           f"finalizers={meta.get('finalizers', [])})",
                           where=f"{namespace}/{name}") from None
    return time.monotonic() - start


def delete_and_wait(kube: Kube, namespace: str, name: str, timeout: float = 120,
                    grace_seconds: int | None = None) -> float:
    """Delete Pod `name` if present (that uid only) and wait until it is gone."""
    current = kube.get_pod(namespace, name)
    if current is None:
        return 0.0
    uid = _uid(current)
    if not current["metadata"].get("deletionTimestamp") or grace_seconds is not None:
        kube.resource("Pod").delete(name, namespace, uid=uid, grace_seconds=grace_seconds)
    return wait_gone(kube, namespace, name, uid=uid, timeout=timeout)


@dataclass
class RecreateOutcome:
    pod: dict
    replaced_uid: str | None = None
    waited_seconds: float = 0.0
    conflicts: list[str] = field(default_factory=list)


def recreate_pod(kube: Kube, manifest: dict, timeout: float = 120,
                 max_conflicts: int = 3) -> RecreateOutcome:
    """Create `manifest`; if a Pod of that name exists (Running or Terminating), delete THAT
    object (uid precondition), watch until it is gone, then create.

    A 409 on create means someone else's object appeared meanwhile (or the old one was still
    there): the new holder is looked at and waited for again, at most `max_conflicts` times,
    each one recorded — never a blind retry loop."""
    meta = manifest["metadata"]
    namespace, name = meta.get("namespace", "default"), meta["name"]
    outcome_conflicts: list[str] = []
    replaced: str | None = None
    waited = 0.0
    for _ in range(max_conflicts + 1):
        existing = kube.get_pod(namespace, name)
        if existing is not None:
            replaced = replaced or _uid(existing)
            waited += delete_and_wait(kube, namespace, name, timeout=timeout)
        try:
            created = kube.create(manifest)
        except Conflict as exc:
            holder = kube.get_pod(namespace, name)
            state = "gone again" if holder is None else (
                "Terminating" if holder["metadata"].get("deletionTimestamp") else
                f"uid {_uid(holder)}")
            outcome_conflicts.append(f"409 on create ({exc.message}); holder {state}")
            continue
        return RecreateOutcome(pod=created, replaced_uid=replaced, waited_seconds=waited,
                               conflicts=outcome_conflicts)
    raise Conflict(f"pod {name} kept being re-created by someone else: "
                   f"{'; '.join(outcome_conflicts)}", where=f"{namespace}/{name}")


@dataclass
class PodOutcome:
    phase: str
    pod: dict
    stuck_reason: str | None = None
    stuck_message: str | None = None
    timed_out: bool = False

    @property
    def refused(self) -> str | None:
        """Why the node refused to run the Pod at all ("Evicted: The node had condition:
        [DiskPressure]"), or None. A kubelet that rejects a Pod at admission marks it Failed
        with no container ever started: that says nothing about the image, so callers report
        it as an ERROR of the cluster, with the node's own words."""
        status = self.pod.get("status") or {}
        if self.phase != "Failed" or status.get("containerStatuses"):
            return None
        reason, message = status.get("reason"), status.get("message")
        if not (reason or message):
            return None
        return f"{reason or 'rejected'}: {(message or '').strip()}".rstrip(": ")

    @property
    def refusal(self) -> str | None:
        """The one sentence every flow reports a refusal in: "the node refused the Pod
        (Evicted: …)"; None when the node did not refuse it."""
        refused = self.refused
        return f"the node refused the Pod ({refused})" if refused else None


def wait_for_pod(kube: Kube, namespace: str, name: str, timeout: float = 180,
                 until: str = "done", stuck_grace: float = 20.0) -> PodOutcome:
    """Wait until the Pod Succeeded/Failed (`until="done"`), or is Running with every container
    ready (`until="ready"`); also return early when a container is stuck (image pull failure,
    config error) for `stuck_grace` seconds, because those do not fix themselves."""
    start = time.monotonic()
    deadline = start + timeout
    stuck_since: float | None = None
    last: dict | None = None

    def judge(pod: dict | None) -> PodOutcome | None:
        nonlocal stuck_since, last
        if pod is None:
            raise TransportError("pod disappeared while waiting for it",
                                 where=f"{namespace}/{name}")
        last = pod
        status = pod.get("status", {})
        phase = status.get("phase", "Pending")
        if phase in ("Succeeded", "Failed"):
            return PodOutcome(phase=phase, pod=pod)
        statuses = status.get("containerStatuses", []) + status.get("initContainerStatuses", [])
        if until == "ready" and phase == "Running" and statuses and \
                all(s.get("ready") for s in status.get("containerStatuses", [])):
            return PodOutcome(phase=phase, pod=pod)
        waiting = [s["state"]["waiting"] for s in statuses
                   if s.get("state", {}).get("waiting", {}).get("reason") in STUCK_REASONS]
        now = time.monotonic()
        if waiting:
            stuck_since = stuck_since or now
            if now - stuck_since >= stuck_grace:
                return PodOutcome(phase=phase, pod=pod, stuck_reason=waiting[0].get("reason"),
                                  stuck_message=waiting[0].get("message"))
        else:
            stuck_since = None
        return None

    for pod in observe(kube.resource("Pod"), name, namespace, deadline=deadline,
                       tick=max(1.0, min(5.0, stuck_grace / 4))):
        outcome = judge(pod)
        if outcome is not None:
            return outcome
    pod = kube.get_pod(namespace, name) or last or {}
    return PodOutcome(phase=pod.get("status", {}).get("phase", "Pending"), pod=pod,
                      timed_out=True)


def observed(pod: dict | None) -> dict:
    """What the cluster says about a Pod it ran: the node it ran on, the image its first
    container names and the imageID the kubelet reports (the content it really ran). Kept as
    `data["observed"]` of the check that judged the Pod, so a signed phase statement names it."""
    pod = pod or {}
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    first = statuses[0] if statuses else {}
    containers = (pod.get("spec") or {}).get("containers") or [{}]
    return {"node": (pod.get("spec") or {}).get("nodeName"),
            "image": first.get("image") or containers[0].get("image"),
            "image_id": first.get("imageID") or None}
