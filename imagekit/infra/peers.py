"""Peer tools that benchmarks and tests meet as real counterparts: crane, oras, cosign, skopeo.

None of them is ours, and none is a dependency of imagekit itself: they are what a release
engineer would otherwise use, so imagekit is measured and checked against them. crane, oras and
cosign come from Debian sid (Go binaries needing only libc6 >= 2.34, which bookworm has),
fetched through a private apt configuration (see `imagekit.infra.apt`); skopeo is bookworm's.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from imagekit.errors import InfraError, InvalidInput
from imagekit.infra import apt
from imagekit.infra.state import StatePaths

#: tool -> (Debian package, suite it comes from; None = the machine's own suite)
PEERS: dict[str, tuple[str, str | None]] = {
    "crane": ("crane", "sid"),
    "oras": ("oras", "sid"),
    "cosign": ("cosign", "sid"),
    "skopeo": ("skopeo", None),
}


def ensure_peer(tool: str, paths: StatePaths | None = None, log: Path | None = None,
                mirror: str | None = None) -> Path:
    """The path of `tool`, installing its Debian package first when it is missing."""
    if tool not in PEERS:
        raise InvalidInput(f"unknown peer tool {tool!r} (known: {', '.join(sorted(PEERS))})")
    found = shutil.which(tool)
    if found:
        return Path(found)
    package, suite = PEERS[tool]
    paths = paths or StatePaths()
    if log is None:
        paths.logs.mkdir(parents=True, exist_ok=True)
        log = paths.logs / "peers-apt.log"
    if suite is None:
        apt.ensure_packages([package], log)
    else:
        apt.ensure_suite_package(package, suite, paths, log, mirror)
    found = shutil.which(tool)
    if not found:
        raise InfraError(f"{package} installed but {tool} is not on PATH", where=str(log))
    return Path(found)


def ensure_peers(tools: list[str] | None = None,
                 paths: StatePaths | None = None) -> dict[str, Path]:
    """Every peer tool of `tools` (default: all), installed when missing."""
    return {tool: ensure_peer(tool, paths) for tool in (tools or sorted(PEERS))}


def peer_version(tool: str) -> str:
    """The Debian package version of `tool` (Debian's Go builds print no version of their own:
    `crane version` says "could not determine build information")."""
    package, _ = PEERS[tool]
    result = subprocess.run(["dpkg-query", "-W", "-f=${Version}", package], capture_output=True,
                            text=True, check=False)
    return result.stdout.strip() or "unknown"
