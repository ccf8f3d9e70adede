"""Startup phases read from the engine's log AS IT IS WRITTEN, and a failed start told apart from
a server that is ready (the record, section 8).

Phases: `engine_started` (the first line), `weights_loaded` (vLLM's "Model loading took …",
SGLang's "Load weight end"), `graphs_captured` (only when the engine captures graphs: an
`--enforce-eager` vLLM never does, and that is no missing phase), `api_ready` ("Application
startup complete" / SGLang's "fired up"). Each is stamped when the line arrives, so the
evidence shows the start as it unfolded, not a reconstruction.

A failed start has a cause, read from the Pod's status and events, never guessed from a
timeout alone: the container crashed (exit code and the engine's own last lines), was
OOMKilled, the image could not be pulled, the startupProbe ran out (the kubelet's "Startup
probe failed" events, then the kill), the Pod's deadline passed.
"""

from __future__ import annotations

import datetime as dt
import re
from collections import deque
from collections.abc import Callable

from imagekit.evidence.kinds import StartupOutcome, StartupPhase

_WEIGHTS = re.compile(r"Model loading took|Loading weights took|Load weight end\.")
_GRAPHS = re.compile(r"Graph capturing finished in|Capture cuda graph end\.")
_READY = re.compile(r"Application startup complete|The server is fired up and ready to roll")
PULL_ERRORS = {"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull",
               "RegistryUnavailable"}


class PhaseTracker:
    """Feed log lines; each phase is recorded once, at the moment its line is seen."""

    def __init__(self, started: dt.datetime | None = None,
                 on_phase: Callable[[StartupPhase], None] | None = None,
                 keep_lines: int = 40) -> None:
        self.started = started
        self.on_phase = on_phase
        self.phases: list[StartupPhase] = []
        self.tail: deque[str] = deque(maxlen=keep_lines)
        self.lines = 0

    def seen(self, name: str) -> bool:
        return any(p.name == name for p in self.phases)

    def _record(self, name: str, line: str, now: dt.datetime) -> None:
        if self.seen(name):
            return
        start = self.started or now
        phase = StartupPhase(name=name, at=now.isoformat(timespec="milliseconds"),
                             seconds=round(max(0.0, (now - start).total_seconds()), 3),
                             line=line.strip()[:300])
        self.phases.append(phase)
        if self.on_phase is not None:
            self.on_phase(phase)

    def feed(self, line: str, now: dt.datetime | None = None) -> None:
        now = now or dt.datetime.now(dt.UTC)
        self.lines += 1
        self.tail.append(line.rstrip("\n")[:1000])
        if self.lines == 1:
            self._record("engine_started", line, now)
        if _WEIGHTS.search(line):
            self._record("weights_loaded", line, now)
        elif _GRAPHS.search(line):
            self._record("graphs_captured", line, now)
        elif _READY.search(line):
            self._record("api_ready", line, now)

    @property
    def ready_seconds(self) -> float | None:
        return next((p.seconds for p in self.phases if p.name == "api_ready"), None)


def container_started(pod: dict) -> dt.datetime | None:
    """When the engine container started running (its state's startedAt)."""
    for status in pod.get("status", {}).get("containerStatuses") or []:
        state = status.get("state", {})
        stamp = (state.get("running") or state.get("terminated") or {}).get("startedAt")
        if stamp:
            return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    return None


def pod_ready(pod: dict) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in pod.get("status", {}).get("conditions") or [])


def failed_start(pod: dict, events: list[dict], last_lines: list[str],
                 seconds: float | None = None) -> StartupOutcome | None:
    """The cause of a failed start, or None while the Pod may still come up."""
    status = pod.get("status", {})
    messages = [e.get("message", "") for e in events]
    # "Startup probe failed" events come with every probe before the API is up: only the
    # kubelet's kill ("Container engine failed startup probe, will be restarted") is the
    # budget running out
    probe_failed = [m for m in messages if "failed startup probe" in m]
    # v1.20 with restartPolicy Never says only "Stopping container engine" (reason Killing):
    # then the kill follows failureThreshold failed startup probes (events are aggregated:
    # `count` failures in one event)
    threshold = next((c.get("startupProbe", {}).get("failureThreshold", 3)
                      for c in pod.get("spec", {}).get("containers") or []), 3)
    failures = sum(int(e.get("count") or 1) for e in events if e.get("reason") == "Unhealthy"
                   and e.get("message", "").startswith("Startup probe failed"))
    if not probe_failed and failures >= threshold and \
            any(e.get("reason") == "Killing" for e in events):
        probe_failed = [f"{failures} failed startup probes (failureThreshold {threshold}), "
                        "then the kubelet stopped the container"]
    for container in status.get("containerStatuses") or []:
        waiting = container.get("state", {}).get("waiting") or {}
        if waiting.get("reason") in PULL_ERRORS:
            return StartupOutcome(state="image-pull-error", detail=f"{waiting['reason']}: "
                                  f"{waiting.get('message', '')}"[:600], seconds=seconds)
        ended = container.get("state", {}).get("terminated") or \
            container.get("lastState", {}).get("terminated")
        if ended:
            code = ended.get("exitCode")
            if ended.get("reason") == "OOMKilled":
                return StartupOutcome(state="oom-killed", exit_code=code, seconds=seconds,
                                      detail="the engine container was OOMKilled (memory "
                                             "limit or node memory)", last_lines=last_lines)
            if probe_failed:
                return StartupOutcome(state="probe-timeout", exit_code=code, seconds=seconds,
                                      detail="the startupProbe budget ran out before the API "
                                             f"answered: {probe_failed[-1]}"[:600],
                                      last_lines=last_lines)
            return StartupOutcome(state="crashed", exit_code=code, seconds=seconds,
                                  detail=f"the engine exited with code {code} "
                                         f"({ended.get('reason') or 'no reason'}) before its "
                                         "API was ready", last_lines=last_lines)
    if status.get("phase") == "Failed":
        reason = status.get("reason") or "Failed"
        state = "deadline" if reason == "DeadlineExceeded" else "crashed"
        return StartupOutcome(state=state, detail=f"Pod {reason}: {status.get('message', '')}",
                              last_lines=last_lines, seconds=seconds)
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False" \
                and condition.get("reason") == "Unschedulable":
            return StartupOutcome(state="unschedulable", seconds=seconds,
                                  detail=f"Unschedulable: {condition.get('message', '')}")
    return None


def engine_error_line(lines: list[str]) -> str | None:
    """The engine's own error line among its last lines (argparse's `error:`, a Python
    exception's last line), for the one-line finding."""
    for line in reversed(lines):
        text = line.strip()
        if re.search(r"\berror:|Error:|Exception:|ERROR", text):
            return text[:300]
    return None
