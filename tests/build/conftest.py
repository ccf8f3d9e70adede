"""Session fixtures for the image-phase tests: the real engine, the real stand-ins, real pip.

Everything expensive is made once per session and cached by content keys across sessions
(the debootstrap rootfs, the stand-ins, BuildKit's cache), so a warm run takes about a minute
and a cold one (fresh machine) about ten.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from imagekit.engine import Engine
from imagekit.evidence import EvidenceStore
from imagekit.spec import load_spec

REPO = Path(__file__).resolve().parents[2]
ASSETS = REPO   # the shipped folders: dockerfiles/, probes/, manifests/
FIXTURES = Path(__file__).resolve().parent / "fixtures"


@pytest.fixture(scope="session")
def engine(infra) -> Engine:
    engine = Engine(binary=str(infra.docker_client))
    engine.ping()
    return engine


@pytest.fixture(scope="session")
def session_store(tmp_path_factory: pytest.TempPathFactory) -> EvidenceStore:
    return EvidenceStore(tmp_path_factory.mktemp("build-evidence"))


@pytest.fixture(scope="session")
def spec():
    return load_spec(ASSETS / "dockerfiles" / "images.toml")


@pytest.fixture(scope="session")
def standins(spec, engine, session_store):
    """Both stand-ins, pushed to staging and pinned into the local lock."""
    from imagekit.standins import build_standins

    records = build_standins(spec, engine, session_store, "local")
    return {record.image: record for record in records}


@pytest.fixture(scope="session")
def verified(spec, engine, session_store, standins):
    """`images verify` over the local profile (built, pushed, probed)."""
    from imagekit.imagesverify import verify_images

    report = verify_images(spec, engine, session_store, profile="local")
    return report, {entry.image: entry for entry in report.images}
