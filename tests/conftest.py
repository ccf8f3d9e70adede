"""Shared test settings. Real-infrastructure tests are marked docker/registry/cluster/gpu; in CI
(CI=true) a marked test whose part is missing FAILS, it never skips silently."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}


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


@pytest.fixture(scope="session")
def built_wheel(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(wheel, deleted source copy): imagekit's wheel built once per session from a copy of this
    tree as git sees it (tests/build/wheel.py), for every test that installs or ships it. The
    copy is deleted after the build, so nothing can find its way back to it."""
    import shutil

    from tests.build import wheel

    root = tmp_path_factory.mktemp("wheel-build")
    source, dist = wheel.source_copy(root / "src"), root / "dist"
    dist.mkdir()
    built = wheel.build(source, dist)
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    (found,) = dist.glob("imagekit-*.whl")
    shutil.rmtree(source)
    return found, source


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
    from imagekit.spec import load_spec
    from imagekit.standins import build_standins

    spec = load_spec(REPO / "dockerfiles" / "images.toml")
    engine = Engine(binary=str(infra.docker_client))
    records = build_standins(spec, engine, EvidenceStore(tmp_path_factory.mktemp("torch-ev")),
                             "local")
    [record] = [r for r in records if r.image == "sglang"]
    return TorchImage(reference=record.reference, digest=record.digest)


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
    from imagekit.spec import load_spec
    from imagekit.standins import build_standins

    spec = load_spec(REPO / "dockerfiles" / "images.toml")
    engine = Engine(binary=str(infra.docker_client))
    root = tmp_path_factory.mktemp("verified-images") / "store"
    store = EvidenceStore(root)
    build_standins(spec, engine, store, "local")
    report = verify_images(spec, engine, store, profile="local")
    return VerifiedImages(report=report, store_root=root)


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
