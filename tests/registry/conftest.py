"""Fixtures for registry tests: the real loopback registries of `imagekit infra` (staging plain
HTTP, production TLS + basic, target TLS + Bearer tokens), clients that read credentials the
way the CLI does (DOCKER_CONFIG), short retry waits, and fresh repository names per test."""

from __future__ import annotations

import uuid

import pytest

from imagekit.registry import ClientPool, RegistryOptions
from .images import BuiltImage, layer_tar, push_image
from .settings import FAST_RETRY



@pytest.fixture(scope="session")
def reg(infra):
    """name -> host:port for staging, production, target."""
    return {name: endpoint.address for name, endpoint in infra.registries.items()}


@pytest.fixture(autouse=True)
def _docker_env(request, monkeypatch, tmp_path_factory):
    """Registry tests see the infra's docker config and fast retries, like a user with
    DOCKER_CONFIG set would; the CLI reads the same."""
    if "infra" in request.fixturenames:
        state = request.getfixturevalue("infra")
        monkeypatch.setenv("DOCKER_CONFIG", str(state.docker_config_dir))
    monkeypatch.setenv("IMAGEKIT_RETRY_WAIT_INITIAL", "0.01")
    monkeypatch.setenv("IMAGEKIT_RETRY_WAIT_MAX", "0.05")
    monkeypatch.setenv("IMAGEKIT_RETRY_AFTER_MAX", "0.1")
    monkeypatch.setenv("IMAGEKIT_UPLOAD_JOURNAL", str(tmp_path_factory.mktemp("journal")))


@pytest.fixture
def options(infra) -> RegistryOptions:
    return RegistryOptions(docker_config=infra.docker_config_dir, retry=FAST_RETRY,
                           chunk_size=1 << 20)


@pytest.fixture
def pool(options):
    with ClientPool(options) as p:
        yield p


@pytest.fixture
def repo() -> str:
    return f"test/{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="session")
def tars() -> list[bytes]:
    """Four layers of 0.5-3 MB: enough for chunked uploads (1 MiB chunks) and parallelism."""
    return [layer_tar(seed, size) for seed, size in
            ((1, 3_000_000), (2, 500_000), (3, 2_000_000), (4, 1_200_000))]


@pytest.fixture
def staged(pool, reg, repo, tars) -> BuiltImage:
    """An image pushed to staging (gzip level 6)."""
    return push_image(pool.get(reg["staging"]), repo, "v1", tars, compression="gzip", level=6)
