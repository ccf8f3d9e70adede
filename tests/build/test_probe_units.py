"""Probe parsing and verdict rules without an engine (the probes are stdlib scripts)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from imagekit.engine import RunOutcome
from imagekit.imagesverify import judge
from imagekit.probe import parse_outcome
from imagekit.results import CheckResult, Status
from imagekit.spec.models import Acceptance

PROBES = Path(__file__).resolve().parents[2] / "probes"


def _load(name: str):
    sys.path.insert(0, str(PROBES))
    try:
        spec = importlib.util.spec_from_file_location(f"probe_{name}", PROBES / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(PROBES))


def test_pip_check_parses_the_records_lines() -> None:
    parse = _load("pip_check").parse
    broken = parse("nixl 1.2.0 requires nixl-cu12, which is not installed.\n"
                   "moviepy 2.2.1 has requirement pillow<12.0,>=9.2.0, but you have pillow "
                   "12.2.0.\n")
    assert [b["package"] for b in broken] == ["nixl", "moviepy"]
    assert broken[0]["problem"] == "not-installed" and broken[0]["requirement"] == "nixl-cu12"
    assert broken[1]["requirement"] == "pillow<12.0,>=9.2.0"
    assert broken[1]["installed"] == "pillow 12.2.0"
    assert parse("No broken requirements found.\n") == []


def test_probe_without_json_or_with_nonzero_exit_is_error() -> None:
    broke = parse_outcome("pip_check", RunOutcome(returncode=1, stdout="Traceback", stderr="x",
                                                  seconds=0.1))
    assert broke.status is Status.ERROR
    absent = parse_outcome("pip_check", RunOutcome(returncode=127, stdout="", stderr="exec: "
                                                   "python3: not found", seconds=0.1))
    assert absent.status is Status.ERROR and "python3" in absent.detail
    ok = parse_outcome("x", RunOutcome(returncode=0, stdout='noise\n{"status": "DEFERRED", '
                                       '"detail": "why", "data": {}}\n', stderr="", seconds=0))
    assert ok.status is Status.DEFERRED and ok.detail == "why"


def test_accepted_status_must_match_exactly_and_keeps_the_real_status() -> None:
    accept = {"vllm.cli_help": Acceptance(status=Status.DEFERRED, reason="CPU only, GPU later")}
    checks = [CheckResult(name="pip_check", status=Status.PASS),
              CheckResult(name="cli_help", status=Status.DEFERRED)]
    verdict, accepted = judge("vllm", checks, accept)
    assert verdict is Status.PASS and [a.check for a in accepted] == ["cli_help"]
    failing = [checks[0], CheckResult(name="cli_help", status=Status.FAIL)]
    verdict, accepted = judge("vllm", failing, accept)
    assert verdict is Status.FAIL and accepted == []
    verdict, _ = judge("sglang", checks, accept)  # another image's acceptance does not apply
    assert verdict is Status.DEFERRED


def _run_probe_with_fake_torch(tmp_path: Path, arch: list[str], cuda: str | None) -> dict:
    """torch_arch's verdict logic against a stand-in `torch` module (the real CUDA torch is on
    the GPU machine: there torch 2.11.0+cu130 listed sm_90 and the probe said PASS)."""
    import json
    import os
    import subprocess

    fake = tmp_path / f"fake-{len(arch)}-{cuda}"
    (fake / "torch").mkdir(parents=True)
    (fake / "torch" / "__init__.py").write_text(
        "import types\n__version__ = '9.9.9'\n"
        f"cuda = types.SimpleNamespace(get_arch_list=lambda: {arch!r})\n"
        f"version = types.SimpleNamespace(cuda={cuda!r})\n")
    done = subprocess.run([sys.executable, str(PROBES / "torch_arch.py")], capture_output=True,
                          text=True, check=True,
                          env={**os.environ, "PYTHONPATH": str(fake)})
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_torch_arch_verdicts(tmp_path: Path) -> None:
    hopper = _run_probe_with_fake_torch(tmp_path, ["sm_80", "sm_90", "sm_100"], "13.0")
    assert hopper["status"] == "PASS"
    cpu = _run_probe_with_fake_torch(tmp_path, [], None)
    assert cpu["status"] == "FAIL" and "CPU build" in cpu["detail"]
    ampere = _run_probe_with_fake_torch(tmp_path, ["sm_80"], "12.1")
    assert ampere["status"] == "FAIL" and "runs on sm_90" in ampere["detail"], ampere
