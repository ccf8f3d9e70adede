"""Retry policy for registry traffic: 429, 5xx and broken connections are retried with
jittered exponential backoff (stamina), and a server's Retry-After is honoured.

Why a policy object and not stamina's defaults: the record shows relays that time out and
retry during large-layer downloads; operators want the waits long, tests want them short. The
environment can override every number (IMAGEKIT_RETRY_ATTEMPTS, IMAGEKIT_RETRY_WAIT_INITIAL,
IMAGEKIT_RETRY_WAIT_MAX, IMAGEKIT_RETRY_AFTER_MAX).
"""

from __future__ import annotations

import email.utils
import os
import time

import httpx
from pydantic import BaseModel, ConfigDict

RETRY_STATUSES = frozenset({408, 425, 429, 500, 502, 503, 504})


class RetryPolicy(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    attempts: int = 8
    wait_initial: float = 0.2
    wait_max: float = 10.0
    wait_jitter: float = 0.5
    #: A Retry-After longer than this is cut to it (a hostile or confused server cannot park us).
    retry_after_max: float = 60.0
    #: Total seconds one request may spend retrying.
    timeout: float = 600.0

    @classmethod
    def from_env(cls) -> "RetryPolicy":
        values: dict[str, float | int] = {}
        for field, env, kind in (("attempts", "IMAGEKIT_RETRY_ATTEMPTS", int),
                                 ("wait_initial", "IMAGEKIT_RETRY_WAIT_INITIAL", float),
                                 ("wait_max", "IMAGEKIT_RETRY_WAIT_MAX", float),
                                 ("wait_jitter", "IMAGEKIT_RETRY_WAIT_JITTER", float),
                                 ("retry_after_max", "IMAGEKIT_RETRY_AFTER_MAX", float)):
            if os.environ.get(env):
                values[field] = kind(os.environ[env])
        return cls(**values)


class RetryableStatus(Exception):
    """A response whose status says "try again" (429/5xx); carries the server's Retry-After."""

    def __init__(self, response: httpx.Response) -> None:
        super().__init__(f"HTTP {response.status_code}")
        self.status_code = response.status_code
        self.retry_after = parse_retry_after(response.headers.get("retry-after"))


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a Retry-After header (delta-seconds or HTTP-date); None when absent/bad."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


RETRYABLE_TRANSPORT = (httpx.TransportError,)


def backoff_hook(policy: RetryPolicy):
    """stamina `on=` hook: True (retry with backoff), a float (wait exactly that), or False."""

    def hook(exc: Exception) -> bool | float:
        if isinstance(exc, RetryableStatus):
            if exc.retry_after is not None:
                return min(exc.retry_after, policy.retry_after_max)
            return True
        if isinstance(exc, httpx.ConnectError) and "CERTIFICATE_VERIFY_FAILED" in str(exc):
            return False  # a certificate that is not trusted will not become trusted by waiting
        return isinstance(exc, RETRYABLE_TRANSPORT)

    return hook
