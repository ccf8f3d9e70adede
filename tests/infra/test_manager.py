"""The cluster slot of `infra up --cluster` and the root requirement, without starting anything."""

from __future__ import annotations

import pytest

from imagekit.errors import InfraError
from imagekit.infra import manager
from imagekit.infra.state import StatePaths


def test_cluster_flag_without_cluster_module_is_a_clear_error(
        monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setattr(manager.importlib.util, "find_spec", lambda name: None)
    assert manager.cluster_module() is None
    with pytest.raises(InfraError, match=r"imagekit\.infra\.cluster is missing"):
        manager.up(cluster=True, paths=StatePaths(tmp_path))
    assert not (tmp_path / "state.json").exists()  # failed before touching anything


def test_up_and_down_need_root(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setattr(manager.os, "geteuid", lambda: 1000)
    with pytest.raises(InfraError, match="must run as root"):
        manager.up(paths=StatePaths(tmp_path))
    with pytest.raises(InfraError, match="must run as root"):
        manager.down(paths=StatePaths(tmp_path))
