"""Shared test settings: retry waits short enough for tests, long enough for a registry restart."""

from imagekit.registry import RetryPolicy

FAST_RETRY = RetryPolicy(attempts=10, wait_initial=0.01, wait_max=0.3, wait_jitter=0.01,
                         retry_after_max=0.1, timeout=120)
