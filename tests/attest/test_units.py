"""Signing, DSSE, SBOM and the promotion re-check, without a registry."""

from __future__ import annotations

import base64
import json
import stat

import pytest

from imagekit.attest import keys
from imagekit.attest.dsse import (
    EnvelopeError,
    bundle_of,
    envelope_of_bundle,
    sign_envelope,
    verify_envelope,
)
from imagekit.attest.models import HopLink
from imagekit.attest.statements import PROMOTION_TYPE, promotion_predicate, statement
from imagekit.attest.verify import check_promotion
from imagekit.errors import InvalidInput
from imagekit.oci.digest import Digest
from imagekit.results import Status
from imagekit.sbom.bom import bom_from, diff_boms, packages_of

D = Digest.parse("sha256:" + "ab" * 32)


def test_generated_key_is_0600_and_refuses_to_overwrite(tmp_path):
    private, public = keys.generate(tmp_path)
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    assert b"PRIVATE KEY" in private.read_bytes() and b"PUBLIC KEY" in public.read_bytes()
    with pytest.raises(InvalidInput):
        keys.generate(tmp_path)
    private.chmod(0o644)
    with pytest.raises(InvalidInput, match="readable by others"):
        keys.load_private(private)


def test_envelope_verifies_only_untampered_with_the_right_key(tmp_path):
    private, public = keys.generate(tmp_path / "a")
    _, other = keys.generate(tmp_path / "b")
    key = keys.load_private(private)
    st = statement(D, "x/y", PROMOTION_TYPE, {"n": 1})
    envelope = envelope_of_bundle(bundle_of(sign_envelope(st, key), key))
    assert verify_envelope(envelope, keys.load_public(public)) == st
    with pytest.raises(EnvelopeError, match="no signature verifies"):
        verify_envelope(envelope, keys.load_public(other))
    changed = json.loads(base64.b64decode(envelope["payload"]))
    changed["predicate"]["n"] = 2
    forged = dict(envelope, payload=base64.b64encode(json.dumps(changed).encode()).decode())
    with pytest.raises(EnvelopeError, match="no signature verifies"):
        verify_envelope(forged, keys.load_public(public))


PIP_BEFORE = json.dumps({"version": "1", "installed": [
    {"metadata": {"name": "Pillow", "version": "12.2.0"}},
    {"metadata": {"name": "torch", "version": "2.13.0"}},
    {"metadata": {"name": "gone", "version": "1.0"}}]})
PIP_AFTER = json.dumps({"version": "1", "installed": [
    {"metadata": {"name": "pillow", "version": "11.3.0"}},
    {"metadata": {"name": "torch", "version": "2.13.0"}},
    {"metadata": {"name": "nixl_cu12", "version": "1.2.0"}}]})
DPKG = ("Package: bash\nStatus: install ok installed\nVersion: 5.2.15-2+b2\nArchitecture: amd64\n"
        "\nPackage: removed-one\nStatus: deinstall ok config-files\nVersion: 1\n")


def test_sbom_lists_installed_packages_and_the_diff_names_changes():
    before, after = bom_from(D, "img", PIP_BEFORE, DPKG), bom_from(D, "img", PIP_AFTER, DPKG)
    assert before["bomFormat"] == "CycloneDX" and before["specVersion"] == "1.6"
    assert packages_of(after) == {"pypi/pillow": "11.3.0", "pypi/torch": "2.13.0",
                                  "pypi/nixl-cu12": "1.2.0", "deb/bash": "5.2.15-2+b2"}
    diff = diff_boms(before, after)
    assert diff.lines() == ["+ pypi/nixl-cu12 1.2.0", "- pypi/gone 1.0",
                            "~ pypi/pillow 12.2.0 -> 11.3.0"]


def test_promotion_recheck_fails_a_missing_or_failing_link():
    hop = HopLink(endpoint="r/x:1", digest=str(D), verified=True, read_back="ok")
    predicate = promotion_predicate(D, "m", hops=[hop], required=["hops"])
    st = statement(D, "r/x", PROMOTION_TYPE, predicate.model_dump(mode="json"))
    assert all(c.status is Status.PASS for c in check_promotion(st, D))
    missing = check_promotion(st, D, require=["build"])
    assert [c.name for c in missing if c.status is Status.FAIL] == ["link build"]
    other = Digest.parse("sha256:" + "cd" * 32)
    wrong = check_promotion(st, other)
    assert {c.name for c in wrong if c.status is Status.FAIL} == {"promotion subject", "hops"}


def test_verify_counts_accepted_checks_apart_never_inside_pass(tmp_path):
    """`verify-attestations`' link line for probes whose torch_arch FAIL and cli_help DEFERRED
    the profile accepted: the reports' own count, accepted apart (it said `5 check(s) PASS`)."""
    from imagekit.attest.verify import link_shown_by_tests
    from imagekit.evidence import EvidenceStore
    from imagekit.report import build_report
    from imagekit.report.accepted import Accepted
    from imagekit.results import CheckResult
    from tests.report.conftest import write_rehearsal

    store = EvidenceStore(tmp_path / "evidence")
    r = write_rehearsal(store, torch_arch=Status.FAIL, promote=False)
    with store.attempt(r.image_id, "probe") as a:
        a.add_check(CheckResult(name="cli_help", status=Status.DEFERRED, detail="no engine"))
    report = build_report(store, r.digest, accepted=[
        Accepted(check="torch_arch", status=Status.FAIL, reason="CPU torch", source="spec"),
        Accepted(check="cli_help", status=Status.DEFERRED, reason="no engine", source="spec")])
    hop = HopLink(endpoint="r/x:1", digest=str(D), verified=True, read_back="ok")
    predicate = promotion_predicate(D, "m", report=report, hops=[hop], required=["probes"])
    st = statement(D, "r/x", PROMOTION_TYPE, predicate.model_dump(mode="json"))
    [probes] = [c for c in check_promotion(st, D) if c.name == "link probes"]
    assert probes.status is Status.PASS
    assert probes.detail.startswith(
        "PASS: 3 PASS, 2 accepted (torch_arch FAIL, cli_help DEFERRED)"), probes.detail
    assert "check(s) PASS" not in probes.detail
    tested = {"predicate": {"passedTests": ["probe:pip_check", "probe:find_spec"],
                            "failedTests": ["probe:torch_arch"], "acceptances": [
                                {"test": "probe:torch_arch", "status": "FAIL"}]}}
    shown = link_shown_by_tests(tested, "probes", honour_acceptances=True)
    assert shown.status is Status.PASS
    assert shown.detail == "2 PASS, 1 accepted (probe:torch_arch)"


def test_sbom_history_diffs_against_the_previous_build(tmp_path):
    from imagekit.evidence import EvidenceStore
    from imagekit.sbom.history import record_sbom, sbom_diff

    store = EvidenceStore(tmp_path)
    name = "127.0.0.1:5001/imagekit-local/sglang:one"
    first, second = D, Digest.parse("sha256:" + "cd" * 32)
    assert sbom_diff(store, name) is None  # nothing to compare with
    record_sbom(store, name, first, bom_from(first, name, PIP_BEFORE, DPKG))
    record_sbom(store, "127.0.0.1:5003/imagekit-local/sglang:two", second,
                bom_from(second, name, PIP_AFTER, DPKG))  # the same image, promoted
    diff = sbom_diff(store, name)
    assert diff.before == str(first) and diff.after == str(second)
    assert [c.package for c in diff.added] == ["pypi/nixl-cu12"]
    assert sbom_diff(store, name, first) is None  # the first build has no previous one
    from imagekit.sbom.history import markdown_section

    section = "\n".join(markdown_section(str(tmp_path), str(second)))
    assert "`~ pypi/pillow 12.2.0 -> 11.3.0`" in section and "`+ pypi/nixl-cu12 1.2.0`" in section
    assert "No evidence" in "\n".join(markdown_section(str(tmp_path), str(second.__class__
                                                                    .parse("sha256:" + "ef" * 32))))
    from imagekit.report import build_report, render

    page = render(build_report(store, second), "md")  # the report hook, end to end
    assert "## Packages since the previous build" in page and "pypi/nixl-cu12 1.2.0" in page


def test_verify_bad_input_is_one_line_exit_2(tmp_path):
    import subprocess
    import sys

    _, public = keys.generate(tmp_path)
    for args, needle in ((["127.0.0.1:1/x:1", "--trust-key", str(public), "--require-type",
                           "nope"], "unknown attestation type 'nope'"),
                         (["not a ref", "--trust-key", str(public)], "REF:"),
                         (["127.0.0.1:1/x:1", "--trust-key", str(tmp_path / "imagekit.key")],
                          "not a PEM public key")):
        done = subprocess.run([sys.executable, "-m", "imagekit", "verify-attestations", *args],
                              capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 2, done.stderr
        assert done.stderr.startswith("imagekit: error: ") and needle in done.stderr
        assert "Traceback" not in done.stderr
