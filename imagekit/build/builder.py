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
import fcntl
import hashlib
import json
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from imagekit.build.epoch import SourceDateEpoch, source_date_epoch
from imagekit.build.layout import platform_image
from imagekit.build.publish import load_layout, push_layout
from imagekit.build.records import BuildRecord
from imagekit.engine import BuildOutcome, Engine
from imagekit.errors import CheckFailed, NotFound
from imagekit.evidence import EvidenceStore, Role, Subject
from imagekit.evidence.kinds import BuildResult
from imagekit.infra import build_engine
from imagekit.infra.build_engine import BuildEngineInstance
from imagekit.infra.state import StatePaths, registry_trust
from imagekit.oci import ImageReference
from imagekit.progress import current as current_progress
from imagekit.provenance import PROVENANCE_FILE
from imagekit.provenance.layout import read_buildkit_provenance
from imagekit.registry import RegistryClient, RegistryOptions
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


def build_on(instance: BuildEngineInstance, engine: Engine, image: ResolvedImage,
             context: Path, epoch: SourceDateEpoch, layout: Path, *,
             dockerfile: Path | None = None, tags: list[str] | None = None,
             no_cache: bool = False, on_line: Callable[[str], None] | None = None,
             pip_cert: Path | None = None, label: str | None = None) -> BuildOutcome:
    """The one way an image is built, for `images verify` and for its rebuilds: on a build
    engine instance (with `engine`'s client and credentials), into an OCI layout, from the
    lock's base with the image's build args and SOURCE_DATE_EPOCH, pip's CA as a secret."""
    build_with = Engine(binary=engine.binary, config_dir=engine.config_dir, host=instance.host)
    return build_with.build(context, dockerfile=dockerfile or image.dockerfile, tags=tags or [],
                            build_args={**build_args_for(image),
                                        "SOURCE_DATE_EPOCH": str(epoch.value)},
                            secrets={"pip_cert": ca_bundle(pip_cert)}, no_cache=no_cache,
                            on_line=on_line, layout=layout, label=label)


def build_key(image: ResolvedImage, context: Path | None = None,
              epoch: SourceDateEpoch | None = None) -> str:
    """sha256 of what decides the image's content: base digest, context files, build args,
    SOURCE_DATE_EPOCH (`epoch`: the context's, when the caller has it already)."""
    context = context or image.context
    epoch = epoch or source_date_epoch(context, image.base_resolved)
    material = json.dumps({
        "base": str(image.base_digest), "context": tree_hash(context),
        "dockerfile": image.dockerfile.name, "args": build_args_for(image),
        "epoch": epoch.value, "recipe": 2,
    }, sort_keys=True)
    return hashlib.sha256(material.encode()).hexdigest()


def build_image(spec: ImagesSpec, name: str, engine: Engine, store: EvidenceStore, *,
                profile: str | None = None, push: bool = True, no_cache: bool = False,
                dockerfile: Path | None = None, variant: str | None = None,
                on_line: Callable[[str], None] | None = None,
                pip_cert: Path | None = None,
                builder: BuildEngineInstance | None = None,
                registry: RegistryOptions | None = None) -> BuildRecord:
    """Build (and push) one image. `dockerfile`+`variant` build an alternative Dockerfile on
    the same locked base (tests use it for the record's wrong fix); its records are kept apart.

    The build runs on the build engine (`builder`, default infra's `main` instance:
    imagekit.infra.build_engine) into an OCI layout, reproducibly (SOURCE_DATE_EPOCH, file
    times rewritten, BuildKit's provenance beside it); the layout is then loaded into `engine`
    (where the probes run it) and pushed by the registry client (`registry`: its options,
    default infra's trust for its own registries), so the digest pushed is the one built."""
    image = resolve_image(spec, name, profile)
    context = dockerfile.parent if dockerfile is not None else image.context
    label = name if variant is None else f"{name}-{variant}"
    epoch = source_date_epoch(context, image.base_resolved)
    key = build_key(image, context, epoch)
    args = build_args_for(image)
    local_tag = f"imagekit-local/{label}:{key[:16]}"
    engine.ping()
    paths = StatePaths()
    instance = builder or build_engine.start(paths)
    base = Subject.of(image.base_digest, Role.BASE, str(image.base_pinned))
    with store.attempt(evidence_name(label), KIND, subjects=[base], profile=image.profile,
                       cache_key=key, base=str(image.base_pinned), build_args=args,
                       source_date_epoch=epoch.value) as attempt, \
            layout_folder(paths) as layout:
        outcome = build_on(instance, engine, image, context, epoch, layout,
                           dockerfile=dockerfile, tags=[local_tag], no_cache=no_cache,
                           on_line=on_line, pip_cert=pip_cert)
        attempt.write_text("build.log", outcome.log)
        attempt.write_json("build-outcome.json", {
            "ok": outcome.ok, "returncode": outcome.returncode, "seconds": outcome.seconds,
            "builder": instance.describe(),
            "source_date_epoch": epoch.model_dump()})
        if not outcome.ok:
            attempt.write_result(_result(image, label, key, None))
            attempt.finish(Status.FAIL, summary=f"build of {label} failed "
                           f"(exit {outcome.returncode})", checks=[CheckResult(
                               name="build", status=Status.FAIL,
                               detail=_failure_line(outcome.log, outcome.returncode))])
            raise BuildFailed(f"build of {label} failed: "
                              f"{_failure_line(outcome.log, outcome.returncode)}",
                              where=str(attempt.path / "build.log"))
        built = platform_image(layout)
        try:
            statement: bytes | None = read_buildkit_provenance(layout, built.digest)
        except NotFound:  # an engine without attestations: the build records none
            statement = None
        if statement is not None:
            attempt.write_bytes(PROVENANCE_FILE, statement)
        held = engine.inspect(str(image.base_pinned)).diff_ids \
            if engine.exists(str(image.base_pinned)) else []
        image_id = load_layout(engine, built, local_tag, [str(d) for d in held])
        reference = digest = None
        if push:
            target = ImageReference.parse(f"{image.staging_repository}:{key[:16]}")
            if variant is not None:
                target = ImageReference.parse(f"{image.staging_repository}-{variant}:"
                                              f"{key[:16]}")
            options = registry or RegistryOptions(**registry_trust(target.registry))
            same_registry = image.base_tag.registry == target.registry
            with current_progress().phase("push", str(target)), \
                    RegistryClient(target.registry, options) as client:
                digest = push_layout(client, target.repository, str(target.tag), built,
                                     mount_from=image.base_tag.repository if same_registry
                                     else None)
            reference = target.with_digest(digest)
            engine.pull(reference)  # the engine now knows the image by its registry digest
        record = BuildRecord(
            name=label, profile=image.profile, engine=image.engine, base=image.base_pinned,
            cache_key=key, local_tag=local_tag, image_id=image_id,
            reference=reference, digest=digest, build_args=args, seconds=outcome.seconds,
            cached=_all_cached(outcome.log), built=dt.datetime.now(dt.UTC),
            evidence=str(attempt.path), source_date_epoch=epoch.value,
            epoch_origin=epoch.origin, builder_version=instance.version,
            builder_packages=dict(instance.packages),
            provenance=PROVENANCE_FILE if statement is not None else None)
        attempt.write_json("build.json", record)
        if record.digest is not None:
            attempt.add_subject(record.digest, Role.SUBJECT, str(record.reference))
        attempt.add_subject(record.image_id, Role.ALIAS if record.digest else Role.SUBJECT)
        attempt.write_result(_result(image, label, key, record))
        attempt.add_check(CheckResult(name="build", status=Status.PASS,
                                      detail=f"{local_tag} {image_id.short}" +
                                      (f" pushed {reference}" if reference else "")))
    if digest is not None:
        with store.attempt(digest, KIND, subjects=[
                Subject.of(digest, Role.SUBJECT, str(reference)),
                Subject.of(record.image_id, Role.ALIAS), base],
                name=label, profile=image.profile) as by_digest:
            by_digest.write_text("build.log", outcome.log)
            by_digest.write_json("build.json", record)
            if statement is not None:
                by_digest.write_bytes(PROVENANCE_FILE, statement)
            by_digest.write_result(_result(image, label, key, record))
            by_digest.add_check(CheckResult(name="build", status=Status.PASS,
                                            detail=f"{reference}"))
    return record


@contextmanager
def layout_folder(paths: StatePaths) -> Iterator[Path]:
    """A scratch folder for one build's OCI layout (the whole image: gigabytes), removed after
    the layout was loaded and pushed. Under the state dir: /tmp may be a small tmpfs."""
    root = paths.root / "build-engine" / "layouts"
    root.mkdir(parents=True, exist_ok=True)
    for left in root.glob("layout-*"):  # a killed build's: no process holds its lock
        try:
            with (left / ".lock").open("a") as held:
                fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            continue  # a build in progress (or not ours to remove)
        shutil.rmtree(left, ignore_errors=True)
    folder = Path(tempfile.mkdtemp(prefix="layout-", dir=root))
    try:
        with (folder / ".lock").open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield folder / "image"
    finally:
        shutil.rmtree(folder, ignore_errors=True)


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
        seconds=record.seconds if record else None, cached=record.cached if record else False,
        source_date_epoch=record.source_date_epoch if record else None,
        epoch_origin=record.epoch_origin if record else None,
        builder=build_engine.describe(record.builder_version, record.builder_packages)
        if record and record.builder_version else None,
        provenance=record.provenance if record else None)


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
