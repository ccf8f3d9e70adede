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
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from imagekit.cli.app import app, console, evidence_store, guarded, print_json, progress_for

if TYPE_CHECKING:
    from imagekit.progress import Progress
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
    """Runs imagekit sub-commands, records each; each step is a phase of the rehearsal's
    progress, and the step's own phases (its child process's progress events) are drawn
    under it, live."""

    def __init__(self, attempt, json_output: bool, sink: Progress) -> None:
        self.attempt, self.json_output, self.sink = attempt, json_output, sink
        self.steps: list[Any] = []
        self.env: dict[str, str] | None = None

    def use_infra_credentials(self) -> None:
        """The loopback registries' credentials live in infra's docker config dir: point the
        steps at it (by DOCKER_CONFIG, a path, never the secrets), unless the caller chose one."""
        from imagekit.infra.state import registry_env

        if "DOCKER_CONFIG" not in os.environ:
            self.env = {**(self.env or os.environ), **registry_env()}

    def run(self, name: str, *args: str, want_json: bool = False,
            judged_after: bool = False, store: Path | None = None) -> tuple[int, dict | None]:
        """`judged_after`: the caller judges the step's result itself (its exit 1 is not the
        step's verdict), so the live line does not say FAILED for it. `store`: the evidence
        store of the actor that runs this step (default: the rehearsal's, CI's)."""
        from imagekit.results import CheckResult

        argv = [sys.executable, "-m", "imagekit", *args]
        started = time.monotonic()
        env = self.env if store is None else \
            {**(self.env or os.environ), "IMAGEKIT_EVIDENCE_DIR": str(store)}
        done = _run_live(argv, env, name, self.sink, shown=f"imagekit {' '.join(args)}",
                         judged_after=judged_after)
        seconds = round(time.monotonic() - started, 2)
        step = _step_model()(name=name, argv=["imagekit", *args], exit_code=done.returncode,
                             seconds=seconds, status=_status_of(done.returncode))
        self.steps.append(step)
        index = len(self.steps)
        self.attempt.write_text(f"steps/{index:02d}-{name}.stdout", done.stdout)
        self.attempt.write_text(f"steps/{index:02d}-{name}.stderr", done.stderr)
        self.attempt.add_check(CheckResult(
            name=name, status=step.status,
            detail=f"exit {done.returncode} in {seconds} s"
                   + (f": {_last_words(done.stderr)}"
                      if done.returncode and _last_words(done.stderr) else "")))
        body = None
        if want_json and done.stdout.strip():
            try:
                body = json.loads(done.stdout)
            except json.JSONDecodeError:
                body = None
        return done.returncode, body


def _last_words(stderr: str) -> str:
    """The child's last stderr line that is not a progress event (its error, usually)."""
    from imagekit.progress import ProgressEvent

    for line in reversed(stderr.strip().splitlines()):
        if line.strip() and ProgressEvent.parse_line(line) is None:
            return line.strip()[:300]
    return ""


def _run_live(argv: list[str], env: dict[str, str] | None, name: str, sink: Progress,
              shown: str | None = None, judged_after: bool = False
              ) -> subprocess.CompletedProcess:
    """Run one step as a child that reports its progress as JSON lines (IMAGEKIT_PROGRESS=
    json): its events become phases under this step, its other stderr lines the step's live
    detail; the sink's heartbeat covers silence. stdout and stderr are kept whole."""
    import threading

    from imagekit.progress import MODE_ENV, ProgressEvent

    env = {**(env if env is not None else os.environ), MODE_ENV: "json"}
    phase = sink.phase("rehearsal", name, shown)
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, bufsize=1)
    out: list[str] = []
    err: list[str] = []

    def pump_out() -> None:
        out.append(proc.stdout.read())

    def pump_err() -> None:
        for line in proc.stderr:
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
            f"{_status_of(code).value} exit {code}"
        phase.fail(said + (f": {_last_words(stderr)}" if _last_words(stderr) else ""))
    return subprocess.CompletedProcess(argv, code, "".join(out), stderr)


def _accept_step(runner: _Runner, attempt, name: str, reference: str, profile: str,
                 actors: Path) -> None:
    """The promoted vLLM image accepted on the cluster with the stand-in model on a
    read-only PVC (issue 15) by the operator: its empty store, trusting CI's and the release
    engineer's keys, signing the phase with its own; judged by imagekit.clusteraccept.rehearsal."""
    from imagekit.cli.app import settings
    from imagekit.clusteraccept import rehearsal as step
    from imagekit.infra.cluster import NODE_NAME

    operator = step.store_dir(actors, "operator")
    namespace = settings().accept_namespace  # $IMAGEKIT_ACCEPT_NAMESPACE
    code, _ = runner.run("model-volume", *step.volume_args(NODE_NAME, namespace), store=operator)
    if code != 0:
        return
    _, body = runner.run(f"{name}-cluster-accept", *step.accept_args(reference, profile, namespace),
                         *step.trust_args(actors, "ci", "release"),
                         *step.sign_args(actors, "operator"),
                         want_json=True, judged_after=True, store=operator)
    attempt.checks.pop()   # the exit code says DEFERRED (the stand-in): judged just below
    judged = step.standin_acceptance_check(f"{name}-cluster-accept", body)
    attempt.add_check(judged)
    verdict = runner.sink.phase("rehearsal", f"{name}-cluster-accept verdict", judged.detail)
    if judged.status.value == "PASS":
        verdict.done("PASS")
    else:
        verdict.fail(f"{judged.status.value}: {judged.detail}"[:300])


def _referrers_registry() -> str:
    """The fourth loopback registry's address (the one WITH the referrers API)."""
    from imagekit.infra.registries import endpoints
    from imagekit.infra.state import StatePaths

    return endpoints(StatePaths())["referrers"].address


def _actor_keys(runner: _Runner, actors: Path) -> bool:
    """Each actor makes its own key pair (`imagekit keys generate`) and hands its public key
    to the others under its name; every actor's store starts empty. False when one failed."""
    import shutil

    from imagekit.clusteraccept import rehearsal as step

    others = [a for a in (*step.ACTORS, step.AUDITOR) if a != "ci"]  # CI: the rehearsal's
    for actor in others:
        step.store_dir(actors, actor).mkdir(parents=True, exist_ok=True)
    for actor in step.ACTORS:
        code, _ = runner.run(f"{actor}-keys", "keys", "generate", "--out",
                             str(step.key_dir(actors, actor)), "--force",
                             store=step.store_dir(actors, actor) if actor in others else None)
        if code != 0:
            return False
        shutil.copyfile(step.key_dir(actors, actor) / "imagekit.pub",
                        step.public_key(actors, actor))
    return True


def _write_index(out: Path, actors: Path, promoted: dict[str, str], ci_store: Path) -> None:
    """index.md: who played which part (keys, stores) and the auditor's reports."""
    from imagekit.clusteraccept import rehearsal as step

    out.mkdir(parents=True, exist_ok=True)
    lines = ["# rehearsal: three actors, one registry", "",
             "| actor | public key | evidence store |", "|---|---|---|"]
    for actor in (*step.ACTORS, step.AUDITOR):
        key = step.public_key(actors, actor)
        where = ci_store if actor == "ci" else step.store_dir(actors, actor).relative_to(out)
        lines.append(f"| {actor} | {key.relative_to(out) if key.exists() else '-'} | "
                     f"{where} |")
    lines += ["", "CI's store is the rehearsal's own (it built the images); the others start "
              "empty. The reports below were rendered from the auditor's empty store, from "
              "what the three keys signed at the registry.", ""]
    lines += _decision_rows(out, promoted)
    found = sorted(p.name for p in out.glob("*.md") if p.name != "index.md")
    lines += ["", "Reports: " + (", ".join(f"[{f}]({f})" for f in found) or "none")]
    (out / "index.md").write_text("\n".join(lines) + "\n")


def _decision_rows(out: Path, promoted: dict[str, str]) -> list[str]:
    """The auditor's gate decision per promoted image first, the raw worst status beside it
    (issue 27: a person reads the decision, not "FAIL" under a gate that allowed it)."""
    from imagekit.report.models import ImageReport

    reports = {}
    for path in out.glob("*.json"):
        if path.name.endswith(".intoto.json"):
            continue
        try:
            report = ImageReport.model_validate_json(path.read_text())
        except ValueError:
            continue
        reports[report.subject] = (report, path.with_suffix(".md").name)
    rows = ["| image | decision | raw status | digest | report |", "|---|---|---|---|---|"]
    for name, reference in promoted.items():
        # the promoted tag names the digest (local-<12 hex>), or the reference pins it
        hit = next(((r, md) for digest, (r, md) in reports.items()
                    if reference.endswith(digest) or digest.removeprefix("sha256:")[:12]
                    in reference.rpartition(":")[2]), None)
        if hit is None:
            rows.append(f"| {name} `{reference}` | no report | - | - | - |")
            continue
        report, md = hit
        decision = report.decision().replace("|", "\\|")
        rows.append(f"| {name} `{reference}` | **{decision}** | {report.status.value} | "
                    f"`{report.subject[:19]}…` | [{md}]({md}) |")
    return rows


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
    from imagekit.clusteraccept import rehearsal as step
    from imagekit.results import CheckResult, Status, exit_code_for, overall
    from imagekit.spec import load_spec

    spec = load_spec()
    profile_name, prof = spec.profile(profile)
    store = evidence_store(evidence_dir)  # before infra up: a run that cannot be recorded
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out = out or Path("rehearsal-reports") / stamp
    from imagekit.inputs import writable_dir

    writable_dir(out, "--out")  # /proc/x: refused before the first step, not after the last
    for actor in (*step.ACTORS, step.AUDITOR):   # bad input before anything runs
        kept = step.store_dir(out / "actors", actor)
        if kept.exists() and any(kept.iterdir()):
            from imagekit.errors import InvalidInput

            raise InvalidInput("an actor's evidence store must start empty; give a new --out",
                               where=str(kept))
    with store.attempt(f"rehearsal-{profile_name}", "rehearsal", profile=profile_name,
                       reports=str(out)) as attempt, progress_for(json_output) as sink:
        runner = _Runner(attempt, json_output, sink)
        # the steps write where the rehearsal does (also when it was given --evidence-dir)
        runner.env = {**os.environ, "IMAGEKIT_EVIDENCE_DIR": str(store.root)}
        code, _ = runner.run("infra-up", "infra", "up", *(["--cluster"] if cluster else []))
        if code == 0:
            runner.use_infra_credentials()
        if code == 0 and prof.standins:
            runner.run("standins-build", "standins", "build", "--profile", profile_name)
        if code == 0:
            runner.run("images-verify", "images", "verify", "--profile", profile_name)
        actors = out / "actors"
        keys_ok = code == 0 and _actor_keys(runner, actors)
        promoted: dict[str, str] = {}
        for name, image in spec.images.items():
            build = latest_build(name, profile_name, store)
            if build is None or build.reference is None or build.digest is None:
                attempt.add_check(CheckResult(
                    name=f"{name}-promote", status=Status.ERROR,
                    detail="no pushed build of this image in evidence: images verify failed"))
                continue
            if not keys_ok:
                continue
            tag = f"{profile_name}-{build.digest.hex[:12]}"
            hops = [f"{prof.registry_for(role)}/{image.repository}:{tag}"
                    for role in image.promotion[1:]]
            if not hops:
                continue
            # CI (this store) signs the image phase where it pushed the build
            code, _ = runner.run(f"{name}-attest", "attest", str(build.reference),
                                 *step.sign_args(actors, "ci"))
            if code != 0:
                continue
            # the release engineer: an empty store, CI's key trusted; the first hop is the
            # registry WITH the referrers API (go-containerregistry's), then the profile's
            hops = [f"{_referrers_registry()}/{image.repository}:{tag}", *hops]
            via = [arg for hop in hops[:-1] for arg in ("--via", hop)]
            code, _ = runner.run(f"{name}-promote", "promote", str(build.reference), *via,
                                 "--to", hops[-1], *step.trust_args(actors, "ci"),
                                 *step.sign_args(actors, "release"),
                                 store=step.store_dir(actors, "release"))
            if code == 0:
                promoted[name] = hops[-1]
                # the operator: an empty store, its own key. Acceptance first: its gate then
                # decides from the registry's signed image phase; the operator's own probe
                # evidence (torch_arch FAIL, which only CI's signed acceptance covers) would
                # otherwise be the local evidence it decides from
                if cluster and image.engine == "vllm":
                    _accept_step(runner, attempt, name, hops[-1], profile_name, actors)
                if cluster:
                    runner.run(f"{name}-cluster-probe", "cluster", "probe", hops[-1],
                               "--expect-digest", str(build.digest), "--profile", profile_name,
                               *step.trust_args(actors, "ci", "release"),
                               *step.sign_args(actors, "operator"),
                               store=step.store_dir(actors, "operator"))
        # the auditor: a fourth, empty store, trusting all three; the reports from the registry
        auditor = step.store_dir(actors, step.AUDITOR)
        for name, reference in promoted.items():
            runner.run(f"{name}-report", "report", reference, "--format", "all", "--out",
                       str(out), "--profile", profile_name,
                       *step.trust_args(actors, *step.ACTORS), store=auditor)
        _write_index(out, actors, promoted, store.root)
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
    elif not console.is_terminal:  # a pipe or a file: whole lines, never cut at 80 columns
        print(f"rehearsal ({profile_name})")
        for line in closing_lines(checks):
            print(line)
        print(f"reports: {out}/index.md   evidence: {attempt.path}", flush=True)
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


def closing_lines(checks: list) -> list[str]:
    """The closing table as plain whole lines (step, status, the whole detail) for a pipe."""
    width = max((len(c.name) for c in checks), default=4)
    return [f"{c.name:<{width}}  {c.status.value:<8}  {' '.join(c.detail.split())}"
            for c in checks]
