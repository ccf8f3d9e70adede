"""The typed errors of the Kubernetes transport: API statuses mapped to imagekit's errors, with
the server's own message (that message is the finding: the Priority admission plugin's 403
text, "object is being deleted", a 409).

403 → `AdmissionRefused`, 404 → `NotFound`, 409 → `Conflict`, 410 → `Gone`,
422 → `InvalidInput`, anything else ≥ 400 → `TransportError`. A wait that ran past its
deadline is a `WaitTimeout` (a `TransportError`); a watch whose stream broke off after it had
started is a `WatchBroken` (a `TransportError`: the waits watch again from their last
resourceVersion); a write whose connection closed before its answer is a `SentUnanswered` (a
`TransportError`: a create reads the object back by name before sending it again).
"""

from __future__ import annotations

from imagekit.errors import ImagekitError, InvalidInput, NotFound, TransportError

__all__ = ["AdmissionRefused", "Conflict", "Gone", "InvalidInput", "NotFound", "SentUnanswered",
           "TransportError", "UnknownResource", "WaitTimeout", "WatchBroken", "for_status"]


class AdmissionRefused(ImagekitError):
    """The API server refused the object (HTTP 403): admission or authorization said no."""

    exit_code = 1


class Conflict(ImagekitError):
    """HTTP 409: an object of that name exists (possibly still Terminating)."""


class Gone(TransportError):
    """HTTP 410 (or a watch ERROR event of code 410): the resourceVersion is too old; list
    again and watch from the new one."""


class SentUnanswered(TransportError):
    """A write went out on a connection that closed before its answer came: whether the server
    acted on it is not known (read the object back before sending it again)."""


class WatchBroken(TransportError):
    """A watch stream that had started broke off (the connection was closed or reset under
    it): the events up to there arrived; watching again from the last resourceVersion goes
    on where it stopped."""


class UnknownResource(InvalidInput):
    """Discovery does not list this kind in this apiVersion on this server."""


class WaitTimeout(TransportError):
    """A wait (a watch with a deadline) ended before its condition held; `last` is the
    object's last state seen (None: it did not exist)."""

    def __init__(self, message: str, *, where: str | None = None,
                 last: dict | None = None) -> None:
        super().__init__(message, where=where)
        self.last = last


def for_status(status: int, message: str, where: str) -> ImagekitError | None:
    """The typed error of an API status, None below 400."""
    if status < 400:
        return None
    if status == 403:
        return AdmissionRefused(message, where=where)
    if status == 404:
        return NotFound(message, where=where)
    if status == 409:
        return Conflict(message, where=where)
    if status == 410:
        return Gone(f"API 410: {message}", where=where)
    if status == 422:
        return InvalidInput(message, where=where)
    return TransportError(f"API {status}: {message}", where=where)
