"""The Docker engine infra starts: python-on-whales `buildx.build` with a BuildKit secret, through
the client InfraState names, on a base made by `docker import` (nothing is pulled)."""

from __future__ import annotations

import hashlib
import io
import secrets
import subprocess
import tarfile
from pathlib import Path

import pytest
from python_on_whales import DockerClient

from imagekit.infra import apt
from imagekit.infra.state import InfraState

pytestmark = pytest.mark.docker

BUSYBOX = Path("/bin/busybox")


@pytest.fixture(scope="session")
def docker(infra: InfraState) -> DockerClient:
    assert infra.docker_client.exists(), f"{infra.docker_client} missing"
    return DockerClient(client_call=[str(infra.docker_client)], host=infra.docker_host,
                        config=str(infra.docker_config_dir))


@pytest.fixture(scope="session")
def busybox_base(docker: DockerClient, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A one-binary base image, imported once and cached by the binary's digest."""
    apt.ensure_packages(["busybox-static"])
    data = BUSYBOX.read_bytes()
    tag = f"imagekit-infra-test/busybox:{hashlib.sha256(data).hexdigest()[:12]}"
    if docker.image.exists(tag):
        return tag
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        info = tarfile.TarInfo("bin/busybox")
        info.size, info.mode = len(data), 0o755
        tar.addfile(info, io.BytesIO(data))
        for applet in ("sh", "cat", "ls", "sha256sum", "test"):
            link = tarfile.TarInfo(f"bin/{applet}")
            link.type, link.linkname = tarfile.SYMTYPE, "busybox"
            tar.addfile(link)
    tarball = tmp_path_factory.mktemp("base") / "rootfs.tar"
    tarball.write_bytes(buffer.getvalue())
    docker.import_(tarball, tag)
    return tag


def test_client_matches_daemon_and_has_buildx(docker: DockerClient, infra: InfraState) -> None:
    assert infra.docker_client == Path("/usr/bin/docker")
    version = docker.version()
    assert version.server is not None and version.server.api_version
    result = subprocess.run([str(infra.docker_client), "buildx", "version"], capture_output=True,
                            text=True, check=False)
    assert result.returncode == 0 and "buildx" in result.stdout


def test_buildx_build_with_secret(docker: DockerClient, busybox_base: str,
                                  tmp_path: Path, secret_file) -> None:
    secret_value = secrets.token_hex(24)
    secret_file = secret_file(tmp_path / "secret", secret_value)  # 0600, removed afterwards
    context = tmp_path / "ctx"
    context.mkdir()
    (context / "Dockerfile").write_text(
        f"FROM {busybox_base}\n"
        "RUN --mount=type=secret,id=x,required=true sha256sum /run/secrets/x > /seen\n")
    tag = f"imagekit-infra-test/secret:{secret_value[:8]}"
    try:
        image = docker.buildx.build(context, secrets=[f"id=x,src={secret_file}"], load=True,
                                    tags=[tag], progress=False, cache=False)
        assert image is not None
        seen = docker.run(tag, ["cat", "/seen"], remove=True)
        assert seen.split()[0] == hashlib.sha256(secret_value.encode()).hexdigest()
        # the secret itself is in no layer and no history entry
        missing = docker.run(tag, ["sh", "-c", "test -e /run/secrets/x && echo present || "
                                               "echo absent"], remove=True)
        assert missing.strip() == "absent"
        history = subprocess.run([str(docker.client_config.client_call[0]), "history",
                                  "--no-trunc", tag], capture_output=True, text=True, check=True)
        assert secret_value not in history.stdout
        saved = tmp_path / "image.tar"
        docker.image.save(tag, output=saved)
        assert secret_value.encode() not in _all_bytes(saved)
    finally:
        if docker.image.exists(tag):
            docker.image.remove(tag, force=True)


def _all_bytes(archive: Path) -> bytes:
    """The saved image with every nested layer tar opened (layers are plain tars in docker save)."""
    out = io.BytesIO()
    with tarfile.open(archive) as outer:
        for member in outer.getmembers():
            if member.isfile():
                data = outer.extractfile(member).read()  # type: ignore[union-attr]
                out.write(data)
    return out.getvalue()


def test_push_with_config_credentials(docker: DockerClient, busybox_base: str,
                                      infra: InfraState) -> None:
    """docker reads DOCKER_CONFIG's auths: basic auth on production, the token flow on target."""
    for name in ("production", "target"):
        ref = f"{infra.registries[name].address}/infra-test/busybox:engine"
        docker.image.tag(busybox_base, ref)
        try:
            docker.image.push(ref, quiet=True)
            docker.image.remove(ref)
            docker.image.pull(ref, quiet=True)
            assert docker.image.exists(ref)
        finally:
            if docker.image.exists(ref):
                docker.image.remove(ref)
