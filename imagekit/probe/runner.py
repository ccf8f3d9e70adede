"""Run the probes of `probes/` inside an image: `docker run --rm --network
none`, the probes bind-mounted read-only (the image under test is not changed), entrypoint
overridden to python3.

Each probe's last stdout line is its JSON verdict; a probe that exits non-zero or prints no JSON
is an ERROR (the probe broke, not the image). Raw stdout/stderr of every probe go to evidence.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from imagekit import packaged
from imagekit.engine import Engine, RunOutcome
from imagekit.errors import InvalidInput
from imagekit.evidence import EvidenceStore, Role
from imagekit.evidence.kinds import ProbeResult, ServeArgsReport
from imagekit.launch.command import Engine as ServeEngine
from imagekit.launch.command import ServeCommand, ServeConfig, serve_probe_input
from imagekit.oci import Digest
from imagekit.progress import current as current_progress
from imagekit.results import CheckResult, Status, overall

PROBES_ENV = "IMAGEKIT_PROBES_DIR"
MOUNT = "/imagekit-probes"
#: The probes run as the user the cluster's Pods run as (restricted Pod Security,
#: imagekit.cluster.manifests.RUN_AS_USER), never as root: an image whose Python only works as
#: root (caches under /root, files readable by root alone) fails here, not in the cluster.
#: HOME and temporary files go to /tmp, as the Pods' emptyDir gives them.
PROBE_USER = "65532:65532"
PROBE_ENV = {"PYTHONDONTWRITEBYTECODE": "1", "HOME": "/tmp", "TMPDIR": "/tmp",
             "XDG_CACHE_HOME": "/tmp/.cache"}


def probes_dir(given: Path | None = None) -> Path:
    """`given` (the CLI passes $IMAGEKIT_PROBES_DIR, imagekit.settings), else the packaged
    probes (probes). A folder that is missing or holds no probe is bad input,
    found before anything runs (a bind mount of a missing folder would have docker create it
    empty, and every probe would break)."""
    directory = Path(given).absolute() if given else packaged.path("probes")
    if not directory.is_dir() or not any(directory.glob("*.py")):
        what = f"${PROBES_ENV} names no folder of probes (*.py)" if given else \
            "the installed package has no probes (*.py): reinstall imagekit"
        raise InvalidInput(what, where=str(directory))
    return directory


#: the image-to-GPU fit rules (one file, the preflight package's fit.py), mounted beside the
#: probes' folder: torch_arch imports it from there
FIT_MOUNT = "/imagekit-preflight"


def fit_rules() -> Path:
    return packaged.path("preflight", "fit.py")


def probes_version(directory: Path | None = None) -> str:
    """sha256 of the probe scripts (and the fit rules they load): part of every cache key that
    covers probe results. `directory`: the probes' folder (default the packaged probes)."""
    directory = directory or probes_dir()
    digest = hashlib.sha256()
    for path in [*sorted(directory.glob("*.py")), fit_rules()]:
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


class ProbePlan(BaseModel):
    """Which probes to run and their arguments (from the spec, or given by hand)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    engine: str
    probes: list[str]
    find_spec: list[str] = []
    #: the serve commands serve_args parses (empty: launch.sh's defaults for the engine)
    serve: list[ServeCommand] = []

    def serve_commands(self) -> list[ServeCommand]:
        if self.serve:
            return list(self.serve)
        return [ServeCommand.of("launch.sh defaults",
                                ServeConfig.build(engine=ServeEngine(self.engine)))]

    def argv(self, probe: str) -> list[str]:
        args = [f"{MOUNT}/{probe}.py"]
        if probe == "find_spec":
            args += self.find_spec
        elif probe == "cli_help":
            args.append(self.engine)
        elif probe == "serve_args":
            args += [self.engine, serve_probe_input(self.engine, self.serve_commands())]
        return args

    def arguments(self) -> list[tuple[str, list[str]]]:
        """Each probe with the arguments its script gets (argv without the script path): the
        plan as a runner that mounts the probes elsewhere takes it (`cluster probe`)."""
        return [(probe, self.argv(probe)[1:]) for probe in self.probes]


def serve_commands_of(image, profile: str | None = None) -> list[ServeCommand]:  # noqa: ANN001
    """The spec image's serve settings (ImageSpec: those of `profile`; ResolvedImage: already
    its profile's) as serve_args commands, in the spec's order."""
    settings = image.serve_for(profile) if hasattr(image, "serve_for") else \
        dict(getattr(image, "serve", {}) or {})
    return [ServeCommand.of(label, setting.config(image.engine))
            for label, setting in settings.items()]


def plan_for(image=None, *, engine: str | None = None, probes: list[str] | None = None,  # noqa: ANN001
             find_spec: list[str] | None = None, serve: list[ServeCommand] | None = None,
             profile: str | None = None) -> ProbePlan:
    """The probes for an image: explicit choices first, then the spec image's own (its probes
    and find_spec list — also when it was given by reference, see `imagekit.names`), then the
    engine's built-ins (`imagekit.spec.engines`: SGLang's include nixl and nixl._api)."""
    from imagekit.spec.engines import engine_find_spec
    from imagekit.spec.models import KNOWN_PROBES

    engine = engine or (image.engine if image is not None else None)
    if engine is None:
        raise ValueError("plan_for needs an engine or a spec image")
    own_probes = list(image.probes) if image is not None else list(KNOWN_PROBES)
    own_find_spec = list(image.find_spec) if image is not None and image.find_spec else \
        engine_find_spec(engine)
    own_serve = serve_commands_of(image, profile) if image is not None else []
    return ProbePlan(engine=engine, probes=list(probes or own_probes),
                     find_spec=list(find_spec or own_find_spec), serve=list(serve or own_serve))


def serve_args_report(checks: list[CheckResult]) -> ServeArgsReport | None:
    """The typed serve_args outcome of a probe run (None when serve_args did not run or broke)."""
    for check in checks:
        if check.name == "serve_args" and check.status is not Status.ERROR:
            return ServeArgsReport.of(check)
    return None


class ProbeReport(BaseModel):
    """What `imagekit probe --json` prints."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    image: str
    digest: str | None
    image_id: str | None = None
    status: Status
    checks: list[CheckResult]
    versions: dict[str, str | None] = {}
    evidence: str | None = None


def parse_outcome(probe: str, outcome: RunOutcome) -> CheckResult:
    last = next((line for line in reversed(outcome.stdout.splitlines()) if line.strip()), "")
    try:
        result = json.loads(last)
    except json.JSONDecodeError:
        result = None
    if outcome.returncode != 0 or not isinstance(result, dict):
        if outcome.returncode == 125:
            why = "could not start: docker could not run the container"
        elif outcome.returncode in (126, 127):
            why = "could not start: no runnable python3 in the image"
        else:
            why = f"exited {outcome.returncode} without a JSON verdict"
        tail = " | ".join(outcome.stderr.strip().splitlines()[-3:])[:400]
        return CheckResult(name=probe, status=Status.ERROR, detail=f"probe {why}: {tail}",
                           data={"exit_code": outcome.returncode})
    try:
        status = Status(str(result.get("status")))
    except ValueError:
        return CheckResult(name=probe, status=Status.ERROR,
                           detail=f"probe printed an unknown status {result.get('status')!r}")
    return CheckResult(name=probe, status=status, detail=str(result.get("detail", "")),
                       data=dict(result.get("data") or {}))


def run_probes(engine: Engine, image: str, plan: ProbePlan, *, attempt=None,
               probes: Path | None = None) -> tuple[list[CheckResult], dict[str, str | None]]:
    """Run every probe of the plan, plus the versions fact-finder. Returns (checks, versions).
    `probes`: the probes' folder (default the packaged probes; probes_dir)."""
    directory = probes_dir(probes)
    volumes = [(directory, MOUNT, "ro"), (fit_rules().parent, FIT_MOUNT, "ro")]
    env = PROBE_ENV
    checks = []
    step = "probe " + image.rsplit("/", 1)[-1]
    for probe in plan.probes:
        with current_progress().phase(step, probe) as phase:  # one `docker run` each
            outcome = engine.run(image, plan.argv(probe), entrypoint="python3",
                                 network="none", volumes=volumes, envs=env, user=PROBE_USER)
            if attempt is not None:
                attempt.write_text(f"probes/{probe}.stdout", outcome.stdout)
                attempt.write_text(f"probes/{probe}.stderr", outcome.stderr)
            checks.append(parse_outcome(probe, outcome))
            phase.done(detail=checks[-1].status.value)
    with current_progress().phase(step, "versions"):
        outcome = engine.run(image, [f"{MOUNT}/versions.py"], entrypoint="python3",
                             network="none", volumes=volumes, envs=env, user=PROBE_USER)
    if attempt is not None:
        attempt.write_text("probes/versions.stdout", outcome.stdout)
        attempt.write_text("probes/versions.stderr", outcome.stderr)
    versions_check = parse_outcome("versions", outcome)
    versions = dict(versions_check.data.get("versions") or {})
    return checks, versions


def probe_image(engine: Engine, store: EvidenceStore, image: str, plan: ProbePlan, *,
                digest: Digest | None = None, label: str | None = None,
                probes: Path | None = None) -> ProbeReport:
    """Probe one image and record the attempt under its digest (kind `probe`); `probes`: the
    probes' folder (default the packaged probes)."""
    directory = probes_dir(probes)
    engine.ping()
    info = engine.inspect(image) if engine.exists(image) else None
    key = digest or (info.id if info else None) or f"probe-{label or 'image'}"
    with store.attempt(key, "probe", image=image, probes=plan.probes,
                       probes_version=probes_version(directory)) as attempt:
        checks, versions = run_probes(engine, image, plan, attempt=attempt, probes=directory)
        attempt.write_json("checks.json", [c.model_dump(mode="json") for c in checks])
        attempt.write_json("versions.json", versions)
        if digest is not None and info is not None:
            attempt.add_subject(info.id, Role.ALIAS)       # the image ID of the same image
        attempt.write_result(ProbeResult(image=image, probes=list(plan.probes),
                                         versions=versions,
                                         serve_args=serve_args_report(checks)))
        for check in checks:
            attempt.add_check(check)
    return ProbeReport(image=image, digest=str(digest) if digest else None,
                       image_id=str(info.id) if info else None, status=overall(checks),
                       checks=checks, versions=versions, evidence=str(attempt.path))
