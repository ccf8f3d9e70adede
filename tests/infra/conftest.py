"""Order for the infra tests: `infra down` (and the re-up after it) runs last in the session, so
no other test loses its engine or registries halfway."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "infra_last: runs after every other test of the session")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    last = [item for item in items if item.get_closest_marker("infra_last")]
    if last:
        items[:] = [item for item in items if item not in last] + last
