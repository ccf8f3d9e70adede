"""Turn what a person types (an image NAME of the spec, a REF, a DIGEST) into a digest.

- DIGEST (`sha256:…`): itself.
- REF pinned by digest (`repo@sha256:…`): its digest.
- REF by tag: the latest promote/build attempt whose data names that reference next to a digest;
  failing that the registry serving it (`imagekit.registry`, imported at call time; infra's CA
  and docker config for the loopback registries) is asked.
- NAME (no '/', ':' or '@'): its latest build, from `imagekit.build.latest_build(name)`
  (imported at call time: the build layer may be absent, then a clear one-line error).
"""

from __future__ import annotations

import importlib
import inspect
import logging
from typing import Any

from imagekit.errors import ImagekitError, InvalidInput, NotFound
from imagekit.evidence import EvidenceStore
from imagekit.oci.digest import Digest
from imagekit.oci.reference import ImageReference
from imagekit.report.collect import _json_documents, _walk, all_records


def _digest_of(value: Any) -> Digest | None:
    """A digest from whatever a helper returns: a Digest, a string, or an object/dict with one
    of the usual attribute names (registry digest preferred over the local image ID)."""
    if value is None:
        return None
    if isinstance(value, Digest):
        return value
    if isinstance(value, str):
        return Digest.parse(value) if value.startswith(("sha256:", "sha512:")) else None
    for name in ("registry_digest", "manifest_digest", "digest", "pushed_digest", "image_digest",
                 "image_id", "config_digest"):
        found = value.get(name) if isinstance(value, dict) else getattr(value, name, None)
        if found is not None:
            digest = _digest_of(found)
            if digest is not None:
                return digest
    return None


def resolve_name(name: str, store: EvidenceStore | None = None, *,
                 profile: str | None = None) -> Digest:
    try:
        build = importlib.import_module("imagekit.build")
        latest_build = build.latest_build
    except (ImportError, AttributeError):
        raise InvalidInput("cannot resolve an image name: imagekit.build.latest_build is not "
                           "available; give a digest or reference instead", where=name) from None
    try:
        parameters = inspect.signature(latest_build).parameters
    except (TypeError, ValueError):
        parameters = {}
    kwargs: dict[str, Any] = {}
    if store is not None and "store" in parameters:
        kwargs["store"] = store
    if profile is not None and "profile" in parameters:
        kwargs["profile"] = profile
    result = latest_build(name, **kwargs)
    digest = _digest_of(result)
    if digest is None:
        raise NotFound(f"no build of {name!r} with a digest was found", where=name)
    return digest


#: Keys whose reference value sits next to that image's own digest (a HopRecord's endpoint,
#: a PromoteResult's source, a BuildRecord's local tag) — not e.g. a build's `base`.
_REFERENCE_KEYS = ("endpoint", "reference", "ref", "source", "local_tag")


def _from_evidence(store: EvidenceStore, texts: set[str]) -> Digest | None:
    """The digest the newest promote/build evidence records next to this reference."""
    best: tuple[Any, Digest] | None = None
    for record in all_records(store):
        if record.kind not in ("promote", "build"):
            continue
        for document in _json_documents(store, record):
            for _, item in _walk(document):
                if not any(item.get(key) in texts for key in _REFERENCE_KEYS):
                    continue
                digest = _digest_of(item)
                if digest is not None and (best is None or record.finished >= best[0]):
                    best = (record.finished, digest)
    return best[1] if best else None


def _registry_options(registry: str):
    """Trust the infra CA and read infra's docker config for infra's loopback registries; the
    registry client's defaults otherwise."""
    from imagekit.infra.state import registry_trust
    from imagekit.registry import RegistryOptions, RetryPolicy

    # one small read for a person waiting: a few quick retries, not a relay's patience
    retry = RetryPolicy.from_env()
    retry = retry.model_copy(update={"attempts": min(retry.attempts, 3),
                                     "wait_max": min(retry.wait_max, 2.0),
                                     "timeout": min(retry.timeout, 30.0)})
    options: dict[str, Any] = {"retry": retry, "timeout_s": 30.0}
    options.update(registry_trust(registry))
    return RegistryOptions(**options)


def _from_registry(reference: ImageReference) -> Digest | None:
    """The digest a registry names for the tag (a HEAD: not counted as a pull; the digest only
    picks evidence, which is keyed by what was proven when it was recorded)."""
    try:
        from imagekit.registry import RegistryClient
    except ImportError:
        return None
    # stamina logs each scheduled retry as a warning; a one-line error is this command's answer
    quiet = logging.getLogger("stamina")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        with RegistryClient(reference.registry,
                            _registry_options(reference.registry)) as client:
            return client.resolve_tag(reference.repository, reference.tag or "latest")
    finally:
        quiet.setLevel(level)


def resolve(text: str, store: EvidenceStore) -> tuple[Digest, str | None]:
    """(digest, image name when a NAME was given)."""
    text = text.strip()
    if not text:
        raise InvalidInput("give an image NAME, REF or DIGEST")
    if text.startswith(("sha256:", "sha512:")):
        return Digest.parse(text), None
    if not any(ch in text for ch in "/:@"):
        return resolve_name(text, store), text
    reference = ImageReference.parse(text)
    if reference.digest is not None:
        return reference.digest, None
    digest = _from_evidence(store, {text, str(reference)})
    if digest is None:
        try:
            digest = _from_registry(reference)
        except ImagekitError as exc:
            raise NotFound(f"{text} is not in the evidence and the registry lookup failed: "
                           f"{exc.one_line()}", where=text) from None
    if digest is None:
        raise NotFound("no evidence names this reference and no registry lookup is available",
                       where=text)
    return digest, None
