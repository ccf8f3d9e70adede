"""The rehearsal shows each step live: a step is a real child process
that reports its own phases (imagekit.progress, as JSON lines because the rehearsal sets
IMAGEKIT_PROGRESS=json for it); they are drawn under the step's name while it runs, a silent
stretch gets heartbeat lines, and the step ends with its elapsed time and exit status."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import time
from pathlib import Path

from imagekit import rehearsal
from imagekit.progress import LineProgress, ProgressEvent

REPO = Path(__file__).resolve().parents[2]
# a child as the CLI makes it: its progress is the one IMAGEKIT_PROGRESS names (the settings)
CHILD = ("import sys, time\n"
         "from imagekit import progress, settings\n"
         "sink = progress.make(settings.load().progress or 'off')\n"
         "print('plain stderr line', file=sys.stderr, flush=True)\n"
         "with sink.phase('child', 'sleeping'):\n"
         "    time.sleep(1.6)\n"
         "print('{\"ok\": true}')\n"
         "sys.exit(int(sys.argv[1]))\n")


def _run(code: int, heartbeat: float = 0.4, judged_after: bool = False
         ) -> tuple[subprocess.CompletedProcess[str], list[ProgressEvent]]:
    out = io.StringIO()
    sink = LineProgress(out, as_json=True, heartbeat_s=heartbeat)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = rehearsal.run_live([sys.executable, "-c", CHILD, str(code)], env, "demo", sink,
                               judged_after=judged_after)
    sink.close()
    return done, [ProgressEvent.model_validate_json(x) for x in out.getvalue().splitlines()]


def test_a_steps_own_phases_are_drawn_live_under_its_name() -> None:
    started = time.monotonic()
    done, events = _run(0)
    assert done.returncode == 0 and done.stdout.strip() == '{"ok": true}'
    assert "plain stderr line" in done.stderr                       # kept whole for evidence
    child = [e for e in events if e.step == "demo › child"]
    assert [e.state for e in child if e.state != "running"] == ["start", "done"]
    assert child[-1].elapsed_s >= 1.5                                # the child's own time
    beats = [e for e in events if e.state == "running"]
    # the child's silent phase got heartbeats (the step's own may beat first: a loaded machine
    # starts the child's interpreter slower than the 0.4 s heartbeat)
    assert any(b.step == "demo › child" and b.phase == "sleeping" for b in beats), beats
    (end,) = [e for e in events if e.step == "rehearsal" and e.state == "done"]
    assert end.phase == "demo" and end.elapsed_s <= time.monotonic() - started + 0.1


def test_a_failed_step_ends_as_failed_with_its_exit_code() -> None:
    done, events = _run(1, heartbeat=60)
    assert done.returncode == 1
    (end,) = [e for e in events if e.step == "rehearsal" and e.state != "start"]
    assert end.state == "failed", end
    assert (end.detail or "").startswith("exit 1: a check failed or was deferred"), end
    assert not [e for e in events if e.state == "running"]          # 60 s: none this time


def test_a_step_judged_after_does_not_read_failed_for_its_exit_1() -> None:
    # the stand-in acceptance exits 1 for its DEFERRED semantics; its verdict is judged next
    done, events = _run(1, heartbeat=60, judged_after=True)
    (end,) = [e for e in events if e.step == "rehearsal" and e.state != "start"]
    assert end.state == "done" and (end.detail or "").endswith("its verdict follows"), end
    # any other exit code still ends the step as failed, judged or not
    done, events = _run(3, heartbeat=60, judged_after=True)
    (end,) = [e for e in events if e.step == "rehearsal" and e.state != "start"]
    assert done.returncode == 3 and end.state == "failed", end


KILLED = ("import os, signal, time\n"
          "from imagekit import progress, settings\n"
          "progress.make(settings.load().progress or 'off').phase('child', 'never ends')\n"
          "time.sleep(0.2)\n"
          "os.kill(os.getpid(), signal.SIGKILL)\n")


def test_a_killed_steps_open_phases_end_as_failed() -> None:
    out = io.StringIO()
    sink = LineProgress(out, as_json=True, heartbeat_s=60)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = rehearsal.run_live([sys.executable, "-c", KILLED], env, "demo", sink)
    assert done.returncode == -9
    events = [ProgressEvent.model_validate_json(x) for x in out.getvalue().splitlines()]
    child = [e for e in events if e.step == "demo › child"]
    assert [e.state for e in child] == ["start", "failed"], child
    assert "before this phase did" in (child[-1].detail or "")
    assert not sink.open                                         # nothing left spinning


def test_the_three_actors_keys_and_stores_are_laid_out_apart(tmp_path) -> None:
    from imagekit.clusteraccept import rehearsal as step

    assert step.ACTORS == ("ci", "release", "operator")
    assert step.trust_args(tmp_path, "ci", "release") == [
        "--trust-key", str(tmp_path / "keys" / "ci.pub"),
        "--trust-key", str(tmp_path / "keys" / "release.pub")]
    assert step.sign_args(tmp_path, "operator") == [
        "--key", str(tmp_path / "keys" / "operator" / "imagekit.key")]
    stores = {step.store_dir(tmp_path, a) for a in (*step.ACTORS, step.AUDITOR)}
    assert len(stores) == 4


def test_a_rehearsal_whose_actor_store_is_not_empty_is_bad_input_before_anything(tmp_path):
    """Each actor's store must start empty: an --out that already holds one is exit 2, one
    line, before infra up or anything else runs (no rehearsal attempt either)."""
    import os
    import subprocess
    import sys

    from imagekit.clusteraccept import rehearsal as step

    kept = step.store_dir(tmp_path / "out" / "actors", "release")
    kept.mkdir(parents=True)
    (kept / "leftover").write_text("x")
    evidence = tmp_path / "evidence"
    done = subprocess.run([sys.executable, "-m", "imagekit", "rehearsal", "--out-dir",
                           str(tmp_path / "out"), "--evidence-dir", str(evidence)],
                          capture_output=True, text=True, timeout=60, check=False,
                          env=dict(os.environ))
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.strip().splitlines() == [
        f"imagekit: error: an actor's evidence store must start empty; give a new --out-dir "
        f"({kept})"]
    assert not any(evidence.rglob("attempt.json"))


class _Attempt:
    """What StepRunner writes into: files by name, checks in order."""

    def __init__(self) -> None:
        self.files: dict[str, str] = {}
        self.checks: list = []

    def write_text(self, name: str, text: str) -> None:
        self.files[name] = text

    def add_check(self, check) -> None:
        self.checks.append(check)


def test_a_step_judged_after_is_recorded_but_its_check_is_the_judges() -> None:
    """The runner records every step as a typed RehearsalStep with its output; a step run
    `judged_after` adds no check of its own (the rehearsal used to add one and pop it)."""
    from imagekit.evidence.kinds import RehearsalStep
    from imagekit.progress import NullProgress
    from imagekit.results import Status

    attempt = _Attempt()
    runner = rehearsal.StepRunner(attempt, NullProgress(),  # type: ignore[arg-type]
                                  env={**os.environ, "PYTHONPATH": str(REPO)})
    code, _ = runner.run("version", "--version")
    assert code == 0
    code, body = runner.run("judged", "no-such-command", judged_after=True, want_json=True)
    assert code == 2 and body is None
    assert [type(s) for s in runner.steps] == [RehearsalStep, RehearsalStep]
    assert [(s.name, s.exit_code, s.status) for s in runner.steps] == [
        ("version", 0, Status.PASS), ("judged", 2, Status.ERROR)]
    assert runner.steps[1].argv == ["imagekit", "no-such-command"]
    assert [c.name for c in attempt.checks] == ["version"] == [c.name for c in runner.checks]
    assert set(attempt.files) == {"steps/01-version.stdout", "steps/01-version.stderr",
                                  "steps/02-judged.stdout", "steps/02-judged.stderr"}
    assert "no-such-command" in attempt.files["steps/02-judged.stderr"]
