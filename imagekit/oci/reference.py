"""`ImageReference`: `registry/repo[:tag][@digest]`, with docker.io normalisation.

Grammar follows distribution/reference: the first path component is a registry only when it
contains '.' or ':' or is 'localhost'; otherwise the registry is docker.io and a single-component
repository gets the 'library/' prefix.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import GetCoreSchemaHandler
from pydantic_core import core_schema

from imagekit.errors import InvalidDigest, InvalidReference
from imagekit.oci.digest import Digest

DOCKER_HUB = "docker.io"
_DOCKER_HUB_ALIASES = {"docker.io", "index.docker.io", "registry-1.docker.io"}

_COMPONENT = re.compile(r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$")
_TAG = re.compile(r"^[\w][\w.-]{0,127}$")
_DOMAIN_LABEL = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = re.compile(
    rf"^(?:{_DOMAIN_LABEL}(?:\.{_DOMAIN_LABEL})*|\[[0-9a-fA-F:]+\])(?::[0-9]+)?$"
)
_MAX_NAME = 255


class ImageReference:
    """A parsed image reference. `tag` and `digest` are both optional, at least one is
    usually present; `with_digest()` pins a reference to content."""

    __slots__ = ("registry", "repository", "tag", "digest")

    registry: str
    repository: str
    tag: str | None
    digest: Digest | None

    def __init__(self, registry: str, repository: str, tag: str | None = None,
                 digest: Digest | None = None) -> None:
        object.__setattr__(self, "registry", registry)
        object.__setattr__(self, "repository", repository)
        object.__setattr__(self, "tag", tag)
        object.__setattr__(self, "digest", digest)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("ImageReference is immutable")

    @classmethod
    def parse(cls, text: str) -> ImageReference:
        if not isinstance(text, str) or not text:
            raise InvalidReference("an image reference cannot be empty")
        if text != text.strip() or any(ch.isspace() for ch in text):
            raise InvalidReference("an image reference cannot contain whitespace",
                                   where=repr(text)[:100])
        rest, digest = text, None
        if "@" in rest:
            rest, _, digest_text = rest.partition("@")
            try:
                digest = Digest.parse(digest_text)
            except InvalidDigest as exc:
                raise InvalidReference(f"bad digest in reference: {exc.message}",
                                       where=text[:120]) from None
        tag = None
        last_slash = rest.rfind("/")
        colon = rest.rfind(":")
        if colon > last_slash:
            rest, tag = rest[:colon], rest[colon + 1:]
            if not _TAG.match(tag):
                raise InvalidReference(f"invalid tag {tag!r} (letters, digits, '_', '.', '-'; "
                                       "at most 128; not starting with '.' or '-')",
                                       where=text[:120])
        if not rest:
            raise InvalidReference("missing repository name", where=text[:120])
        parts = rest.split("/")
        first = parts[0]
        if len(parts) > 1 and ("." in first or ":" in first or first == "localhost"):
            registry, path = first, parts[1:]
            if not _DOMAIN.match(registry):
                raise InvalidReference(f"invalid registry {registry!r}", where=text[:120])
        else:
            registry, path = DOCKER_HUB, parts
        if registry in _DOCKER_HUB_ALIASES:
            registry = DOCKER_HUB
            if len(path) == 1:
                path = ["library", *path]
        for component in path:
            if not _COMPONENT.match(component):
                raise InvalidReference(
                    f"invalid repository component {component!r} (lowercase letters, digits, "
                    "and single '.', '_', '__' or '-' separators)", where=text[:120])
        repository = "/".join(path)
        if len(registry) + 1 + len(repository) > _MAX_NAME:
            raise InvalidReference(f"repository name longer than {_MAX_NAME} characters",
                                   where=text[:120])
        return cls(registry, repository, tag, digest)

    # -- derived forms -------------------------------------------------------------------------
    @property
    def name(self) -> str:
        """registry/repository, without tag or digest."""
        return f"{self.registry}/{self.repository}"

    @property
    def identifier(self) -> str:
        """What goes after /manifests/ in the API: the digest when pinned, else the tag."""
        if self.digest is not None:
            return str(self.digest)
        return self.tag or "latest"

    def with_digest(self, digest: Digest | str) -> ImageReference:
        """The same repository pinned to content; the tag is dropped (a digest wins anyway)."""
        return ImageReference(self.registry, self.repository, None,
                              digest if isinstance(digest, Digest) else Digest.parse(digest))

    def with_tag(self, tag: str) -> ImageReference:
        return ImageReference.parse(f"{self.name}:{tag}")

    def in_registry(self, registry: str, repository: str | None = None) -> ImageReference:
        return ImageReference(registry, repository or self.repository, self.tag, self.digest)

    @property
    def is_pinned(self) -> bool:
        return self.digest is not None

    def __str__(self) -> str:
        text = self.name
        if self.tag:
            text += f":{self.tag}"
        if self.digest:
            text += f"@{self.digest}"
        return text

    def __repr__(self) -> str:
        return f"ImageReference({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ImageReference):
            return str(self) == str(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(str(self))

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler
                                     ) -> core_schema.CoreSchema:
        def validate(value: Any) -> ImageReference:
            if isinstance(value, ImageReference):
                return value
            return cls.parse(value)

        return core_schema.no_info_plain_validator_function(
            validate,
            json_schema_input_schema=core_schema.str_schema(),
            serialization=core_schema.plain_serializer_function_ser_schema(str),
        )
