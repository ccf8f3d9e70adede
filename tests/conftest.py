"""Shared test settings. Real-infrastructure tests are marked docker/registry/cluster/gpu; in CI
(CI=true) a marked test whose part is missing FAILS, it never skips silently."""

from __future__ import annotations

import json
import os
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import pytest

T = TypeVar("T")

REPO = Path(__file__).resolve().parents[1]
IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}


#: Files whose tests must share a worker with another file's: the same package-scoped engine
#: serves both, so one start (not one per worker) serves them all.
SHARED_WORKER = {"tests/acceptance/test_semantic_cases_real.py":
                 "tests/acceptance/test_real_model.py",
                 # the rebuilds hold gigabytes of layouts and a fresh engine for minutes; the
                 # pages' `imagekit doctor` judges free disk: never at the same time
                 "tests/build/test_reproducible_real.py": "tests/docs/test_pages.py"}

#: Scopes sent out before every other: the pages are the README as a user on a new machine types
#: it (`imagekit doctor` judges the disk the suite has not yet filled with its images), and with
#: the rebuilds they are the longest unit of the run, which sent first no longer ends it late.
FIRST_SCOPES = ("tests/docs/test_pages.py",)


class _FirstScopesFirst(OrderedDict):  # type: ignore[type-arg]
    """The scheduler's work queue, with FIRST_SCOPES moved to its front as they are queued."""

    def __setitem__(self, key: str, value: object) -> None:
        super().__setitem__(key, value)
        if key in FIRST_SCOPES:
            self.move_to_end(key, last=False)


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """`--dist loadfile`, with the files of SHARED_WORKER sent to one worker together."""
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class SharedEngineScheduling(LoadFileScheduling):
        def __init__(self, config: pytest.Config, log: object = None) -> None:
            super().__init__(config, log)
            self.workqueue = _FirstScopesFirst()

        def _split_scope(self, nodeid: str) -> str:
            scope = super()._split_scope(nodeid)
            return SHARED_WORKER.get(scope, scope)

    return SharedEngineScheduling(config, log)


@pytest.fixture(autouse=True)
def _evidence_in_tmp(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
                     ) -> None:
    """Tests never write into the developer's own evidence store."""
    monkeypatch.setenv("IMAGEKIT_EVIDENCE_DIR", str(tmp_path_factory.mktemp("evidence")))


def write_secret(path: Path, text: str) -> Path:
    """A file for a secret: created 0600 (never world-readable, not even for a moment)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    return path


@pytest.fixture
def secret_file():
    """write(path, text) -> path: a 0600 file holding a secret, removed after the test (pytest
    keeps tmp_path of the last runs: a password must not stay there)."""
    written: list[Path] = []

    def write(path: Path, text: str) -> Path:
        written.append(write_secret(path, text))
        return path

    yield write
    for path in written:
        path.unlink(missing_ok=True)


def once_per_run(tmp_path_factory: pytest.TempPathFactory, name: str,
                 produce: Callable[[Path], T], dump: Callable[[T], object],
                 load: Callable[[object], T]) -> T:
    """`produce(directory)` once per test run, however many pytest-xdist workers ask: the first
    builds under a file lock in the run's shared temp folder and writes the result as JSON; the
    others wait, then read it. A build that raises writes nothing, so the next asker retries and
    fails the same way, with its own traceback. Without workers it simply produces."""
    from filelock import FileLock

    if not os.environ.get("PYTEST_XDIST_TESTRUNUID"):
        return produce(tmp_path_factory.mktemp(name))
    shared = tmp_path_factory.getbasetemp().parent / f"once-{name}"
    shared.mkdir(exist_ok=True)
    result = shared / "result.json"
    with FileLock(str(shared / ".lock")):
        if result.is_file():
            return load(json.loads(result.read_text()))
        work = shared / "work"
        work.mkdir(exist_ok=True)
        value = produce(work)
        result.write_text(json.dumps(dump(value)))
        return value


@pytest.fixture(scope="session")
def built_wheel(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(wheel, deleted source copy): imagekit's wheel built once per session from a copy of this
    tree as git sees it (tests/build/wheel.py), for every test that installs or ships it. The
    copy is deleted after the build, so nothing can find its way back to it."""
    import shutil

    from tests.build import wheel

    def produce(root: Path) -> tuple[Path, Path]:
        source, dist = wheel.source_copy(root / "src"), root / "dist"
        dist.mkdir()
        built = wheel.build(source, dist)
        assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
        (found,) = dist.glob("imagekit-*.whl")
        shutil.rmtree(source)
        return found, source

    return once_per_run(tmp_path_factory, "wheel-build", produce,
                        lambda value: [str(p) for p in value],
                        lambda data: (Path(data[0]), Path(data[1])))  # type: ignore[index]


@dataclass(frozen=True)
class TorchImage:
    """The one CPU torch image the cluster tests run (`reference` by tag, `digest`)."""
    reference: object   # imagekit.oci.ImageReference
    digest: object      # imagekit.oci.Digest

    @property
    def pinned(self):
        return self.reference.with_digest(self.digest)  # type: ignore[attr-defined]


@pytest.fixture(scope="session")
def torch_image(infra, tmp_path_factory: pytest.TempPathFactory) -> TorchImage:
    """The sglang stand-in (bookworm + python3 + this machine's CPU torch), pushed to staging by
    `imagekit standins build` (content-keyed: warm when tests/build ran): the one torch image
    of the suite, for the GPU preflight Pods of tests/gpu and tests/cluster alike."""
    from imagekit.engine import Engine
    from imagekit.evidence import EvidenceStore
    from imagekit.oci import Digest, ImageReference
    from imagekit.spec import load_spec
    from imagekit.standins import build_standins

    def produce(work: Path) -> TorchImage:
        spec = load_spec(REPO / "dockerfiles" / "images.toml")
        engine = Engine(binary=str(infra.docker_client))
        records = build_standins(spec, engine, EvidenceStore(work / "torch-ev"), "local")
        [record] = [r for r in records if r.image == "sglang"]
        return TorchImage(reference=record.reference, digest=record.digest)

    return once_per_run(tmp_path_factory, "torch-image", produce,
                        lambda image: [str(image.reference), str(image.digest)],
                        lambda data: TorchImage(reference=ImageReference.parse(data[0]),  # type: ignore[index]
                                                digest=Digest.parse(data[1])))  # type: ignore[index]


@dataclass(frozen=True)
class VerifiedImages:
    """`images verify` over the local profile, once per test run: its report and the store it
    wrote. Tests that add to a store take their own copy (`store_copy`), so each still starts
    from the image phase alone."""
    report: object      # imagekit.imagesverify.VerifyReport
    store_root: Path

    def store_copy(self, dest: Path):  # -> imagekit.evidence.EvidenceStore
        import shutil

        from imagekit.evidence import EvidenceStore

        shutil.copytree(self.store_root, dest)
        return EvidenceStore(dest)

    def entry(self, name: str):  # -> imagekit.imagesverify.ImageEntry
        (found,) = [e for e in self.report.images if e.image == name]  # type: ignore[attr-defined]
        return found


@pytest.fixture(scope="session")
def verified_images(infra, tmp_path_factory: pytest.TempPathFactory) -> VerifiedImages:
    """Both fixed images built, pushed and probed once per test run (stand-ins first), shared
    by the image-phase, cluster-probe and cluster-accept tests where isolation allows."""
    from imagekit.engine import Engine
    from imagekit.evidence import EvidenceStore
    from imagekit.imagesverify import verify_images
    from imagekit.imagesverify.models import ImagesVerifyReport
    from imagekit.spec import load_spec
    from imagekit.standins import build_standins

    def produce(work: Path) -> VerifiedImages:
        spec = load_spec(REPO / "dockerfiles" / "images.toml")
        engine = Engine(binary=str(infra.docker_client))
        root = work / "store"
        store = EvidenceStore(root)
        build_standins(spec, engine, store, "local")
        report = verify_images(spec, engine, store, profile="local")
        return VerifiedImages(report=report, store_root=root)

    return once_per_run(
        tmp_path_factory, "verified-images", produce,
        lambda done: {"report": done.report.model_dump(mode="json"),  # type: ignore[attr-defined]
                      "store_root": str(done.store_root)},
        lambda data: VerifiedImages(
            report=ImagesVerifyReport.model_validate(data["report"]),  # type: ignore[index]
            store_root=Path(data["store_root"])))  # type: ignore[index]


@pytest.fixture(scope="session")
def infra():  # -> imagekit.infra.state.InfraState
    """The real local infrastructure: `imagekit infra up --no-cluster` once per session, then
    its state.

    Never skips: a part that cannot start fails every test that needs it, with the reason.
    (`make test` runs `imagekit infra up --cluster` first, so this is normally the fast path.)
    """
    import subprocess
    import sys

    from imagekit.infra.state import load_state
    from imagekit.settings import load

    if os.geteuid() != 0:
        pytest.fail("real-infrastructure tests need root (imagekit infra up starts daemons)")
    result = subprocess.run([sys.executable, "-m", "imagekit", "infra", "up", "--no-cluster"],
                            capture_output=True, text=True, timeout=1200, check=False)
    if result.returncode != 0:
        pytest.fail(f"imagekit infra up failed (exit {result.returncode}): "
                    f"{(result.stderr or result.stdout).strip()[-2000:]}")
    return load_state(load().state_dir)  # where the CLI's `infra up` wrote it
