"""The referrer documents a registry hands us, as bounded pydantic models.

Everything a registry says about referrers is the registry's word, not ours: the referrers API's
index, the referrers tag schema's index, each referrer manifest and the descriptor of its
Sigstore bundle layer. Each is parsed here, once, before any field is used:

- shapes are strict: `manifests` is a list of objects, `annotations` a map of strings to
  strings, `size` an integer, a digest `algorithm:hex` (a list, a number or `null` where an
  object belongs is refused — never a TypeError deep in the verifier);
- bounds: at most `MAX_LISTED` entries per index document and `MAX_ENTRIES` distinct ones per
  listing (all pages together),
  `MAX_LAYERS` layers per referrer manifest, `MAX_BUNDLE_BYTES` per bundle;
- an index listing one digest many times is deduplicated (the first entry wins), so a valid
  referrer listed 2,000 times is read once.

A document outside these rules is one line naming the registry and the document
(`RegistryDocumentError`, exit 2); nothing about it is trusted or partly used.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, ValidationError

from imagekit.errors import TransportError

#: Entries one referrers listing may hold (all pages together). Our digests carry a handful
#: (test-result, sbom, promotion, re-attestations); cosign's own listings stay in the tens.
MAX_ENTRIES = 512
#: Entries one index document may list before deduplication (one digest listed many times).
MAX_LISTED = 4096
#: Layers in one referrer manifest (a Sigstore bundle manifest has exactly one).
MAX_LAYERS = 16
#: Bytes of one attestation bundle (an SBOM statement of a large image is a few MiB).
MAX_BUNDLE_BYTES = 16 << 20
#: Bytes of one index or referrer manifest document.
MAX_DOCUMENT_BYTES = 4 << 20

_DIGEST = r"^(sha256:[0-9a-f]{64}|sha512:[0-9a-f]{128})$"
Digested = Annotated[StrictStr, Field(pattern=_DIGEST)]
Short = Annotated[StrictStr, Field(max_length=255)]
Annotations = Annotated[dict[Annotated[StrictStr, Field(max_length=1024)],
                             Annotated[StrictStr, Field(max_length=16384)]],
                        Field(max_length=256)]


class RegistryDocumentError(TransportError):
    """A registry document that is not what the distribution spec says it is (exit 2)."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)

    def dump(self) -> dict:
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


class ReferrerDescriptor(_Strict):
    """One entry of a referrers index: the referrer manifest it points at."""

    media_type: Short | None = Field(default=None, alias="mediaType")
    digest: Digested
    size: StrictInt | None = Field(default=None, ge=0, le=MAX_DOCUMENT_BYTES)
    artifact_type: Short | None = Field(default=None, alias="artifactType")
    annotations: Annotations | None = None


class ReferrersIndex(_Strict):
    """The referrers API's answer or the tag schema's `<alg>-<hex>` index."""

    schema_version: StrictInt | None = Field(default=None, alias="schemaVersion")
    media_type: Short | None = Field(default=None, alias="mediaType")
    manifests: Annotated[list[ReferrerDescriptor], Field(max_length=MAX_LISTED)] = []


class LayerDescriptor(_Strict):
    """A referrer manifest's layer (for ours: the Sigstore bundle)."""

    media_type: Short = Field(alias="mediaType")
    digest: Digested
    size: StrictInt = Field(ge=0, le=MAX_BUNDLE_BYTES)
    annotations: Annotations | None = None


class SubjectDescriptor(_Strict):
    media_type: Short | None = Field(default=None, alias="mediaType")
    digest: Digested
    size: StrictInt | None = Field(default=None, ge=0)


class ConfigDescriptor(_Strict):
    media_type: Short = Field(alias="mediaType")
    digest: Digested
    size: StrictInt = Field(ge=0, le=MAX_DOCUMENT_BYTES)


class ReferrerManifest(_Strict):
    """A referrer's image manifest: its subject, artifact type, layers and annotations."""

    schema_version: StrictInt | None = Field(default=None, alias="schemaVersion")
    media_type: Short | None = Field(default=None, alias="mediaType")
    artifact_type: Short | None = Field(default=None, alias="artifactType")
    config: ConfigDescriptor | None = None
    layers: Annotated[list[LayerDescriptor], Field(max_length=MAX_LAYERS)] = []
    subject: SubjectDescriptor | None = None
    annotations: Annotations | None = None


def _first_error(exc: ValidationError) -> str:
    first = exc.errors()[0]
    loc = ".".join(str(p) for p in first.get("loc", ())) or "document"
    return f"{loc}: {first.get('msg', 'invalid')}"[:200]


def _decode(data: bytes | str | Any, what: str, where: str) -> Any:
    if isinstance(data, (bytes, bytearray, str)):
        if len(data) > MAX_DOCUMENT_BYTES:
            raise RegistryDocumentError(f"{what} is larger than {MAX_DOCUMENT_BYTES >> 20} MiB",
                                        where=where)
        try:
            return json.loads(data)
        except (ValueError, RecursionError):
            raise RegistryDocumentError(f"{what} is not JSON", where=where) from None
    return data


def _model(cls: type[_Strict], data: Any, what: str, where: str) -> Any:
    body = _decode(data, what, where)
    if not isinstance(body, dict):
        raise RegistryDocumentError(f"{what} is a JSON {type(body).__name__}, not an object",
                                    where=where)
    try:
        return cls.model_validate(body)
    except ValidationError as exc:
        raise RegistryDocumentError(f"{what} is malformed: {_first_error(exc)}",
                                    where=where) from None
    except RecursionError:
        raise RegistryDocumentError(f"{what} nests too deeply", where=where) from None


def parse_index(data: bytes | str | Any, where: str, *, what: str = "referrers index"
                ) -> ReferrersIndex:
    """A referrers index (bytes or an already-decoded body), bounded and strict."""
    return _model(ReferrersIndex, data, what, where)


def parse_manifest(data: bytes | str | Any, where: str, *, what: str = "referrer manifest"
                   ) -> ReferrerManifest:
    """A referrer manifest, bounded and strict."""
    return _model(ReferrerManifest, data, what, where)


def dedupe(entries: list[ReferrerDescriptor], where: str) -> list[ReferrerDescriptor]:
    """Each digest once (the first entry wins), at most MAX_ENTRIES in all."""
    seen: dict[str, ReferrerDescriptor] = {}
    for entry in entries:
        seen.setdefault(entry.digest, entry)
    if len(seen) > MAX_ENTRIES:
        raise RegistryDocumentError(f"referrers listing holds {len(seen)} distinct entries, "
                                    f"more than {MAX_ENTRIES}", where=where)
    return list(seen.values())
