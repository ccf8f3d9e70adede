"""BuildKit's `--progress=plain` output as steps: `#N [stage] RUN …`, its output, its end.

What the plain printer writes (buildx 0.13, docker 20.10's BuildKit), one vertex at a time:

    #5 [2/3] RUN echo hello && sleep 1.2 && echo world
    #5 0.292 hello
    #5 DONE 1.9s
    #6 [3/3] RUN echo again
    #6 CACHED
    #7 [4/4] RUN false
    #7 ERROR: process "/bin/sh -c false" did not complete successfully: exit code: 1

The first line of a vertex is its name; BuildKit prints the name again when it switches back to
a vertex after another one's output (ignored here). `DONE <seconds>s` is BuildKit's own timing
of the step, reported as the phase's elapsed time rather than our clock.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Literal

from pydantic import BaseModel, ConfigDict

from imagekit.progress import Phase, Progress

_LINE = re.compile(r"^#(?P<id>\d+) (?P<rest>.*)$")
_DONE = re.compile(r"^DONE (?P<s>\d+(?:\.\d+)?)s$")
_OUTPUT = re.compile(r"^(?P<t>\d+\.\d+) (?P<text>.*)$")

StepStatus = Literal["running", "done", "cached", "error", "canceled"]


class BuildStep(BaseModel):
    """One BuildKit vertex as the plain log showed it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: int
    name: str
    status: StepStatus = "running"
    seconds: float | None = None  # BuildKit's DONE time
    output_lines: int = 0
    error: str | None = None

    @property
    def internal(self) -> bool:
        """BuildKit's own housekeeping (loading the Dockerfile, .dockerignore, metadata)."""
        return self.name.startswith("[internal]") or self.name.startswith("building with")


class StepTracker:
    """Feeds plain-progress lines; keeps the steps and, given a `Progress`, one phase per
    step that is not BuildKit housekeeping (ended with BuildKit's own time)."""

    def __init__(self, progress: Progress | None = None, step: str = "build") -> None:
        self.progress, self.step = progress, step
        self.steps: dict[int, BuildStep] = {}
        self.phases: dict[int, Phase] = {}

    def feed(self, line: str) -> None:
        match = _LINE.match(line.strip())
        if match is None:
            return
        vertex, rest = int(match["id"]), match["rest"]
        known = self.steps.get(vertex)
        if known is None:
            step = BuildStep(id=vertex, name=rest)
            self.steps[vertex] = step
            if self.progress is not None and not step.internal:
                self.phases[vertex] = self.progress.phase(self.step, _label(step))
            return
        if rest == known.name:
            return
        if done := _DONE.match(rest):
            self._end(known, "done", seconds=float(done["s"]))
        elif rest == "CACHED":
            self._end(known, "cached", seconds=0.0)
        elif rest.startswith("ERROR"):
            self._end(known, "error", error=rest.removeprefix("ERROR").lstrip(": ") or None)
        elif rest == "CANCELED":
            self._end(known, "canceled")
        else:
            output = _OUTPUT.match(rest)
            if output is not None:
                self.steps[vertex] = known.model_copy(
                    update={"output_lines": known.output_lines + 1})
            phase = self.phases.get(vertex)
            if phase is not None:
                phase.detail(output["text"] if output else rest)

    def _end(self, step: BuildStep, status: StepStatus, seconds: float | None = None,
             error: str | None = None) -> None:
        self.steps[step.id] = step.model_copy(update={"status": status, "seconds": seconds,
                                                      "error": error})
        phase = self.phases.pop(step.id, None)
        if phase is None:
            return
        if status == "done":
            phase.done(elapsed=seconds)
        elif status == "cached":
            phase.done(elapsed=0.0, cached=True)
        else:
            phase.fail(error or status)

    def close(self, ok: bool) -> None:
        """The build ended: any step still open did not finish (failed build) or finished
        without a DONE line."""
        for vertex in list(self.phases):
            phase = self.phases.pop(vertex)
            if ok:
                phase.done()
            else:
                phase.fail("the build ended before this step finished")


def _label(step: BuildStep) -> str:
    name = " ".join(step.name.split())
    return f"#{step.id} {name[:110]}" + ("…" if len(name) > 110 else "")


def parse_plain(lines: Iterable[str] | str) -> list[BuildStep]:
    """Every step of a whole plain-progress log, in the order BuildKit numbered them."""
    if isinstance(lines, str):
        lines = lines.splitlines()
    tracker = StepTracker()
    for line in lines:
        tracker.feed(line)
    return [tracker.steps[k] for k in sorted(tracker.steps)]
