"""`imagekit infra up` through a pipe: with --json, stdout is the one JSON
document and stderr only progress events, one start and one end line per phase with its
elapsed time; without --json, a pipe gets one text line per phase start and end. Real
processes, real infrastructure (already up: `up` only verifies it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from imagekit.progress import MODE_ENV, ProgressEvent

pytestmark = [pytest.mark.docker, pytest.mark.registry]
REPO = Path(__file__).resolve().parents[2]


def _up(*extra: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != MODE_ENV}
    env["PYTHONPATH"] = str(REPO)
    return subprocess.run([sys.executable, "-m", "imagekit", "infra", "up", *extra],
                          capture_output=True, text=True, env=env, timeout=600, check=False)


def test_json_stdout_is_json_and_stderr_one_line_per_phase(infra) -> None:
    done = _up("--json")
    assert done.returncode == 0, done.stderr[-2000:]
    body = json.loads(done.stdout)                        # nothing but the document
    assert {c["name"] for c in body["components"]} >= {"docker", "staging"}
    events = [ProgressEvent.parse_line(line) for line in done.stderr.splitlines()]
    assert events and all(events), done.stderr            # every stderr line is an event
    phases = [e.phase for e in events if e.state == "start"]
    assert phases[:3] == ["docker engine", "build engine", "registries"]
    ends = {e.phase: e for e in events if e.state in ("done", "failed")}
    assert set(ends) == set(phases)                       # each phase ended, once
    assert all(e.state == "done" and e.elapsed_s >= 0 for e in ends.values())


def test_a_pipe_gets_text_lines_with_elapsed_times(infra) -> None:
    done = _up()
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stderr.splitlines()
    assert "[infra] docker engine …" in lines
    assert any(line.startswith("[infra] registries: done in ") and line.endswith(" s")
               for line in lines), lines
    assert "\x1b[" not in done.stderr                     # no terminal codes into a pipe


def test_the_rehearsal_draws_a_real_steps_phases_under_its_name(infra) -> None:
    """The rehearsal's runner on the real `imagekit infra up` child: the child's own phases
    arrive live as events under `infra-up › infra`, then the step's own end."""
    import io

    from imagekit import rehearsal
    from imagekit.progress import LineProgress

    out = io.StringIO()
    sink = LineProgress(out, as_json=True, heartbeat_s=60)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = rehearsal.run_live([sys.executable, "-m", "imagekit", "infra", "up"], env,
                               "infra-up", sink)
    sink.close()
    assert done.returncode == 0, done.stderr[-2000:]
    events = [ProgressEvent.model_validate_json(x) for x in out.getvalue().splitlines()]
    inner = [(e.phase, e.state) for e in events if e.step == "infra-up › infra"]
    assert inner[:6] == [("docker engine", "start"), ("docker engine", "done"),
                         ("build engine", "start"), ("build engine", "done"),
                         ("registries", "start"), ("registries", "done")]
    assert (events[-1].step, events[-1].phase, events[-1].state) == \
        ("rehearsal", "infra-up", "done")
