"""Shared test settings. Real-infrastructure tests are marked docker/registry/cluster/gpu; in CI
(CI=true) a marked test whose part is missing FAILS, it never skips silently."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}


@pytest.fixture(autouse=True)
def _evidence_in_tmp(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
                     ) -> None:
    """Tests never write into the developer's own evidence store."""
    monkeypatch.setenv("IMAGEKIT_EVIDENCE_DIR", str(tmp_path_factory.mktemp("evidence")))
