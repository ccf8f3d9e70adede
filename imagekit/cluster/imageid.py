"""What a running container's `imageID` proves, and what it does not.

`status.containerStatuses[].imageID` looks like `127.0.0.1:5003/team/img@sha256:…` (containerd)
or `docker-pullable://repo@sha256:…` (dockershim). Only the digest after `@` is trustworthy:
the repository before it can name another registry that served the same content, and
containerd deduplicates manifests with the same config and layers (e.g. re-serialised JSON),
so imageID may name the *other* manifest's digest. `status.containerStatuses[].image` is the
config ID, not the reference. Hence: equal digest → match; different digest → compare both
manifests' config digests before calling it a mismatch.
"""

from __future__ import annotations

from collections.abc import Callable

from imagekit.errors import ImagekitError, InvalidDigest
from imagekit.oci import Digest, ImageIndex, ImageManifest, parse_manifest
from imagekit.results import CheckResult, Status


def image_id_digest(image_id: str) -> Digest | None:
    """The digest after the last '@' of an imageID; None when there is none."""
    if not image_id or "@" not in image_id:
        return None
    try:
        return Digest.parse(image_id.rsplit("@", 1)[1])
    except InvalidDigest:
        return None


def config_digest_of(manifest_bytes: bytes, fetch: Callable[[Digest], bytes] | None = None
                     ) -> Digest | None:
    """Config digest of an image manifest; for an index, of its linux/amd64 entry (fetched)."""
    manifest = parse_manifest(manifest_bytes)
    if isinstance(manifest, ImageManifest):
        return manifest.config_digest
    if isinstance(manifest, ImageIndex) and fetch is not None:
        entry = manifest.select()
        return config_digest_of(fetch(entry.digest), fetch)
    return None


def compare_image_id(pinned: Digest, image_id: str,
                     fetch_manifest: Callable[[Digest], bytes]) -> CheckResult:
    """The `image_id` check: does the container run the content pinned by `pinned`?"""
    seen = image_id_digest(image_id)
    data = {"pinned": str(pinned), "image_id": image_id}
    if seen is None:
        return CheckResult(name="image_id", status=Status.FAIL, data=data,
                           detail=f"no digest in the container's imageID {image_id!r}: the "
                                  "container never ran the pinned image")
    if seen == pinned:
        return CheckResult(name="image_id", status=Status.PASS, data=data,
                           detail=f"imageID digest equals the pinned digest {pinned.short}")
    try:
        pinned_config = config_digest_of(fetch_manifest(pinned), fetch_manifest)
        seen_config = config_digest_of(fetch_manifest(seen), fetch_manifest)
    except ImagekitError as exc:
        return CheckResult(name="image_id", status=Status.FAIL, data=data,
                           detail=f"imageID digest {seen.short} differs from pinned "
                                  f"{pinned.short} and its manifest cannot be compared: "
                                  f"{exc.one_line()}")
    data.update(pinned_config=str(pinned_config), image_id_config=str(seen_config))
    if pinned_config is not None and pinned_config == seen_config:
        return CheckResult(name="image_id", status=Status.PASS, data=data,
                           detail=f"imageID names {seen.short}, not the pinned {pinned.short}, "
                                  f"but both manifests have config {pinned_config.short} "
                                  "(same content, deduplicated by containerd)")
    return CheckResult(name="image_id", status=Status.FAIL, data=data,
                       detail=f"container runs {seen.short} (config "
                              f"{seen_config.short if seen_config else '?'}), not the pinned "
                              f"{pinned.short} (config "
                              f"{pinned_config.short if pinned_config else '?'})")
