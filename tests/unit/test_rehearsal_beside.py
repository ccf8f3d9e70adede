"""The rehearsal brings the cluster up (and makes the model volume) beside the stand-ins and
the images' build: those steps start before `cluster-up` ends, every cluster step waits for
it, and the rehearsal never ends with one of its steps still running. After the build, each
image's steps run beside the other image's, each in its own order."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from imagekit.evidence import EvidenceStore
from imagekit.rehearsal import flow
from imagekit.rehearsal.steps import beside
from imagekit.results import CheckResult
from imagekit.spec import load_spec


class GatedRunner:
    """Records each step's start and end; `cluster-up` holds until images-verify has
    started (it can only end if the two run at once), and exits `cluster_code`."""

    def __init__(self, cluster_code: int = 0) -> None:
        self.events: list[str] = []
        self.checks: list[CheckResult] = []
        self.cluster_code = cluster_code
        self.verify_started = threading.Event()
        self.lock = threading.Lock()

    def _note(self, what: str) -> None:
        with self.lock:
            self.events.append(what)

    def run(self, name: str, *args: str, **_: Any) -> tuple[int, None]:
        self._note(f"start {name}")
        if name == "images-verify":
            self.verify_started.set()
        code = 0
        if name == "cluster-up":
            assert self.verify_started.wait(10), "cluster-up ran alone, not beside the build"
            code = self.cluster_code
        elif name == "images-verify" or name.endswith("-keys"):
            code = 1  # nothing built, no keys: the image steps stop there
        elif name == "model-volume":
            time.sleep(0.5)  # still running when the build's steps have all ended
        self._note(f"end {name}")
        return code, None

    def use_infra_credentials(self) -> None:
        pass

    def add_check(self, check: CheckResult) -> None:
        self.checks.append(check)


def _rehearse(tmp_path: Path, runner: GatedRunner) -> None:
    flow._steps(runner, load_spec(), "local", EvidenceStore(tmp_path / "ev"),  # type: ignore[arg-type]
                tmp_path / "out", cluster=True)


def test_the_cluster_comes_up_beside_the_build_and_is_waited_for(tmp_path: Path) -> None:
    runner = GatedRunner()
    _rehearse(tmp_path, runner)
    events = runner.events
    # the machine's infra first, without the cluster; then the cluster beside the stand-ins
    assert events[:2] == ["start infra-up", "end infra-up"]
    assert events.index("start images-verify") < events.index("end cluster-up")
    # the model volume follows the cluster on its own track, and the rehearsal waits for both
    assert events.index("end cluster-up") < events.index("start model-volume")
    assert events[-1] == "end model-volume"


def test_a_cluster_that_does_not_come_up_makes_no_volume(tmp_path: Path) -> None:
    runner = GatedRunner(cluster_code=1)
    _rehearse(tmp_path, runner)
    assert "end cluster-up" in runner.events
    assert not any("model-volume" in e for e in runner.events)


def test_a_track_that_raises_raises_in_the_caller() -> None:
    def broken() -> None:
        raise OSError("the attempt folder went away")

    with pytest.raises(OSError, match="went away"):
        beside(broken).result()


def test_infra_up_is_asked_without_the_cluster(tmp_path: Path) -> None:
    runner = GatedRunner()
    seen: list[tuple[str, tuple[str, ...]]] = []
    original = runner.run

    def recording(name: str, *args: str, **kw: Any) -> tuple[int, None]:
        seen.append((name, args))
        return original(name, *args, **kw)

    runner.run = recording  # type: ignore[method-assign]
    _rehearse(tmp_path, runner)
    asked = dict(seen)
    assert asked["infra-up"] == ("infra", "up", "--no-cluster")
    assert asked["cluster-up"] == ("infra", "up", "--cluster")


class ChainRunner(GatedRunner):
    """Every step passes (the keys are written); sglang's promotion holds until vLLM's
    attestation has started: it can end only if the two images' steps run at once."""

    def __init__(self) -> None:
        super().__init__()
        self.vllm_started = threading.Event()

    def run(self, name: str, *args: str, **_: Any) -> tuple[int, None]:
        self._note(f"start {name}")
        if name.endswith("-keys"):
            out = Path(args[args.index("--out-dir") + 1])
            out.mkdir(parents=True, exist_ok=True)
            (out / "imagekit.pub").write_text("key\n")
        if name == "vllm-attest":
            self.vllm_started.set()
        if name == "sglang-promote":
            assert self.vllm_started.wait(10), "the images' steps ran one image after the other"
        self._note(f"end {name}")
        return 0, None


def test_each_images_steps_run_beside_the_others(tmp_path: Path, monkeypatch) -> None:
    import imagekit.build
    from imagekit.oci import Digest

    def built(name: str, *_: Any, **__: Any) -> Any:
        digest = Digest.parse("sha256:" + ("a" if name == "sglang" else "b") * 64)
        return SimpleNamespace(reference=f"127.0.0.1:5001/imagekit/{name}@{digest}",
                               digest=digest)

    monkeypatch.setattr(imagekit.build, "latest_build", built)
    runner = ChainRunner()
    promoted = flow._steps(runner, load_spec(), "local",  # type: ignore[arg-type]
                           EvidenceStore(tmp_path / "ev"), tmp_path / "out", cluster=False)
    assert set(promoted) == {"sglang", "vllm"}
    events = runner.events
    # each image keeps its own order: attested, then promoted
    for name in ("sglang", "vllm"):
        assert events.index(f"end {name}-attest") < events.index(f"start {name}-promote")
    assert events.index("start vllm-attest") < events.index("end sglang-promote")
