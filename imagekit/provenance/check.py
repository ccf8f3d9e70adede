"""The provenance check: was the digest built from the lock's base and the checkout's Dockerfile?

Three checks, one line each, read by the gate (imagekit.report.collect: from the build's
recorded provenance) and by `imagekit verify-attestations` (from the signed statement):

- `subject`: the statement names the digest being judged (a statement moved to another image
  proves nothing about it);
- `base`: the image BuildKit resolved from the lock's base repository is the digest the lock
  pins for that image and profile; another digest FAILs naming both;
- `dockerfile`: the Dockerfile bytes BuildKit parsed (mode=max source infos) hash to the
  checkout's Dockerfile of that image; a provenance without source infos (mode=min) cannot
  show it: DEFERRED, with why.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from imagekit.errors import InvalidInput
from imagekit.oci.digest import Digest
from imagekit.provenance.slsa import (
    ImageDependency,
    ProvenanceStatement,
    ResourceDescriptor,
    SlsaProvenance,
    image_dependency,
    parse_statement,
)
from imagekit.results import CheckResult, Status
from imagekit.spec.models import ResolvedImage

SUBJECT, BASE, DOCKERFILE = "subject", "base", "dockerfile"


def _sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def check_subject(statement: ProvenanceStatement, digest: Digest, note: str = ""
                  ) -> CheckResult:
    """The statement names `digest`. `note`: how the subject was bound, when the caller set it
    (the build recorded BuildKit's subject-less statement for the digest it pushed)."""
    if statement.names(digest):
        return CheckResult(name=SUBJECT, status=Status.PASS,
                           detail=f"names {digest}" + (f" ({note})" if note else ""))
    named = [f"{algorithm}:{value}" for s in statement.subject
             for algorithm, value in s.digest.items()]
    return CheckResult(name=SUBJECT, status=Status.FAIL,
                       detail=f"the provenance is about {', '.join(named) or 'no digest'}, "
                              f"not {digest}"[:500])


def check_provenance(raw: bytes | dict, digest: Digest, image: ResolvedImage | str,
                     *, subject_note: str = "") -> list[CheckResult]:
    """The three checks of a provenance statement about `digest` against `image`: the spec's
    image of one profile, its base pinned by the lock — or, where it could not be resolved,
    why (base and Dockerfile are then DEFERRED with it). A statement that cannot be read is
    one FAIL line."""
    try:
        _, statement = parse_statement(raw)
    except InvalidInput as exc:
        return [CheckResult(name=SUBJECT, status=Status.FAIL, detail=exc.message[:500])]
    subject = check_subject(statement, digest, subject_note)
    if isinstance(image, str):
        return [subject, *(CheckResult(name=name, status=Status.DEFERRED, detail=image[:500])
                           for name in (BASE, DOCKERFILE))]
    return [subject, _base(statement.predicate.build_definition.resolved_dependencies, image),
            _dockerfile(statement.predicate, image)]


def _base(dependencies: list[ResourceDescriptor], image: ResolvedImage) -> CheckResult:
    lock = f"the lock pins {image.base_digest} for {image.name} ({image.profile})"
    images: list[ImageDependency] = []
    for dependency in dependencies:
        try:
            found = image_dependency(dependency)
        except InvalidInput as exc:
            return CheckResult(name=BASE, status=Status.FAIL, detail=exc.message[:500])
        if found is not None:
            images.append(found)
    wanted = (image.base_tag.registry, image.base_tag.repository)
    bases = [d for d in images if (d.registry, d.repository) == wanted]
    others = [d for d in images if d not in bases]
    also = f"; also resolved {', '.join(d.pinned for d in others)}" if others else ""
    if not bases:
        names = ", ".join(d.pinned for d in images) or "no image"
        return CheckResult(name=BASE, status=Status.FAIL,
                           detail=f"built from {names}, not from the lock's base "
                                  f"{image.base_tag.registry}/{image.base_tag.repository}: "
                                  f"{lock}"[:500],
                           data={"lock": str(image.base_digest),
                                 "provenance": [str(d.digest) for d in images]})
    wrong = [d for d in bases if d.digest != image.base_digest]
    if wrong:
        return CheckResult(name=BASE, status=Status.FAIL,
                           detail=f"built from base {wrong[0].digest}, but {lock} "
                                  f"({wrong[0].registry}/{wrong[0].repository}){also}"[:500],
                           data={"lock": str(image.base_digest),
                                 "provenance": str(wrong[0].digest)})
    return CheckResult(name=BASE, status=Status.PASS,
                       detail=f"built from {bases[0].pinned} = the lock's base for "
                              f"{image.name} ({image.profile}){also}"[:500],
                       data={"lock": str(image.base_digest)})


def _dockerfile(predicate: SlsaProvenance, image: ResolvedImage) -> CheckResult:
    infos = predicate.source_infos
    path = predicate.config_path
    if infos is None:
        return CheckResult(name=DOCKERFILE, status=Status.DEFERRED,
                           detail="the provenance records no source files (BuildKit's "
                                  "mode=min): the Dockerfile it built cannot be compared "
                                  f"with {image.dockerfile}")
    info = next((i for i in infos if i.filename == path), None)
    if info is None:
        return CheckResult(name=DOCKERFILE, status=Status.DEFERRED,
                           detail=f"the provenance records no source file named {path!r} "
                                  f"(it records {', '.join(i.filename for i in infos)}): "
                                  f"cannot be compared with {image.dockerfile}"[:500])
    try:
        built = _sha256(info.content())
        checkout = _sha256(Path(image.dockerfile).read_bytes())
    except InvalidInput as exc:
        return CheckResult(name=DOCKERFILE, status=Status.FAIL, detail=exc.message)
    except OSError as exc:
        return CheckResult(name=DOCKERFILE, status=Status.DEFERRED,
                           detail=f"cannot read {image.dockerfile}: {exc.strerror or exc}")
    if built != checkout:
        return CheckResult(name=DOCKERFILE, status=Status.FAIL,
                           detail=f"the Dockerfile BuildKit built ({built}) differs from "
                                  f"{image.dockerfile} ({checkout})",
                           data={"built": built, "checkout": checkout})
    return CheckResult(name=DOCKERFILE, status=Status.PASS,
                       detail=f"{image.dockerfile} ({checkout}) is the Dockerfile BuildKit "
                              "built", data={"built": built, "checkout": checkout})


def judge_provenance(raw: bytes | dict, digest: Digest, *, image: str | None,
                     profile: str | None, spec_path: Path | None = None,
                     subject_note: str = "") -> list[CheckResult]:
    """check_provenance against the images spec (`spec_path`, else the default one) and its
    lock for `image` in `profile` (the spec's default profile when None). A spec, lock or image
    that cannot be resolved leaves base and Dockerfile DEFERRED, with why."""
    return check_provenance(raw, digest, resolve(image, profile, spec_path),
                            subject_note=subject_note)


def resolve(image: str | None, profile: str | None, spec_path: Path | None = None
            ) -> ResolvedImage | str:
    """The spec's `image` of `profile`, its base pinned by the lock; or why it cannot be."""
    from imagekit.errors import SpecError
    from imagekit.spec import default_spec_path, load_spec, resolve_image

    if not image:
        return "the evidence names no image of the spec: base and Dockerfile cannot be checked"
    try:
        return resolve_image(load_spec(default_spec_path(spec_path)), image, profile)
    except SpecError as exc:
        return f"cannot resolve image {image!r} in the images spec and its lock: " \
               f"{exc.one_line()}"


def resolve_served(repository: str, image: str | None, profile: str | None,
                   spec_path: Path | None = None) -> ResolvedImage | str:
    """The spec image a served repository is (`--image`, else the one image of the spec whose
    `repository` is the served one: promotion keeps the repository path), in `profile`; or
    why it cannot be told."""
    from imagekit.errors import SpecError
    from imagekit.spec import default_spec_path, load_spec

    if image is None:
        try:
            spec = load_spec(default_spec_path(spec_path))
        except SpecError as exc:
            return f"cannot read the images spec: {exc.one_line()}"
        named = [name for name, entry in spec.images.items() if entry.repository == repository]
        if len(named) != 1:
            return (f"{len(named)} images of the spec have repository {repository!r}"
                    + (f" ({', '.join(named)})" if named else "")
                    + ": give --image NAME to check the provenance against its lock")
        image = named[0]
    return resolve(image, profile, spec_path)
