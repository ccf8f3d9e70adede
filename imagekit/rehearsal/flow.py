"""`imagekit rehearsal`: the main job on the embedded default, end to end, as one operation.

The local stand-in rehearsal of the whole release path: infrastructure up, stand-in bases,
`images verify` (build both fixed images, push to staging, probe inside, manifest), with the
cluster brought up and the model volume made beside those two (nothing in them needs it),
then per image `promote` staging → production → target with every hop read back, a zero-GPU
`cluster probe` of the promoted tag pinned to its digest, for the vLLM image `cluster accept`
of the promoted tag with the stand-in instruct model on a read-only PVC (protocol and semantics
PASS, each DEFERRED one the profile allows, live startup phases in evidence), and finally the
reports.

Three actors play it, each with its own key and evidence store (CI, the release engineer, the
operator), and an auditor renders the reports from an empty store. Each step is the ordinary
imagekit command run as its own process (`imagekit.rehearsal.steps`); the rehearsal keeps every
step's argv, exit code and output in one more evidence attempt (kind `rehearsal`) and never
stops at the first failure of an image's later steps without saying so.

Steps that need nothing of each other run at once (`imagekit.rehearsal.steps.beside`): the
cluster's bring-up, the stand-in model and the model volume beside the stand-ins and the images'
build; after the build, each image's own steps beside the other image's. On 2 cores the run is
bound by CPU, so this fills the time one step leaves idle (downloads, a single-threaded
conversion, a Pod starting) with another's work.
"""

from __future__ import annotations

import functools
import os
import shutil
from collections.abc import Mapping
from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict

from imagekit.errors import ImagekitError, InvalidInput
from imagekit.rehearsal.steps import StepRunner, beside
from imagekit.results import CheckResult, Status

if TYPE_CHECKING:
    from imagekit.evidence import EvidenceStore
    from imagekit.progress import Progress
    from imagekit.spec import Acceptance, ImageSpec, ImagesSpec


class RehearsalOutcome(BaseModel):
    """What one rehearsal did: its verdicts in order, what it promoted where, where its
    reports and its evidence attempt are."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    profile: str
    reports: Path
    promoted: dict[str, str]
    checks: list[CheckResult]
    evidence: Path
    #: `--layers N`: image -> layers of the stand-in it built, read back from the registry
    standin_layers: dict[str, int] = {}


def check_layers(layers: int | None, spec: ImagesSpec, profile: str) -> None:
    """`--layers N` (off by default), before any side effect: the bounds of `standins build
    --layers`, and a profile that builds stand-ins, with an SGLang image to pad."""
    if layers is None:
        return
    from imagekit.standins.build import check_layers as bounds

    bounds(layers)
    profile_name, prof = spec.profile(profile)
    if not prof.standins:
        raise InvalidInput(f"--layers: profile {profile_name!r} builds no stand-ins",
                           where="--layers")
    if padded_image(spec) is None:
        raise InvalidInput("--layers: the spec has no SGLang image to pad", where="--layers")


def padded_image(spec: ImagesSpec) -> str | None:
    """The spec image whose stand-in `--layers` pads: the SGLang one (the record's 63)."""
    return next((name for name, image in spec.images.items() if image.engine == "sglang"),
                None)


def standin_layer_count(spec: ImagesSpec, profile: str, image: str,
                        state_dir: Path | None = None) -> tuple[int, str]:
    """Layers of the stand-in base `standins build` pinned for `image`, counted in its
    manifest at the registry (not the flag echoed): (count, the pinned reference@digest).
    `state_dir`: infra's state (its CA and docker config for the loopback registries)."""
    from imagekit.infra.state import registry_trust
    from imagekit.oci import ImageReference
    from imagekit.registry import RegistryClient, RegistryOptions
    from imagekit.registry.images import resolve_image
    from imagekit.spec import load_lock

    entry = load_lock(spec.lock_path(profile), profile).bases[image]
    pinned = ImageReference.parse(f"{entry.tag.registry}/{entry.tag.repository}@{entry.digest}")
    with RegistryClient(pinned.registry,
                        RegistryOptions(**registry_trust(pinned.registry, state_dir))) as client:
        resolved = resolve_image(client, pinned)
    return len(resolved.manifest.layers), f"{entry.tag}@{entry.digest}"


def check_out(out: Path) -> Path:
    """The reports directory, checked before the first step (not after the last): writable,
    and no actor's evidence store in it may hold anything (each actor starts empty)."""
    from imagekit.clusteraccept import rehearsal as step
    from imagekit.inputs import writable_dir

    writable_dir(out, "--out-dir")  # /proc/x: refused before the first step, not after the last
    for actor in (*step.ACTORS, step.AUDITOR):
        kept = step.store_dir(out / "actors", actor)
        if kept.exists() and any(kept.iterdir()):
            raise InvalidInput("an actor's evidence store must start empty; give a new --out-dir",
                               where=str(kept))
    return out


def volume_step(runner: StepRunner, actors: Path, namespace: str | None = None) -> bool:
    """The stand-in model on a read-only PVC (`cluster model-volume`), by the operator into
    its own store: True when it is there."""
    from imagekit.clusteraccept import rehearsal as step
    from imagekit.infra.cluster import NODE_NAME

    namespace = namespace or step.NAMESPACE  # $IMAGEKIT_ACCEPT_NAMESPACE, from the settings
    code, _ = runner.run("model-volume", *step.volume_args(NODE_NAME, namespace),
                         store=step.store_dir(actors, "operator"))
    return code == 0


def accept_step(runner: StepRunner, name: str, reference: str, profile: str,
                actors: Path, namespace: str | None = None,
                allowed: Mapping[str, Acceptance] | None = None) -> None:
    """The promoted vLLM image accepted on the cluster with the stand-in model on its
    read-only PVC (`volume_step`, before) by the operator: its empty store, trusting CI's and
    the release engineer's keys, signing the phase with its own; judged by
    imagekit.clusteraccept.rehearsal (the step's exit code says DEFERRED for the stand-in: its
    verdict is that judge's). `allowed`: the checks the profile lets stay DEFERRED
    (`Profile.cluster_accept_allowances`)."""
    from imagekit.clusteraccept import rehearsal as step

    operator = step.store_dir(actors, "operator")
    namespace = namespace or step.NAMESPACE
    _, body = runner.run(f"{name}-cluster-accept", *step.accept_args(reference, profile, namespace),
                         *step.trust_args(actors, "ci", "release"),
                         *step.sign_args(actors, "operator"),
                         want_json=True, judged_after=True, store=operator)
    judged = step.standin_acceptance_check(f"{name}-cluster-accept", body, allowed, profile)
    runner.add_check(judged)
    verdict = runner.sink.phase("rehearsal", f"{name}-cluster-accept verdict", judged.detail)
    if judged.status is Status.PASS:
        verdict.done("PASS")
    else:
        verdict.fail(f"{judged.status.value}: {judged.detail}"[:300])


class ClusterTrack(BaseModel):
    """What the cluster's steps beside the images' steps left ready."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    up: bool
    volume: bool


def cluster_track(runner: StepRunner, actors: Path, namespace: str | None,
                  model: Future[int] | None) -> ClusterTrack:
    """`infra up --cluster` (on a new machine Kubernetes is built from source, at a lower CPU
    priority) and then, once `model` (the stand-in model's step, on its own track) has made
    the model, the model volume: steps that need nothing the stand-ins or the images' build
    make, so they run beside them (`beside`) and are ready by the first cluster step."""
    code, _ = runner.run("cluster-up", "infra", "up", "--cluster")
    if code != 0:
        return ClusterTrack(up=False, volume=False)
    made = model is not None and model.result() == 0
    return ClusterTrack(up=True, volume=made and volume_step(runner, actors, namespace))


def referrers_registry(state_dir: Path | None = None) -> str:
    """The fourth loopback registry's address (the one WITH the referrers API) of the infra
    whose state is `state_dir` (default /var/lib/imagekit)."""
    from imagekit.infra.registries import endpoints
    from imagekit.infra.state import StatePaths

    return endpoints(StatePaths(state_dir))["referrers"].address


def actor_keys(runner: StepRunner, actors: Path) -> bool:
    """Each actor makes its own key pair (`imagekit keys generate`) and hands its public key
    to the others under its name; every actor's store starts empty. False when one failed."""
    from imagekit.clusteraccept import rehearsal as step

    others = [a for a in (*step.ACTORS, step.AUDITOR) if a != "ci"]  # CI: the rehearsal's
    for actor in others:
        step.store_dir(actors, actor).mkdir(parents=True, exist_ok=True)
    for actor in step.ACTORS:
        code, _ = runner.run(f"{actor}-keys", "keys", "generate", "--out-dir",
                             str(step.key_dir(actors, actor)), "--overwrite",
                             store=step.store_dir(actors, actor) if actor in others else None)
        if code != 0:
            return False
        shutil.copyfile(step.key_dir(actors, actor) / "imagekit.pub",
                        step.public_key(actors, actor))
    return True


def write_index(out: Path, actors: Path, promoted: dict[str, str], ci_store: Path,
                standin_layers: dict[str, int] | None = None) -> None:
    """index.md: who played which part (keys, stores) and the auditor's reports; with
    `--layers`, the layer count of each padded stand-in as its manifest says."""
    from imagekit.clusteraccept import rehearsal as step

    out.mkdir(parents=True, exist_ok=True)
    rows, decisions = decision_rows(out, promoted)
    lines = [f"**{'; '.join(decisions) or 'nothing promoted: no image report'}**", "",
             "# rehearsal: three actors, one registry", "",
             "| actor | public key | evidence store |", "|---|---|---|"]
    for actor in (*step.ACTORS, step.AUDITOR):
        key = step.public_key(actors, actor)
        where = ci_store if actor == "ci" else step.store_dir(actors, actor).relative_to(out)
        lines.append(f"| {actor} | {key.relative_to(out) if key.exists() else '-'} | "
                     f"{where} |")
    lines += ["", "CI's store is the rehearsal's own (it built the images); the others start "
              "empty. The reports below were rendered from the auditor's empty store, from "
              "what the three keys signed at the registry.", ""]
    for name, count in (standin_layers or {}).items():
        lines.append(f"The {name} stand-in base was built with --layers: {count} layers "
                     "(counted in its manifest at the registry).")
    if standin_layers:
        lines.append("")
    lines += rows
    found = sorted(p.name for p in out.glob("*.md") if p.name != "index.md")
    lines += ["", "Reports: " + (", ".join(f"[{f}]({f})" for f in found) or "none")]
    (out / "index.md").write_text("\n".join(lines) + "\n")


def decision_rows(out: Path, promoted: dict[str, str]) -> tuple[list[str], list[str]]:
    """The auditor's decision per promoted image (the table's rows, and `name: decision` for
    the index's first line), with the evaluated checks beside it: the same records, so the
    row never reads "FAIL" under a decision that allows it."""
    from imagekit.report.decision import derive
    from imagekit.report.markdown import checks_line
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
    rows = ["| image | decision | checks | digest | report |", "|---|---|---|---|---|"]
    decisions = []
    for name, reference in promoted.items():
        # the promoted tag names the digest (local-<12 hex>), or the reference pins it
        hit = next(((r, md) for digest, (r, md) in reports.items()
                    if reference.endswith(digest) or digest.removeprefix("sha256:")[:12]
                    in reference.rpartition(":")[2]), None)
        if hit is None:
            rows.append(f"| {name} `{reference}` | no report | - | - | - |")
            decisions.append(f"{name}: no report")
            continue
        report, md = hit
        decision = derive(report)
        summary = decision.summary
        decisions.append(f"{name}: {summary}")
        rows.append(f"| {name} `{reference}` | **{summary.replace('|', chr(92) + '|')}** | "
                    f"{checks_line(report, decision)} | `{report.subject[:19]}…` | [{md}]({md}) |")
    return rows, decisions


def writable_spec(spec: ImagesSpec, out: Path) -> ImagesSpec:
    """The spec the rehearsal's steps use: `spec`, unless it is the one inside an installed
    wheel, whose lock may not be written there (`ImagesSpec.writable_lock_path`): then a copy
    beside the reports (`imagekit init` into `out/spec`), where `standins build` pins."""
    from imagekit import packaged

    if not packaged.in_installed_package(spec.root):
        return spec
    from imagekit.spec import load_spec
    from imagekit.spec.starter import SPEC_NAME, write_starter

    return load_spec(write_starter(out / "spec", force=True,
                                   source=spec.root / SPEC_NAME).spec)


def run_rehearsal(spec: ImagesSpec, profile: str, store: EvidenceStore, out: Path, *,
                  cluster: bool, sink: Progress,
                  namespace: str | None = None, layers: int | None = None,
                  state_dir: Path | None = None) -> RehearsalOutcome:
    """Every step of the rehearsal in order, recorded in one `rehearsal` attempt; `out` was
    checked (`check_out`) before. A step that fails stops the later steps of its image only.
    `layers` (checked by `check_layers` before): the SGLang stand-in padded to that many.
    `state_dir`: infra's state (the CLI's $IMAGEKIT_STATE_DIR; its steps inherit the
    variable itself with the rest of the environment)."""
    profile_name = spec.profile(profile)[0]
    env = {**os.environ, "IMAGEKIT_EVIDENCE_DIR": str(store.root)}
    copy = writable_spec(spec, out)
    if copy is not spec:   # the steps read the copy (they find the same spec otherwise)
        from imagekit.spec.starter import SPEC_NAME

        spec, env["IMAGEKIT_IMAGES_SPEC"] = copy, str(copy.root / SPEC_NAME)
    with store.attempt(f"rehearsal-{profile_name}", "rehearsal", profile=profile_name,
                       reports=str(out)) as attempt:
        # the steps write where the rehearsal does (also when it was given --evidence-dir)
        runner = StepRunner(attempt, sink, env=env, state_dir=state_dir)
        standin_layers: dict[str, int] = {}
        promoted = _steps(runner, spec, profile_name, store, out, cluster=cluster,
                          namespace=namespace, layers=layers, standin_layers=standin_layers,
                          state_dir=state_dir)
        write_index(out, out / "actors", promoted, store.root, standin_layers)
        attempt.write_json("steps.json", [s.model_dump(mode="json") for s in runner.steps])
        from imagekit.evidence.kinds import RehearsalResult

        attempt.write_result(RehearsalResult(profile=profile_name, steps=runner.steps,
                                             layers=layers, standin_layers=standin_layers))
    return RehearsalOutcome(profile=profile_name, reports=out, promoted=promoted,
                            checks=runner.checks, evidence=attempt.path,
                            standin_layers=standin_layers)


def _steps(runner: StepRunner, spec: ImagesSpec, profile_name: str,
           store: EvidenceStore, out: Path, *, cluster: bool,
           namespace: str | None = None, layers: int | None = None,
           standin_layers: dict[str, int] | None = None,
           state_dir: Path | None = None) -> dict[str, str]:
    """The steps themselves; returns what was promoted (image name -> its final hop).
    With `layers`, the padded stand-in's layer count (read back) goes into `standin_layers`.
    `state_dir`: infra's state (its registries' addresses and trust)."""
    from imagekit.build import latest_build
    from imagekit.clusteraccept import rehearsal as step

    prof = spec.profile(profile_name)[1]
    code, _ = runner.run("infra-up", "infra", "up", "--no-cluster")
    if code == 0:
        runner.use_infra_credentials()
    actors = out / "actors"
    # the cluster is needed from the first cluster step on: it comes up beside the stand-ins
    # and the images' build, not before them; so is the stand-in model (converted on the host,
    # on a track of its own), whose volume follows the cluster
    accepting = cluster and code == 0 and any(image.engine == "vllm"
                                               for image in spec.images.values())
    model = beside(lambda: runner.run("instruct-model", "standins", "model")[0]) \
        if accepting else None
    track = beside(lambda: cluster_track(runner, actors, namespace, model)) \
        if cluster and code == 0 else None
    padded = padded_image(spec) if layers else None
    if code == 0 and prof.standins:
        pad = ["--layers", str(layers), "--layers-for", padded] if layers and padded else []
        built, _ = runner.run("standins-build", "standins", "build", "--profile", profile_name,
                              *pad)
        if built == 0 and layers and padded:
            layers_check(runner, spec, profile_name, padded, layers, standin_layers,
                         state_dir)
    if code == 0:
        runner.run("images-verify", "images", "verify", "--profile", profile_name)
    keys_ok = code == 0 and actor_keys(runner, actors)
    promoted: dict[str, str] = {}

    def chain(name: str, image: ImageSpec) -> str | None:
        """One image's steps after the build, in order; its final hop when promoted."""
        build = latest_build(name, profile_name, store)
        if build is None or build.reference is None or build.digest is None:
            runner.add_check(CheckResult(
                name=f"{name}-promote", status=Status.ERROR,
                detail="no pushed build of this image in evidence: images verify failed"))
            return None
        if not keys_ok:
            return None
        tag = f"{profile_name}-{build.digest.hex[:12]}"
        hops = [f"{prof.registry_for(role)}/{image.repository}:{tag}"
                for role in image.promotion[1:]]
        if not hops:
            return None
        # CI (this store) signs the image phase where it pushed the build
        code, _ = runner.run(f"{name}-attest", "attest", str(build.reference),
                             *step.sign_args(actors, "ci"))
        if code != 0:
            return None
        # the release engineer: an empty store, CI's key trusted; the first hop is the
        # registry WITH the referrers API (go-containerregistry's), then the profile's
        hops = [f"{referrers_registry(state_dir)}/{image.repository}:{tag}", *hops]
        via = [arg for hop in hops[:-1] for arg in ("--via", hop)]
        code, _ = runner.run(f"{name}-promote", "promote", str(build.reference), *via,
                             "--to", hops[-1], *step.trust_args(actors, "ci"),
                             *step.sign_args(actors, "release"),
                             store=step.store_dir(actors, "release"))
        if code != 0:
            return None
        # the operator: an empty store, its own key. Acceptance first: its gate then
        # decides from the registry's signed image phase; the operator's own probe
        # evidence (torch_arch FAIL, which only CI's signed acceptance covers) would
        # otherwise be the local evidence it decides from
        ready = track.result() if track is not None else None
        if ready is None or not ready.up:
            return hops[-1]  # no cluster asked for, or its step FAILed and says why
        if image.engine == "vllm" and ready.volume:
            accept_step(runner, name, hops[-1], profile_name, actors, namespace,
                        prof.cluster_accept_allowances(name))
        runner.run(f"{name}-cluster-probe", "cluster", "probe", hops[-1],
                   "--expect-digest", str(build.digest), "--profile", profile_name,
                   *step.trust_args(actors, "ci", "release"),
                   *step.sign_args(actors, "operator"),
                   store=step.store_dir(actors, "operator"))
        return hops[-1]

    # the images' steps need nothing of each other: each image's chain runs beside the others
    # (one image's Pod probe beside another's acceptance), each in its own order
    chains = {name: beside(functools.partial(chain, name, image))
              for name, image in spec.images.items()}
    for name, chained in chains.items():
        final = chained.result()
        if final is not None:
            promoted[name] = final
    if track is not None:
        track.result()  # recorded, and no step of it outlives the rehearsal
    if model is not None:
        model.result()
    # the auditor: a fourth, empty store, trusting all three; the reports from the registry
    auditor = step.store_dir(actors, step.AUDITOR)
    for name, reference in promoted.items():
        runner.run(f"{name}-report", "report", reference, "--format", "all", "--out-dir",
                   str(out), "--profile", profile_name,
                   *step.trust_args(actors, *step.ACTORS), store=auditor)
    return promoted


def layers_check(runner: StepRunner, spec: ImagesSpec, profile: str, image: str, layers: int,
                 standin_layers: dict[str, int] | None,
                 state_dir: Path | None = None) -> None:
    """The padded stand-in's layers, counted in its pushed manifest: PASS at `layers` or more
    (a stand-in that already had more is not cut), FAIL fewer, ERROR unreadable."""
    name = f"{image}-standin-layers"
    try:
        count, pinned = standin_layer_count(spec, profile, image, state_dir)
    except (ImagekitError, OSError, KeyError, ValueError) as exc:  # one check says why
        runner.add_check(CheckResult(name=name, status=Status.ERROR,
                                     detail=f"could not read the stand-in's manifest: {exc}"))
        return
    if standin_layers is not None:
        standin_layers[image] = count
    runner.add_check(CheckResult(
        name=name, status=Status.PASS if count >= layers else Status.FAIL,
        detail=f"{count} layers in the manifest of {pinned} (--layers {layers})"))


def closing_lines(checks: list[CheckResult]) -> list[str]:
    """The closing table as plain whole lines (step, status, the whole detail) for a pipe."""
    width = max((len(c.name) for c in checks), default=4)
    return [f"{c.name:<{width}}  {c.status.value:<8}  {' '.join(c.detail.split())}"
            for c in checks]
