"""Find and load the images spec; turn an image of a profile into a `ResolvedImage` (base pinned
by the lock). Every failure is a `SpecError` (exit 2, one line) naming the file."""

from __future__ import annotations

import tomllib
from pathlib import Path

from pydantic import ValidationError

from imagekit import packaged
from imagekit.errors import InvalidInput, SpecError
from imagekit.inputs import inside, read_text
from imagekit.spec.lock import load_lock
from imagekit.spec.models import ImagesSpec, ResolvedImage


def default_spec_path(given: Path | str | None = None) -> Path:
    """`given` (the CLI passes `--spec`, else $IMAGEKIT_IMAGES_SPEC from imagekit.settings),
    else ./images.toml (what `imagekit init` writes), else ./dockerfiles/images.toml (a
    checkout), else the packaged one (dockerfiles/images.toml, shipped in the wheel). Nothing
    here reads the environment."""
    if given:
        return Path(given).absolute()
    for here in (Path.cwd() / "images.toml", Path.cwd() / "dockerfiles" / "images.toml"):
        if here.exists():
            return here.absolute()
    return packaged.path("dockerfiles", "images.toml")


def load_spec(path: Path | str | None = None) -> ImagesSpec:
    path = Path(path).absolute() if path is not None else default_spec_path()
    if not path.is_file():
        raise SpecError("images spec not found", where=str(path))
    try:
        text = read_text(path, "images spec")
    except InvalidInput as exc:
        raise SpecError(exc.message, where=exc.where) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"images spec is not valid TOML: {exc}", where=str(path)) from None
    if "root" in data:
        raise SpecError("'root' is not a spec key", where=str(path))
    try:
        spec = ImagesSpec.model_validate({**data, "root": path.parent})
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first["loc"])
        msg = first["msg"].removeprefix("Value error, ")
        raise SpecError(f"bad images spec: {loc}: {msg}" if loc else f"bad images spec: {msg}",
                        where=str(path)) from None
    for name in spec.images:
        try:  # refused before anything reads it: a spec cannot point a build at /etc/passwd
            inside(spec.root, spec.images[name].dockerfile, f"image {name!r}: dockerfile",
                   str(path))
        except InvalidInput as exc:
            raise SpecError(exc.message, where=exc.where) from None
        dockerfile = spec.dockerfile_path(name)
        if not dockerfile.is_file():
            raise SpecError(f"image {name!r}: Dockerfile {spec.images[name].dockerfile!r} "
                            "does not exist", where=str(path))
    for name, prof in spec.profiles.items():
        try:
            inside(spec.root, prof.lock, f"profile {name!r}: lock", str(path))
        except InvalidInput as exc:
            raise SpecError(exc.message, where=exc.where) from None
    return spec


def resolve_image(spec: ImagesSpec, name: str, profile: str | None = None) -> ResolvedImage:
    """The image with its base digest from the profile's lock; no lock entry → SpecError."""
    profile_name, prof = spec.profile(profile)
    image = spec.image(name)
    lock_path = spec.lock_path(profile_name)
    lock = load_lock(lock_path, profile_name)
    base_tag = image.base[profile_name]
    entry = lock.bases.get(name)
    if entry is None or not entry.stands_for(base_tag):
        hint = "run `imagekit pin --profile " + profile_name + "`"
        if prof.standins:
            hint = "run `imagekit standins build` (it pushes and pins the stand-ins)"
        raise SpecError(f"base {base_tag} of image {name!r} has no digest in the lock; {hint}",
                        where=str(lock_path))
    if entry.placeholder:
        raise SpecError(f"the lock's digest for {base_tag} is a placeholder; run `imagekit pin "
                        f"--profile {profile_name}` where that registry is reachable",
                        where=str(lock_path))
    base_tag = entry.tag                     # a padded stand-in: the tag it was pushed under
    mirror = image.mirror.get(profile_name)
    mirror_entry = lock.mirrors.get(name) if mirror is not None else None
    mirror_digest = None
    if mirror is not None and mirror_entry is not None and mirror_entry.stands_for(mirror):
        mirror, mirror_digest = mirror_entry.tag, mirror_entry.digest
    dockerfile = spec.dockerfile_path(name)
    return ResolvedImage(
        name=name, profile=profile_name, engine=image.engine, dockerfile=dockerfile,
        context=dockerfile.parent, repository=image.repository, base_tag=base_tag,
        base_digest=entry.digest, base_resolved=entry.resolved, mirror=mirror,
        mirror_digest=mirror_digest,
        build_args=dict(image.build_args.get(profile_name, {})),
        pip_index_url=prof.pip_index_url, staging=prof.staging, probes=list(image.probes),
        find_spec=list(image.find_spec), serve=image.serve_for(profile_name))
