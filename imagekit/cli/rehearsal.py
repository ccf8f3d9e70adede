"""`imagekit rehearsal`: the main job on the embedded default, end to end, as one command.

The local stand-in rehearsal of the whole release path: infrastructure up (cluster included),
stand-in bases, `images verify` (build both fixed images, push to staging, probe inside, manifest),
then per image `promote` staging → production → target with every hop read back, a zero-GPU
`cluster probe` of the promoted tag pinned to its digest, for the vLLM image `cluster accept`
of the promoted tag with the stand-in model on a read-only PVC (protocol PASS, semantics
DEFERRED, live startup phases in evidence), and finally the reports.

Each step is the ordinary imagekit command run as its own process, so it writes its own evidence
exactly as when a person runs it; the rehearsal keeps every step's argv, exit code and output in
one more evidence attempt (kind `rehearsal`) and never stops at the first failure of an image's
later steps without saying so.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from imagekit.cli.app import app, console, err_console, evidence_store, guarded, print_json

if TYPE_CHECKING:
    from imagekit.results import Status


@functools.cache
def _step_model() -> Any:
    """RehearsalStep, built on first use: pydantic is not imported for `imagekit --help`."""
    from pydantic import BaseModel, ConfigDict

    from imagekit.results import Status

    class RehearsalStep(BaseModel):
        model_config = ConfigDict(extra="forbid", frozen=True)

        name: str
        argv: list[str]
        exit_code: int
        seconds: float
        status: Status

    return RehearsalStep


def _status_of(code: int) -> Status:
    from imagekit.results import Status

    return {0: Status.PASS, 1: Status.FAIL}.get(code, Status.ERROR)


class _Runner:
    """Runs imagekit sub-commands, records each, prints a line per step."""

    def __init__(self, attempt, json_output: bool) -> None:
        self.attempt, self.json_output = attempt, json_output
        self.steps: list[Any] = []
        self.env: dict[str, str] | None = None

    def use_infra_credentials(self) -> None:
        """The loopback registries' credentials live in infra's docker config dir: point the
        steps at it (by DOCKER_CONFIG, a path, never the secrets), unless the caller chose one."""
        import os

        from imagekit.infra.state import registry_env

        if "DOCKER_CONFIG" not in os.environ:
            self.env = {**os.environ, **registry_env()}

    def run(self, name: str, *args: str, want_json: bool = False) -> tuple[int, dict | None]:
        from imagekit.results import CheckResult

        argv = [sys.executable, "-m", "imagekit", *args]
        if not self.json_output:
            err_console.print(f"[bold]→ {name}[/]: imagekit {' '.join(args)}")
        else:
            _phase_line(name, "start", 0.0)
        started = time.monotonic()
        done = _run_live(argv, self.env, name, started, self.json_output)
        seconds = round(time.monotonic() - started, 2)
        if self.json_output:
            _phase_line(name, "done", seconds, status=_status_of(done.returncode).value,
                        exit_code=done.returncode)
        step = _step_model()(name=name, argv=["imagekit", *args], exit_code=done.returncode,
                             seconds=seconds, status=_status_of(done.returncode))
        self.steps.append(step)
        index = len(self.steps)
        self.attempt.write_text(f"steps/{index:02d}-{name}.stdout", done.stdout)
        self.attempt.write_text(f"steps/{index:02d}-{name}.stderr", done.stderr)
        self.attempt.add_check(CheckResult(
            name=name, status=step.status,
            detail=f"exit {done.returncode} in {seconds} s"
                   + (f": {done.stderr.strip().splitlines()[-1]}"
                      if done.returncode and done.stderr.strip() else "")))
        if not self.json_output:
            colour = "green" if done.returncode == 0 else "red"
            err_console.print(f"  [{colour}]{step.status.value}[/] exit {done.returncode} "
                              f"({seconds} s)")
            if done.returncode and done.stderr.strip():
                err_console.print("  " + done.stderr.strip().splitlines()[-1], markup=False)
        body = None
        if want_json and done.stdout.strip():
            try:
                body = json.loads(done.stdout)
            except json.JSONDecodeError:
                body = None
        return done.returncode, body


#: A step silent this long gets a "still running" line, so a long step (the Kubernetes build,
#: stand-in builds) never looks hung.
HEARTBEAT_S = 15.0


def _phase_line(step: str, phase: str, elapsed: float, **extra: object) -> None:
    """One JSON line per phase on stderr (stdout stays the one JSON document of --json)."""
    sys.stderr.write(json.dumps({"step": step, "phase": phase, "elapsed_s": round(elapsed, 1),
                                 **extra}) + "\n")
    sys.stderr.flush()


def _run_live(argv: list[str], env: dict[str, str] | None, name: str, started: float,
              json_output: bool) -> subprocess.CompletedProcess:
    """Run a step, showing its stderr (its progress) live with the elapsed time, and a
    heartbeat while it is silent; stdout and stderr are kept whole for the evidence."""
    import queue
    import threading

    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, bufsize=1)
    out: list[str] = []
    err: list[str] = []
    lines: queue.Queue[str | None] = queue.Queue()

    def pump_out() -> None:
        out.append(proc.stdout.read())

    def pump_err() -> None:
        for line in proc.stderr:
            err.append(line)
            lines.put(line)
        lines.put(None)

    readers = [threading.Thread(target=pump_out, daemon=True),
               threading.Thread(target=pump_err, daemon=True)]
    for reader in readers:
        reader.start()
    last = time.monotonic()
    while True:
        try:
            line = lines.get(timeout=1.0)
        except queue.Empty:
            now = time.monotonic()
            if now - last >= HEARTBEAT_S:
                last = now
                if json_output:
                    _phase_line(name, "running", now - started)
                else:
                    err_console.print(f"  [dim]… {name} still running, "
                                      f"{now - started:.0f} s[/]")
            continue
        if line is None:
            break
        last = time.monotonic()
        text = line.rstrip()
        if text and not json_output:
            err_console.print(f"  {last - started:6.1f}s {text[:160]}", markup=False,
                              highlight=False)
        elif text:
            _phase_line(name, "output", last - started, line=text[:300])
    code = proc.wait()
    for reader in readers:
        reader.join()
    return subprocess.CompletedProcess(argv, code, "".join(out), "".join(err))


def _accept_step(runner: _Runner, attempt, name: str, reference: str, profile: str) -> None:
    """The promoted vLLM image accepted on the cluster with the stand-in model on a
    read-only PVC (issue 15); judged by imagekit.clusteraccept.rehearsal."""
    from imagekit.clusteraccept import rehearsal as step
    from imagekit.infra.cluster import NODE_NAME

    code, _ = runner.run("model-volume", *step.volume_args(NODE_NAME))
    if code != 0:
        return
    _, body = runner.run(f"{name}-cluster-accept", *step.accept_args(reference, profile),
                         want_json=True)
    attempt.checks.pop()   # the exit code says DEFERRED (the stand-in): judged just below
    judged = step.standin_acceptance_check(f"{name}-cluster-accept", body)
    attempt.add_check(judged)
    if not runner.json_output:
        err_console.print(f"  judged {judged.status.value}: {judged.detail}", markup=False,
                          soft_wrap=True)


@app.command("rehearsal")
@guarded
def rehearsal(
    profile: str = typer.Option("local", help="Spec profile (the embedded default: local)."),
    cluster: bool = typer.Option(True, help="Also bring up the cluster and probe there."),
    out: Path = typer.Option(None, help="Reports directory (default rehearsal-reports/<UTC>)."),
    evidence_dir: Path = typer.Option(None, "--evidence-dir", envvar="IMAGEKIT_EVIDENCE_DIR",
                                      help="Evidence store root (default ./.evidence)."),
    json_output: bool = typer.Option(False, "--json", help="Print one JSON document."),
) -> None:
    """Run the local stand-in rehearsal of the whole release path, end to end."""
    from imagekit.build import latest_build
    from imagekit.results import CheckResult, Status, exit_code_for, overall
    from imagekit.spec import load_spec

    spec = load_spec()
    profile_name, prof = spec.profile(profile)
    store = evidence_store(evidence_dir)  # before infra up: a run that cannot be recorded
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out = out or Path("rehearsal-reports") / stamp
    with store.attempt(f"rehearsal-{profile_name}", "rehearsal", profile=profile_name,
                       reports=str(out)) as attempt:
        runner = _Runner(attempt, json_output)
        code, _ = runner.run("infra-up", "infra", "up", *(["--cluster"] if cluster else []))
        if code == 0:
            runner.use_infra_credentials()
        if code == 0 and prof.standins:
            runner.run("standins-build", "standins", "build", "--profile", profile_name)
        if code == 0:
            runner.run("images-verify", "images", "verify", "--profile", profile_name)
        promoted: dict[str, str] = {}
        for name, image in spec.images.items():
            build = latest_build(name, profile_name, store)
            if build is None or build.reference is None or build.digest is None:
                attempt.add_check(CheckResult(
                    name=f"{name}-promote", status=Status.ERROR,
                    detail="no pushed build of this image in evidence: images verify failed"))
                continue
            tag = f"{profile_name}-{build.digest.hex[:12]}"
            hops = [f"{prof.registry_for(role)}/{image.repository}:{tag}"
                    for role in image.promotion[1:]]
            if not hops:
                continue
            via = [arg for hop in hops[:-1] for arg in ("--via", hop)]
            code, _ = runner.run(f"{name}-promote", "promote", str(build.reference), *via,
                                 "--to", hops[-1])
            if code == 0:
                promoted[name] = hops[-1]
                if cluster:
                    runner.run(f"{name}-cluster-probe", "cluster", "probe", hops[-1],
                               "--expect-digest", str(build.digest), "--profile", profile_name)
                if cluster and image.engine == "vllm":
                    _accept_step(runner, attempt, name, hops[-1], profile_name)
        runner.run("report", "report", "--all-images", "--format", "all", "--out", str(out),
                   "--profile", profile_name)
        attempt.write_json("steps.json", [s.model_dump(mode="json") for s in runner.steps])
        from imagekit.evidence.kinds import RehearsalResult
        from imagekit.evidence.kinds import RehearsalStep as EvidenceStep

        attempt.write_result(RehearsalResult(profile=profile_name, steps=[
            EvidenceStep(**s.model_dump()) for s in runner.steps]))
        checks = list(attempt.checks)
    summary = {"profile": profile_name, "reports": str(out), "promoted": promoted,
               "status": overall(checks).value,
               "checks": [c.model_dump(mode="json") for c in checks],
               "evidence": str(attempt.path)}
    if json_output:
        print_json(summary)
    else:
        from rich.table import Table

        table = Table("step", "status", "detail", title=f"rehearsal ({profile_name})")
        for check in checks:
            table.add_row(check.name, check.status.value, check.detail[:90])
        console.print(table)
        console.print(f"reports: {out}/index.md   evidence: {attempt.path}", markup=False)
    code = exit_code_for(checks)
    if code:
        raise typer.Exit(code)
