"""BuildKit's plain output as steps: a real `docker buildx build` of a tiny
image on the debootstrap base, each RUN one phase ended with BuildKit's own DONE time; a cached
rebuild says CACHED; a failing RUN is a failed phase with BuildKit's error."""

from __future__ import annotations

import io
import uuid
from pathlib import Path

import pytest

from imagekit.engine.buildkit import parse_plain
from imagekit.progress import LineProgress, ProgressEvent
from imagekit.standins import ensure_rootfs_image

pytestmark = [pytest.mark.docker]


def _events(out: io.StringIO) -> list[ProgressEvent]:
    return [ProgressEvent.model_validate_json(x) for x in out.getvalue().splitlines()]


def test_a_real_build_is_one_phase_per_step_with_buildkits_time(engine, tmp_path: Path) -> None:
    base, _ = ensure_rootfs_image(engine, [])
    nonce = uuid.uuid4().hex[:8]                # a new RUN line: never in BuildKit's cache
    (tmp_path / "Dockerfile").write_text(
        f"ARG BASE_IMAGE\nFROM ${{BASE_IMAGE}}\n"
        f"RUN echo start-{nonce} && sleep 1.5 && echo end\nRUN echo second\n")
    tag = f"imagekit-test/progress:{nonce}"
    out = io.StringIO()
    try:
        outcome = engine.build(tmp_path, tags=[tag], build_args={"BASE_IMAGE": base},
                               progress=LineProgress(out, as_json=True, heartbeat_s=60))
        assert outcome.ok, outcome.log[-1500:]
        steps = {s.name: s for s in parse_plain(outcome.log)}
        run = steps[f"[2/3] RUN echo start-{nonce} && sleep 1.5 && echo end"]
        assert run.status == "done" and run.seconds >= 1.5 and run.output_lines == 2
        assert steps["[3/3] RUN echo second"].status == "done"
        events = _events(out)
        assert {e.step for e in events} == {"build progress"}
        ended = {e.phase: e for e in events if e.state != "start"}
        mine = ended[f"#{run.id} [2/3] RUN echo start-{nonce} && sleep 1.5 && echo end"]
        assert mine.state == "done" and mine.elapsed_s == run.seconds   # BuildKit's figure
        assert not any("[internal]" in e.phase for e in events)        # housekeeping hidden
        starts = [e.phase for e in events if e.state == "start"]
        assert sorted(starts) == sorted(ended)                          # each step ended

        again = io.StringIO()
        outcome = engine.build(tmp_path, tags=[tag], build_args={"BASE_IMAGE": base},
                               progress=LineProgress(again, as_json=True, heartbeat_s=60))
        cached = [e for e in _events(again) if e.state == "done" and "RUN" in e.phase]
        assert len(cached) == 2 and all(e.cached for e in cached), again.getvalue()
    finally:
        engine.remove(tag, force=True)


def test_a_failing_step_is_a_failed_phase_with_buildkits_error(engine, tmp_path: Path) -> None:
    base, _ = ensure_rootfs_image(engine, [])
    nonce = uuid.uuid4().hex[:8]
    (tmp_path / "Dockerfile").write_text(
        f"ARG BASE_IMAGE\nFROM ${{BASE_IMAGE}}\nRUN echo {nonce} && exit 7\n")
    out = io.StringIO()
    outcome = engine.build(tmp_path, tags=[f"imagekit-test/progress-fail:{nonce}"],
                           build_args={"BASE_IMAGE": base},
                           progress=LineProgress(out, as_json=True, heartbeat_s=60))
    assert not outcome.ok
    (failed,) = [s for s in parse_plain(outcome.log) if s.status == "error"]
    assert "exit code: 7" in failed.error
    (event,) = [e for e in _events(out) if e.state == "failed"]
    assert event.phase.startswith(f"#{failed.id} [2/2] RUN echo {nonce}")
    assert "exit code: 7" in event.detail


def test_imagekit_build_through_a_pipe_is_json_on_stdout_and_steps_on_stderr(
        standins, tmp_path: Path) -> None:
    """The CLI as a CI job runs it: `imagekit build vllm --no-push --json | …`."""
    import json
    import os
    import subprocess
    import sys

    from imagekit.progress import MODE_ENV

    repo = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if k != MODE_ENV}
    env["PYTHONPATH"] = str(repo)
    done = subprocess.run([sys.executable, "-m", "imagekit", "build", "vllm", "--no-push",
                           "--json", "--evidence-dir", str(tmp_path / "ev")], cwd=repo,
                          env=env, capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout)["builds"][0]["name"] == "vllm"      # stdout: JSON only
    events = [ProgressEvent.parse_line(x) for x in done.stderr.splitlines()]
    assert events and all(events), done.stderr[-2000:]                 # stderr: events only
    runs = [e for e in events if e.step == "build vllm" and " RUN " in e.phase
            and e.state in ("done", "failed")]
    assert len(runs) >= 2 and all(e.state == "done" for e in runs), done.stderr[-2000:]
    starts = {e.phase for e in events if e.state == "start"}
    assert {e.phase for e in runs} <= starts                           # each began, then ended
