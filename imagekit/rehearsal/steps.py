"""The rehearsal's steps: each an ordinary `imagekit …` command run as its own process.

A step writes its own evidence exactly as when a person runs it; the runner keeps its argv,
exit code, time and output in the rehearsal's attempt, as a typed `RehearsalStep` (the
evidence kind) and one check. A step whose exit code is not its verdict (the stand-in
acceptance exits 1 for its DEFERRED semantics) is run `judged_after`: the runner records the
step but leaves its check to the caller's judge, instead of adding one to be taken back.

Steps that need nothing from each other may run at once (`beside`): the rehearsal
brings the cluster up beside the stand-ins and the images' build. A step is recorded when it
ends, so the record's order is the order in which steps ended.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from imagekit.evidence.kinds import RehearsalStep
from imagekit.progress import MODE_ENV, ProgressEvent
from imagekit.results import CheckResult, Status

T = TypeVar("T")

if TYPE_CHECKING:
    from imagekit.evidence import Attempt
    from imagekit.progress import Progress


def status_of(code: int) -> Status:
    """A step's exit code as a status: 0 PASS, 1 FAIL (a check failed or was deferred), any
    other ERROR (the command broke, or was killed)."""
    return {0: Status.PASS, 1: Status.FAIL}.get(code, Status.ERROR)


def last_words(stderr: str) -> str:
    """The child's last stderr line that is not a progress event (its error, usually)."""
    for line in reversed(stderr.strip().splitlines()):
        if line.strip() and ProgressEvent.parse_line(line) is None:
            return line.strip()[:300]
    return ""


def run_live(argv: list[str], env: dict[str, str] | None, name: str, sink: Progress,
             shown: str | None = None, judged_after: bool = False
             ) -> subprocess.CompletedProcess[str]:
    """Run one step as a child that reports its progress as JSON lines (IMAGEKIT_PROGRESS=
    json): its events become phases under this step, its other stderr lines the step's live
    detail; the sink's heartbeat covers silence. stdout and stderr are kept whole."""
    env = {**(env if env is not None else os.environ), MODE_ENV: "json"}
    phase = sink.phase("rehearsal", name, shown)
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, bufsize=1)
    stdout, stderr_pipe = proc.stdout, proc.stderr
    assert stdout is not None and stderr_pipe is not None  # both are PIPEs
    out: list[str] = []
    err: list[str] = []

    def pump_out() -> None:
        out.append(stdout.read())

    def pump_err() -> None:
        for line in stderr_pipe:
            err.append(line)
            event = ProgressEvent.parse_line(line)
            if event is not None:
                sink.forward(event, name)
            elif line.strip():
                phase.detail(line)

    readers = [threading.Thread(target=pump_out, daemon=True),
               threading.Thread(target=pump_err, daemon=True)]
    for reader in readers:
        reader.start()
    code = proc.wait()
    for reader in readers:
        reader.join()
    stderr = "".join(err)
    sink.end_forwarded(name, f"the step ended (exit {code}) before this phase did")
    if code == 0:
        phase.done()
    elif code == 1 and judged_after:
        phase.done("exit 1: a check failed or was deferred; its verdict follows")
    else:
        # exit 1 is "a check FAILed or was DEFERRED" (README): say so, the step's own
        # judge (e.g. the stand-in acceptance verdict) may still pass it
        said = "exit 1: a check failed or was deferred" if code == 1 else \
            f"{status_of(code).value} exit {code}"
        phase.fail(said + (f": {last_words(stderr)}" if last_words(stderr) else ""))
    return subprocess.CompletedProcess(argv, code, "".join(out), stderr)


class StepRunner:
    """Runs imagekit sub-commands and records each in `attempt`; each step is a phase of the
    rehearsal's progress, and the step's own phases (its child process's progress events) are
    drawn under it, live. `checks` are the rehearsal's verdicts, in order."""

    def __init__(self, attempt: Attempt, sink: Progress,
                 env: dict[str, str] | None = None, state_dir: Path | None = None) -> None:
        self.attempt, self.sink, self.env = attempt, sink, env
        self.state_dir = state_dir  # infra's state (the CLI's $IMAGEKIT_STATE_DIR)
        self.steps: list[RehearsalStep] = []
        self.checks: list[CheckResult] = []
        #: steps beside each other end in any order: one records at a time
        self._recording = threading.RLock()

    def use_infra_credentials(self) -> None:
        """The loopback registries' credentials live in infra's docker config dir: point the
        steps at it (by DOCKER_CONFIG, a path, never the secrets), unless the caller chose one."""
        from imagekit.infra.state import registry_env

        if "DOCKER_CONFIG" not in os.environ:
            self.env = {**(self.env or os.environ), **registry_env(root=self.state_dir)}

    def add_check(self, check: CheckResult) -> None:
        """One verdict of the rehearsal (a step's, or the judge's of a step)."""
        with self._recording:
            self.checks.append(check)
            self.attempt.add_check(check)

    def run(self, name: str, *args: str, want_json: bool = False,
            judged_after: bool = False, store: Path | None = None
            ) -> tuple[int, dict[str, Any] | None]:
        """Run `imagekit ARGS` as step `name`: (exit code, its stdout as JSON with want_json).

        `judged_after`: the caller judges the step's result itself (its exit 1 is not the
        step's verdict): the live line does not say FAILED for it and no check is added here.
        `store`: the evidence store of the actor that runs this step (default: the
        rehearsal's, CI's)."""
        argv = [sys.executable, "-m", "imagekit", *args]
        started = time.monotonic()
        env = self.env if store is None else \
            {**(self.env or os.environ), "IMAGEKIT_EVIDENCE_DIR": str(store)}
        done = run_live(argv, env, name, self.sink, shown=f"imagekit {' '.join(args)}",
                        judged_after=judged_after)
        seconds = round(time.monotonic() - started, 2)
        step = RehearsalStep(name=name, argv=["imagekit", *args], exit_code=done.returncode,
                             seconds=seconds, status=status_of(done.returncode))
        with self._recording:
            self.steps.append(step)
            index = len(self.steps)
            self.attempt.write_text(f"steps/{index:02d}-{name}.stdout", done.stdout)
            self.attempt.write_text(f"steps/{index:02d}-{name}.stderr", done.stderr)
            if not judged_after:
                said = last_words(done.stderr)
                self.add_check(CheckResult(
                    name=name, status=step.status,
                    detail=f"exit {done.returncode} in {seconds} s"
                           + (f": {said}" if done.returncode and said else "")))
        body = None
        if want_json and done.stdout.strip():
            try:
                body = json.loads(done.stdout)
            except json.JSONDecodeError:
                body = None
        return done.returncode, body


def beside(track: Callable[[], T]) -> Future[T]:
    """Start `track` (steps of a StepRunner, which records each as it ends) on a thread beside
    the caller's steps; its Future's `result()` waits for it and raises what it raised."""
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rehearsal-beside")
    try:
        return pool.submit(track)
    finally:
        pool.shutdown(wait=False)  # the thread runs the one track to its end
