"""debootstrap's stages from its own output: a real debootstrap log
(bookworm minbase + python3, captured from this machine's first `standins build`) moves
through the stages a person recognises, and replayed through a real child process each stage
is one phase with its elapsed time and its latest package as the heartbeat's detail."""

from __future__ import annotations

import io
import sys
from pathlib import Path

from imagekit.progress import LineProgress, ProgressEvent, run_logged
from imagekit.standins.rootfs import debootstrap_stage, debootstrap_stages

LOG = Path(__file__).resolve().parents[1] / "fixtures" / "progress" / \
    "debootstrap-bookworm-minbase.log"
STAGES = ["release and package lists", "resolving dependencies", "retrieving packages",
          "extracting", "installing core packages", "unpacking the base system",
          "configuring the base system", "installed"]


def test_the_captured_log_goes_through_every_stage_once_in_order() -> None:
    assert debootstrap_stages(LOG.read_text()) == STAGES


def test_per_package_lines_stay_in_their_stage() -> None:
    assert debootstrap_stage("I: Retrieving libc6 2.36-9+deb12u10") == "retrieving packages"
    assert debootstrap_stage("I: Validating libc6 2.36-9+deb12u10") is None
    assert debootstrap_stage("I: Retrieving Packages ") is None     # still the lists
    assert debootstrap_stage("I: Unpacking bash...") is None
    assert debootstrap_stage("W: some warning") is None


# replays the captured log at a pace (a real child's pipe, not a string handed over)
REPLAY = ("import sys, time\n"
          "for line in open(sys.argv[1]):\n"
          "    sys.stdout.write(line); sys.stdout.flush()\n"
          "    if line.startswith('I: Extracting'): time.sleep(0.01)\n")


def test_a_replayed_run_is_one_phase_per_stage_with_elapsed_times(tmp_path: Path) -> None:
    out = io.StringIO()
    code, _ = run_logged([sys.executable, "-c", REPLAY, str(LOG)], tmp_path / "d.log",
                         "debootstrap", what="starting", stage_of=debootstrap_stage,
                         progress=LineProgress(out, as_json=True, heartbeat_s=60))
    assert code == 0
    events = [ProgressEvent.model_validate_json(x) for x in out.getvalue().splitlines()]
    done = [e for e in events if e.state == "done"]
    assert [e.phase for e in done] == ["starting", *STAGES]
    extracting = next(e for e in done if e.phase == "extracting")
    assert extracting.elapsed_s >= 0.5                  # 88 packages × 10 ms, really waited
    assert (tmp_path / "d.log").read_text() == LOG.read_text()
