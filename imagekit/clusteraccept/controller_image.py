"""The acceptance controller's image: imagekit's acceptance client on the local bookworm base.

Built from `dockerfiles/controller/Dockerfile` on the stand-ins' rootfs image
(debootstrap, cached by its own key), pip dependencies fetched with the CA bundle as the
BuildKit secret `pip_cert` (never in a layer), imagekit's source copied last. Cached by a
content key of all of that: an unchanged second run finds the local tag and only re-pushes (the
registry already has every blob). The scripts the controller runs are not in the image: they
come from a ConfigMap (section 9).
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from imagekit import packaged
from imagekit.engine import Engine
from imagekit.errors import CheckFailed
from imagekit.oci import Digest, ImageReference
from imagekit.standins.build import ca_bundle, tree_hash
from imagekit.standins.rootfs import ensure_rootfs_image, rootfs_key

PACKAGE = Path(__file__).absolute().parents[1]          # imagekit/
#: the preflight package: imagekit.stats is its stats.py (the evidence models import it)
PREFLIGHT = packaged.path("preflight")
DOCKERFILE_DIR = packaged.path("dockerfiles", "controller")
REPOSITORY = "imagekit/accept-controller"
LOCAL_REPOSITORY = "imagekit-local/accept-controller"


class ControllerImage(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    reference: ImageReference   # registry/repo:key
    digest: Digest
    cache_key: str
    built: bool
    log: str = ""

    @property
    def pinned(self) -> ImageReference:
        return self.reference.with_digest(self.digest)


def cache_key(dockerfile_dir: Path = DOCKERFILE_DIR, package: Path = PACKAGE,
              mirror: str | None = None, preflight: Path = PREFLIGHT) -> str:
    """Everything that goes into the image: the base's key (of `mirror`, default this machine's
    Debian archive), the Dockerfile and requirements, imagekit's and the preflight's source."""
    return hashlib.sha256("\0".join([rootfs_key(mirror=mirror), tree_hash(dockerfile_dir),
                                     tree_hash(package), tree_hash(preflight)]).encode()
                          ).hexdigest()


def ensure_controller_image(engine: Engine, registry: str, *, pip_index_url: str | None = None,
                            on_line=None, cache_dir: Path | None = None,
                            pip_cert: Path | None = None,
                            mirror: str | None = None) -> ControllerImage:
    """The controller image pushed to `registry` (a loopback registry the cluster pulls from),
    built only when its content key is new. Raises CheckFailed with the build log's tail when
    the build fails."""
    key = cache_key(mirror=mirror)
    local = f"{LOCAL_REPOSITORY}:{key[:16]}"
    reference = ImageReference.parse(f"{registry}/{REPOSITORY}:{key[:16]}")
    log: list[str] = []
    built = False
    if not engine.exists(local):
        base, _ = ensure_rootfs_image(engine, log, cache_dir=cache_dir, mirror=mirror)
        with tempfile.TemporaryDirectory(prefix="imagekit-controller-") as tmp:
            context = Path(tmp) / "context"
            shutil.copytree(DOCKERFILE_DIR, context)
            for source, name in ((PACKAGE, "imagekit"), (PREFLIGHT, "preflight")):
                shutil.copytree(source, context / name,
                                ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            outcome = engine.build(
                context, tags=[local],
                build_args={"BASE_IMAGE": base,
                            **({"PIP_INDEX_URL": pip_index_url} if pip_index_url else {})},
                secrets={"pip_cert": ca_bundle(pip_cert)}, on_line=on_line)
        log.append(outcome.log)
        if not outcome.ok:
            raise CheckFailed(f"the controller image build failed (exit {outcome.returncode}): "
                              + " | ".join(outcome.log.strip().splitlines()[-5:])[:600],
                              where=str(DOCKERFILE_DIR))
        built = True
    else:
        log.append(f"{local} present: cache hit")
    engine.tag(local, str(reference))
    digest = engine.push(reference)
    return ControllerImage(reference=reference, digest=digest, cache_key=key, built=built,
                           log="\n".join(log))
