"""The version comes from one place (imagekit.__version__): pyproject reads it, `imagekit
--version` shows it, every evidence attempt and every attestation statement carry it."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import imagekit
from imagekit.evidence import EvidenceStore
from imagekit.oci import Digest

REPO = Path(__file__).resolve().parents[2]


def test_pyproject_takes_the_version_from_the_package() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "version" not in project["project"]
    assert project["project"]["dynamic"] == ["version"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {
        "attr": "imagekit.__version__"}


def test_version_option() -> None:
    result = subprocess.run([sys.executable, "-m", "imagekit", "--version"], cwd=REPO,
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"imagekit {imagekit.__version__}\n"


def test_every_attempt_records_the_version(tmp_path: Path) -> None:
    store = EvidenceStore(tmp_path)
    digest = Digest.parse("sha256:" + "ab" * 32)
    with store.attempt(digest, "unit-test", reference="x") as attempt:
        pass
    [record] = store.attempts(str(digest), "unit-test")
    assert record.context == {"imagekit_version": imagekit.__version__, "reference": "x"}
    assert attempt.context["imagekit_version"] == imagekit.__version__


def test_attestation_statements_carry_the_version() -> None:
    from imagekit.attest.statements import promotion_predicate

    digest = Digest.parse("sha256:" + "cd" * 32)
    predicate = promotion_predicate(digest, "application/vnd.oci.image.manifest.v1+json",
                                    report=None, hops=[])
    assert predicate.imagekit_version == imagekit.__version__
