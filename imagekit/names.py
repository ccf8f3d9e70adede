"""One answer to "which image did the person mean?" for every command that takes an image.

A spec image NAME (`sglang`: no '/', ':' or '@') means the profile's latest verified build of
that image — its staging repository pinned by the digest the registry answered for the push
(`imagekit.build.latest_build`: the newest PASS build, i.e. built, pushed and read back).
Anything else is a REF (`registry/repo[:tag][@digest]`). A NAME is never handed to the
reference parser: `sglang` would otherwise become `docker.io/library/sglang`, and a command
would spend minutes retrying a host it cannot resolve.

A REF whose repository is a spec image's repository carries that image's spec entry, so probes
of a candidate pushed by hand apply the image's probes and find_spec list — the record's
section 2 lesson (uninstalling nixl passes pip check and fails find_spec) must not depend on
whether the candidate was named or referenced.

Used by `probe`, `cluster probe`, `promote`; `digest_of` is the one tag -> digest answer of
every command that pins a REF at its registry (`cluster gpu-preflight`, `cluster accept`, the
report's resolver, the trusted-name resolver).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from imagekit.errors import InvalidInput, SpecError
from imagekit.evidence import EvidenceStore
from imagekit.oci import Digest, ImageReference

if TYPE_CHECKING:
    from imagekit.registry import RegistryClient
    from imagekit.spec import ImageSpec, ImagesSpec


def digest_of(client: RegistryClient, reference: ImageReference) -> Digest:
    """The digest `reference` names: its own pin, else what `client` (a RegistryClient for
    `reference.registry`) answers for its tag, `latest` when it has none. A HEAD (a GET only
    when the registry sends no digest header): not a pull, and the same answer `docker pull`
    and the kubelet get for that tag."""
    if reference.digest is not None:
        return reference.digest
    return client.resolve_tag(reference.repository, reference.tag or "latest")


def looks_like_name(text: str) -> bool:
    """A spec image name: no registry, repository separator, tag or digest."""
    text = text.strip()
    return bool(text) and not any(ch in text for ch in "/:@") and \
        not text.startswith(("sha256:", "sha512:"))


@dataclass(frozen=True)
class Target:
    """What a person's NAME or REF stands for."""

    given: str
    #: pullable reference: for a NAME the staging repository pinned by digest
    reference: ImageReference
    #: the spec image's name (given as NAME, or the REF's repository is that image's)
    name: str | None = None
    image: ImageSpec | None = None
    spec: ImagesSpec | None = None
    digest: Digest | None = None
    #: for a NAME: the docker daemon's local tag of that build (probes run it without a pull)
    local_tag: str | None = None
    profile: str | None = None
    #: how a NAME was resolved from the registry (signed statements), when it was
    note: str = ""

    @property
    def by_name(self) -> bool:
        return self.name is not None and self.given.strip() == self.name


def _load_spec(spec, spec_path: Path | None, required: bool):  # noqa: ANN001, ANN202
    if spec is not None:
        return spec
    from imagekit.spec import default_spec_path, load_spec

    path = Path(spec_path) if spec_path is not None else default_spec_path()
    if not path.is_file():
        if required:
            raise SpecError("an image NAME needs the images spec, which was not found "
                            "(give --spec, or a full reference registry/repository:tag)",
                            where=str(path))
        return None
    return load_spec(path)


def spec_image_for(reference: ImageReference, spec: ImagesSpec | None
                   ) -> tuple[str, ImageSpec] | None:
    """(name, ImageSpec) of the spec image whose repository `reference` names (the repository
    itself or any registry path ending in it: `…/imagekit/sglang`)."""
    if spec is None:
        return None
    for name, image in spec.images.items():
        if reference.repository == image.repository or \
                reference.repository.endswith("/" + image.repository):
            return name, image
    return None


def resolve_target(text: str, *, spec=None, spec_path: Path | None = None,  # noqa: ANN001
                   store: EvidenceStore | None = None, profile: str | None = None,
                   remote=None) -> Target:  # noqa: ANN001
    """NAME or REF -> Target. A NAME unknown to the spec, or without a build yet, is bad input
    (exit 2) that says what to do; it is never looked up as `docker.io/library/NAME`.

    `remote(reference) -> (digest, note)`: where this store has no build of the NAME, the tag
    the profile's build pushes to staging (`<staging>/<repository>:<build key[:16]>`, the
    same for this spec and lock on any machine) is resolved at the registry and verified by
    the statements trusted keys signed about it (the CLI hands imagekit.cli.trustopts'
    resolver in: verification sits above this layer)."""
    given = text
    text = text.strip()
    if not text:
        raise InvalidInput("give an image NAME of the spec or a reference")
    if looks_like_name(text):
        spec = _load_spec(spec, spec_path, required=True)
        if text not in spec.images:
            raise InvalidInput(
                f"{text!r} is not an image of the spec (images: {', '.join(spec.images)}); a "
                "reference needs a registry and repository, e.g. 127.0.0.1:5001/imagekit/"
                f"{text}:TAG", where=str(spec.root / "images.toml"))
        from imagekit.build import build_key, latest_build
        from imagekit.spec import resolve_image

        profile_name, _ = spec.profile(profile)
        # the build of what THIS spec and its lock say (base digest, context, build args), not
        # whatever was built last under that name
        wanted = build_key(resolve_image(spec, text, profile_name))
        record = latest_build(text, profile_name, store or EvidenceStore(), cache_key=wanted)
        if (record is None or record.reference is None or record.digest is None) and \
                remote is not None:
            staging = spec.profile(profile_name)[1].staging
            tag = ImageReference.parse(f"{staging}/{spec.images[text].repository}:"
                                       f"{wanted[:16]}")
            digest, note = remote(tag)
            return Target(given=given, reference=tag.with_digest(digest), name=text,
                          image=spec.images[text], spec=spec, digest=digest, local_tag=None,
                          profile=profile_name, note=note)
        if record is None or record.reference is None or record.digest is None:
            raise InvalidInput(f"image {text!r} has no verified (built and pushed) build of this "
                               f"spec and lock in profile {profile_name!r} yet; run `imagekit "
                               f"build {text} --spec {spec.root / 'images.toml'}` or "
                               "`imagekit images verify`",
                               where=str((store or EvidenceStore()).root))
        reference = record.reference
        if reference.digest is None:
            reference = reference.with_digest(record.digest)
        return Target(given=given, reference=reference, name=text, image=spec.images[text],
                      spec=spec, digest=record.digest, local_tag=record.local_tag,
                      profile=profile_name)
    reference = ImageReference.parse(text)
    spec = _load_spec(spec, spec_path, required=False)
    found = spec_image_for(reference, spec)
    return Target(given=given, reference=reference, name=found[0] if found else None,
                  image=found[1] if found else None, spec=spec if found else None,
                  digest=reference.digest, profile=profile)
