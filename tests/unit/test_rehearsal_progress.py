"""The rehearsal shows each step live (issue 19, point 1): a step's own stderr lines appear
while it runs, with the elapsed time; a silent step gets heartbeat lines; with --json every
phase is one JSON line on stderr. A real child process, not a mock."""

from __future__ import annotations

import json
import sys
import time

from imagekit.cli import rehearsal

CHILD = ("import sys, time\n"
         "print('phase one', file=sys.stderr, flush=True)\n"
         "time.sleep(1.6)\n"
         "print('phase two', file=sys.stderr, flush=True)\n"
         "print('{\"ok\": true}')\n"
         "sys.exit(3)\n")


def test_step_output_and_heartbeat_are_live_json(monkeypatch, capsys) -> None:
    monkeypatch.setattr(rehearsal, "HEARTBEAT_S", 0.5)
    started = time.monotonic()
    done = rehearsal._run_live([sys.executable, "-c", CHILD], None, "demo", started, True)
    assert done.returncode == 3 and json.loads(done.stdout) == {"ok": True}
    assert "phase one" in done.stderr and "phase two" in done.stderr       # kept whole
    events = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    phases = [e["phase"] for e in events]
    assert phases[0] == "output" and events[0]["line"] == "phase one"
    assert "running" in phases, phases                     # the silent 1.6 s got a heartbeat
    two = next(e for e in events if e.get("line") == "phase two")
    assert two["elapsed_s"] >= 1.5                         # printed when it happened, timed
    assert phases.index("running") < phases.index("output", 1)


def test_step_output_is_live_for_a_person(monkeypatch, capsys) -> None:
    monkeypatch.setattr(rehearsal, "HEARTBEAT_S", 0.5)
    rehearsal._run_live([sys.executable, "-c", CHILD], None, "demo", time.monotonic(), False)
    err = capsys.readouterr().err
    assert "s phase one" in err and "s phase two" in err
    assert "demo still running" in err
