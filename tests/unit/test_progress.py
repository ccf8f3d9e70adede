"""One progress mechanism: phases with elapsed times, one line per phase
start/end on a pipe, JSON lines for --json, a heartbeat for a silent phase, stages from a
stream of lines, and a real child process run through `run_logged`."""

from __future__ import annotations

import io
import sys
import time
from pathlib import Path

import pytest

from imagekit import progress
from imagekit.progress import LineProgress, ProgressEvent, text_line

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "progress"


def _events(stream: io.StringIO) -> list[ProgressEvent]:
    return [ProgressEvent.model_validate_json(line) for line in stream.getvalue().splitlines()]


def test_a_phase_is_one_start_and_one_end_line_with_its_elapsed_time() -> None:
    out = io.StringIO()
    sink = LineProgress(out, as_json=True, heartbeat_s=60)
    with sink.phase("demo", "sleeping"):
        time.sleep(0.3)
    with pytest.raises(RuntimeError), sink.phase("demo", "breaking"):
        raise RuntimeError("boom")
    sink.close()
    events = _events(out)
    assert [(e.phase, e.state) for e in events] == [
        ("sleeping", "start"), ("sleeping", "done"), ("breaking", "start"),
        ("breaking", "failed")]
    assert 0.3 <= events[1].elapsed_s < 2
    assert events[3].detail == "RuntimeError: boom"


def test_a_silent_phase_gets_heartbeat_lines_and_a_talkative_one_does_not() -> None:
    out = io.StringIO()
    sink = LineProgress(out, as_json=True, heartbeat_s=0.3)
    with sink.phase("demo", "silent") as phase:
        phase.detail("the last thing it said")
        time.sleep(1.1)
    beats = [e for e in _events(out) if e.state == "running"]
    assert len(beats) >= 2, out.getvalue()
    assert beats[0].detail == "the last thing it said" and beats[-1].elapsed_s >= 0.6
    # no open phase: no heartbeat
    before = len(out.getvalue().splitlines())
    time.sleep(0.7)
    assert len(out.getvalue().splitlines()) == before
    sink.close()


def test_text_lines_say_what_and_how_long() -> None:
    done = ProgressEvent(step="k8s build", phase="compiling", state="done", elapsed_s=123.4)
    assert text_line(done) == "[k8s build] compiling: done in 123.4 s"
    cached = done.model_copy(update={"cached": True, "elapsed_s": 0.0})
    assert text_line(cached) == "[k8s build] compiling: cached in 0.0 s"
    beat = done.model_copy(update={"state": "running", "elapsed_s": 40.2, "detail": "go build"})
    assert text_line(beat) == "[k8s build] compiling: still running, 40 s — go build"
    failed = done.model_copy(update={"state": "failed", "elapsed_s": 0.6,
                                     "detail": "port held by pid 7 (python -c import x\ns=1)"})
    assert text_line(failed) == ("[k8s build] compiling: FAILED after 0.6 s — port held by "
                                 "pid 7 (python -c import x s=1)")     # one line, always


def test_stages_end_the_previous_stage_when_a_new_one_begins() -> None:
    out = io.StringIO()
    sink = LineProgress(out, as_json=True, heartbeat_s=60)
    stages = sink.stages("debootstrap")
    stages.enter("retrieving")
    stages.enter("retrieving", "again")      # the same stage: no new phase
    stages.enter("extracting")
    stages.end()
    assert [(e.phase, e.state) for e in _events(out)] == [
        ("retrieving", "start"), ("retrieving", "done"), ("extracting", "start"),
        ("extracting", "done")]


CHILD = ("import sys, time\n"
         "print('STAGE one', flush=True)\n"
         "print('working', file=sys.stderr, flush=True)\n"
         "time.sleep(0.9)\n"
         "print('STAGE two', flush=True)\n"
         "sys.exit(int(sys.argv[1]))\n")


@pytest.mark.parametrize("code", [0, 5])
def test_run_logged_streams_a_real_child_into_stages_and_its_log(tmp_path: Path,
                                                                code: int) -> None:
    out = io.StringIO()
    sink = LineProgress(out, as_json=True, heartbeat_s=0.4)
    log = tmp_path / "child.log"
    got, timed_out = progress.run_logged(
        [sys.executable, "-c", CHILD, str(code)], log, "child", what="starting",
        stage_of=lambda line: line.split()[1] if line.startswith("STAGE") else None,
        progress=sink)
    assert (got, timed_out) == (code, False)
    assert log.read_text().splitlines() == ["STAGE one", "working", "STAGE two"]
    events = _events(out)
    ends = [(e.phase, e.state) for e in events if e.state in ("done", "failed")]
    assert ends == [("starting", "done"), ("one", "done"),
                    ("two", "done" if code == 0 else "failed")]
    one = next(e for e in events if e.phase == "one" and e.state == "done")
    assert one.elapsed_s >= 0.8                       # it lasted while the child slept
    beat = next(e for e in events if e.state == "running")
    assert beat.phase == "one" and beat.detail == "working"


def test_run_logged_kills_a_child_past_its_timeout(tmp_path: Path) -> None:
    out = io.StringIO()
    started = time.monotonic()
    code, timed_out = progress.run_logged(["sleep", "30"], tmp_path / "l.log", "slow",
                                          timeout=0.5, progress=LineProgress(out, True, 60))
    assert timed_out and code != 0 and time.monotonic() - started < 5
    assert _events(out)[-1].state == "failed" and "timed out" in _events(out)[-1].detail


def test_a_childs_events_are_forwarded_under_the_parents_step() -> None:
    out = io.StringIO()
    sink = LineProgress(out, as_json=True, heartbeat_s=60)
    child = [ProgressEvent(step="debootstrap", phase="extracting", state="start", elapsed_s=0),
             ProgressEvent(step="debootstrap", phase="extracting", state="done",
                           elapsed_s=12.5)]
    for event in child:
        parsed = ProgressEvent.parse_line(event.model_dump_json())
        assert parsed == event
        sink.forward(parsed, "standins-build")
    assert ProgressEvent.parse_line('{"ok": true}') is None
    assert ProgressEvent.parse_line("I: Extracting libc6...") is None
    events = _events(out)
    assert [(e.step, e.state, e.elapsed_s) for e in events] == [
        ("standins-build › debootstrap", "start", 0.0),
        ("standins-build › debootstrap", "done", 12.5)]    # the child's own time


def test_the_command_line_mode_rule(monkeypatch) -> None:
    monkeypatch.setenv(progress.MODE_ENV, "off")  # the environment is the CLI's, not read here
    assert progress.choose_mode(json_output=True, tty=True) == "json"
    assert progress.choose_mode(json_output=False, tty=True) == "rich"
    assert progress.choose_mode(json_output=False, tty=False) == "plain"
    assert progress.choose_mode(json_output=False, tty=True, chosen="off") == "off"
    assert progress.choose_mode(json_output=False, tty=True, chosen="nonsense") == "rich"


def test_rich_progress_draws_a_line_per_finished_phase() -> None:
    from rich.console import Console

    console = Console(file=io.StringIO(), force_terminal=True, width=120)
    sink = progress.RichProgress(console)
    with sink.phase("build vllm", "#5 [2/3] RUN pip install"):
        time.sleep(0.05)
    sink.close()
    text = console.file.getvalue()
    assert "✓" in text and "build vllm" in text and "#5 [2/3] RUN pip install" in text


def test_a_captured_buildkit_log_parses_into_steps() -> None:
    """The plain output of a real `docker buildx build` (buildx 0.13.1, captured here)."""
    from imagekit.engine.buildkit import parse_plain

    steps = parse_plain((FIXTURES / "buildkit-plain.log").read_text())
    by_name = {s.name: s for s in steps}
    run = by_name["[2/3] RUN echo hello && sleep 1.2 && echo world"]
    assert (run.id, run.status, run.seconds, run.output_lines) == (5, "done", 1.9, 2)
    assert by_name["[stage-0 1/4] FROM docker.io/imagekit-standins/bookworm-python:"
                   "2c86358cf5645428"].status == "cached"
    assert by_name["exporting to image"].seconds == 0.1
    assert [s.id for s in steps] == [0, 1, 2, 3, 4, 5, 6, 7]
    assert all(s.status != "running" for s in steps if s.id)      # every step ended


def test_run_logged_returns_when_the_child_exits_though_a_daemon_holds_the_pipe(
        tmp_path: Path, monkeypatch) -> None:
    """An apt postinst may start a daemon that inherits stdout: the child's exit decides,
    not the pipe's EOF."""
    monkeypatch.setattr(progress, "DRAIN_S", 0.5)
    started = time.monotonic()
    code, _ = progress.run_logged(
        ["bash", "-c", "echo installing; (sleep 20 &) ; exit 0"], tmp_path / "d.log", "apt",
        progress=LineProgress(io.StringIO(), True, 60))
    assert code == 0 and time.monotonic() - started < 5
    assert (tmp_path / "d.log").read_text().startswith("installing")
