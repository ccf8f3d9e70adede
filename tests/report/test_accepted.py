"""Statuses the images spec accepts (`[profiles.X.accept]`) turn into warnings with their
reason — only for the profile the evidence names, only for the exact status, and the real
status stays visible in every format."""

from __future__ import annotations

import json

import pytest

from imagekit.report import build_report, check_promotable, render
from imagekit.results import Status
from tests.report.conftest import write_rehearsal


@pytest.fixture(autouse=True)
def _spec(spec_file) -> None:
    """Acceptances come from the test's own small spec (tests/report/conftest.py)."""


def test_accepted_fail_is_a_warning_with_its_reason(store) -> None:
    r = write_rehearsal(store, torch_arch=Status.FAIL, profile="local")
    decision = check_promotable(store, r.digest)
    assert decision.allowed, decision.reasons
    [warning] = [w for w in decision.warnings if "torch_arch" in w]
    assert "accepted: the stand-in carries the machine's CPU torch build" in warning
    report = build_report(store, r.digest)
    # only the gate applies acceptances: the report's status stays the real one
    assert report.profile == "local" and report.status is Status.FAIL
    assert report.gate.allowed and report.gate == decision
    [line] = [c for c in report.checks if c.name == "torch_arch"]
    assert line.status is Status.FAIL and line.accepted          # the real status is kept
    statement = json.loads(render(report, "intoto"))
    assert statement["predicate"]["result"] == "FAILED"
    assert "probe:torch_arch" in statement["predicate"]["failedTests"]
    assert "probe:torch_arch" not in statement["predicate"]["warnedTests"]
    junit = render(report, "junit")
    assert 'message="FAIL (accepted by the gate: the stand-in carries' in junit
    assert "**FAIL** (accepted)" in render(report, "md")


def test_other_profile_does_not_accept(store) -> None:
    r = write_rehearsal(store, torch_arch=Status.FAIL, profile="production")
    decision = check_promotable(store, r.digest)
    assert not decision.allowed
    assert any("probe:torch_arch FAIL" in reason for reason in decision.reasons)


def test_unknown_profile_is_never_guessed(store) -> None:
    r = write_rehearsal(store, torch_arch=Status.FAIL)             # evidence names no profile
    assert not check_promotable(store, r.digest).allowed
    assert check_promotable(store, r.digest, profile="local").allowed   # the caller may say


def test_acceptance_needs_the_exact_status(store) -> None:
    r = write_rehearsal(store, torch_arch=Status.ERROR, profile="local")
    decision = check_promotable(store, r.digest)
    assert not decision.allowed
    assert any("probe:torch_arch ERROR" in reason for reason in decision.reasons)


def test_the_cli_hands_the_spec_and_the_state_dir_down(store, spec_file, tmp_path) -> None:
    """$IMAGEKIT_IMAGES_SPEC and $IMAGEKIT_STATE_DIR are read by the CLI (imagekit.settings)
    and handed down to the report and its gate; nothing below the CLI reads them. Through the
    CLI, the spec's acceptance lets the gate through and infra's state names the endpoints (the
    case that FAILS when a variable is not handed down: the run reads the packaged spec, which
    accepts the stand-in's torch_arch too, and /var/lib/imagekit). In-process, another spec
    and state handed to build_report give another gate and no names."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from imagekit.infra.state import InfraState, RegistryEndpoint, save_state

    r = write_rehearsal(store, torch_arch=Status.FAIL, profile="local")
    state = tmp_path / "state"
    save_state(InfraState(
        state_dir=state, docker_config_dir=state / "docker-config", ca_file=state / "ca.crt",
        registries={"relay-a": RegistryEndpoint(name="relay-a", address="127.0.0.1:5002",
                                                scheme="https", auth="basic")}))
    env = {**os.environ, "IMAGEKIT_EVIDENCE_DIR": str(store.root),
           "IMAGEKIT_IMAGES_SPEC": str(spec_file), "IMAGEKIT_STATE_DIR": str(state)}
    done = subprocess.run([sys.executable, "-m", "imagekit", "report", r.digest, "--format",
                           "json"], capture_output=True, text=True, env=env, timeout=120,
                          cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr
    given = json.loads(done.stdout)
    assert given["gate"]["allowed"] and str(spec_file) in given["accepted"][0]["source"]
    assert "relay-a (127.0.0.1:5002)" in {e["endpoint"] for e in given["endpoints"]}

    strict = spec_file.with_name("strict.toml")     # the same spec without the acceptances
    text = spec_file.read_text()
    strict.write_text(text.split("[profiles.local.accept]")[0] + "[profiles.production]" +
                      text.split("[profiles.production]")[1])
    other = build_report(store, r.digest, spec_path=strict, state_dir=tmp_path / "no-state")
    assert not other.gate.allowed and other.accepted == []
    assert any("probe:torch_arch FAIL" in reason for reason in other.gate.reasons)
    assert "127.0.0.1:5002" in {e.endpoint for e in other.endpoints}
    mine = build_report(store, r.digest, spec_path=spec_file, state_dir=state)
    assert mine.gate.allowed and "relay-a (127.0.0.1:5002)" in \
        {e.endpoint for e in mine.endpoints}
