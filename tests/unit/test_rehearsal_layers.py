"""`imagekit rehearsal --layers N`: off by default, checked before any
side effect with the bounds of `standins build --layers`, passed to the stand-ins step for the
SGLang image only, and the layer count recorded is the one read back (not the flag)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from imagekit.errors import InvalidInput
from imagekit.evidence import EvidenceStore
from imagekit.evidence.kinds import RehearsalResult
from imagekit.rehearsal import check_layers, flow
from imagekit.results import CheckResult, Status
from imagekit.spec import load_spec


class FakeRunner:
    """Records the steps asked for; the stand-ins step passes, every later one fails (no
    infra is touched: images verify, the keys, everything after stop there)."""

    def __init__(self) -> None:
        self.runs: list[tuple[str, tuple[str, ...]]] = []
        self.checks: list[CheckResult] = []

    def run(self, name: str, *args: str, **_: Any) -> tuple[int, None]:
        self.runs.append((name, args))
        return (0 if name in ("infra-up", "standins-build") else 1), None

    def use_infra_credentials(self) -> None:
        pass

    def add_check(self, check: CheckResult) -> None:
        self.checks.append(check)


def _steps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, layers: int | None,
           counted: int = 63) -> tuple[FakeRunner, dict[str, int], list[str]]:
    runner, found, asked = FakeRunner(), dict[str, int](), list[str]()

    def read_back(spec: Any, profile: str, image: str, state_dir: Any = None
                  ) -> tuple[int, str]:
        asked.append(image)
        return counted, "127.0.0.1:5001/imagekit-standins/sglang-base:cu13-standin-layers63@x"

    monkeypatch.setattr(flow, "standin_layer_count", read_back)
    flow._steps(runner, load_spec(), "local",  # type: ignore[arg-type]
                EvidenceStore(tmp_path / "ev"), tmp_path / "out",
                cluster=False, layers=layers, standin_layers=found)
    return runner, found, asked


def _standins_args(runner: FakeRunner) -> tuple[str, ...]:
    return next(args for name, args in runner.runs if name == "standins-build")


def test_off_by_default_the_stand_ins_step_is_unchanged(tmp_path: Path, monkeypatch) -> None:
    runner, found, asked = _steps(tmp_path, monkeypatch, None)
    assert _standins_args(runner) == ("standins", "build", "--profile", "local")
    assert found == {} and asked == []
    assert not any(c.name.endswith("-standin-layers") for c in runner.checks)


def test_layers_pads_only_the_sglang_stand_in_and_records_the_count_read_back(
        tmp_path: Path, monkeypatch) -> None:
    runner, found, asked = _steps(tmp_path, monkeypatch, 63)
    assert _standins_args(runner) == ("standins", "build", "--profile", "local",
                                      "--layers", "63", "--layers-for", "sglang")
    assert asked == ["sglang"] and found == {"sglang": 63}
    check = next(c for c in runner.checks if c.name == "sglang-standin-layers")
    assert check.status is Status.PASS and check.detail.startswith("63 layers in the manifest")
    # the rest of the rehearsal is the same steps in the same order
    names = [name for name, _ in runner.runs]
    assert names[:3] == ["infra-up", "standins-build", "images-verify"]


def test_fewer_layers_in_the_manifest_than_asked_is_a_fail(tmp_path: Path, monkeypatch) -> None:
    runner, found, _ = _steps(tmp_path, monkeypatch, 63, counted=5)
    check = next(c for c in runner.checks if c.name == "sglang-standin-layers")
    assert check.status is Status.FAIL and "5 layers" in check.detail
    assert found == {"sglang": 5}  # what the manifest says, not the flag


def test_an_unreadable_manifest_is_an_error_not_a_pass(tmp_path: Path, monkeypatch) -> None:
    def broken(*_: Any) -> tuple[int, str]:
        raise KeyError("sglang")

    runner, found = FakeRunner(), dict[str, int]()
    monkeypatch.setattr(flow, "standin_layer_count", broken)
    flow._steps(runner, load_spec(), "local", EvidenceStore(tmp_path / "ev"),  # type: ignore[arg-type]
                tmp_path / "out", cluster=False, layers=63, standin_layers=found)
    check = next(c for c in runner.checks if c.name == "sglang-standin-layers")
    assert check.status is Status.ERROR and found == {}


def test_the_index_and_the_evidence_carry_the_count(tmp_path: Path) -> None:
    flow.write_index(tmp_path, tmp_path / "actors", {}, tmp_path / "ev", {"sglang": 63})
    assert "The sglang stand-in base was built with --layers: 63 layers" in \
        (tmp_path / "index.md").read_text()
    result = RehearsalResult(profile="local", layers=63, standin_layers={"sglang": 63})
    assert RehearsalResult.model_validate_json(result.model_dump_json()).standin_layers == \
        {"sglang": 63}
    assert RehearsalResult(profile="local").layers is None  # off by default


@pytest.mark.parametrize("layers", [0, 121, -3])
def test_check_layers_bounds_are_standins_builds(layers: int) -> None:
    with pytest.raises(InvalidInput, match=f"--layers {layers}: give 1-120"):
        check_layers(layers, load_spec(), "local")
    check_layers(None, load_spec(), "local")
    check_layers(63, load_spec(), "local")


def test_bad_layers_is_one_line_exit_2_before_anything(tmp_path: Path) -> None:
    out, evidence = tmp_path / "reports", tmp_path / "ev"
    done = subprocess.run([sys.executable, "-m", "imagekit", "rehearsal", "--layers", "500",
                           "--out-dir", str(out), "--evidence-dir", str(evidence)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == "imagekit: error: --layers 500: give 1-120 (imagekit)" or \
        done.stderr.strip().startswith("imagekit: error: --layers 500: give 1-120"), done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    assert not out.exists() and not evidence.exists()  # no side effect: no infra, no store


def test_standins_build_layers_for_an_unknown_image_is_one_line(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "imagekit", "standins", "build", "--layers",
                           "63", "--layers-for", "nope", "--evidence-dir", str(tmp_path / "ev")],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().startswith("imagekit: error: --layers-for nope: no such image"), \
        done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
