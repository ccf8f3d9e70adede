"""The parts on this machine: the docker engine and buildx, free disk, the evidence store, the
signing key.

Disk minimums, and why:

- docker's data root, 20 GiB (`--min-free` changes it): one image phase of the local profile
  holds both stand-in bases (vLLM 3.67 GB, SGLang 2.98 GB: docs/design/build.md), the fixed
  images' own layers on them (the vLLM pip layer alone is 953 MB), BuildKit's pip cache
  (~1 GB) and, on a rebuild, the previous attempt's layers until docker prunes them: about
  10 GB, doubled so that a rebuild does not meet a full disk in the middle of a layer export
  (the build then fails after minutes, not at its start). The production CUDA bases are several
  times larger: raise it there.
- the evidence store, 1 GiB: records are JSON and text logs (a build attempt keeps its whole
  log, a cluster run its Pods' logs: megabytes each); 1 GiB holds hundreds of runs, and an
  attempt that meets a full disk is left unfinished (never a pass).

Where both are on one filesystem it must hold both minimums together.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from imagekit.doctor.models import Part
from imagekit.errors import ImagekitError, InfraError
from imagekit.results import CheckResult, Status

if TYPE_CHECKING:
    from imagekit.engine.readiness import EngineFacts

GIB = 1 << 30
DOCKER_MIN_FREE_GIB = 20.0
EVIDENCE_MIN_FREE_GIB = 1.0
DATA_ROOT = "docker data root"


def docker_client(docker: str | None, state_dir: Path | None) -> str:
    """The docker client the image phase builds with (`$IMAGEKIT_DOCKER`, else the one infra
    recorded, else the engine's own pick); InfraError when there is none."""
    from imagekit.build.engine_choice import default_engine

    return default_engine(docker, state_dir).binary


def docker_result(facts: EngineFacts) -> CheckResult:
    data = facts.model_dump(mode="json")
    if facts.error is not None:
        return CheckResult(name=Part.DOCKER.value, status=Status.FAIL, data=data,
                           detail=f"the engine does not answer: {facts.error} (client "
                                  f"{facts.client})")
    where = f" at {facts.endpoint}" if facts.endpoint else ""
    return CheckResult(name=Part.DOCKER.value, status=Status.PASS, data=data,
                       detail=f"engine {facts.server_version}{where}, data root "
                              f"{facts.data_root or 'unknown'} (client {facts.client})")


def check_buildx(binary: str, timeout_s: float) -> CheckResult:
    from imagekit.engine.readiness import buildx_version

    try:
        version = buildx_version(binary, timeout_s)
    except InfraError as exc:
        return CheckResult(name=Part.BUILDX.value, status=Status.FAIL,
                           detail=f"{exc.message} (client {binary}); the image phase builds "
                                  "with `docker buildx build`")
    return CheckResult(name=Part.BUILDX.value, status=Status.PASS,
                       data={"version": version},
                       detail=f"version {version} (plugin of {binary})")


def _existing(path: Path) -> Path:
    """`path`, or its nearest existing ancestor (where it would be created)."""
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def check_disk(places: list[tuple[str, Path | None, float, str]]) -> CheckResult:
    """Each (what, path, minimum GiB, why unknown) judged by the free space of its filesystem;
    places on one filesystem must hold their minimums together. A place whose path is not
    known here makes the check DEFERRED (never a pass), unless another one already FAILs."""
    groups: dict[int, list[tuple[str, Path, float]]] = {}
    free: dict[int, int] = {}
    unknown: list[str] = []
    for what, path, minimum, why in places:
        if path is None:
            unknown.append(f"{what}: {why}")
            continue
        here = _existing(path)
        try:
            device = os.stat(here).st_dev
            free[device] = shutil.disk_usage(here).free
        except OSError as exc:
            unknown.append(f"{what}: cannot read {here} ({exc.strerror or exc})")
            continue
        groups.setdefault(device, []).append((what, path, minimum))
    said, short = [], []
    for device, members in groups.items():
        need = sum(m for _, _, m in members)
        have = free[device] / GIB
        names = " and ".join(f"{what} {path}" for what, path, _ in members)
        line = f"{have:.1f} GiB free for {names} (needs {need:g})"
        said.append(line)
        if have < need:
            short.append(line)
    data = {"places": [{"what": w, "path": str(p) if p else None, "min_free_gib": m}
                       for w, p, m, _ in places]}
    not_judged = [f"not judged: {u}" for u in unknown]
    if short:
        return CheckResult(name=Part.DISK.value, status=Status.FAIL, data=data,
                           detail="; ".join(short + not_judged))
    if unknown:
        return CheckResult(name=Part.DISK.value, status=Status.DEFERRED, data=data,
                           detail="; ".join(said + not_judged))
    return CheckResult(name=Part.DISK.value, status=Status.PASS, data=data,
                       detail="; ".join(said))


def check_evidence(root: Path) -> CheckResult:
    """The store's root can be written (a file made and removed there), or, where it does not
    exist yet, created: its nearest existing folder is a writable directory."""
    name, data = Part.EVIDENCE.value, {"root": str(root)}

    def fail(why: str) -> CheckResult:
        return CheckResult(name=name, status=Status.FAIL, data=data, detail=f"{root}: {why}")

    if root.exists() and not root.is_dir():
        return fail("a file is in the evidence store's place (point --evidence-dir or "
                    "IMAGEKIT_EVIDENCE_DIR at a directory)")
    here = _existing(root)
    if not here.is_dir():
        return fail(f"cannot be created: {here} is not a directory")
    try:
        with tempfile.TemporaryFile(dir=here):
            pass
    except OSError as exc:
        return fail(f"cannot write in {here}: {exc.strerror or exc}")
    index = root / "index.jsonl"
    if index.exists() and not os.access(index, os.W_OK):
        return fail(f"{index.name} cannot be appended to")
    if here != root.absolute():
        return CheckResult(name=name, status=Status.PASS, data=data,
                           detail=f"{root} will be created in {here}, which is writable")
    return CheckResult(name=name, status=Status.PASS, data=data, detail=f"{root} is writable")


def check_key(path: Path) -> CheckResult:
    """The signing key loads as `attest` and `promote --key` load it."""
    from imagekit.attest.keys import key_hint, load_private

    name = Part.KEY.value
    try:
        key = load_private(path)
    except ImagekitError as exc:
        return CheckResult(name=name, status=Status.FAIL, data={"path": str(path)},
                           detail=f"{exc.message} ({path})")
    hint = key_hint(key.public_key())
    return CheckResult(name=name, status=Status.PASS, data={"path": str(path), "hint": hint},
                       detail=f"{path}: ECDSA P-256 private key (public key hint {hint})")


def check_engine(docker: str | None, state_dir: Path | None, timeout_s: float,
                 record: Callable[[CheckResult], None], *, engine: bool, buildx: bool,
                 disk: list[tuple[str, Path | None, float, str]] | None,
                 min_free_gib: float = DOCKER_MIN_FREE_GIB) -> None:
    """Record the docker, buildx and disk checks asked for (`disk`: the places besides
    docker's data root, which is added from the engine's answer and must have `min_free_gib`
    free)."""
    from imagekit.engine.readiness import engine_facts

    try:
        binary = docker_client(docker, state_dir)
    except InfraError as exc:
        for wanted, part in ((engine, Part.DOCKER), (buildx, Part.BUILDX)):
            if wanted:
                record(CheckResult(name=part.value, status=Status.FAIL, detail=exc.message))
        if disk is not None:
            record(check_disk([(DATA_ROOT, None, min_free_gib, "no docker client"), *disk]))
        return
    if buildx:
        record(check_buildx(binary, timeout_s))
    if not engine and disk is None:
        return
    try:
        facts = engine_facts(binary, timeout_s)
    except InfraError as exc:
        if engine:
            record(CheckResult(name=Part.DOCKER.value, status=Status.FAIL, detail=exc.message))
        if disk is not None:
            record(check_disk([(DATA_ROOT, None, min_free_gib, "the engine did not answer"),
                               *disk]))
        return
    if engine:
        record(docker_result(facts))
    if disk is not None:
        record(check_disk([_data_root(facts, min_free_gib), *disk]))


def _data_root(facts: EngineFacts, minimum: float) -> tuple[str, Path | None, float, str]:
    """docker's data root as a place for `check_disk`; its path only where it is a path of
    this machine (a remote engine's disk is not seen from here: not judged)."""
    if facts.error is not None:
        return DATA_ROOT, None, minimum, "the engine does not answer"
    if not facts.local:
        return DATA_ROOT, None, minimum, f"the engine is on another machine ({facts.endpoint})"
    if facts.data_root is None or not facts.data_root.exists():
        return DATA_ROOT, None, minimum, f"its data root {facts.data_root} is not a path of " \
                                         "this machine"
    return DATA_ROOT, facts.data_root, minimum, ""
