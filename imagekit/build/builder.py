"""`imagekit build IMAGE|--all`: build a fixed image from its locked base, push it to staging.

- The base is the lock's digest (`resolve_image`), passed as BASE_IMAGE; a tag never floats.
- pip inside the build reaches the index with the machine's CA bundle as the BuildKit secret
  `pip_cert` (a file path in argv; its content never enters argv, layers or history).
- Every attempt, failed ones included, is a new evidence attempt with the full build log
  (`name:image-<name>`, kind `build`); a successful, pushed build is also recorded under its
  registry digest. Nothing is overwritten: a rebuild is another attempt.
- The cache key covers the base digest, the Dockerfile's directory and the build args; the
  BuildKit cache makes an unchanged rebuild take seconds.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Callable
from pathlib import Path

from imagekit.build.records import BuildRecord
from imagekit.engine import Engine
from imagekit.errors import CheckFailed
from imagekit.evidence import EvidenceStore, Role, Subject
from imagekit.evidence.kinds import BuildResult
from imagekit.oci import ImageReference
from imagekit.results import CheckResult, Status
from imagekit.spec import ImagesSpec, ResolvedImage, resolve_image
from imagekit.standins.build import ca_bundle, tree_hash

KIND = "build"


class BuildFailed(CheckFailed):
    """The engine built and a step failed (e.g. `pip check` in the fix layer): exit 1."""


def evidence_name(name: str) -> str:
    return f"image-{name}"


def build_args_for(image: ResolvedImage) -> dict[str, str]:
    index = {"PIP_INDEX_URL": image.pip_index_url} if image.pip_index_url else {}
    return {"BASE_IMAGE": str(image.base_pinned), **index, **image.build_args}


def build_key(image: ResolvedImage, context: Path | None = None) -> str:
    """sha256 of what decides the image's content: base digest, context files, build args."""
    material = json.dumps({
        "base": str(image.base_digest), "context": tree_hash(context or image.context),
        "dockerfile": image.dockerfile.name, "args": build_args_for(image), "recipe": 1,
    }, sort_keys=True)
    return hashlib.sha256(material.encode()).hexdigest()


def build_image(spec: ImagesSpec, name: str, engine: Engine, store: EvidenceStore, *,
                profile: str | None = None, push: bool = True, no_cache: bool = False,
                dockerfile: Path | None = None, variant: str | None = None,
                on_line: Callable[[str], None] | None = None,
                pip_cert: Path | None = None) -> BuildRecord:
    """Build (and push) one image. `dockerfile`+`variant` build an alternative Dockerfile on
    the same locked base (tests use it for the record's wrong fix); its records are kept apart."""
    image = resolve_image(spec, name, profile)
    context = dockerfile.parent if dockerfile is not None else image.context
    label = name if variant is None else f"{name}-{variant}"
    key = build_key(image, context)
    args = build_args_for(image)
    local_tag = f"imagekit-local/{label}:{key[:16]}"
    engine.ping()
    base = Subject.of(image.base_digest, Role.BASE, str(image.base_pinned))
    with store.attempt(evidence_name(label), KIND, subjects=[base], profile=image.profile,
                       cache_key=key, base=str(image.base_pinned), build_args=args) as attempt:
        outcome = engine.build(context, dockerfile=dockerfile or image.dockerfile,
                               tags=[local_tag], build_args=args,
                               secrets={"pip_cert": ca_bundle(pip_cert)}, no_cache=no_cache,
                               on_line=on_line)
        attempt.write_text("build.log", outcome.log)
        attempt.write_json("build-outcome.json", {
            "ok": outcome.ok, "returncode": outcome.returncode, "seconds": outcome.seconds,
            "image_id": str(outcome.image_id) if outcome.image_id else None})
        if not outcome.ok:
            attempt.write_result(_result(image, label, key, None))
            attempt.finish(Status.FAIL, summary=f"build of {label} failed "
                           f"(exit {outcome.returncode})", checks=[CheckResult(
                               name="build", status=Status.FAIL,
                               detail=_failure_line(outcome.log, outcome.returncode))])
            raise BuildFailed(f"build of {label} failed: "
                              f"{_failure_line(outcome.log, outcome.returncode)}",
                              where=str(attempt.path / "build.log"))
        assert outcome.image_id is not None
        reference = digest = None
        if push:
            target = ImageReference.parse(f"{image.staging_repository}:{key[:16]}")
            if variant is not None:
                target = ImageReference.parse(f"{image.staging_repository}-{variant}:"
                                              f"{key[:16]}")
            engine.tag(local_tag, str(target))
            digest = engine.push(target)
            reference = target.with_digest(digest)
        record = BuildRecord(
            name=label, profile=image.profile, engine=image.engine, base=image.base_pinned,
            cache_key=key, local_tag=local_tag, image_id=outcome.image_id,
            reference=reference, digest=digest, build_args=args, seconds=outcome.seconds,
            cached=_all_cached(outcome.log), built=dt.datetime.now(dt.UTC),
            evidence=str(attempt.path))
        attempt.write_json("build.json", record)
        if record.digest is not None:
            attempt.add_subject(record.digest, Role.SUBJECT, str(record.reference))
        attempt.add_subject(record.image_id, Role.ALIAS if record.digest else Role.SUBJECT)
        attempt.write_result(_result(image, label, key, record))
        attempt.add_check(CheckResult(name="build", status=Status.PASS,
                                      detail=f"{local_tag} {outcome.image_id.short}" +
                                      (f" pushed {reference}" if reference else "")))
    if digest is not None:
        with store.attempt(digest, KIND, subjects=[
                Subject.of(digest, Role.SUBJECT, str(reference)),
                Subject.of(record.image_id, Role.ALIAS), base],
                name=label, profile=image.profile) as by_digest:
            by_digest.write_text("build.log", outcome.log)
            by_digest.write_json("build.json", record)
            by_digest.write_result(_result(image, label, key, record))
            by_digest.add_check(CheckResult(name="build", status=Status.PASS,
                                            detail=f"{reference}"))
    return record


def _result(image: ResolvedImage, label: str, key: str, record: BuildRecord | None
            ) -> BuildResult:
    """The build's evidence result (docs/design/evidence.md): what was built on which base, and
    where it was pushed; a failed build names no image."""
    return BuildResult(
        name=label, profile=image.profile, engine=image.engine, base=str(image.base_pinned),
        base_digest=str(image.base_digest), cache_key=key,
        image_id=str(record.image_id) if record else None,
        digest=str(record.digest) if record and record.digest else None,
        reference=str(record.reference) if record and record.reference else None,
        local_tag=record.local_tag if record else None,
        seconds=record.seconds if record else None, cached=record.cached if record else False)


def _all_cached(log: str) -> bool:
    steps = [line for line in log.splitlines() if line.startswith("#") and " RUN " in line]
    return bool(steps) and all("CACHED" in log.split(step, 1)[1][:400] for step in steps)


def _failure_line(log: str, returncode: int) -> str:
    for line in reversed(log.splitlines()):
        if "ERROR" in line or "error:" in line.lower():
            return " ".join(line.split())[:300]
    return f"exit code {returncode}"


def latest_build(name: str, profile: str | None = None,
                 store: EvidenceStore | None = None, *,
                 cache_key: str | None = None) -> BuildRecord | None:
    """The newest successful build of `name` (optionally of one profile), from evidence.

    For other operations (e.g. a cluster probe Pod) that need the fixed image: `.reference` is
    the staging repository pinned by digest, `.digest` the manifest digest, `.image_id` the
    config digest. None when nothing was built yet. With `cache_key` (build_key of a resolved
    image): only a build of exactly those inputs — what a given spec and its lock say."""
    store = store or EvidenceStore()
    for record in reversed(store.attempts(evidence_name(name), KIND)):
        if record.status is not Status.PASS:
            continue
        path = store.path_of(record) / "build.json"
        if not path.is_file():
            continue
        build = BuildRecord.model_validate_json(path.read_text())
        if (profile is None or build.profile == profile) and \
                (cache_key is None or build.cache_key == cache_key):
            return build
    return None


def ensure_build(name: str, profile: str | None = None, *, store: EvidenceStore | None = None,
                 engine: Engine | None = None, spec: ImagesSpec | None = None,
                 cache_dir: Path | None = None, pip_cert: Path | None = None,
                 wheel: Path | None = None, mirror: str | None = None) -> BuildRecord:
    """A pushed build of `name` whose base is the lock's current one: the latest if it is still
    current and still in the daemon, else a new build (on a stand-in profile the stand-ins are
    made first when the lock lacks them). For operations and tests that need the fixed image."""
    from imagekit.errors import SpecError
    from imagekit.spec import load_spec

    spec = spec or load_spec()
    store = store or EvidenceStore()
    if engine is None:
        from imagekit.build.engine_choice import default_engine

        engine = default_engine()
    profile_name, prof = spec.profile(profile)
    try:
        image = resolve_image(spec, name, profile_name)
    except SpecError:
        if not prof.standins:
            raise
        from imagekit.standins import build_standins

        build_standins(spec, engine, store, profile_name, cache_dir=cache_dir,
                       pip_cert=pip_cert, wheel=wheel, mirror=mirror)
        image = resolve_image(spec, name, profile_name)
    found = latest_build(name, profile_name, store)
    if found is not None and found.digest is not None and found.cache_key == build_key(image) \
            and engine.exists(found.local_tag):
        return found
    return build_image(spec, name, engine, store, profile=profile_name, push=True,
                       pip_cert=pip_cert)
