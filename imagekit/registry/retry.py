"""The one retry policy of registry traffic: which failures may heal, and for how long we wait.

Every registry call (a request, a blob stream, an upload) runs inside one stamina retry
context whose hook is a `Budget`. Nothing is retried twice over (no nesting): inner steps of a
call never retry on their own.

What the budget decides, and why:
- 429/5xx (and 408/425): retried with jittered exponential backoff until the call's
  **deadline** (default 30 s, `IMAGEKIT_DEADLINE` / `--call-timeout`). A `Retry-After` is honoured
  (capped at `retry_after_max`); one that asks for more than the time left fails at once and
  says so (a `Retry-After: 3600` is an answer, not a wait).
- A connection refused, reset, or cut short (a truncated body): retried only for
  `broken_window` seconds (default 2 s) without progress. A registry restarting or a flaky hop
  heals within that; a closed port or a server that always cuts its bodies does not, and the
  user hears so in seconds, not minutes (the record: 8 x 8 nested attempts, ~215 s).
- A name that does not resolve, a TLS failure, a redirect loop: never retried.
- Time-outs (a server that accepts and never answers, e.g. a token realm): each request's
  timeout is the time left before the deadline, so the call ends at its deadline.
- Progress (a chunk acknowledged, bytes received) restarts the clock: a 10 GB upload is not
  one 30 s call, but 30 s without progress ends it.

Retries are logged to the `imagekit.retry` logger at INFO (stamina's instrumentation hook is
replaced by ours): nothing reaches stderr unless the CLI is `--verbose`.
"""

from __future__ import annotations

import contextlib
import email.utils
import logging
import random
import socket
import threading
import time
from typing import TYPE_CHECKING

import httpx
import stamina
from pydantic import BaseModel, ConfigDict

from imagekit.registry.endpoint import ssl_cause

if TYPE_CHECKING:
    from imagekit.settings import Settings

RETRY_STATUSES = frozenset({408, 425, 429, 500, 502, 503, 504})

log = logging.getLogger("imagekit.retry")


class RetryPolicy(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    #: At most this many tries of one call without progress.
    attempts: int = 8
    wait_initial: float = 0.2
    wait_max: float = 10.0
    wait_jitter: float = 0.5
    #: A Retry-After longer than this (but within the deadline) is cut to it.
    retry_after_max: float = 60.0
    #: Seconds one call may spend (answering, waiting, retrying) without progress.
    deadline: float = 30.0
    #: Seconds a broken connection (refused, reset, cut short) is retried without progress.
    broken_window: float = 2.0
    #: Legacy upper bound on the deadline (older callers set it); the smaller one wins.
    timeout: float = 600.0

    @property
    def budget_s(self) -> float:
        return min(self.deadline, self.timeout)

    @classmethod
    def from_settings(cls, settings: Settings, deadline: float | None = None) -> RetryPolicy:
        """The policy the settings ask for (`IMAGEKIT_RETRY_*`, `IMAGEKIT_DEADLINE`, already
        validated there); `deadline` (the CLI's `--call-timeout`) wins over the variable."""
        values: dict[str, float | int] = {}
        for field, value in (("attempts", settings.retry_attempts),
                             ("wait_initial", settings.retry_wait_initial),
                             ("wait_max", settings.retry_wait_max),
                             ("wait_jitter", settings.retry_wait_jitter),
                             ("retry_after_max", settings.retry_after_max),
                             ("deadline", deadline if deadline is not None
                              else settings.deadline),
                             ("broken_window", settings.retry_broken_window)):
            if value is not None:
                values[field] = value
        return cls(**values)

    def budget(self, what: str) -> Budget:
        return Budget(self, what)


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


def _unresolvable(exc: BaseException) -> bool:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, socket.gaierror):
            return True
        current = current.__cause__ or current.__context__
    text = str(exc)
    return "Name or service not known" in text or "nodename nor servname" in text or \
        "Temporary failure in name resolution" in text or "No address associated" in text


def classify(exc: BaseException) -> str:
    """'status' (429/5xx), 'timeout', 'broken' (may heal soon) or 'final' (will not heal)."""
    if isinstance(exc, RetryableStatus):
        return "status"
    if isinstance(exc, httpx.TimeoutException):
        return "timeout"
    if isinstance(exc, httpx.ConnectError):
        if _unresolvable(exc) or ssl_cause(exc) is not None:
            return "final"
        return "broken"
    if isinstance(exc, httpx.TransportError) and not isinstance(exc, httpx.UnsupportedProtocol):
        return "broken"  # reset, cut short (RemoteProtocolError), read/write error
    return "final"


#: The process-wide wall clock (a `time.monotonic()` instant) no registry call may run past,
#: whatever progress it makes: `wall_clock(seconds)` sets it for a block (an awaited hop's
#: deadline, a referrers listing's total). A global, not a context variable, so that the
#: worker threads of one operation (parallel polls and blob copies) obey it too.
_WALL: list[float] = []
_WALL_LOCK = threading.Lock()


@contextlib.contextmanager
def wall_clock(seconds: float):
    """Every registry call inside the block ends by `seconds` from now (the innermost and
    the earliest wall win): waits, retries and each request's time-out are cut to it."""
    at = time.monotonic() + seconds
    with _WALL_LOCK:
        _WALL.append(at)
    try:
        yield at
    finally:
        with _WALL_LOCK:
            _WALL.remove(at)


def wall_left() -> float | None:
    """Seconds left before the wall clock, None when none is set."""
    walls = list(_WALL)
    return min(walls) - time.monotonic() if walls else None


class Budget:
    """One call's retry budget: the stamina `on=` hook, with the clock and the reason it gave
    up (so the error can say *why* it did not wait longer)."""

    def __init__(self, policy: RetryPolicy, what: str) -> None:
        self.policy = policy
        self.what = what
        self.started = time.monotonic()
        self.broken_since: float | None = None
        self.failures = 0
        self.retries = 0
        self.gave_up: str | None = None

    # -- the clock ------------------------------------------------------------------------
    def progress(self) -> None:
        """Something moved: the deadline and the broken window start again."""
        self.started = time.monotonic()
        self.broken_since = None
        self.failures = 0

    def answered(self) -> None:
        """An exchange completed: the connection works, consecutive failures start again
        (the deadline does not: answers that move nothing are not progress)."""
        self.broken_since = None
        self.failures = 0

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def remaining(self) -> float:
        left = self.policy.budget_s - self.elapsed()
        wall = wall_left()
        return left if wall is None else min(left, wall)

    def timeout(self, base: httpx.Timeout) -> httpx.Timeout:
        """A request's timeout: never past the deadline (at least 0.2 s to say anything)."""
        left = max(0.2, self.remaining())

        def cap(value: float | None) -> float:
            return left if value is None else min(value, left)

        return httpx.Timeout(connect=cap(base.connect), read=cap(base.read),
                             write=cap(base.write), pool=cap(base.pool))

    # -- the hook -------------------------------------------------------------------------
    def _backoff(self) -> float:
        policy = self.policy
        wait = min(policy.wait_max, policy.wait_initial * 2 ** max(0, self.failures - 1))
        return wait + random.uniform(0, policy.wait_jitter) if policy.wait_jitter else wait

    def __call__(self, exc: Exception) -> bool | float:
        kind = classify(exc)
        self.failures += 1
        if kind == "final":
            return False
        if self.failures >= self.policy.attempts:
            self.gave_up = f"{self.failures} attempts"
            return False
        left = self.remaining()
        if kind == "status":
            after = getattr(exc, "retry_after", None)
            if after is not None:
                if after > left:
                    self.gave_up = (f"it asks to retry after {after:g} s, beyond the "
                                    f"{self.policy.budget_s:g} s deadline")
                    return False
                return self._schedule(min(after, self.policy.retry_after_max), left)
            return self._schedule(self._backoff(), left)
        if kind == "broken":
            now = time.monotonic()
            if self.broken_since is None:
                self.broken_since = now
            window = self.policy.broken_window - (now - self.broken_since)
            wait = self._backoff()
            if window <= 0 or (wait >= window and window < left):
                self.gave_up = f"still failing after {now - self.broken_since + wait:.1f} s"
                return False
            return self._schedule(wait, min(left, window))
        return self._schedule(self._backoff(), left)  # a timeout: only if time is left

    def _schedule(self, wait: float, left: float) -> bool | float:
        if left <= 0 or wait >= left:
            wall = wall_left()
            if wall is not None and wall <= left + 1e-6:
                self.gave_up = self.gave_up or "the operation's own deadline reached"
            self.gave_up = self.gave_up or f"deadline of {self.policy.budget_s:g} s reached"
            return False
        self.retries += 1
        return max(0.0, wait)

    def attempts(self):
        """The stamina retry context of this call (the hook decides; stamina loops and
        reports retries through instrumentation)."""
        return stamina.retry_context(on=self, attempts=None, timeout=None, wait_initial=0,
                                     wait_max=0, wait_jitter=0)


def backoff_hook(policy: RetryPolicy) -> Budget:
    """A fresh budget used as a stamina `on=` hook (kept for callers of the old name)."""
    return policy.budget("call")


def _log_retry(details) -> None:  # stamina.instrumentation.RetryDetails
    log.info("retry %d of %s in %.2f s: %s: %s", details.retry_num, details.name,
             details.wait_for, type(details.caused_by).__name__, details.caused_by)


stamina.instrumentation.set_on_retry_hooks([_log_retry])
