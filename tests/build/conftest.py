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
def session_store(verified_images, tmp_path_factory: pytest.TempPathFactory) -> EvidenceStore:
    """A copy of the run's one `images verify` store (tests/conftest.py `verified_images`):
    the image-phase tests add builds and reruns to it, the original stays as verify left it."""
    return verified_images.store_copy(tmp_path_factory.mktemp("build-evidence") / "store")


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
def verified(verified_images, session_store, standins):
    """`images verify` over the local profile (built, pushed, probed): the run's one verify,
    its records in `session_store`."""
    report = verified_images.report
    return report, {entry.image: entry for entry in report.images}
