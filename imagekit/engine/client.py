"""Which docker client to drive, and a python-on-whales `DockerClient` for it.

This kind of machine may carry two clients: Debian's docker.io (`/usr/bin/docker`, 20.10, the
daemon's own version) and a newer one in /usr/local/bin. Both work with the trixie docker-buildx
plugin, but the daemon's own client is the combination the infra recipe verified, so it is
preferred. `IMAGEKIT_DOCKER` overrides the choice (the infra helper records its pick too).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from python_on_whales import DockerClient

from imagekit.errors import InfraError

DOCKER_ENV = "IMAGEKIT_DOCKER"
_PREFERRED = ("/usr/bin/docker",)


def find_docker_binary(chosen: str | None = None) -> str:
    """`chosen` (`$IMAGEKIT_DOCKER`, passed from the CLI's settings), else the preferred
    client, else docker on PATH."""
    if chosen:
        if not (Path(chosen).is_file() and os.access(chosen, os.X_OK)):
            raise InfraError(f"{DOCKER_ENV} names no executable docker client", where=chosen)
        return chosen
    for candidate in _PREFERRED:
        if Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which("docker")
    if not found:
        raise InfraError("no docker client installed; run `imagekit infra up`")
    return found


def docker_client(binary: str | None = None, config_dir: Path | None = None,
                  host: str | None = None) -> DockerClient:
    """A client for the local daemon (`host`: another daemon's socket, e.g. the build
    engine's). `config_dir` is a DOCKER_CONFIG-style dir (credentials live there, never in
    argv)."""
    binary = binary or find_docker_binary()
    return DockerClient(client_call=[binary], config=str(config_dir) if config_dir else None,
                        host=host)
