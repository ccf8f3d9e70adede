"""The stand-ins' common base: Debian bookworm minbase with python3, made by debootstrap and
`docker import`ed. Nothing can be pulled from outside on this kind of machine, so every base
is made here.

Cached by a key of what goes into it (suite, variant, packages, mirror): the rootfs tarball is
kept under the cache dir and the imported image is tagged with the key, so a second run finds the
tag and does nothing (seconds), and a fresh daemon on the same machine only re-imports.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

from imagekit.engine import Engine
from imagekit.errors import InfraError
from imagekit.infra.apt import debian_mirror

SUITE = "bookworm"
VARIANT = "minbase"
PACKAGES = ("python3", "python3-pip", "python3-venv")
REPOSITORY = "imagekit-standins/bookworm-python"
CACHE_ENV = "IMAGEKIT_CACHE_DIR"


def cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV, "/var/cache/imagekit")).absolute()


def rootfs_key(packages: tuple[str, ...] = PACKAGES) -> str:
    material = json.dumps({"suite": SUITE, "variant": VARIANT, "packages": sorted(packages),
                           "mirror": debian_mirror(), "arch": "amd64", "recipe": 1}, sort_keys=True)
    return hashlib.sha256(material.encode()).hexdigest()


def rootfs_tag(packages: tuple[str, ...] = PACKAGES) -> str:
    return f"{REPOSITORY}:{rootfs_key(packages)[:16]}"


def _ensure_debootstrap(log: list[str]) -> str:
    found = shutil.which("debootstrap")
    if found:
        return found
    log.append("debootstrap missing: apt-get install -y debootstrap")
    done = subprocess.run(["apt-get", "-o", "DPkg::Lock::Timeout=600", "install", "-y",
                           "--no-install-recommends", "debootstrap"],
                          capture_output=True, text=True, check=False)
    log.append(done.stdout[-4000:] + done.stderr[-4000:])
    found = shutil.which("debootstrap")
    if done.returncode != 0 or not found:
        raise InfraError("debootstrap is not installed and apt-get could not install it")
    return found


def make_rootfs_tarball(target: Path, packages: tuple[str, ...], log: list[str]) -> Path:
    """debootstrap into a scratch dir next to `target`, then tar it (numeric owners kept)."""
    debootstrap = _ensure_debootstrap(log)
    work = target.with_suffix(".rootfs")
    if work.exists():
        shutil.rmtree(work)
    argv = [debootstrap, f"--variant={VARIANT}", f"--include={','.join(packages)}", SUITE,
            str(work), debian_mirror()]
    log.append("$ " + " ".join(argv))
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    log.append(done.stdout + done.stderr)
    if done.returncode != 0:
        raise InfraError(f"debootstrap failed with exit code {done.returncode}",
                         where=str(work))
    # apt's downloaded .debs and lists are not part of the base
    for sub in ("var/cache/apt/archives", "var/lib/apt/lists"):
        for item in (work / sub).glob("*"):
            if item.is_file():
                item.unlink()
    partial = target.with_suffix(".partial")
    argv = ["tar", "--numeric-owner", "-C", str(work), "-cf", str(partial), "."]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise InfraError(f"tar of the rootfs failed: {done.stderr[-300:]}", where=str(work))
    os.replace(partial, target)
    shutil.rmtree(work)
    return target


def ensure_rootfs_image(engine: Engine, log: list[str],
                        packages: tuple[str, ...] = PACKAGES) -> tuple[str, bool]:
    """The imported base's tag, and whether anything had to be made (False: cache hit)."""
    tag = rootfs_tag(packages)
    if engine.exists(tag):
        log.append(f"rootfs image {tag} present: cache hit")
        return tag, False
    directory = cache_dir() / "standins"
    directory.mkdir(parents=True, exist_ok=True)
    tarball = directory / f"rootfs-{rootfs_key(packages)[:16]}.tar"
    if not tarball.exists():
        make_rootfs_tarball(tarball, packages, log)
    else:
        log.append(f"rootfs tarball {tarball} cached; importing")
    engine.import_rootfs(tarball, tag, changes=[
        'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin',
        'ENV LANG=C.UTF-8', 'CMD ["/bin/bash"]'])
    return tag, True
