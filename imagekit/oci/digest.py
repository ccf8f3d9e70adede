"""`Digest`: a content address, parsed once and compared by value."""

from __future__ import annotations

import hashlib
import re
from typing import Any

from pydantic import GetCoreSchemaHandler
from pydantic_core import core_schema

from imagekit.errors import InvalidDigest

_HEX_LENGTH = {"sha256": 64, "sha512": 128}
_HEX = re.compile(r"^[0-9a-f]+$")


class Digest:
    """`algorithm:hex` (sha256 or sha512, lowercase hex of the exact length).

    Immutable and hashable; equal when algorithm and hex are equal. Serialises as the string.
    """

    __slots__ = ("algorithm", "hex")

    algorithm: str
    hex: str

    def __init__(self, algorithm: str, hex: str) -> None:  # noqa: A002 - OCI's own word
        if algorithm not in _HEX_LENGTH:
            raise InvalidDigest(f"unsupported digest algorithm {algorithm!r} (sha256 or sha512)",
                                where=f"{algorithm}:{hex}")
        want = _HEX_LENGTH[algorithm]
        if len(hex) != want or not _HEX.match(hex):
            raise InvalidDigest(f"digest hex must be {want} lowercase hex characters, got "
                                f"{len(hex)} character(s)", where=f"{algorithm}:{hex}"[:100])
        object.__setattr__(self, "algorithm", algorithm)
        object.__setattr__(self, "hex", hex)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("Digest is immutable")

    @classmethod
    def parse(cls, text: str) -> Digest:
        if not isinstance(text, str):
            raise InvalidDigest(f"a digest must be a string, got {type(text).__name__}")
        algorithm, sep, hex_part = text.partition(":")
        if not sep or not algorithm:
            raise InvalidDigest("a digest looks like sha256:<64 hex>", where=text[:100] or "''")
        return cls(algorithm, hex_part)

    @classmethod
    def of_bytes(cls, data: bytes, algorithm: str = "sha256") -> Digest:
        return cls(algorithm, hashlib.new(algorithm, data).hexdigest())

    def hasher(self) -> hashlib._Hash:
        """A fresh hash object of this digest's algorithm, to check a stream against it."""
        return hashlib.new(self.algorithm)

    def matches(self, data: bytes) -> bool:
        return hashlib.new(self.algorithm, data).hexdigest() == self.hex

    @property
    def short(self) -> str:
        return f"{self.algorithm}:{self.hex[:12]}"

    def __str__(self) -> str:
        return f"{self.algorithm}:{self.hex}"

    def __repr__(self) -> str:
        return f"Digest({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Digest):
            return self.algorithm == other.algorithm and self.hex == other.hex
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self.algorithm, self.hex))

    def __lt__(self, other: Digest) -> bool:
        return str(self) < str(other)

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler
                                     ) -> core_schema.CoreSchema:
        def validate(value: Any) -> Digest:
            if isinstance(value, Digest):
                return value
            return cls.parse(value)

        return core_schema.no_info_plain_validator_function(
            validate,
            json_schema_input_schema=core_schema.str_schema(pattern=r"^sha(256|512):[0-9a-f]+$"),
            serialization=core_schema.plain_serializer_function_ser_schema(str),
        )
