"""A comparison that cannot be made is an error with evidence, never a verdict."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from imagekit.evidence import EvidenceStore
from imagekit.results import Status

pytestmark = pytest.mark.registry


def test_missing_copy_is_exit_2_one_line_and_an_error_attempt(reg, repo, staged) -> None:
    official = f"{reg['staging']}/{repo}:v1"
    missing = f"{reg['staging']}/{repo}-absent:v1"
    done = subprocess.run([sys.executable, "-m", "imagekit", "verify-mirror", official, missing],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("imagekit: error: ") and "evidence:" in line
    store = EvidenceStore(os.environ["IMAGEKIT_EVIDENCE_DIR"])
    records = [r for key in store.keys() for r in store.attempts(key, "verify-copy")]
    assert [r.status for r in records] == [Status.ERROR]
    assert records[0].context["copy"] == missing
    assert all(c.status is not Status.PASS for c in records[0].checks)
