"""Debian packages infra needs, installed with apt only when missing (idempotent, quiet).

`docker-buildx` is not in bookworm; trixie's build (a static-ish Go binary needing libc6 >= 2.34)
works on bookworm, and so do sid's crane, oras and cosign. Such a package is fetched with a
*private* sources list, lists dir and cache under the state dir, so the machine's /etc/apt is
never touched and no newer-suite package can sneak into a normal `apt-get upgrade`.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from imagekit.errors import InfraError
from imagekit.infra.state import StatePaths
from imagekit.progress import run_logged

_ENV = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
#: Another apt run (a parallel install, unattended upgrades) holds the dpkg lock: wait for it.
_LOCK_WAIT = ["-o", "DPkg::Lock::Timeout=600"]
_updated = False

MIRROR_ENV = "IMAGEKIT_DEBIAN_MIRROR"
_SOURCES_LIST = Path("/etc/apt/sources.list")
_SOURCES_PARTS = Path("/etc/apt/sources.list.d")


def _deb822_archives(text: str) -> list[str]:
    """URIs of `Types: deb` stanzas serving Debian's main archive (not security) in a .sources."""
    found = []
    for stanza in text.split("\n\n"):
        fields: dict[str, str] = {}
        for line in stanza.splitlines():
            if line.strip().startswith("#") or ":" not in line:
                continue
            key, _, value = line.partition(":")
            fields[key.strip().lower()] = value.strip()
        suites = fields.get("suites", "").split()
        if "deb" in fields.get("types", "").split() and \
                "main" in fields.get("components", "").split() and \
                any(not suite.endswith("-security") for suite in suites):
            found += [uri for uri in fields.get("uris", "").split() if "security" not in uri]
    return found


def _one_line_archives(text: str) -> list[str]:
    found = []
    for line in text.splitlines():
        words = [w for w in line.split() if not w.startswith("[")]
        if len(words) >= 4 and words[0] == "deb" and "main" in words[3:] and \
                not words[2].endswith("-security") and "security" not in words[1]:
            found.append(words[1])
    return found


def debian_mirror(given: str | None = None) -> str:
    """`given` (the CLI passes $IMAGEKIT_DEBIAN_MIRROR, imagekit.settings), else the Debian
    archive this machine's own apt uses.

    Read from the machine's configuration rather than written into the project, so the project
    follows whatever mirror or proxy the machine is set up with.
    """
    if given:
        return given.rstrip("/")
    candidates: list[str] = []
    if _SOURCES_PARTS.is_dir():
        for path in sorted(_SOURCES_PARTS.glob("*.sources")):
            candidates += _deb822_archives(path.read_text(errors="replace"))
    for path in [_SOURCES_LIST, *sorted(_SOURCES_PARTS.glob("*.list"))]:
        if path.is_file():
            candidates += _one_line_archives(path.read_text(errors="replace"))
    if not candidates:
        raise InfraError("cannot tell which Debian archive apt uses; set "
                         f"{MIRROR_ENV}", where=str(_SOURCES_PARTS))
    return candidates[0].rstrip("/")


def suite_source(suite: str, mirror: str | None = None) -> str:
    return (f"deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] "
            f"{debian_mirror(mirror)} {suite} main\n")


def trixie_source(mirror: str | None = None) -> str:
    return suite_source("trixie", mirror)


def missing_packages(packages: list[str]) -> list[str]:
    """The packages of `packages` that dpkg does not have installed (one dpkg-query call)."""
    if not packages:
        return []
    result = subprocess.run(["dpkg-query", "-W", "-f=${Package}\t${Status}\n", *packages],
                            capture_output=True, text=True, check=False)
    present = set()
    for line in result.stdout.splitlines():
        name, _, status = line.partition("\t")
        if status.strip() == "install ok installed":
            present.add(name.split(":")[0])
    return [p for p in packages if p not in present]


def installed(package: str) -> bool:
    return not missing_packages([package])


def apt_stage(line: str) -> str | None:
    """apt-get's output → stages: downloading (Get:), unpacking, setting up."""
    if line.startswith("Get:"):
        return "downloading"
    if line.startswith("Unpacking "):
        return "unpacking"
    if line.startswith("Setting up "):
        return "setting up"
    return None


def _run(argv: list[str], what: str, log: Path | None, cwd: Path | None = None) -> None:
    """One apt-get call: a phase per stage of the command line's progress, output in `log`."""
    code, _ = run_logged(argv, log or Path(os.devnull), "apt", what=what, stage_of=apt_stage,
                         env=_ENV, cwd=cwd)
    if code != 0:
        raise InfraError(f"{what} failed (exit {code})",
                         where=str(log) if log else " ".join(argv[:3]))


def ensure_packages(packages: list[str], log: Path | None = None) -> list[str]:
    """Install the missing ones (one apt-get update per process first); return those installed."""
    global _updated
    missing = missing_packages(packages)
    if not missing:
        return []
    if os.geteuid() != 0:
        raise InfraError(f"packages {', '.join(missing)} are missing; installing them needs root",
                         where="apt-get")
    if not _updated:
        _run(["apt-get", *_LOCK_WAIT, "-q", "update"], "apt-get update", log)
        _updated = True
    _run(["apt-get", *_LOCK_WAIT, "-q", "-y", "install", "--no-install-recommends", *missing],
         f"apt-get install {' '.join(missing)}", log)
    return missing


def ensure_trixie_package(package: str, paths: StatePaths, log: Path | None = None,
                          mirror: str | None = None) -> bool:
    """Install `package` from Debian trixie via a private apt configuration; True if done now.
    `mirror`: the Debian archive (default the one this machine's apt uses)."""
    return ensure_suite_package(package, "trixie", paths, log, mirror)


def ensure_suite_package(package: str, suite: str, paths: StatePaths,
                         log: Path | None = None, mirror: str | None = None) -> bool:
    """Install `package` from Debian `suite` (trixie, sid) via a private apt configuration, only
    when dpkg lacks it; True if installed now. The .deb is kept, so a rerun downloads nothing."""
    if installed(package):
        return False
    if os.geteuid() != 0:
        raise InfraError(f"package {package} is missing; installing it needs root",
                         where="apt-get")
    deb = download_suite_package(package, suite, paths, log, mirror)
    _run(["apt-get", *_LOCK_WAIT, "-q", "-y", "install", "--no-install-recommends",
          str(deb)], f"apt-get install {deb.name}", log)
    return True


def download_suite_package(package: str, suite: str, paths: StatePaths,
                           log: Path | None = None, mirror: str | None = None) -> Path:
    """The .deb of `package` from Debian `suite`, fetched once through the private apt
    configuration and kept under the state dir (a rerun downloads nothing); never installed.
    For a source package a build unpacks itself (`dpkg-deb -x`), e.g. a Go -dev package."""
    root = paths.apt / suite
    lists, cache = root / "lists", root / "cache"
    parts, debs = root / "sources.list.d", root / "debs"
    for directory in (lists / "partial", cache / "archives" / "partial", parts, debs):
        directory.mkdir(parents=True, exist_ok=True)
    sources = root / "sources.list"
    sources.write_text(suite_source(suite, mirror))
    private = ["-o", f"Dir::Etc::sourcelist={sources}", "-o", f"Dir::Etc::sourceparts={parts}",
               "-o", f"Dir::State::Lists={lists}", "-o", f"Dir::Cache={cache}",
               "-o", "APT::Get::List-Cleanup=0"]
    found = sorted(debs.glob(f"{package}_*.deb"))
    if not found:
        _run(["apt-get", *private, "-q", "update"], f"apt-get update ({suite}, for {package})",
             log)
        _run(["apt-get", *private, "-q", "download", package], f"apt-get download {package}",
             log, cwd=debs)
        found = sorted(debs.glob(f"{package}_*.deb"))
        if not found:
            raise InfraError(f"apt-get download {package} produced no .deb", where=str(debs))
    return found[-1]
