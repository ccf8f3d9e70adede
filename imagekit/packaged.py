"""The files imagekit ships beside its code: the Dockerfiles and the default images spec
(dockerfiles/), the in-image probes (probes/), the Pod templates and scripts (manifests/) and the
GPU preflight package (gpu_checks/preflight/).

They live at the top of the repository, where a reader of the design looks for them, and the
wheel maps them in (pyproject's package-dir): the first three under imagekit/data/, the preflight
as the top-level package `preflight` (it runs as `python -m preflight`, inside images). One
lookup serves both an installed wheel and a checkout, from any working directory; nothing here
reads the environment or the working directory."""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent

#: Each shipped folder: where an installed wheel has it, and where a checkout has it.
FOLDERS: dict[str, tuple[Path, Path]] = {
    "dockerfiles": (_PACKAGE / "data" / "dockerfiles", _PACKAGE.parent / "dockerfiles"),
    "probes": (_PACKAGE / "data" / "probes", _PACKAGE.parent / "probes"),
    "manifests": (_PACKAGE / "data" / "manifests", _PACKAGE.parent / "manifests"),
    "preflight": (_PACKAGE.parent / "preflight", _PACKAGE.parent / "gpu_checks" / "preflight"),
}


def path(folder: str, *parts: str) -> Path:
    """The on-disk path of a shipped file or folder, e.g. `path("probes", "pip_check.py")`.

    The wheel's place is taken when it exists, else the checkout's (an editable install or a
    test run from the repository). An installed wheel that lost a folder gets the wheel's
    place too, so the error names where the file should be, not a checkout that never was.
    The wheel installs unzipped, so this is a real path."""
    try:
        installed, checkout = FOLDERS[folder]
    except KeyError:
        raise ValueError(f"no shipped folder named {folder!r} (one of {', '.join(FOLDERS)})") \
            from None
    wheel = (_PACKAGE / "data").is_dir()
    root = installed if installed.is_dir() or (wheel and not checkout.is_dir()) else checkout
    return root.joinpath(*parts)


def in_installed_package(path: Path) -> bool:
    """Whether `path` lies in the wheel's installed copy of a shipped folder (site-packages),
    not in a checkout or a user's folder. Files there belong to the installation: an upgrade
    replaces them, so nothing imagekit writes (a lock) may go there."""
    target = path.absolute()
    return any(installed.is_dir() and target.is_relative_to(installed.absolute())
               for installed, _ in FOLDERS.values())
