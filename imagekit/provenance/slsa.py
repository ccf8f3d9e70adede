"""BuildKit's SLSA v1 provenance, read through typed models of the parts imagekit judges, and
the statement imagekit signs from it.

BuildKit (`--attest type=provenance,mode=max,version=v1`) writes an in-toto statement with an
EMPTY subject: it cannot know the digest a registry will answer for the push. imagekit keeps
BuildKit's predicate byte for byte in meaning (the dict unchanged) and sets the subject to the
repository and manifest digest that was pushed, so a copy moved to another digest does not
verify there. Only the fields below are read; every other field is kept as BuildKit wrote it.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Literal

from packageurl import PackageURL
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from imagekit.errors import InvalidInput, InvalidReference
from imagekit.oci import ImageReference
from imagekit.oci.digest import Digest

SLSA_PROVENANCE_TYPE = "https://slsa.dev/provenance/v1"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
#: the statement types BuildKit writes (v0.1 to this day) and imagekit signs (v1)
STATEMENT_TYPES = ("https://in-toto.io/Statement/v0.1", STATEMENT_TYPE)
#: package URL types BuildKit gives an image it resolved: a registry's (`docker`) or one
#: from the engine's local store (`oci`)
IMAGE_PURL_TYPES = ("docker", "oci")
#: a statement file is small (the sample is 9 KiB); a bound keeps a hostile one cheap
MAX_STATEMENT_BYTES = 8 * 1024 * 1024

_READ = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)


class ResourceDescriptor(BaseModel):
    """in-toto's ResourceDescriptor: what BuildKit resolved (an image, by package URL)."""

    model_config = _READ

    uri: str | None = None
    digest: dict[str, str] = {}
    name: str | None = None


class ConfigSource(BaseModel):
    """Where the build definition came from (`path: Dockerfile`; no digest for a local one)."""

    model_config = _READ

    path: str | None = None
    uri: str | None = None
    digest: dict[str, str] = {}


class ExternalParameters(BaseModel):
    model_config = _READ

    config_source: ConfigSource | None = Field(default=None, alias="configSource")


class BuildDefinition(BaseModel):
    model_config = _READ

    build_type: str = Field(alias="buildType")
    external_parameters: ExternalParameters = Field(default_factory=ExternalParameters,
                                                    alias="externalParameters")
    resolved_dependencies: list[ResourceDescriptor] = Field(default=[],
                                                            alias="resolvedDependencies")


class SourceInfo(BaseModel):
    """A build definition file BuildKit parsed (mode=max), its bytes base64-encoded."""

    model_config = _READ

    filename: str
    data: str = ""
    language: str | None = None

    def content(self) -> bytes:
        try:
            return base64.b64decode(self.data, validate=True)
        except (binascii.Error, ValueError):
            raise InvalidInput(f"source info {self.filename!r} is not base64") from None


class BuildkitSource(BaseModel):
    model_config = _READ

    infos: list[SourceInfo] = []


class BuildkitMetadata(BaseModel):
    model_config = _READ

    source: BuildkitSource | None = None


class RunMetadata(BaseModel):
    model_config = _READ

    buildkit_metadata: BuildkitMetadata | None = None


class RunDetails(BaseModel):
    model_config = _READ

    metadata: RunMetadata | None = None


class SlsaProvenance(BaseModel):
    """The SLSA v1 predicate's parts imagekit judges."""

    model_config = _READ

    build_definition: BuildDefinition = Field(alias="buildDefinition")
    run_details: RunDetails = Field(default_factory=RunDetails, alias="runDetails")

    @property
    def source_infos(self) -> list[SourceInfo] | None:
        """The parsed files BuildKit recorded; None when it recorded none (mode=min)."""
        metadata = self.run_details.metadata
        found = metadata.buildkit_metadata.source if metadata and \
            metadata.buildkit_metadata else None
        return list(found.infos) if found is not None and found.infos else None

    @property
    def config_path(self) -> str:
        """The build definition's file name (`Dockerfile` unless the build named another)."""
        source = self.build_definition.external_parameters.config_source
        return (source.path if source and source.path else None) or "Dockerfile"


class StatementSubject(BaseModel):
    model_config = _READ

    name: str = ""
    digest: dict[str, str] = {}


class ProvenanceStatement(BaseModel):
    """An in-toto statement carrying SLSA v1 provenance (BuildKit's, or the one imagekit
    signed from it)."""

    model_config = _READ

    type: Literal["https://in-toto.io/Statement/v0.1", "https://in-toto.io/Statement/v1"] = \
        Field(alias="_type")
    subject: list[StatementSubject] = []
    predicate_type: Literal["https://slsa.dev/provenance/v1"] = Field(alias="predicateType")
    predicate: SlsaProvenance

    def names(self, digest: Digest) -> bool:
        return any(s.digest.get(digest.algorithm) == digest.hex for s in self.subject)


class ImageDependency(BaseModel):
    """One image the build resolved, from its package URL: the repository and digest."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    uri: str
    registry: str
    repository: str
    digest: Digest

    @property
    def pinned(self) -> str:
        return f"{self.registry}/{self.repository}@{self.digest}"


def parse_statement(raw: bytes | dict) -> tuple[dict, ProvenanceStatement]:
    """(the statement as a dict, unchanged; its typed reading). InvalidInput (one line) when it
    is not an in-toto statement of SLSA v1 provenance."""
    if isinstance(raw, (bytes, bytearray)):
        if len(raw) > MAX_STATEMENT_BYTES:
            raise InvalidInput(f"the provenance statement is larger than "
                               f"{MAX_STATEMENT_BYTES // 1024} KiB")
        try:
            raw = json.loads(raw)
        except (UnicodeDecodeError, ValueError) as exc:
            raise InvalidInput(f"the provenance statement is not JSON ({exc})") from None
    if not isinstance(raw, dict):
        raise InvalidInput("the provenance statement is not a JSON object")
    try:
        return raw, ProvenanceStatement.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise InvalidInput(f"not an in-toto statement of SLSA v1 provenance: {where}: "
                           f"{first['msg']}") from None


def signed_statement(raw: bytes | dict, digest: Digest, name: str) -> dict:
    """The statement imagekit signs: BuildKit's predicate unchanged, its subject the pushed
    repository `name` and manifest `digest` (BuildKit's subject is empty)."""
    statement, _ = parse_statement(raw)
    return {"_type": STATEMENT_TYPE,
            "subject": [{"name": name, "digest": {digest.algorithm: digest.hex}}],
            "predicateType": SLSA_PROVENANCE_TYPE, "predicate": statement["predicate"]}


def image_dependency(descriptor: ResourceDescriptor) -> ImageDependency | None:
    """The image a resolved dependency names (a `pkg:docker`/`pkg:oci` package URL), None for
    anything else. Its digest is the descriptor's own `digest` (the purl's `digest` qualifier
    must agree). InvalidInput when an image purl cannot be read."""
    if not descriptor.uri or not descriptor.uri.startswith("pkg:"):
        return None
    try:
        purl = PackageURL.from_string(descriptor.uri)
    except ValueError as exc:
        raise InvalidInput(f"resolved dependency {descriptor.uri!r} is not a package URL "
                           f"({exc})") from None
    if purl.type not in IMAGE_PURL_TYPES:
        return None
    # BuildKit writes docker's familiar name (`ubuntu`, `host:port/path/name`) as namespace/name
    familiar = f"{purl.namespace}/{purl.name}" if purl.namespace else purl.name
    qualifiers = purl.qualifiers if isinstance(purl.qualifiers, dict) else {}
    named = {f"{algorithm}:{value}" for algorithm, value in descriptor.digest.items()}
    if "digest" in qualifiers:
        named.add(qualifiers["digest"])
    if len(named) != 1:
        raise InvalidInput(f"resolved dependency {descriptor.uri!r} names "
                           f"{len(named)} digests ({', '.join(sorted(named)) or 'none'})")
    try:
        reference = ImageReference.parse(familiar)
        digest = Digest.parse(named.pop())
    except (InvalidReference, InvalidInput) as exc:
        raise InvalidInput(f"resolved dependency {descriptor.uri!r}: {exc.message}") from None
    return ImageDependency(uri=descriptor.uri, registry=reference.registry,
                           repository=reference.repository, digest=digest)
