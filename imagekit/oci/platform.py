"""`Platform`: os/architecture[/variant], as in an index entry or image config."""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field

from imagekit.errors import InvalidInput

_PART = re.compile(r"^[a-z0-9][a-z0-9._-]{0,31}$")


class Platform(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True, populate_by_name=True)

    os: str
    architecture: str
    variant: str | None = None
    os_version: str | None = Field(default=None, alias="os.version")
    os_features: list[str] | None = Field(default=None, alias="os.features")

    @classmethod
    def parse(cls, text: str) -> Platform:
        """`linux/amd64`, `linux/arm64/v8`."""
        parts = text.split("/") if isinstance(text, str) else []
        if len(parts) not in (2, 3) or not all(_PART.match(p) for p in parts):
            raise InvalidInput("a platform looks like os/arch[/variant] (lowercase letters, "
                               "digits, '.', '_', '-'), e.g. linux/amd64",
                               where=repr(text)[:80])
        return cls(os=parts[0], architecture=parts[1],
                   variant=parts[2] if len(parts) == 3 else None)

    @property
    def is_unknown(self) -> bool:
        """Attestation entries of buildx indexes say unknown/unknown."""
        return self.os == "unknown" or self.architecture == "unknown"

    def satisfies(self, wanted: Platform) -> bool:
        """True when this entry serves `wanted` (a wanted variant must match if given)."""
        if (self.os, self.architecture) != (wanted.os, wanted.architecture):
            return False
        if wanted.variant is None:
            return True
        return (self.variant or _default_variant(self)) == wanted.variant

    def __str__(self) -> str:
        return "/".join(p for p in (self.os, self.architecture, self.variant) if p)


def _default_variant(platform: Platform) -> str | None:
    return {"arm64": "v8"}.get(platform.architecture)


LINUX_AMD64 = Platform(os="linux", architecture="amd64")
