"""Every folder of tests is collected: pytest skips folders whose names match `norecursedirs`
(its default includes `build`, the image-phase tests' folder), and a skipped folder fails
nothing, so its tests would never run in `make test`."""

from __future__ import annotations

from fnmatch import fnmatch

import pytest

from tests.conftest import REPO

#: pytest's own default `norecursedirs`
PYTEST_DEFAULT = [".*", "*.egg", "_darcs", "build", "CVS", "dist", "node_modules", "venv",
                  "{arch}"]


def never_collected(patterns: list[str]) -> list[str]:
    """The folders of tests (those holding a test_*.py) that `patterns` would skip."""
    folders = {p.parent.relative_to(REPO / "tests") for p in (REPO / "tests").rglob("test_*.py")}
    return sorted(str(f) for f in folders
                  if any(fnmatch(part, pattern) for part in f.parts for pattern in patterns))


def test_no_folder_of_tests_is_skipped_by_norecursedirs(pytestconfig: pytest.Config) -> None:
    patterns = pytestconfig.getini("norecursedirs")
    assert never_collected(patterns) == [], patterns


def test_pytests_default_would_skip_the_image_phase_tests() -> None:
    assert never_collected(PYTEST_DEFAULT) == ["build"]
