"""Debian packages infra needs, installed with apt only when missing (idempotent, quiet).

`docker-buildx` is not in bookworm; trixie's build (a static-ish Go binary needing libc6 >= 2.34)
works on bookworm. It is fetched with a *private* sources list, lists dir and cache under the
state dir, so the machine's /etc/apt is never touched and no trixie package can sneak into a
normal `apt-get upgrade`.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from imagekit.errors import InfraError
from imagekit.infra.state import StatePaths

_ENV = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
#: Another apt run (a parallel install, unattended upgrades) holds the dpkg lock: wait for it.
_LOCK_WAIT = ["-o", "DPkg::Lock::Timeout=600"]
_updated = False

TRIXIE_SOURCE = ("deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] "
                 "http://deb.debian.org/debian trixie main\n")


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


def _run(argv: list[str], what: str, log: Path | None, cwd: Path | None = None) -> None:
    out = open(log, "ab") if log else subprocess.DEVNULL
    try:
        result = subprocess.run(argv, env=_ENV, stdout=out, stderr=subprocess.STDOUT, cwd=cwd,
                                check=False)
    finally:
        if log:
            out.close()
    if result.returncode != 0:
        raise InfraError(f"{what} failed (exit {result.returncode})",
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


def ensure_trixie_package(package: str, paths: StatePaths, log: Path | None = None) -> bool:
    """Install `package` from Debian trixie via a private apt configuration; True if done now."""
    if installed(package):
        return False
    root = paths.apt / "trixie"
    lists, cache = root / "lists", root / "cache"
    parts, debs = root / "sources.list.d", root / "debs"
    for directory in (lists / "partial", cache / "archives" / "partial", parts, debs):
        directory.mkdir(parents=True, exist_ok=True)
    sources = root / "sources.list"
    sources.write_text(TRIXIE_SOURCE)
    private = ["-o", f"Dir::Etc::sourcelist={sources}", "-o", f"Dir::Etc::sourceparts={parts}",
               "-o", f"Dir::State::Lists={lists}", "-o", f"Dir::Cache={cache}",
               "-o", "APT::Get::List-Cleanup=0"]
    found = sorted(debs.glob(f"{package}_*.deb"))
    if not found:
        _run(["apt-get", *private, "-q", "update"], f"apt-get update (trixie, for {package})", log)
        _run(["apt-get", *private, "-q", "download", package], f"apt-get download {package}",
             log, cwd=debs)
        found = sorted(debs.glob(f"{package}_*.deb"))
        if not found:
            raise InfraError(f"apt-get download {package} produced no .deb", where=str(debs))
    _run(["apt-get", *_LOCK_WAIT, "-q", "-y", "install", "--no-install-recommends",
          str(found[-1])], f"apt-get install {found[-1].name}", log)
    return True
