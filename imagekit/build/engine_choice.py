"""Which docker client the image phase drives: `IMAGEKIT_DOCKER` if set, else the client that
`imagekit infra up` recorded (`InfraState.docker_client`, the one matching the daemon), else the
engine transport's own default (/usr/bin/docker, then PATH)."""

from __future__ import annotations

import os
from pathlib import Path

from imagekit.engine import Engine, find_docker_binary
from imagekit.errors import InfraError


def default_engine(docker: str | None = None, state_dir: Path | None = None) -> Engine:
    """`docker` (`$IMAGEKIT_DOCKER`, from the CLI's settings) when given, else the client infra
    recorded in its state (`state_dir`: `$IMAGEKIT_STATE_DIR`), else the engine's own pick."""
    if docker:
        return Engine(binary=find_docker_binary(docker))
    try:
        from imagekit.infra.state import load_state

        client = load_state(state_dir).docker_client
    except (ImportError, InfraError):
        return Engine()
    if client and client.is_file() and os.access(client, os.X_OK):
        return Engine(binary=str(client))
    return Engine()
