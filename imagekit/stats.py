"""Noise-aware verdicts (median of cycles, its order-statistic interval, the 3-way rule, the
two-sample ratio): imagekit's name for the one file, gpu_checks/preflight/stats.py, which
the GPU preflight package carries into the Pod. Nothing is defined here."""

from __future__ import annotations

from preflight.stats import *  # noqa: F403 - the one file, re-exported
from preflight.stats import _mw_counts, _mw_lower_k  # noqa: F401 - tests read them
