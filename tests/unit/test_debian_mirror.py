"""The Debian archive is read from the machine's apt configuration, never written in the project."""

from __future__ import annotations

from pathlib import Path

import pytest

from imagekit.errors import InfraError
from imagekit.infra import apt

DEB822 = """Types: deb
# a comment
URIs: http://mirror.example/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://mirror.example/debian-security
Suites: bookworm-security
Components: main
"""


def test_deb822_main_archive_not_security() -> None:
    assert apt._deb822_archives(DEB822) == ["http://mirror.example/debian"]


def test_one_line_sources() -> None:
    text = ("deb http://sec.example/debian-security bookworm-security main\n"
            "deb [arch=amd64] http://one.example/debian/ bookworm main contrib\n")
    assert apt._one_line_archives(text) == ["http://one.example/debian/"]


def test_mirror_from_files_and_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    parts = tmp_path / "sources.list.d"
    parts.mkdir()
    (parts / "debian.sources").write_text(DEB822)
    monkeypatch.setattr(apt, "_SOURCES_PARTS", parts)
    monkeypatch.setattr(apt, "_SOURCES_LIST", tmp_path / "absent")
    monkeypatch.delenv(apt.MIRROR_ENV, raising=False)
    assert apt.debian_mirror() == "http://mirror.example/debian"
    assert "http://mirror.example/debian trixie main" in apt.trixie_source()
    monkeypatch.setenv(apt.MIRROR_ENV, "http://other.example/debian/")
    assert apt.debian_mirror() == "http://other.example/debian"


def test_no_sources_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(apt, "_SOURCES_PARTS", tmp_path / "none.d")
    monkeypatch.setattr(apt, "_SOURCES_LIST", tmp_path / "none")
    monkeypatch.delenv(apt.MIRROR_ENV, raising=False)
    with pytest.raises(InfraError, match="IMAGEKIT_DEBIAN_MIRROR"):
        apt.debian_mirror()
