"""What the docker client says about its engine, asked with a bound: `imagekit doctor`'s view.

The engine's other calls (python-on-whales) wait as long as the daemon takes, which is right
for a build and wrong for a readiness check: a daemon that hangs must be a FAIL within seconds.
So each question here is one `docker` process with a time-out, asked in the words docker itself
answers: `docker info` (the server's version and data root, or the errors it met reaching it),
`docker context inspect` (the endpoint: a local socket, or another machine), and
`docker buildx version` (the plugin the image phase builds with).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from imagekit.errors import InfraError


class EngineFacts(BaseModel):
    """The engine as its client sees it: its version and data root where it answered."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    client: str
    #: where the client connects (`unix:///var/run/docker.sock`, `tcp://…`, `ssh://…`)
    endpoint: str | None = None
    server_version: str | None = None
    data_root: Path | None = None
    #: why the engine did not answer (docker's own words), None when it did
    error: str | None = None

    @property
    def local(self) -> bool:
        """The engine runs on this machine (its data root is a path here)."""
        return self.endpoint is None or self.endpoint.startswith(("unix://", "npipe://"))


def _docker(binary: str, args: list[str], timeout_s: float) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run([binary, *args], capture_output=True, text=True,
                              timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise InfraError(f"`docker {' '.join(args[:2])}` gave no answer within {timeout_s:g} s",
                         where=binary) from None
    except OSError as exc:
        raise InfraError(f"cannot run the docker client: {exc.strerror or exc}",
                         where=binary) from None


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else "no message"


def engine_facts(binary: str, timeout_s: float) -> EngineFacts:
    """The engine's version, data root and endpoint; `error` says why it did not answer.
    InfraError only when the client itself cannot be run or hangs."""
    context = _docker(binary, ["context", "inspect", "--format",
                               "{{json .Endpoints.docker.Host}}"], timeout_s)
    endpoint = None
    if context.returncode == 0:
        try:
            found = json.loads(context.stdout)
            endpoint = found if isinstance(found, str) and found else None
        except ValueError:
            endpoint = None
    done = _docker(binary, ["info", "--format", "{{json .}}"], timeout_s)
    try:
        info = json.loads(done.stdout) if done.stdout.strip() else {}
    except ValueError:
        info = {}
    if not isinstance(info, dict):
        info = {}
    errors = [str(e) for e in info.get("ServerErrors") or []]
    version = info.get("ServerVersion")
    if errors or not version:
        why = "; ".join(errors) or _last_line(done.stderr or done.stdout)
        return EngineFacts(client=binary, endpoint=endpoint, error=why)
    root = info.get("DockerRootDir")
    return EngineFacts(client=binary, endpoint=endpoint, server_version=str(version),
                       data_root=Path(root) if isinstance(root, str) and root else None)


def buildx_version(binary: str, timeout_s: float) -> str:
    """The buildx plugin's version (`v0.19.3`, `0.13.1+ds1`); InfraError when the client has no
    working buildx (the message is docker's)."""
    done = _docker(binary, ["buildx", "version"], timeout_s)
    words = done.stdout.split()
    if done.returncode != 0 or len(words) < 2:
        raise InfraError(f"docker buildx is not usable: {_last_line(done.stderr or done.stdout)}",
                         where=binary)
    return words[1]
