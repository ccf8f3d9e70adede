"""The Debian archive is read from the machine's apt configuration, never written in the project."""

from __future__ import annotations

from pathlib import Path

import pytest

from imagekit.errors import InfraError
from imagekit.infra import apt
from imagekit.settings import load

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
    monkeypatch.setenv(apt.MIRROR_ENV, "http://ignored.example/debian")  # read at the CLI only
    assert apt.debian_mirror() == "http://mirror.example/debian"
    assert "http://mirror.example/debian trixie main" in apt.trixie_source()
    given = load({apt.MIRROR_ENV: "http://other.example/debian/"}).debian_mirror
    assert apt.debian_mirror(given) == "http://other.example/debian"
    assert apt.debian_mirror("http://other.example/debian/") == "http://other.example/debian"
    assert "http://other.example/debian sid main" in apt.suite_source("sid", given)


def test_rootfs_keys_are_byte_identical_for_the_same_mirror(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The stand-in base's cache key and tag, for a mirror given as an argument, are the ones
    the process computed when rootfs.py read $IMAGEKIT_DEBIAN_MIRROR itself (values recorded
    from that code); another mirror is another key (the case that makes it FAIL)."""
    from imagekit.standins.rootfs import rootfs_key, rootfs_tag

    monkeypatch.setattr(apt, "_SOURCES_PARTS", tmp_path / "none.d")   # no machine fallback
    monkeypatch.setattr(apt, "_SOURCES_LIST", tmp_path / "none")
    old = "5812ed7694d5b371eadf3b7c6b237ca7ee8fd3389804c948757fe9713dc7e298"
    assert rootfs_key(mirror="http://m.example/debian/") == old
    assert rootfs_key(mirror="http://m.example/debian") == old        # trailing / as before
    assert rootfs_tag(mirror="http://m.example/debian/") == \
        "imagekit-standins/bookworm-python:5812ed7694d5b371"
    assert rootfs_key(("python3",), "http://m.example/debian/") == \
        "0a8576aa01214aedfa3d56488778ddb07dff942e18585c79bb88fd01a229df81"
    assert rootfs_key(mirror="http://n.example/debian") != old


def test_no_sources_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(apt, "_SOURCES_PARTS", tmp_path / "none.d")
    monkeypatch.setattr(apt, "_SOURCES_LIST", tmp_path / "none")
    monkeypatch.delenv(apt.MIRROR_ENV, raising=False)
    with pytest.raises(InfraError, match="IMAGEKIT_DEBIAN_MIRROR"):
        apt.debian_mirror()
