"""One exception hierarchy; the CLI maps each class to a one-line message and an exit code.

Exit codes: 2 = bad input / usage / the tool could not do its job, 1 = a check ran and failed.
"""

from __future__ import annotations


class ImagekitError(Exception):
    """Base of every error imagekit raises on purpose."""

    exit_code: int = 2

    def __init__(self, message: str, *, where: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.where = where

    def one_line(self) -> str:
        text = " ".join(self.message.split())
        return f"{text} ({self.where})" if self.where else text


class InvalidInput(ImagekitError):
    """Malformed user input: a reference, a digest, a spec file, a flag."""


class InvalidDigest(InvalidInput):
    """A string that is not `algorithm:hex` of a known algorithm and length."""


class InvalidReference(InvalidInput):
    """A string that is not `registry/repo[:tag][@digest]`."""


class SpecError(InvalidInput):
    """An images spec or lock file that cannot be used."""


class NotFound(ImagekitError):
    """A manifest, blob, image or record that does not exist where it was looked for."""


class Unauthorized(ImagekitError):
    """A registry refused the credentials (or their absence)."""


class DigestMismatch(ImagekitError):
    """Content whose sha256 is not the digest it was asked for: never trusted."""


class TransportError(ImagekitError):
    """A registry, engine or cluster did not answer usefully after retries."""


class InfraError(ImagekitError):
    """Local infrastructure could not be started, stopped or inspected."""


class PortTaken(InfraError):
    """A port imagekit needs is held by a process imagekit did not start."""


class EvidenceError(ImagekitError):
    """The evidence store refused a write (e.g. an attempt would be overwritten)."""


class CheckFailed(ImagekitError):
    """A check ran to completion and its verdict is FAIL."""

    exit_code = 1


class RegistryBehaviour(ImagekitError):
    """A registry behaved in a way imagekit bounds rather than follows: an upload past its byte
    budget or its deadline, an offset that cannot be trusted and a commit it then refused, a tag
    it will not move, a quota a promote cannot fit. The destination failed the check."""

    exit_code = 1
