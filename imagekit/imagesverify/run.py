"""`imagekit images verify`: build every image of the spec, push it to staging, probe it inside,
run verify-copy where the spec names a mirror of the base, and write the image manifest.

Cache: each image's result is keyed by (build key = base digest + Dockerfile dir + build args,
probe scripts' hash, probe plan, accepted statuses, mirror digest). When the newest record with
that key is there and the image is still in the daemon and in the staging registry, the record
is reused without building or probing (a no-op rerun takes seconds); a new, small attempt says
so. Anything else runs in full and never overwrites an older record.

Verdict: a check's real status is always kept; the profile's `accept` table may accept a named
non-PASS status (e.g. vLLM's CPU_PASS_GPU_CLI_DEFERRED) for the verdict, with its reason shown.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Callable
from pathlib import Path

from imagekit.build import BuildFailed, BuildRecord, build_image, build_key
from imagekit.build.rebuild import rebuild_image
from imagekit.engine import Engine
from imagekit.errors import ImagekitError
from imagekit.evidence import EvidenceStore, Role, Subject
from imagekit.evidence.kinds import (
    ImagesManifestResult,
    ImagesVerifyResult,
    ManifestImage,
    ProbeResult,
)
from imagekit.imagesverify.models import AcceptedCheck, ImageEntry, ImagesVerifyReport
from imagekit.probe import ProbePlan, probes_version, run_probes
from imagekit.probe.runner import probes_dir, serve_args_report, serve_commands_of
from imagekit.results import CheckResult, Status, overall
from imagekit.spec import ImagesSpec, ResolvedImage, resolve_image

KIND = "images-verify"


def cache_name(profile: str, name: str) -> str:
    return f"images-verify-{profile}-{name}"


def fix_layers(dockerfile_text: str) -> list[str]:
    """The Dockerfile's RUN instructions (continuations joined): what the fix layers do."""
    joined = re.sub(r"\\\n", " ", dockerfile_text)
    layers = []
    for line in joined.splitlines():
        stripped = line.strip()
        if stripped.upper().startswith("RUN "):
            layers.append(" ".join(stripped.split()))
    return layers


def verify_key(image: ResolvedImage, plan: ProbePlan, accepted: dict[str, object],
               probes: Path | None = None, rebuild: bool = False) -> str:
    """`probes`: the probes' folder (default the packaged probes): its probes_version keys it.
    `rebuild`: the entry holds the `reproducible` check (an entry without it does not stand
    for one with it)."""
    material = json.dumps({
        "build": build_key(image), "probes": probes_version(probes),
        "plan": plan.model_dump(mode="json"), "accept": accepted,
        "mirror": str(image.mirror_digest) if image.mirror_digest else None, "recipe": 1,
        **({"rebuild": True} if rebuild else {}),
    }, sort_keys=True, default=str)
    return hashlib.sha256(material.encode()).hexdigest()


def judge(name: str, checks: list[CheckResult], accept: dict) -> tuple[Status,
                                                                       list[AcceptedCheck]]:
    accepted, rest = [], []
    for check in checks:
        rule = accept.get(f"{name}.{check.name}")
        if check.status is not Status.PASS and rule is not None and rule.status == check.status:
            accepted.append(AcceptedCheck(check=check.name, status=check.status,
                                          reason=rule.reason))
        else:
            rest.append(check)
    if not rest:
        return Status.PASS, accepted
    return overall(rest), accepted


def _verify_copy_check(image: ResolvedImage, store: EvidenceStore) -> CheckResult:
    """verify-copy of the base's mirror through imagekit.verify; DEFERRED when unavailable."""
    if image.mirror is None:
        return CheckResult(name="verify_copy", status=Status.DEFERRED,
                           detail="the spec names no mirror for this base")
    if image.mirror_digest is None:
        return CheckResult(name="verify_copy", status=Status.FAIL,
                           detail=f"mirror {image.mirror} is not pinned in the lock")
    try:
        from imagekit.verify import record_evidence, verify_copy
    except ImportError as exc:  # the registry helper's module may not be there yet
        return CheckResult(name="verify_copy", status=Status.DEFERRED,
                           detail=f"imagekit.verify is not available ({exc})")
    official = image.base_pinned
    copy = image.mirror.with_digest(image.mirror_digest)
    try:
        result = verify_copy(official, copy)
    except ImagekitError as exc:
        return CheckResult(name="verify_copy", status=Status.ERROR,
                           detail=f"verify-copy {official} vs {copy}: {exc.one_line()}")
    where = record_evidence(store, result)
    same = result.verdict == "identical-content"
    return CheckResult(name="verify_copy", status=Status.PASS if same else Status.FAIL,
                       detail=f"{copy} vs {official}: {result.verdict}; config digest "
                              f"{'equal' if result.config_digest_equal else 'DIFFERS'}; "
                              f"diff_ids {'equal' if result.diff_ids_equal else 'DIFFER'} "
                              f"{result.diff_ids_matching}/{result.layers}",
                       data={"evidence": where, "config_digest_equal": result.config_digest_equal,
                             "diff_ids_equal": result.diff_ids_equal})


def _cached_entry(store: EvidenceStore, engine: Engine, image: ResolvedImage,
                  key: str) -> ImageEntry | None:
    for record in reversed(store.attempts(cache_name(image.profile, image.name), KIND)):
        if record.context.get("verify_key") != key:
            continue
        if record.status is Status.ERROR:
            return None
        path = store.path_of(record) / "entry.json"
        if not path.is_file():
            return None
        entry = ImageEntry.model_validate_json(path.read_text())
        if entry.reference is None or entry.digest is None:
            return None
        build = entry.evidence.get("local_tag")
        if not build or not engine.exists(build):
            return None
        if not _in_registry(entry.reference):
            return None
        return entry.model_copy(update={"cached": True})
    return None


def _in_registry(reference: str) -> bool:
    from imagekit.oci import ImageReference
    from imagekit.registry import ClientPool, RegistryOptions
    from imagekit.registry.retry import RetryPolicy

    ref = ImageReference.parse(reference)
    try:
        with ClientPool(RegistryOptions(retry=RetryPolicy(attempts=2))) as pool:
            found = pool.get(ref.registry).manifest_exists(ref.repository, ref.identifier)
    except ImagekitError:
        return False
    return found is not None and ref.digest is not None and found == ref.digest


def verify_one(spec: ImagesSpec, name: str, engine: Engine, store: EvidenceStore, *,
               profile: str | None, no_cache: bool,
               on_line: Callable[[str], None] | None = None,
               pip_cert: Path | None = None, probes: Path | None = None,
               rebuild: bool = False) -> ImageEntry:
    image = resolve_image(spec, name, profile)
    _, prof = spec.profile(profile)
    rebuild = rebuild or prof.reproducible
    image_spec = spec.image(name)
    plan = ProbePlan(engine=image.engine, probes=image.probes, find_spec=image.find_spec,
                     serve=serve_commands_of(image))
    accept = {k: v for k, v in prof.accept.items() if k.startswith(f"{name}.")}
    probes = probes_dir(probes)
    key = verify_key(image, plan, {k: v.model_dump(mode="json") for k, v in accept.items()},
                     probes, rebuild)
    if not no_cache:
        cached = _cached_entry(store, engine, image, key)
        if cached is not None:
            with store.attempt(cache_name(image.profile, name), KIND,
                               subjects=entry_subjects(cached), verify_key=key,
                               digest=cached.digest, image_id=cached.image_id,
                               cached=True) as attempt:
                attempt.write_json("entry.json", cached)
                attempt.write_result(entry_result(cached))
                for check in cached.checks:
                    attempt.add_check(check)
                attempt.finish(cached.verdict, summary=f"{name}: cached result reused "
                               f"(verify key {key[:12]})")
            return cached
    try:
        record: BuildRecord = build_image(spec, name, engine, store, profile=profile, push=True,
                                          no_cache=no_cache, on_line=on_line,
                                          pip_cert=pip_cert)
    except BuildFailed as exc:
        # the build's own attempt keeps the full log; the manifest says the image failed
        failed = CheckResult(name="build", status=Status.FAIL, detail=exc.one_line())
        return ImageEntry(
            image=name, engine=image.engine, profile=image.profile, reference=None, digest=None,
            image_id=None, base=str(image.base_pinned), base_digest=str(image.base_digest),
            mirror=str(image.mirror) if image.mirror else None,
            fix_layers=fix_layers(image.dockerfile.read_text()), checks=[failed],
            status=Status.FAIL, verdict=Status.FAIL, verify_key=key,
            evidence={"build_log": exc.where or ""})
    # push=True: the build always records the digest it pushed (the evidence key)
    assert record.digest is not None, f"{name}: the build recorded no pushed digest"
    with store.attempt(record.digest, "probe", image=str(record.reference),
                       image_id=str(record.image_id), probes=plan.probes,
                       probes_version=probes_version(probes)) as probe_attempt:
        checks, versions = run_probes(engine, record.local_tag, plan, attempt=probe_attempt,
                                      probes=probes)
        probe_attempt.write_json("versions.json", versions)
        probe_attempt.add_subject(record.image_id, Role.ALIAS)
        probe_attempt.write_result(ProbeResult(image=str(record.reference),
                                               probes=list(plan.probes), versions=versions))
        for check in checks:
            probe_attempt.add_check(check)
    if image_spec.mirror.get(image.profile) is not None:
        checks.append(_verify_copy_check(image, store))
    if rebuild:
        checks.append(rebuild_image(spec, name, store, profile=profile, expect=record.digest,
                                    pip_cert=pip_cert, docker=engine.binary,
                                    config_dir=engine.config_dir))
    verdict, accepted = judge(name, checks, accept)
    entry = ImageEntry(
        image=name, engine=image.engine, profile=image.profile,
        reference=str(record.reference) if record.reference else None,
        digest=str(record.digest) if record.digest else None, image_id=str(record.image_id),
        base=str(image.base_pinned), base_digest=str(image.base_digest),
        mirror=str(image.mirror) if image.mirror else None,
        fix_layers=fix_layers(image.dockerfile.read_text()), build_args=record.build_args,
        versions=versions, checks=checks, accepted=accepted, status=overall(checks),
        verdict=verdict, verify_key=key,
        evidence={"build": record.evidence, "probe": str(probe_attempt.path),
                  "local_tag": record.local_tag})
    for subject in (record.digest, cache_name(image.profile, name)):
        with store.attempt(subject, KIND, subjects=entry_subjects(entry), verify_key=key,
                           digest=entry.digest, image_id=entry.image_id, cached=False) as attempt:
            attempt.write_json("entry.json", entry)
            attempt.write_result(entry_result(entry))
            for check in checks:
                attempt.add_check(check)
            attempt.finish(verdict, summary=f"{name}: verdict {verdict.value}" +
                           (f" ({len(accepted)} accepted)" if accepted else ""))
    return entry


def entry_subjects(entry: ImageEntry) -> list[Subject]:
    """An image manifest entry is about the pushed image (and its image ID), built on a base."""
    found = []
    if entry.digest:
        found.append(Subject.of(entry.digest, Role.SUBJECT, entry.reference))
    if entry.image_id:
        found.append(Subject.of(entry.image_id, Role.ALIAS if found else Role.SUBJECT))
    found.append(Subject.of(entry.base_digest, Role.BASE, entry.base))
    return found


def entry_result(entry: ImageEntry) -> ImagesVerifyResult:
    return ImagesVerifyResult(
        image=entry.image, engine=entry.engine, profile=entry.profile,
        reference=entry.reference, digest=entry.digest, image_id=entry.image_id,
        base=entry.base, base_digest=entry.base_digest, fix_layers=list(entry.fix_layers),
        versions=dict(entry.versions), verdict=entry.verdict,
        accepted=[a.check for a in entry.accepted], cached=entry.cached,
        serve_args=serve_args_report(entry.checks))


def verify_images(spec: ImagesSpec, engine: Engine, store: EvidenceStore, *,
                  profile: str | None = None, names: list[str] | None = None,
                  no_cache: bool = False,
                  on_line: Callable[[str], None] | None = None,
                  pip_cert: Path | None = None, probes: Path | None = None,
                  rebuild: bool = False) -> ImagesVerifyReport:
    """`probes`: the probes' folder (default the packaged probes; the CLI passes
    $IMAGEKIT_PROBES_DIR). `rebuild`: each image is also rebuilt on a fresh builder and must
    give the digest verified (imagekit.build.rebuild; on by the profile's `reproducible`)."""
    started = time.monotonic()
    profile_name, _ = spec.profile(profile)
    engine.ping()
    entries = [verify_one(spec, name, engine, store, profile=profile_name, no_cache=no_cache,
                          on_line=on_line, pip_cert=pip_cert, probes=probes,
                          rebuild=rebuild)
               for name in (names or list(spec.images))]
    verdicts = [CheckResult(name=e.image, status=e.verdict) for e in entries]
    report = ImagesVerifyReport(profile=profile_name, spec=str(spec.root / "images.toml"),
                                images=entries, verdict=overall(verdicts),
                                seconds=time.monotonic() - started)
    with store.attempt(f"images-{profile_name}", "images-manifest",
                       digests=[e.digest for e in entries]) as attempt:
        attempt.write_json("manifest.json", report)
        attempt.write_result(ImagesManifestResult(
            profile=profile_name, verdict=report.verdict,
            images=[ManifestImage(image=e.image, digest=e.digest, reference=e.reference,
                                  verdict=e.verdict) for e in entries]))
        for entry in entries:
            attempt.add_check(CheckResult(name=entry.image, status=entry.verdict,
                                          detail=f"{entry.reference}"))
        attempt.finish(report.verdict, summary=f"{len(entries)} image(s), verdict "
                       f"{report.verdict.value}")
    return report.model_copy(update={"evidence": str(attempt.path)})
