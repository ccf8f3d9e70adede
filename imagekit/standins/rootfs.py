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
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from imagekit.engine import Engine
from imagekit.errors import InfraError
from imagekit.infra.apt import debian_mirror
from imagekit.progress import current as current_progress
from imagekit.progress import run_logged

SUITE = "bookworm"
VARIANT = "minbase"
PACKAGES = ("python3", "python3-pip", "python3-venv")
REPOSITORY = "imagekit-standins/bookworm-python"
#: The rootfs cache unless the caller passes `cache_dir` (the CLI passes IMAGEKIT_CACHE_DIR,
#: imagekit.settings).
DEFAULT_CACHE_DIR = Path("/var/cache/imagekit")


def rootfs_key(packages: tuple[str, ...] = PACKAGES, mirror: str | None = None) -> str:
    """The base's content key; `mirror`: the Debian archive (default the one this machine's
    apt uses; the CLI passes $IMAGEKIT_DEBIAN_MIRROR), part of the key."""
    material = json.dumps({"suite": SUITE, "variant": VARIANT, "packages": sorted(packages),
                           "mirror": debian_mirror(mirror), "arch": "amd64", "recipe": 1},
                          sort_keys=True)
    return hashlib.sha256(material.encode()).hexdigest()


def rootfs_tag(packages: tuple[str, ...] = PACKAGES, mirror: str | None = None) -> str:
    return f"{REPOSITORY}:{rootfs_key(packages, mirror)[:16]}"


def _ensure_debootstrap(log: list[str]) -> str:
    found = shutil.which("debootstrap")
    if found:
        return found
    log.append("debootstrap missing: apt-get install -y debootstrap")
    with current_progress().phase("rootfs", "apt-get install debootstrap"):
        done = subprocess.run(["apt-get", "-o", "DPkg::Lock::Timeout=600", "install", "-y",
                               "--no-install-recommends", "debootstrap"],
                              capture_output=True, text=True, check=False)
    log.append(done.stdout[-4000:] + done.stderr[-4000:])
    found = shutil.which("debootstrap")
    if done.returncode != 0 or not found:
        raise InfraError("debootstrap is not installed and apt-get could not install it")
    return found


#: debootstrap's `I:` lines that begin a stage (any other line stays in the current one):
#: Retrieving/Validating alternate per package, Unpacking/Configuring per package, so a stage
#: is the coarse step a person recognises, with the package as its latest detail.
_STAGES = (
    (re.compile(r"^I: Retrieving (InRelease|Release)\b"), "release and package lists"),
    (re.compile(r"^I: Resolving dependencies"), "resolving dependencies"),
    (re.compile(r"^I: Retrieving (?!InRelease|Release\b|Packages\b)"), "retrieving packages"),
    (re.compile(r"^I: (Chosen extractor|Extracting )"), "extracting"),
    (re.compile(r"^I: Installing core packages"), "installing core packages"),
    (re.compile(r"^I: Unpacking the base system"), "unpacking the base system"),
    (re.compile(r"^I: Configuring the base system"), "configuring the base system"),
    (re.compile(r"^I: Base system installed successfully"), "installed"),
)


def debootstrap_stage(line: str) -> str | None:
    """The stage a debootstrap output line begins, or None (it belongs to the current one)."""
    for pattern, stage in _STAGES:
        if pattern.match(line):
            return stage
    return None


def debootstrap_stages(log_text: str) -> list[str]:
    """The stages a whole debootstrap log went through, in order (what a run showed live)."""
    seen: list[str] = []
    for line in log_text.splitlines():
        stage = debootstrap_stage(line)
        if stage and (not seen or seen[-1] != stage):
            seen.append(stage)
    return seen


def make_rootfs_tarball(target: Path, packages: tuple[str, ...], log: list[str],
                        mirror: str | None = None) -> Path:
    """debootstrap into a scratch dir next to `target`, then tar it (numeric owners kept)."""
    debootstrap = _ensure_debootstrap(log)
    work = target.with_suffix(".rootfs")
    if work.exists():
        shutil.rmtree(work)
    argv = [debootstrap, f"--variant={VARIANT}", f"--include={','.join(packages)}", SUITE,
            str(work), debian_mirror(mirror)]
    log.append("$ " + " ".join(argv))
    with tempfile.TemporaryDirectory(prefix="imagekit-debootstrap-") as tmp:
        output = Path(tmp) / "debootstrap.log"
        code, _ = run_logged(argv, output, "debootstrap", what="starting",
                             stage_of=debootstrap_stage)
        log.append(output.read_text(errors="replace"))
    if code != 0:
        raise InfraError(f"debootstrap failed with exit code {code}", where=str(work))
    # apt's downloaded .debs and lists are not part of the base
    for sub in ("var/cache/apt/archives", "var/lib/apt/lists"):
        for item in (work / sub).glob("*"):
            if item.is_file():
                item.unlink()
    partial = target.with_suffix(".partial")
    argv = ["tar", "--numeric-owner", "-C", str(work), "-cf", str(partial), "."]
    with current_progress().phase("rootfs", "tar of the rootfs"):
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise InfraError(f"tar of the rootfs failed: {done.stderr[-300:]}", where=str(work))
    os.replace(partial, target)
    shutil.rmtree(work)
    return target


def ensure_rootfs_image(engine: Engine, log: list[str], packages: tuple[str, ...] = PACKAGES,
                        cache_dir: Path | None = None,
                        mirror: str | None = None) -> tuple[str, bool]:
    """The imported base's tag, and whether anything had to be made (False: cache hit); the
    debootstrap tarball is cached under `cache_dir` (default /var/cache/imagekit), made from
    `mirror` (default the Debian archive this machine's apt uses)."""
    tag = rootfs_tag(packages, mirror)
    if engine.exists(tag):
        log.append(f"rootfs image {tag} present: cache hit")
        return tag, False
    directory = (cache_dir or DEFAULT_CACHE_DIR).absolute() / "standins"
    directory.mkdir(parents=True, exist_ok=True)
    tarball = directory / f"rootfs-{rootfs_key(packages, mirror)[:16]}.tar"
    if not tarball.exists():
        make_rootfs_tarball(tarball, packages, log, mirror)
    else:
        log.append(f"rootfs tarball {tarball} cached; importing")
    size = tarball.stat().st_size
    with current_progress().phase("rootfs", f"docker import ({size / 1e6:.0f} MB)"):
        engine.import_rootfs(tarball, tag, changes=[
            'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin',
            'ENV LANG=C.UTF-8', 'CMD ["/bin/bash"]'])
    return tag, True
