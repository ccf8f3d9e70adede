"""The Kubernetes build's phases without rebuilding Kubernetes: the real
log of this machine's build (build.sh + the kube Makefile, captured from
/var/lib/imagekit/logs/k8s-build.log) and build.sh's own `phase` function, run by bash."""

from __future__ import annotations

import io
import re
import subprocess
import sys
from pathlib import Path

import pytest

from imagekit.errors import InfraError
from imagekit.infra import cluster
from imagekit.progress import LineProgress, ProgressEvent, using

LOG = Path(__file__).resolve().parents[1] / "fixtures" / "progress" / "k8s-build.log"


def _stages(lines: list[str]) -> list[str]:
    classify = cluster.K8sBuildStages()
    return [s for s in (classify(line) for line in lines) if s]


def test_the_captured_build_log_names_each_generator_and_compile() -> None:
    assert _stages(LOG.read_text().splitlines()) == [
        "code generator prerelease-lifecycle-gen", "code generator deepcopy-gen",
        "code generator defaulter-gen", "code generator conversion-gen",
        "code generator openapi-gen", "code generator go-bindata",
        "go build kube-apiserver", "go build kube-proxy"]


def test_build_sh_phase_lines_are_stages() -> None:
    """build.sh's own `phase` function (taken from the script, run by bash) prints lines the
    classifier reads; `installed X` stays inside the compile it ends."""
    script = (cluster.SCRIPTS / "build.sh").read_text()
    (definition,) = [line for line in script.splitlines() if line.startswith("phase()")]
    calls = ["installing the toolchain (apt)", "downloading the kubernetes source package",
             "compiling kube-apiserver", "installed kube-apiserver", "compiling kubelet"]
    out = subprocess.run(["bash", "-c", "T0=$(date +%s)\n" + definition + "\n" + "\n".join(
        f"phase {c!r}" for c in calls)], capture_output=True, text=True, check=True).stdout
    assert all(re.match(r"^k8s build: .+ \(\d+ s\)$", x) for x in out.splitlines()), out
    assert _stages(out.splitlines()) == [c for c in calls if not c.startswith("installed")]
    assert "for w in $MISSING; do" in script and 'make WHAT="$w"' in script  # one make each


REPLAY = ("import sys, time\n"
          "for line in open(sys.argv[1]):\n"
          "    sys.stdout.write(line); sys.stdout.flush()\n"
          "    if line.startswith('    cmd/kube-apiserver'): time.sleep(1.0)\n")


def test_a_replayed_build_is_phases_with_times_and_heartbeats(tmp_path: Path) -> None:
    """cluster._run (what ensure_built calls) on a child that replays the captured log: each
    stage is a phase, the 1 s silence inside the compile gets heartbeat lines."""
    out = io.StringIO()
    with using(LineProgress(out, as_json=True, heartbeat_s=0.3)):
        cluster._run([sys.executable, "-c", REPLAY, str(LOG)], "starting",
                     log=tmp_path / "b.log", step="k8s build",
                     stage_of=cluster.K8sBuildStages())
    events = [ProgressEvent.model_validate_json(x) for x in out.getvalue().splitlines()]
    done = {e.phase: e for e in events if e.state == "done"}
    assert done["go build kube-apiserver"].elapsed_s >= 1.0
    beats = [e for e in events if e.state == "running"]
    assert beats and all(e.phase == "go build kube-apiserver" for e in beats)
    assert {e.step for e in events} == {"k8s build"}


def test_a_failed_or_hung_setup_command_raises(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    with using(LineProgress(io.StringIO(), heartbeat_s=60)):
        with pytest.raises(InfraError, match="timed out"):
            cluster._run(["sleep", "30"], "sleeping", log=log, timeout=1.0)
        with pytest.raises(InfraError, match=r"failed \(exit 4\)"):
            cluster._run(["bash", "-c", "echo half; exit 4"], "failing", log=log)
    assert "half" in log.read_text()
