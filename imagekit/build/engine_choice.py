"""Which docker client the image phase drives: `IMAGEKIT_DOCKER` if set, else the client that
`imagekit infra up` recorded (`InfraState.docker_client`, the one matching the daemon), else the
engine transport's own default (/usr/bin/docker, then PATH)."""

from __future__ import annotations

import os

from imagekit.engine import DOCKER_ENV, Engine
from imagekit.errors import InfraError


def default_engine() -> Engine:
    if os.environ.get(DOCKER_ENV):
        return Engine()
    try:
        from imagekit.infra.state import load_state

        client = load_state().docker_client
    except (ImportError, InfraError):
        return Engine()
    if client and client.is_file() and os.access(client, os.X_OK):
        return Engine(binary=str(client))
    return Engine()
