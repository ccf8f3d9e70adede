"""`imagekit standins build`: the two local bases that reproduce the record's broken states.

1. the bookworm+python3 rootfs image (debootstrap + docker import, cached: `rootfs.py`);
2. `dockerfiles/standins/<name>/Dockerfile` on top of it, built with the CA bundle as the
   BuildKit secret `pip_cert` and the machine's torch CPU wheel hard-linked into a scratch build
   context (bound into one RUN, never copied into a layer);
3. pushed to the staging registry under the spec's `local` base tag by skopeo (twice as fast as
   `docker push` here: `imagekit.engine.skopeo`), copied as it is to its mirror tag, and the
   registry digests written into the local profile's lock, since builds use only the lock.

Each stand-in is tagged locally by a key of everything that goes into it, so an unchanged second
run skips the build, and its push sends nothing when the tag already names that image.
"""

from __future__ import annotations

import datetime as dt
import glob
import hashlib
import os
import shutil
import tempfile
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from imagekit.engine import Engine, skopeo
from imagekit.errors import CheckFailed, InfraError, SpecError
from imagekit.evidence import EvidenceStore, Role
from imagekit.evidence.kinds import StandinBuildResult, StandinRootfsResult
from imagekit.infra.peers import ensure_peer
from imagekit.oci import Digest, ImageReference
from imagekit.results import CheckResult, Status
from imagekit.spec import ImagesSpec, LockEntry, LockFile, load_lock, write_lock
from imagekit.spec.models import STANDINS_FOLDER
from imagekit.standins.rootfs import ensure_rootfs_image, rootfs_key

STANDINS_DIR_NAME = STANDINS_FOLDER
#: image of the spec → stand-in directory under dockerfiles/standins/
STANDIN_FOR = {"sglang": "sglang-base", "vllm": "vllm-base"}
TORCH_WHEEL_ENV = "IMAGEKIT_TORCH_WHEEL"
TORCH_PATTERN = "torch-2.13.0*-cp311-cp311-*x86_64.whl"


def ca_bundle(pip_cert: Path | None = None) -> Path:
    """The machine's CA bundle (package registries sit behind an intercepting CA here):
    `pip_cert` (the CLI passes IMAGEKIT_PIP_CERT), else $PIP_CERT, else the system bundle."""
    for candidate in (pip_cert, os.environ.get("PIP_CERT"),
                      "/etc/ssl/certs/ca-certificates.crt"):
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    raise InfraError("no CA bundle found for pip inside builds (set IMAGEKIT_PIP_CERT)")


def torch_wheel(given: Path | None = None) -> Path:
    """The local torch CPU wheel (cp311, as bookworm's python3); never downloaded: without it
    pip would fetch a multi-GB CUDA build. `given` (the CLI passes IMAGEKIT_TORCH_WHEEL) wins
    over a search of $PIP_FIND_LINKS and /opt/wheels."""
    if given is not None:
        path = Path(given)
        if path.is_file():
            return path
        raise InfraError(f"{TORCH_WHEEL_ENV} names no file", where=str(path))
    dirs = [d for d in os.environ.get("PIP_FIND_LINKS", "").split() if d] + ["/opt/wheels"]
    for directory in dirs:
        found = sorted(glob.glob(os.path.join(directory.removeprefix("file://"),
                                              TORCH_PATTERN)))
        if found:
            return Path(found[-1])
    raise InfraError("no local torch 2.13.0 CPU wheel for cp311 found "
                     f"(looked in {', '.join(dirs)}; set {TORCH_WHEEL_ENV})")


def tree_hash(root: Path) -> str:
    """sha256 over the relative paths and bytes of every file under root (sorted)."""
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        if "__pycache__" in path.parts:
            continue
        digest.update(str(path.relative_to(root)).encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


class StandinRecord(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    image: str
    standin: str
    local_tag: str
    image_id: Digest
    reference: ImageReference
    digest: Digest
    mirror: ImageReference | None = None
    mirror_digest: Digest | None = None
    built: bool
    seconds: float
    #: layers of the pushed image (`--layers N` pads a stand-in to at least N)
    layers: int | None = None


#: the most layers `--layers` asks for (overlay2 stacks at most 125 lower layers)
MAX_LAYERS = 120


def check_layers(layers: int | None) -> None:
    """`--layers N` in bounds (1-MAX_LAYERS), or off (None); checked before any side effect."""
    if layers is not None and not 1 <= layers <= MAX_LAYERS:
        raise SpecError(f"--layers {layers}: give 1-{MAX_LAYERS}")


def pad_dockerfile(base: str, have: int, want: int) -> str | None:
    """A Dockerfile on top of `base` (with `have` layers) that adds tiny COPY layers until the
    image has `want` (None: it has enough). Generic — it touches no package of the stand-in —
    so the record's layer count (63) can be shown end to end on any stand-in."""
    if want <= have:
        return None
    lines = [f"FROM {base}"]
    lines += [f"COPY layers/{i:03d} /opt/imagekit-layers/{i:03d}" for i in range(want - have)]
    return "\n".join(lines) + "\n"


def _padded(engine: Engine, local_tag: str, want: int, on_line=None) -> tuple[str, int]:
    """`local_tag` padded to `want` layers: (the padded local tag, its layer count)."""
    have = len(engine.inspect(local_tag).diff_ids)
    text = pad_dockerfile(local_tag, have, want)
    if text is None:
        return local_tag, have
    padded = f"{local_tag}-layers{want}"
    if not engine.exists(padded):
        with tempfile.TemporaryDirectory(prefix="imagekit-standin-layers-") as tmp:
            context = Path(tmp)
            (context / "Dockerfile").write_text(text)
            (context / "layers").mkdir()
            for i in range(want - have):
                (context / "layers" / f"{i:03d}").write_text(
                    f"imagekit stand-in padding layer {i} of {want - have}\n")
            outcome = engine.build(context, tags=[padded], network=None, on_line=on_line)
        if not outcome.ok:
            raise CheckFailed(f"padding {local_tag} to {want} layers failed (exit "
                              f"{outcome.returncode}): {outcome.log[-300:]}", where=padded)
    return padded, len(engine.inspect(padded).diff_ids)


def _layers_tag(reference: ImageReference, want: int | None) -> ImageReference:
    """With --layers the pushed tag says so (`…:cu13-standin-layers63`): the default tags,
    which every other run uses, are never replaced by a padded image."""
    if not want or reference.tag is None:
        return reference
    return ImageReference.parse(f"{reference.registry}/{reference.repository}:"
                                f"{reference.tag}-layers{want}")


def _link_or_copy(source: Path, target: Path) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def build_standins(spec: ImagesSpec, engine: Engine, store: EvidenceStore,
                   profile: str | None = None, no_cache: bool = False,
                   on_line=None, layers: int | None = None,
                   cache_dir: Path | None = None, pip_cert: Path | None = None,
                   wheel: Path | None = None,
                   layers_for: frozenset[str] | None = None,
                   mirror: str | None = None) -> list[StandinRecord]:
    """`layers`: pad every stand-in to at least that many layers (off by default), pushed
    under `<tag>-layers<N>` and pinned in the lock in place of the default tag; `layers_for`:
    only the stand-ins of these spec images (None: all), the others as without `layers`."""
    check_layers(layers)
    if layers_for is not None:
        unknown = sorted(set(layers_for) - set(spec.images))
        if unknown:
            raise SpecError(f"--layers-for {unknown[0]}: no such image in the spec "
                            f"(give one of {', '.join(sorted(spec.images))})")
    profile_name, prof = spec.profile(profile)
    if not prof.standins:
        raise SpecError(f"profile {profile_name!r} does not use stand-ins")
    spec.writable_lock_path(profile_name)  # it pins what it pushes: refused before building
    engine.ping()
    standins_root = spec.root / STANDINS_DIR_NAME
    log: list[str] = []
    with store.attempt("standins-rootfs", "standins-rootfs") as attempt:
        base_tag, made = ensure_rootfs_image(engine, log, cache_dir=cache_dir, mirror=mirror)
        attempt.write_text("rootfs.log", "\n".join(log) + "\n")
        attempt.write_result(StandinRootfsResult(image_tag=str(base_tag)))
        attempt.add_check(CheckResult(name="rootfs", status=Status.PASS,
                                      detail=f"{base_tag} ({'made' if made else 'cached'})"))
    wheel = torch_wheel(wheel)
    cert = ca_bundle(pip_cert)
    ensure_peer("skopeo")  # pushes the stand-ins (imagekit.engine.skopeo says why)
    daemon_host = engine.host or os.environ.get("DOCKER_HOST")
    records = []
    lock_path = spec.lock_path(profile_name)
    lock = load_lock(lock_path, profile_name)
    bases, mirrors = dict(lock.bases), dict(lock.mirrors)
    for image_name, image in spec.images.items():
        standin = STANDIN_FOR.get(image.engine)
        directory = standins_root / (standin or "")
        if standin is None or not (directory / "Dockerfile").is_file():
            raise SpecError(f"no stand-in Dockerfile for engine {image.engine!r}",
                            where=str(directory))
        key = hashlib.sha256("\0".join([rootfs_key(mirror=mirror), tree_hash(directory), wheel.name,
                                        prof.pip_index_url or ""]).encode()).hexdigest()
        local_tag = f"imagekit-standins/{standin}:{key[:16]}"
        pad = layers if layers_for is None or image_name in layers_for else None
        reference = _layers_tag(image.base[profile_name], pad)
        started = dt.datetime.now(dt.UTC)
        built = False
        with store.attempt(f"standin-{standin}", "standin-build", cache_key=key,
                           local_tag=local_tag) as attempt:
            if no_cache or not engine.exists(local_tag):
                with tempfile.TemporaryDirectory(prefix="imagekit-standin-") as tmp:
                    context = Path(tmp) / "context"
                    shutil.copytree(directory, context)
                    (context / "wheels").mkdir()
                    _link_or_copy(wheel, context / "wheels" / wheel.name)
                    outcome = engine.build(
                        context, tags=[local_tag],
                        build_args={"BASE_IMAGE": base_tag, "TORCH_WHEEL": wheel.name,
                                    **({"PIP_INDEX_URL": prof.pip_index_url}
                                       if prof.pip_index_url else {})},
                        secrets={"pip_cert": cert}, no_cache=no_cache, on_line=on_line)
                attempt.write_text("build.log", outcome.log)
                if not outcome.ok:
                    attempt.write_result(StandinBuildResult(standin=standin, image=image_name,
                                                            local_tag=local_tag, cache_key=key))
                    attempt.finish(Status.FAIL, summary=f"stand-in {standin} build failed "
                                   f"(exit {outcome.returncode})")
                    raise CheckFailed(f"stand-in {standin} build failed (exit "
                                      f"{outcome.returncode}); log in evidence",
                                      where=str(attempt.path / "build.log"))
                built = True
            else:
                attempt.write_text("build.log", f"{local_tag} present: cache hit\n")
            layer_count = None
            if pad:
                local_tag, layer_count = _padded(engine, local_tag, pad, on_line)
                attempt.write_text("layers.txt", f"{local_tag}: {layer_count} layers "
                                                 f"(--layers {pad})\n")
            info = engine.inspect(local_tag)
            engine.tag(local_tag, str(reference))
            digest = skopeo.push(local_tag, info.id, reference, daemon_host=daemon_host,
                                 config_dir=engine.config_dir).digest
            mirror_ref = image.mirror.get(profile_name)
            if mirror_ref is not None:
                mirror_ref = _layers_tag(mirror_ref, pad)
            mirror_digest = None
            if mirror_ref is not None:
                engine.tag(local_tag, str(mirror_ref))
                mirror_digest = skopeo.copy(reference, digest, mirror_ref,
                                            config_dir=engine.config_dir)
            record = StandinRecord(
                image=image_name, standin=standin, local_tag=local_tag, image_id=info.id,
                reference=reference, digest=digest, mirror=mirror_ref,
                mirror_digest=mirror_digest, built=built,
                seconds=(dt.datetime.now(dt.UTC) - started).total_seconds(),
                layers=layer_count if layer_count is not None else len(info.diff_ids))
            attempt.write_json("standin.json", record)
            attempt.add_subject(digest, Role.SUBJECT, str(reference))
            attempt.write_result(StandinBuildResult(
                standin=standin, image=image_name, image_id=str(info.id),
                local_tag=local_tag, reference=str(reference), digest=str(digest),
                mirror=str(mirror_ref) if mirror_ref else None,
                mirror_digest=str(mirror_digest) if mirror_digest else None, cache_key=key,
                built=built))
            attempt.add_check(CheckResult(name="standin-build", status=Status.PASS,
                                          detail=f"{reference}@{digest}"))
        records.append(record)
        now = dt.datetime.now(dt.UTC).replace(microsecond=0)
        padded = pad is not None
        bases[image_name] = LockEntry(tag=reference, digest=digest, resolved=now,
                                      padded_from=image.base[profile_name] if padded else None)
        if mirror_ref is not None and mirror_digest is not None:
            mirrors[image_name] = LockEntry(
                tag=mirror_ref, digest=mirror_digest, resolved=now,
                padded_from=image.mirror[profile_name] if padded else None)
    write_lock(lock_path, LockFile(profile=profile_name, bases=bases, mirrors=mirrors),
               header=f"profile {profile_name}: stand-ins pushed by `imagekit standins build`; "
                      "machine-local, not committed.")
    return records
