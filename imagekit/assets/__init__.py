"""Package data: probes, Pod templates, launch.sh, controller files, stand-in Dockerfiles, the
GPU preflight package. Read through importlib.resources so that an installed wheel finds them
from any working directory (issue 25); never through the checkout's layout."""

from __future__ import annotations

from importlib import resources
from pathlib import Path


def path(*parts: str) -> Path:
    """The on-disk path of a packaged file or folder (the wheel installs unzipped, so files()
    is a real directory; as_file() would copy and is not needed)."""
    root = resources.files(__name__)
    node = root.joinpath(*parts) if parts else root
    return Path(str(node))
