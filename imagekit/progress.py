"""Progress of long steps, one mechanism for all of them.

Operations (the Kubernetes build, debootstrap, BuildKit builds, engine startup, the rehearsal)
announce *phases*: `progress.current().phase("debootstrap", "retrieving packages")`. What a
person sees is decided once, by the command line, never by the operation:

- a terminal: a live rich status line per open phase (spinner, elapsed time, latest detail), and
  one permanent line when a phase ends;
- a pipe: one text line when a phase starts and one when it ends, with its elapsed time;
- `--json` (or `IMAGEKIT_PROGRESS=json`): the same as JSON lines (`ProgressEvent`) on STDERR,
  so stdout stays the one JSON document;
- line modes never stay silent longer than `HEARTBEAT_S`: an open phase that printed nothing
  for that long gets a `running` line with its elapsed time and latest detail.

`IMAGEKIT_PROGRESS=rich|plain|json|off` overrides the choice; the rehearsal sets `json` for its
child steps and re-draws their events under its own step names.

This module sits in the types layer (beside `errors`, `results`) so that transports (`engine`)
and operations (`infra`, `standins`) can report phases without importing the CLI; rich is
imported only when a terminal asks for it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

#: An open phase that printed nothing for this long gets a heartbeat line (line modes).
HEARTBEAT_S = 10.0
MODE_ENV = "IMAGEKIT_PROGRESS"
MODES = ("rich", "plain", "json", "off")

State = Literal["start", "done", "failed", "running"]


class ProgressEvent(BaseModel):
    """One line of machine progress (stderr of `--json`): a phase began, ended, failed, or is
    still running (heartbeat). `elapsed_s` is the phase's own time; for BuildKit steps that
    BuildKit timed itself (`#7 DONE 12.3s`), BuildKit's figure."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    step: str = Field(description="what runs: 'k8s build', 'debootstrap', 'build vllm', …")
    phase: str = Field(description="the part of it: 'compiling kube-apiserver', '#7 RUN …'")
    state: State
    elapsed_s: float
    detail: str | None = None
    cached: bool | None = Field(default=None, description="BuildKit answered from its cache")

    @classmethod
    def parse_line(cls, line: str) -> ProgressEvent | None:
        """The event on one line of a child's stderr, or None for any other line."""
        text = line.strip()
        if not (text.startswith("{") and '"state"' in text):
            return None
        try:
            return cls.model_validate(json.loads(text))
        except (ValueError, ValidationError):
            return None


class Phase:
    """One open phase. `detail()` updates its live line; `done()`/`fail()` end it (once)."""

    def __init__(self, owner: Progress, step: str, name: str) -> None:
        self.owner, self.step, self.name = owner, step, name
        self.started = time.monotonic()
        self.last_detail: str | None = None
        self.ended = False
        self.token: Any = None  # the sink's handle (a rich task id)

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def detail(self, text: str) -> None:
        text = text.strip()
        if text:
            self.last_detail = text[:200]
            self.owner._detail(self)

    def done(self, detail: str | None = None, elapsed: float | None = None,
             cached: bool | None = None) -> None:
        self._end("done", detail, elapsed, cached)

    def fail(self, detail: str | None = None) -> None:
        self._end("failed", detail, None, None)

    def _end(self, state: State, detail: str | None, elapsed: float | None,
             cached: bool | None) -> None:
        if self.ended:
            return
        self.ended = True
        self.owner._end(self, ProgressEvent(
            step=self.step, phase=self.name, state=state,
            elapsed_s=round(self.elapsed if elapsed is None else elapsed, 1),
            detail=detail[:300] if detail else None, cached=cached))

    def __enter__(self) -> Phase:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: object) -> None:
        if kind is None:
            self.done()
        else:
            self.fail(f"{kind.__name__}: {value}"[:300])


class Progress:
    """The sink-independent part: open phases, one lock, the heartbeat thread (line modes)."""

    heartbeat = False

    def __init__(self, heartbeat_s: float | None = None) -> None:
        self.heartbeat_s = HEARTBEAT_S if heartbeat_s is None else heartbeat_s
        self.open: list[Phase] = []
        self.lock = threading.RLock()
        self.last_write = time.monotonic()
        self._ticker: threading.Thread | None = None
        self._stop = threading.Event()

    # -- the operations' side --------------------------------------------------------------
    def phase(self, step: str, name: str, detail: str | None = None) -> Phase:
        """Start a phase now (usable as a context manager: an exception fails it); `detail`
        goes with its start line (what exactly runs: a command line)."""
        phase = Phase(self, step, name)
        phase.last_detail = detail[:200] if detail else None
        with self.lock:
            self.open.append(phase)
            self._write(phase, ProgressEvent(step=step, phase=name, state="start",
                                             elapsed_s=0.0, detail=phase.last_detail))
        if self.heartbeat and self._ticker is None:
            self._ticker = threading.Thread(target=self._tick, daemon=True,
                                            name="imagekit-heartbeat")
            self._ticker.start()
        return phase

    def stages(self, step: str) -> Stages:
        return Stages(self, step)

    def forward(self, event: ProgressEvent, step_prefix: str) -> None:
        """Re-draw a child process's event under `step_prefix` (the rehearsal's steps)."""
        step = f"{step_prefix} › {event.step}"
        with self.lock:
            if event.state == "start":
                self.phase(step, event.phase, event.detail)
                return
            mine = next((p for p in reversed(self.open)
                         if p.step == step and p.name == event.phase), None)
            if event.state == "running":
                if mine is not None and event.detail:
                    mine.detail(event.detail)
                return
            if mine is None:
                mine = self.phase(step, event.phase)
            mine._end(event.state, event.detail, event.elapsed_s, event.cached)

    def end_forwarded(self, step_prefix: str, detail: str) -> None:
        """A child ended: its phases still open (it was killed mid-phase) end as failed, so
        they are not left spinning or heart-beating under the parent."""
        with self.lock:
            for phase in [p for p in self.open if p.step.startswith(f"{step_prefix} › ")]:
                phase.fail(detail)

    def close(self) -> None:
        self._stop.set()
        with self.lock:
            for phase in list(reversed(self.open)):
                phase.fail("not finished")

    # -- sink hooks -------------------------------------------------------------------------
    def _detail(self, phase: Phase) -> None:
        """A detail changed (line modes show it only in the next heartbeat)."""

    def _end(self, phase: Phase, event: ProgressEvent) -> None:
        with self.lock:
            if phase in self.open:
                self.open.remove(phase)
            self._write(phase, event)

    def _write(self, phase: Phase, event: ProgressEvent) -> None:
        raise NotImplementedError

    def _tick(self) -> None:
        interval = max(0.05, min(1.0, self.heartbeat_s / 4))
        while not self._stop.wait(interval):
            with self.lock:
                if not self.open or time.monotonic() - self.last_write < self.heartbeat_s:
                    continue
                phase = self.open[-1]
                self._write(phase, ProgressEvent(step=phase.step, phase=phase.name,
                                                 state="running",
                                                 elapsed_s=round(phase.elapsed, 1),
                                                 detail=phase.last_detail))


class NullProgress(Progress):
    """Says nothing (library use, tests, `IMAGEKIT_PROGRESS=off`)."""

    def _write(self, phase: Phase, event: ProgressEvent) -> None:
        return None


class LineProgress(Progress):
    """A pipe: one line per phase start and end, heartbeats while silent; text or JSON."""

    heartbeat = True

    def __init__(self, stream: IO[str] | None = None, as_json: bool = False,
                 heartbeat_s: float | None = None) -> None:
        super().__init__(heartbeat_s)
        self.stream, self.as_json = stream, as_json

    def _write(self, phase: Phase, event: ProgressEvent) -> None:
        stream = self.stream or sys.stderr
        stream.write((event.model_dump_json(exclude_none=True) if self.as_json
                      else text_line(event)) + "\n")
        stream.flush()
        self.last_write = time.monotonic()


def text_line(event: ProgressEvent) -> str:
    """The pipe's line for one event (what a person reads in a CI log)."""
    head = f"[{event.step}] {event.phase}"
    # one line per event, whatever the detail holds (an error naming a multi-line cmdline)
    tail = f" — {' '.join(event.detail.split())}" if event.detail else ""
    if event.state == "start":
        return f"{head} …{tail}"
    if event.state == "running":
        return f"{head}: still running, {event.elapsed_s:.0f} s{tail}"
    if event.state == "failed":
        return f"{head}: FAILED after {event.elapsed_s:.1f} s{tail}"
    return f"{head}: {'cached' if event.cached else 'done'} in {event.elapsed_s:.1f} s{tail}"


class RichProgress(Progress):
    """A terminal: one live line per open phase (spinner, elapsed), a permanent line at its
    end. The live display redraws itself, so it needs no heartbeat."""

    def __init__(self, console: Any = None) -> None:
        super().__init__()
        from rich.console import Console
        from rich.progress import Progress as Bars
        from rich.progress import SpinnerColumn, TextColumn, TimeElapsedColumn

        self.console = console or Console(stderr=True, highlight=False)
        self.bars = Bars(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                         console=self.console, transient=True)
        self.bars.start()

    def _label(self, phase: Phase) -> str:
        from rich.markup import escape

        label = f"[bold]{escape(phase.step)}[/] {escape(phase.name)}"
        if phase.last_detail:
            label += f" [dim]{escape(phase.last_detail[:90])}[/]"
        return label

    def _detail(self, phase: Phase) -> None:
        with self.lock:
            if phase.token is not None:
                self.bars.update(phase.token, description=self._label(phase))

    def _write(self, phase: Phase, event: ProgressEvent) -> None:
        from rich.markup import escape

        if event.state == "start":
            phase.token = self.bars.add_task(self._label(phase))
            return
        if event.state == "running":
            return
        if phase.token is not None:
            self.bars.remove_task(phase.token)
            phase.token = None
        mark = {"done": "[green]✓[/]", "failed": "[red]✗[/]"}[event.state]
        word = "cached" if event.cached else f"{event.elapsed_s:.1f} s"
        detail = f" [dim]{escape(event.detail[:100])}[/]" if event.detail and \
            event.state == "failed" else ""
        self.console.print(f"  {mark} [bold]{escape(event.step)}[/] {escape(event.phase)} "
                           f"[dim]({word})[/]{detail}", highlight=False, no_wrap=True,
                           overflow="ellipsis")

    def close(self) -> None:
        super().close()
        self.bars.stop()


class Stages:
    """A stream of lines that moves through named stages (debootstrap's I: lines, build.sh's
    phase lines, an engine's startup log): entering a stage ends the one before it."""

    def __init__(self, progress: Progress, step: str) -> None:
        self.progress, self.step = progress, step
        self.current: Phase | None = None
        self.seen: list[str] = []

    def enter(self, name: str, detail: str | None = None) -> Phase:
        if self.current is not None and self.current.name == name and not self.current.ended:
            if detail:
                self.current.detail(detail)
            return self.current
        self.end()
        self.current = self.progress.phase(self.step, name, detail.strip() if detail else None)
        self.seen.append(name)
        return self.current

    def detail(self, text: str) -> None:
        if self.current is not None:
            self.current.detail(text)

    def end(self, failed: str | None = None) -> None:
        if self.current is not None:
            if failed is None:
                self.current.done()
            else:
                self.current.fail(failed)
            self.current = None


#: After a child exits, its remaining output is read this long at most (a daemon it started
#: may keep the pipe open).
DRAIN_S = 5.0

#: Classifies one output line: the stage it starts, or None (it stays in the current one).
Classifier = Callable[[str], "str | None"]


def run_logged(argv: Sequence[str], log: Path, step: str, *, what: str | None = None,
               stage_of: Classifier | None = None, env: Mapping[str, str] | None = None,
               timeout: float | None = None, progress: Progress | None = None,
               cwd: Path | None = None) -> tuple[int, bool]:
    """Run a child with stdout+stderr appended to `log`, line by line; every line is the open
    stage's detail, and `stage_of(line)` may start a new stage. Returns (exit code, timed out).

    The whole run is one phase (`what`, default the program's name) when no classifier is
    given; with one, each stage is a phase. The caller decides what a failure means."""
    progress = progress or current()
    stages = progress.stages(step)
    stages.enter(what or Path(argv[0]).name)

    log.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    timed_out = False
    done = threading.Event()       # set once the child exited and its output was read
    sink = open(log, "ab")  # noqa: SIM115 - the pump thread writes it and closes it at EOF
    proc = subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env=child_env(env), cwd=cwd)

    def pump() -> None:
        """Lines to the log and the stages. Runs until EOF, which a daemon the child started
        (an apt postinst) may hold open long after the child exited: `done` stops the
        classifying then, so a late line never touches a finished stage."""
        assert proc.stdout is not None
        try:
            for raw in proc.stdout:
                sink.write(raw)
                sink.flush()
                line = raw.decode("utf-8", "replace").rstrip("\r\n").split("\r")[-1]
                if done.is_set() or not line.strip():
                    continue
                stage = stage_of(line) if stage_of is not None else None
                if stage:
                    stages.enter(stage, line)
                else:
                    stages.detail(line)
        finally:
            sink.close()

    reader = threading.Thread(target=pump, daemon=True, name="imagekit-run-logged")
    reader.start()
    try:
        code = proc.wait(timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        proc.kill()
        code = proc.wait()
    reader.join(DRAIN_S)           # the rest of its output; not forever (see pump)
    done.set()
    if timed_out:
        stages.end(failed=f"timed out after {time.monotonic() - started:.0f} s")
    elif code != 0:
        stages.end(failed=f"exit {code}")
    else:
        stages.end()
    return code, timed_out


def child_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a program imagekit starts: this process's, with TMPDIR set to the
    directory `imagekit --tmpdir` chose (the CLI sets `tempfile.tempdir`, the stdlib's own knob,
    instead of writing os.environ), then `extra`."""
    import tempfile

    chosen = {"TMPDIR": tempfile.tempdir} if tempfile.tempdir else {}
    return {**os.environ, **chosen, **(extra or {})}


# -- the process's current progress ---------------------------------------------------------
_current: Progress | None = None


def make(mode: str, console: Any = None) -> Progress:
    if mode == "rich":
        return RichProgress(console)
    if mode in ("plain", "json"):
        return LineProgress(as_json=mode == "json")
    return NullProgress()


def current() -> Progress:
    """The progress the command line installed (`using`); silence otherwise (library callers
    and tests choose theirs by installing one, not through the environment)."""
    global _current
    if _current is None:
        _current = NullProgress()
    return _current


def choose_mode(json_output: bool, tty: bool, chosen: str | None = None) -> str:
    """The command line's rule: an explicit mode (`IMAGEKIT_PROGRESS`, which the CLI's settings
    pass as `chosen`), else --json → json lines on stderr, a terminal → rich, anything else (a
    pipe, a file, CI) → plain lines."""
    chosen = (chosen or "").strip().lower()
    if chosen in MODES:
        return chosen
    if json_output:
        return "json"
    return "rich" if tty else "plain"


@contextmanager
def using(progress: Progress) -> Iterator[Progress]:
    """Install `progress` as the current one for the duration (the CLI's commands)."""
    global _current
    previous = _current
    _current = progress
    try:
        yield progress
    finally:
        progress.close()
        _current = previous
